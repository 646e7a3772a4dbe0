// The Function App that runs function_app.py: Python 3.13 on Flex Consumption, with the user-assigned
// identity for every connection and the app settings orders.settings reads (tests/infra checks the list).

@description('Name of the Function App (its default host name is <name>.azurewebsites.net).')
param name string

@description('Azure region of the Function App.')
param location string

@description('Tags of the Function App; the azd-service-name tag is added here.')
param tags object

@description('Service name in azure.yaml: azd deploys to the app tagged azd-service-name=<this>.')
param serviceName string

@description('Resource ID of the Flex Consumption plan.')
param planResourceId string

@description('Resource ID of the user-assigned managed identity.')
param identityResourceId string

@description('Client ID of the user-assigned managed identity.')
param identityClientId string

@description('Storage account of the host, the deployment package and the state tables.')
param storageAccountName string

@description('Blob container of the deployment package.')
param deploymentContainerName string

@description('Fully qualified Service Bus namespace, e.g. sb-x.servicebus.windows.net.')
param serviceBusNamespace string

@description('Application Insights connection string.')
param applicationInsightsConnectionString string

@description('Memory of each instance, in MB.')
param instanceMemoryMB int

@description('Most instances the app scales out to.')
param maximumInstanceCount int

@description('STATE_TABLE_NAME.')
param stateTableName string

@description('STATE_SHARDS.')
param stateShards int

@description('STEP_COMPLETE_BY_SECONDS.')
param stepCompleteBySeconds int

@description('SUPERVISOR_SCHEDULE.')
param supervisorSchedule string

@description('ORDER_RETENTION.')
param orderRetention string

@description('Durations of the workflows\' waits, in seconds, by the setting each wait names (catalog.json "waits"), as strings, e.g. {"CANCELLATION_WINDOW_SECONDS": "600"}; a setting left out keeps its declared duration.')
param waitSeconds object = {}
@description('PUBLIC_BASE_URL: what a submission\'s Location header and statusUrl start with. Empty: this app\'s own https://<name>.azurewebsites.net.')
param publicBaseUrl string

@description('SUPERVISOR_MAX_FAILURES.')
param supervisorMaxFailures int

@description('SUPERVISOR_BACKOFF_SECONDS.')
param supervisorBackoffSeconds int

@description('SUPERVISOR_MAX_BACKOFF_SECONDS.')
param supervisorMaxBackoffSeconds int

@description('SERVICE_URLS: the base URL of each remote service, as <service>=<url> pairs separated by commas (the names are those of catalog.json); a URL may contain \'=\' but not \',\'. A service not listed, or listed with an empty URL, uses the simulators this app hosts; empty: every service does.')
param serviceUrls string

@secure()
@description('SIMULATORS_KEY: the key the agents send to the simulators this app hosts (x-simulators-key); their service calls are refused without it.')
param simulatorsKey string

@description('Client ID of the Microsoft Entra ID app registration people sign in with (App Service authentication; its app roles Orders.Operator and Orders.Reader are the API\'s operator and reader). Empty: authentication is not configured, and only the submission key is accepted.')
param authClientId string

@description('STOREFRONTS: the names of the storefronts (main.bicep checks them). Each one\'s key, the app setting STOREFRONT_<NAME>_KEY, is not set here: the predeploy hook makes it once (storefrontKeySettings).')
param storefrontNames array = []

@description('Name of the Key Vault holding the input encryption keys; the app reads them through Key Vault references with its user-assigned identity (Key Vault Secrets User, rbac.bicep).')
param keyVaultName string

@description('The secret holding the current input encryption key (INPUT_ENCRYPTION_KEY), made once by the postprovision hook.')
param inputKeyName string

@description('The secret holding the previous input encryption keys (INPUT_ENCRYPTION_PREVIOUS_KEYS), or empty when there is none: the setting is then empty.')
param previousInputKeysName string = ''

var storageSuffix = environment().suffixes.storage
var baseUrl = 'https://${name}.azurewebsites.net'
// function_app.py serves the simulators of every declared service under /api/sim when ENABLE_SIMULATORS is true.
var simulatorsUrl = '${baseUrl}/api/sim'

