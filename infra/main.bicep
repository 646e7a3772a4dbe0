// The order-processing system on Azure: `azd up` provisions this file, then deploys function_app.py.
//
// Subscription scope: it creates the resource group `rg-<environment>` and one module per concern in it
// (identity, storage, messaging, monitoring, key vault, hosting plan, Function App, role assignments,
// alerts).
// Every connection is identity-based through one user-assigned managed identity: no keys, no
// connection strings with secrets, shared-key and SAS access switched off.
targetScope = 'subscription'

// ---- Parameters (azd fills them from main.parameters.json) -------------------------------------------

@minLength(1)
@maxLength(64)
@description('Name of the azd environment. Names the resource group (rg-<name>) and seeds the unique token in every resource name.')
param environmentName string

@minLength(1)
@description('Azure region of every resource. It must offer the Flex Consumption plan (az functionapp list-flexconsumption-locations).')
@metadata({
  azd: {
    type: 'location'
  }
})
param location string

@description('Object ID of the person (or service principal) running azd. When set, they get the same data-plane roles as the app, to run and debug against the deployed Service Bus and tables. Leave empty in CI.')
param principalId string = ''

@description('Kind of principal principalId is: User for a person, ServicePrincipal for a pipeline identity.')
@allowed([
  'User'
  'ServicePrincipal'
])
param principalType string = 'User'

@description('E-mail address that receives the alerts (order in Error, dead-lettered messages, Supervisor not running). Empty: the action group is created without receivers.')
param alertEmail string = ''

@description('SERVICE_URLS: the base URL of each remote service, as <service>=<url> pairs separated by commas, e.g. <service>=https://one.example.com,<service>=https://two.example.com/api (the names are the declared services\', in infra/app/catalog.json); a URL may contain \'=\' but not \',\'. A service not listed uses the simulator the Function App serves under /api/sim; empty: every service does. A name no service has stops the deployment.')
param serviceUrls string = ''

@secure()
//checkov:skip=CKV_AZURE_131:the default is newGuid(), a fresh random value each deployment, not a value written here
@description('SIMULATORS_KEY: the key the agents send to the simulators the app hosts when a service URL is empty; the simulators refuse service calls without it (their controls take only the host\'s master key). A new value each deployment unless set.')
param simulatorsKey string = newGuid()

@description('AZURE_AUTH_CLIENT_ID: client ID of the Microsoft Entra ID app registration people sign in with, made by infra/hooks/create-app-registration.sh (app roles Orders.Operator and Orders.Reader). Empty: App Service authentication is not configured; storefronts still submit with the submission key, and nobody can use the console or the operator routes.')
param authClientId string = ''

@description('Storefronts: the applications that submit orders, each with its own key and its own status queue, as a JSON array of {"name": "<name>", "principalId": "<object id>"} (STOREFRONTS_JSON), e.g. [{"name": "web"}, {"name": "kiosk", "principalId": "00000000-0000-0000-0000-000000000000"}]. name: a lower-case letter, then up to 23 lower-case letters, digits or hyphens, the last not a hyphen (the app refuses any other, so the deployment stops first, naming it); its key is the app setting STOREFRONT_<NAME>_KEY (upper case, \'-\' as \'_\'), made once by the predeploy hook, and its status messages go to the queue order-status-<name>. principalId, optional: the object ID of the service principal or managed identity that reads that queue; it gets Azure Service Bus Data Receiver on that queue only. Empty: no storefronts; orders submitted with the shared key keep the order-status queue.')
param storefronts array = []

@description('Whether the Key Vault holds the secret input-encryption-previous-keys (the keys a rotation replaced, comma-separated): true sets INPUT_ENCRYPTION_PREVIOUS_KEYS to a Key Vault reference to it, false (the default, no rotation yet) leaves the setting empty. Set it to true only once that secret exists: a reference to a missing secret does not resolve, and the app refuses the unresolved text. Rotating the key: docs/deploying.md.')
param inputEncryptionPreviousKeys bool = false

@minValue(1)
@description('STEP_COMPLETE_BY_SECONDS: a step\'s budget in seconds, and how long a Pending task may wait to be claimed.')
param stepCompleteBySeconds int = 30

@description('SUPERVISOR_SCHEDULE: six-field NCRONTAB schedule of the Supervisor sweep. Every 30 seconds by default: frequent enough for 30-second steps, and within the monthly free grant of executions.')
param supervisorSchedule string = '*/30 * * * * *'

@description('ORDER_RETENTION: ISO 8601 duration a finished order (Processed or Compensated) is kept before it is purged; a purged order id is refused for as long again. Orders in Error are kept until an operator acts.')
param orderRetention string = 'P30D'

@description('Durations of the workflows\' waits in seconds, by the app setting each wait names (infra/app/catalog.json "waits"), as strings, e.g. {"CANCELLATION_WINDOW_SECONDS": "600", "FRAUD_REVIEW_SECONDS": "172800"}; a setting left out keeps its declared duration (the cancellation window 30 minutes, a fraud review a day).')
param waitSeconds object = {}
@description('PUBLIC_BASE_URL: the address clients reach the API at, without /api (e.g. https://orders.example.com behind a gateway or a custom domain); a submission\'s Location header and statusUrl start with it. Empty: the Function App\'s own https://<name>.azurewebsites.net.')
param publicBaseUrl string = ''