// The declared services by name (python -m orders.generate writes catalog.json from src/orders/catalog.py).
var services = loadJsonContent('catalog.json').services
// The settings the workflows' waits name, with their declared durations (a timer's, an approval's
// deadline, in seconds); waitSeconds overrides any of them.
var waitSettings = union(loadJsonContent('catalog.json').waits, waitSeconds)
var serviceList = [for service in items(services): service.value]
// SERVICE_URLS as '<name>=<url>' entries (spaces removed, empty entries dropped); an entry's URL is what
// follows its first '=', so a URL may contain '='.
var serviceUrlEntries = filter(split(replace(serviceUrls, ' ', ''), ','), entry => !empty(entry))
// The service each entry names. A name no service has stops the deployment here: ARM reports that the
// property '<name>' does not exist and lists the declared names.
var entryServiceNames = [for entry in serviceUrlEntries: services[first(split(entry, '='))].name]
var entryUrls = [
  for entry in serviceUrlEntries: contains(entry, '=') ? substring(entry, indexOf(entry, '=') + 1) : ''
]
// Per declared service, the URL SERVICE_URLS gives it, or '' for the simulators this app hosts.
var givenServiceUrls = [
  for service in serviceList: contains(entryServiceNames, service.name) ? entryUrls[indexOf(entryServiceNames, service.name)] : ''
]
var useSimulators = contains(givenServiceUrls, '')
// One <NAME>_SERVICE_URL setting per service. Bicep builds an object with computed keys with toObject(),
// which the parser Checkov uses cannot read; json() over '"<setting>":"<url>"' pairs builds the same
// object. string([url]) is '["<url>"]': the URL quoted and escaped for JSON, between brackets.
var serviceUrlJson = [for url in givenServiceUrls: string([empty(url) ? simulatorsUrl : url])]
var serviceUrlPairs = [
  for (service, i) in serviceList: '"${service.urlSetting}":${substring(serviceUrlJson[i], 1, length(serviceUrlJson[i]) - 2)}'
]
var serviceUrlSettings = json('{${join(serviceUrlPairs, ',')}}')
// The app setting holding each storefront's key, as orders.access names it: STOREFRONT_<NAME>_KEY, the
// name upper-cased with '-' as '_' (web: STOREFRONT_WEB_KEY, my-shop: STOREFRONT_MY_SHOP_KEY).
// A Key Vault reference: the platform puts the secret's current version in the setting, fetched with the
// identity keyVaultReferenceIdentity names (below), and fetches it again on any change of the app's
// configuration, or within 24 hours.
var inputKeyReference = '@Microsoft.KeyVault(VaultName=${keyVaultName};SecretName=${inputKeyName})'
var previousKeysReference = empty(previousInputKeysName) ? '' : '@Microsoft.KeyVault(VaultName=${keyVaultName};SecretName=${previousInputKeysName})'
var storefrontKeySettings = [for storefront in storefrontNames: 'STOREFRONT_${toUpper(replace(storefront, '-', '_'))}_KEY']

var appSettings = {
  // Functions host storage (timer leases, keys), identity-based.
  AzureWebJobsStorage__accountName: storageAccountName
  AzureWebJobsStorage__blobServiceUri: 'https://${storageAccountName}.blob.${storageSuffix}'
  AzureWebJobsStorage__credential: 'managedidentity'
  AzureWebJobsStorage__clientId: identityClientId
  // Service Bus triggers (the host) and the engine's sender (adapters/servicebus.py), identity-based.
  ServiceBusConnection__fullyQualifiedNamespace: serviceBusNamespace
  ServiceBusConnection__credential: 'managedidentity'
  ServiceBusConnection__clientId: identityClientId
  // Telemetry with Entra ID authentication (local authentication is off on the component).
  APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsightsConnectionString
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identityClientId};Authorization=AAD'
  // orders.settings (STATE_STORE_CONNECTION is for local runs only).
  STATE_STORE_ENDPOINT: 'https://${storageAccountName}.table.${storageSuffix}'
  AZURE_CLIENT_ID: identityClientId
  STATE_TABLE_NAME: stateTableName
  STATE_SHARDS: string(stateShards)
  STEP_COMPLETE_BY_SECONDS: string(stepCompleteBySeconds)
  SUPERVISOR_SCHEDULE: supervisorSchedule
  SUPERVISOR_MAX_FAILURES: string(supervisorMaxFailures)
  SUPERVISOR_BACKOFF_SECONDS: string(supervisorBackoffSeconds)
  SUPERVISOR_MAX_BACKOFF_SECONDS: string(supervisorMaxBackoffSeconds)
  CANCEL_GRACE_SECONDS: '1'
  // An order waiting for a timer or an approval due more than 20 minutes off is parked out of the live
  // records (engine.supervisor), and brought back 10 minutes before it is due.
  WAIT_PARK_HORIZON_SECONDS: '600'
  // The queue and waiting gauges, measured after a Supervisor sweep at most this often (orders.gauges).
  METRICS_GAUGE_SECONDS: '30'
  ORDER_RETENTION: orderRetention
  // Status URLs are built from this, never from the request's Host header (which the client chooses).
  PUBLIC_BASE_URL: empty(publicBaseUrl) ? baseUrl : publicBaseUrl
  // Empty: each step's breaker stays open as long as the order workflow's retry policy says (10 s).
  BREAKER_RESET_SECONDS: ''
  ENABLE_SIMULATORS: useSimulators ? 'true' : 'false'
  // Sent as x-simulators-key to the service URLs under /api/sim only (orders.settings.service_keys).
  SIMULATORS_KEY: useSimulators ? simulatorsKey : ''
  // The declared storefronts; each one's key (STOREFRONT_<NAME>_KEY) is made by the predeploy hook and
  // kept (retainCurrentAppSettings below). Empty: only the shared submission key.
  STOREFRONTS: join(storefrontNames, ',')
  // The key the declared sensitive input fields are encrypted with at rest, and the keys a rotation
  // replaced (still read, never written): references to the Key Vault's secrets, never a value.
  INPUT_ENCRYPTION_KEY: inputKeyReference
  INPUT_ENCRYPTION_PREVIOUS_KEYS: previousKeysReference
}