@minValue(1)
@description('SUPERVISOR_MAX_FAILURES: failures of one step after which the Supervisor sets its order to Error (and the OrderEnteredError alert fires).')
param supervisorMaxFailures int = 3

@minValue(1)
@description('SUPERVISOR_BACKOFF_SECONDS: first retry delay after a failure; it doubles per failure.')
param supervisorBackoffSeconds int = 2

@minValue(1)
@description('SUPERVISOR_MAX_BACKOFF_SECONDS: cap of the retry delay.')
param supervisorMaxBackoffSeconds int = 60

@minLength(3)
@maxLength(58)
@description('STATE_TABLE_NAME: the state table. Its watch table is this name followed by "watch", the hosted simulators\' ledger this name followed by "sim"; all are created here.')
param stateTableName string = 'orders'

@minValue(1)
@maxValue(100)
@description('STATE_SHARDS: partitions of the state and watch tables. Fixed for the life of a deployment.')
param stateShards int = 8

@description('Memory of each Flex Consumption instance, in MB. 512 MB keeps the Supervisor\'s timer inside the free grant; raise it for heavy traffic.')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 512

@minValue(1)
@maxValue(1000)
@description('Most instances the Flex Consumption plan scales out to.')
param maximumInstanceCount int = 100

@description('Service Bus tier. Standard is billed per operation and throttled at 1,000 credits per second per namespace (README, Capacity); Premium has dedicated messaging units, zone redundancy and no per-operation charge.')
@allowed([
  'Standard'
  'Premium'
])
param serviceBusSku string = 'Standard'

@description('Messaging units of a Premium namespace; ignored for Standard.')
@allowed([
  1
  2
  4
  8
  16
])
param serviceBusCapacity int = 1

// ---- Names -------------------------------------------------------------------------------------------

var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = {
  'azd-env-name': environmentName
}
// The service name in azure.yaml: azd finds the Function App by the azd-service-name tag.
var serviceName = 'api'
var functionAppName = 'func-${serviceName}-${resourceToken}'
var deploymentContainerName = 'app-package-${resourceToken}'

// ---- Storefronts -------------------------------------------------------------------------------------

// Each storefront's name as the app will read it from STOREFRONTS (engine.queues.SUBMITTER_PATTERN): it also
// names a queue, which ends with a letter or digit.
// Bicep has no regular expressions: a name is at most 24 characters, starts with a letter, and nothing is
// left of it once every lower-case letter, digit and hyphen is split out.
var storefrontNames = [for storefront in storefronts: storefront.name]
var storefrontLetters = split('a b c d e f g h i j k l m n o p q r s t u v w x y z', ' ')
var storefrontNameCharacters = union(storefrontLetters, split('0 1 2 3 4 5 6 7 8 9 -', ' '))
// Every operand in parentheses: pycep, the parser of the offline checks, reads a chain of || or a
// leading ! with the wrong precedence.
var invalidStorefrontNames = filter(storefrontNames, name => (length(name) > 24) || (!contains(storefrontLetters, take(name, 1))) || (endsWith(name, '-')) || (!empty(join(split(name, storefrontNameCharacters), ''))))
var duplicateStorefrontNames = length(union(storefrontNames, [])) != length(storefrontNames)
var storefrontProblem = empty(invalidStorefrontNames) ? (duplicateStorefrontNames ? 'storefronts: a name is given twice' : '') : 'storefronts: not a storefront name (a lower-case letter, then up to 23 lower-case letters, digits or hyphens, the last not a hyphen): ${string(invalidStorefrontNames)}'
// A list the app would refuse (orders.access stops on a bad or repeated name in STOREFRONTS) stops the
// deployment here instead, before anything is created. Bicep has no fail(): reading a property the
// object does not have makes ARM report "the language expression property '<problem>' doesn't exist".
var checkedStorefronts = empty(storefrontProblem) ? storefronts : {
  valid: storefronts
}[storefrontProblem]
// Each storefront as the modules take it: its name, and the principal that reads its queue or ''.
var storefrontList = [
  for storefront in checkedStorefronts: {
    name: storefront.name
    principalId: union({ principalId: '' }, storefront).principalId
  }
]
var checkedStorefrontNames = [for storefront in storefrontList: storefront.name]

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: 'rg-${environmentName}'
  location: location
  tags: tags
}

// ---- Modules, one concern each -------------------------------------------------------------------------

module identity 'app/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: 'id-${serviceName}-${resourceToken}'
    location: location
    tags: tags
  }
}

module storage 'app/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: 'st${resourceToken}'
    location: location
    tags: tags
    deploymentContainerName: deploymentContainerName
    stateTableName: stateTableName
  }
}

module messaging 'app/servicebus.bicep' = {
  name: 'messaging'
  scope: rg
  params: {
    name: 'sb-${resourceToken}'
    location: location
    tags: tags
    sku: serviceBusSku
    capacity: serviceBusCapacity
    storefrontNames: checkedStorefrontNames
  }
}

module monitoring 'app/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    logAnalyticsName: 'log-${resourceToken}'
    applicationInsightsName: 'appi-${resourceToken}'
    location: location
    tags: tags
  }
}

// The operations workbook, listed under the Application Insights component (Workbooks).
module workbook 'app/workbook.bicep' = {
  name: 'workbook'
  scope: rg
  params: {
    displayName: 'Order processing (${environmentName})'
    location: location
    tags: tags
    applicationInsightsResourceId: monitoring.outputs.applicationInsightsResourceId
  }
}

// The vault of the key the sensitive input fields are encrypted with; its secret is made by the
// postprovision hook, once.
module keyVault 'app/keyvault.bicep' = {
  name: 'key-vault'
  scope: rg
  params: {
    name: 'kv-${resourceToken}'
    location: location
    tags: tags
  }
}

module plan 'app/hosting-plan.bicep' = {
  name: 'hosting-plan'
  scope: rg
  params: {
    name: 'plan-${resourceToken}'
    location: location
    tags: tags
  }
}

module api 'app/function-app.bicep' = {
  name: 'function-app'
  scope: rg
  params: {
    name: functionAppName
    location: location
    tags: tags
    serviceName: serviceName
    planResourceId: plan.outputs.resourceId
    identityResourceId: identity.outputs.resourceId
    identityClientId: identity.outputs.clientId
    storageAccountName: storage.outputs.name
    deploymentContainerName: deploymentContainerName
    serviceBusNamespace: messaging.outputs.fullyQualifiedNamespace
    applicationInsightsConnectionString: monitoring.outputs.applicationInsightsConnectionString
    instanceMemoryMB: instanceMemoryMB
    maximumInstanceCount: maximumInstanceCount
    stateTableName: stateTableName
    stateShards: stateShards
    stepCompleteBySeconds: stepCompleteBySeconds
    supervisorSchedule: supervisorSchedule
    orderRetention: orderRetention
    waitSeconds: waitSeconds
    publicBaseUrl: publicBaseUrl
    supervisorMaxFailures: supervisorMaxFailures
    supervisorBackoffSeconds: supervisorBackoffSeconds
    supervisorMaxBackoffSeconds: supervisorMaxBackoffSeconds
    serviceUrls: serviceUrls
    simulatorsKey: simulatorsKey
    authClientId: authClientId
    storefrontNames: checkedStorefrontNames
    keyVaultName: keyVault.outputs.name
    inputKeyName: keyVault.outputs.inputKeyName
    previousInputKeysName: inputEncryptionPreviousKeys ? keyVault.outputs.previousInputKeysName : ''
  }
  // The host starts as soon as the app exists: its identity must already hold its data roles.
  dependsOn: [
    rbac
  ]
}

module rbac 'app/rbac.bicep' = {
  name: 'rbac'
  scope: rg
  params: {
    storageAccountName: storage.outputs.name
    serviceBusNamespaceName: messaging.outputs.name
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    keyVaultName: keyVault.outputs.name
    appPrincipalId: identity.outputs.principalId
    userPrincipalId: principalId
    userPrincipalType: principalType
    storefronts: storefrontList
  }
}

module alerts 'app/alerts.bicep' = {
  name: 'alerts'
  scope: rg
  params: {
    resourceToken: resourceToken
    tags: tags
    alertEmail: alertEmail
    applicationInsightsResourceId: monitoring.outputs.applicationInsightsResourceId
    serviceBusNamespaceResourceId: messaging.outputs.resourceId
    location: location
  }
}

// ---- Outputs (azd stores them in .azure/<env>/.env) ----------------------------------------------------

output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_APP_NAME string = api.outputs.name
output SERVICE_API_NAME string = api.outputs.name
output SERVICE_API_ENDPOINTS array = [
  api.outputs.url
]
output SERVICE_API_URI string = api.outputs.url
// The app settings the predeploy hook makes once, a secret per service that answers later (catalog.json).
output CALLBACK_SECRET_SETTINGS string = api.outputs.callbackSecretSettings
// The app settings the predeploy hook makes once, a key per storefront (STOREFRONT_<NAME>_KEY): names only.
output STOREFRONT_KEY_SETTINGS string = api.outputs.storefrontKeySettings
output APPLICATIONINSIGHTS_CONNECTION_STRING string = monitoring.outputs.applicationInsightsConnectionString
output SERVICEBUS_FULLY_QUALIFIED_NAMESPACE string = messaging.outputs.fullyQualifiedNamespace
output STATE_STORE_ENDPOINT string = storage.outputs.tableEndpoint
output AZURE_AUTH_ENABLED bool = api.outputs.authenticationEnabled
// The vault and the secret the postprovision hook makes once (the input encryption key): names only.
output AZURE_KEY_VAULT_NAME string = keyVault.outputs.name
output AZURE_KEY_VAULT_ENDPOINT string = keyVault.outputs.uri
output INPUT_ENCRYPTION_KEY_SECRET_NAME string = keyVault.outputs.inputKeyName