// App Service authentication with Microsoft Entra ID. Anonymous requests still reach the app
// (AllowAnonymous): a storefront calls with the submission key and no sign-in, /api/health is public, and
// the app itself answers 401 or 403 (orders.access). The platform removes clients' X-MS-CLIENT-PRINCIPAL*
// headers and sets its own for a valid session or bearer token; no client secret: people sign in with
// the ID token (the registration issues them), and no token store, since the app needs only the headers.
var authConfig = {
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: false
      unauthenticatedClientAction: 'AllowAnonymous'
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: authClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenant().tenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            'api://${authClientId}'
            authClientId
          ]
        }
      }
    }
    login: {
      tokenStore: {
        enabled: false
      }
    }
  }
}
var appSettingsConfig = {
  name: 'appsettings'
  // Settings set on the app and not here are kept: SUBMISSION_KEY and each STOREFRONT_<NAME>_KEY, which
  // the predeploy hook creates once (infra/hooks/predeploy.sh), so that a storefront's key survives every
  // deployment.
  retainCurrentAppSettings: true
  // The <NAME>_SERVICE_URL settings and the waits' are not in appSettings: their names come from
  // catalog.json.
  properties: union(appSettings, serviceUrlSettings, waitSettings)
}

module site 'br/public:avm/res/web/site:0.24.0' = {
  name: 'function-app-site'
  params: {
    name: name
    location: location
    tags: union(tags, {
      'azd-service-name': serviceName
    })
    kind: 'functionapp,linux'
    serverFarmResourceId: planResourceId
    httpsOnly: true
    publicNetworkAccess: 'Enabled'
    clientAffinityEnabled: false
    managedIdentities: {
      userAssignedResourceIds: [
        identityResourceId
      ]
    }
    // Key Vault references resolve with the user-assigned identity (the site has no system-assigned one).
    keyVaultAccessIdentityResourceId: identityResourceId
    // azd deploys to the package container with Entra ID: FTP and SCM basic authentication stay off.
    basicPublishingCredentialsPolicies: [
      {
        name: 'ftp'
        allow: false
      }
      {
        name: 'scm'
        allow: false
      }
    ]
    siteConfig: {
      alwaysOn: false
      ftpsState: 'Disabled'
      minTlsVersion: '1.2'
      scmMinTlsVersion: '1.2'
      http20Enabled: true
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: 'https://${storageAccountName}.blob.${storageSuffix}/${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityResourceId
          }
        }
      }
      runtime: {
        name: 'python'
        version: '3.13'
      }
      scaleAndConcurrency: {
        instanceMemoryMB: instanceMemoryMB
        maximumInstanceCount: maximumInstanceCount
      }
    }
    // Without an app registration authentication is left as it is (off on a new app): see
    // docs/deploying.md for turning it off again.
    configs: empty(authClientId) ? [appSettingsConfig] : [appSettingsConfig, authConfig]
  }
}

@description('Name of the Function App.')
output name string = site.outputs.name

@description('Base URL of the Function App (the HTTP API is under /api).')
output url string = baseUrl

@description('Whether the app serves the remote-service simulators under /api/sim.')
output simulatorsEnabled bool = useSimulators

@description('Whether App Service authentication (Microsoft Entra ID) is configured.')
output authenticationEnabled bool = !empty(authClientId)

@description('The app settings holding a callback secret, one per service that answers later (catalog.json), comma-separated: the predeploy hook makes each once.')
output callbackSecretSettings string = join(loadJsonContent('catalog.json').callbackSecrets, ',')

@description('The app settings holding a storefront\'s key, one per storefront, comma-separated: the predeploy hook makes each once. Names only, never a key.')
output storefrontKeySettings string = join(storefrontKeySettings, ',')
