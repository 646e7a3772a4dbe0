// Every role assignment of the deployment, in one place, each at the narrowest scope that works.
//
// The app's identity gets exactly the data-plane access the code and the Functions host use:
// - Service Bus: Azure Service Bus Data Sender (the engine sends to every queue) and Data Receiver (the
//   triggers receive, complete, abandon and dead-letter). Never Data Owner: nothing manages entities
//   at run time; Bicep creates the queues.
// - Storage: Storage Table Data Contributor (the state and watch tables) and Storage Blob Data Owner
//   (the host's AzureWebJobsStorage and the Flex Consumption deployment package). No queue role: no
//   trigger or host feature here uses storage queues.
// - Application Insights: Monitoring Metrics Publisher (telemetry with Entra ID, local auth is off).
// - Key Vault: Key Vault Secrets User (reads the input encryption keys through the app settings' Key
//   Vault references), on the vault, which holds nothing else: its secrets do not exist yet when this
//   runs (the postprovision hook makes them), so no assignment can be scoped to one.
// The person running azd (principalId, optional) gets the same data roles on Service Bus and storage,
// to run the code and the tests against the deployment, and Key Vault Secrets Officer on the vault: the
// postprovision hook, which runs as them, lists the vault's secrets and makes the key once (it reads no
// value), and a rotation writes new versions.
// A storefront's reader (its principalId, optional) gets Azure Service Bus Data Receiver on that
// storefront's status queue only: it reads its own orders' status messages and no other queue (the others
// carry every order in flight). The app's Data Sender on the namespace covers these queues too.

@description('Name of the storage account (host storage, deployment package, state tables).')
param storageAccountName string

@description('Name of the Service Bus namespace.')
param serviceBusNamespaceName string

@description('Name of the Application Insights component.')
param applicationInsightsName string

@description('Name of the Key Vault holding the input encryption keys.')
param keyVaultName string

@description('Object (principal) ID of the Function App\'s user-assigned identity.')
param appPrincipalId string

@description('Object ID of the deploying user or pipeline; empty grants nothing.')
param userPrincipalId string = ''

@description('Kind of principal userPrincipalId is (User or ServicePrincipal).')
@allowed([
  'User'
  'ServicePrincipal'
])
param userPrincipalType string = 'User'

@description('Storefronts (main.bicep checks their names), each {"name": "<name>", "principalId": "<object id>" or ""}: a principalId (a service principal or managed identity) gets Azure Service Bus Data Receiver on the queue order-status-<name> only; "" grants nothing.')
param storefronts array = []

// Built-in role definition IDs (the same in every tenant).
var roles = {
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
  keyVaultSecretsUser: '4633458b-17de-408a-b874-0445c86b69e6'
  keyVaultSecretsOfficer: 'b86a8fe4-44ce-4948-aee5-eccb2c155cd7'
}

var grantUser = !empty(userPrincipalId)
// The storefronts that name who reads their status queue.
var storefrontReaders = filter(storefronts, storefront => !empty(storefront.principalId))

resource serviceBus 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName
}

// Each reader's queue, created by servicebus.bicep: the scope of its one role assignment.
resource storefrontStatusQueues 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' existing = [
  for storefront in storefrontReaders: {
    parent: serviceBus
    name: 'order-status-${storefront.name}'
  }
]

resource storage 'Microsoft.Storage/storageAccounts@2024-01-01' existing = {
  name: storageAccountName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource keyVault 'Microsoft.KeyVault/vaults@2024-11-01' existing = {
  name: keyVaultName
}

// ---- The Function App's identity ---------------------------------------------------------------------

resource appServiceBusSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(serviceBus.id, appPrincipalId, roles.serviceBusDataSender)
  scope: serviceBus
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    description: 'Function App: send to the workflow queues'
  }
}

resource appServiceBusReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(serviceBus.id, appPrincipalId, roles.serviceBusDataReceiver)
  scope: serviceBus
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    description: 'Function App: Service Bus triggers receive and settle'
  }
}

resource appTableData 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, appPrincipalId, roles.storageTableDataContributor)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    description: 'Function App: the state and watch tables'
  }
}

resource appBlobData 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, appPrincipalId, roles.storageBlobDataOwner)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    description: 'Function App: host storage and the deployment package'
  }
}

resource appMetricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, appPrincipalId, roles.monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringMetricsPublisher)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    description: 'Function App: send telemetry with Entra ID'
  }
}

resource appKeyVaultSecrets 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(keyVault.id, appPrincipalId, roles.keyVaultSecretsUser)
  scope: keyVault
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.keyVaultSecretsUser)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    description: 'Function App: read the input encryption keys (Key Vault references)'
  }
}

// ---- The deploying user (optional) -------------------------------------------------------------------

resource userServiceBusSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(serviceBus.id, userPrincipalId, roles.serviceBusDataSender)
  scope: serviceBus
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    principalId: userPrincipalId
    principalType: userPrincipalType
    description: 'Developer: send to the workflow queues'
  }
}

resource userServiceBusReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(serviceBus.id, userPrincipalId, roles.serviceBusDataReceiver)
  scope: serviceBus
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
    principalId: userPrincipalId
    principalType: userPrincipalType
    description: 'Developer: receive from the workflow queues'
  }
}

resource userTableData 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(storage.id, userPrincipalId, roles.storageTableDataContributor)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: userPrincipalId
    principalType: userPrincipalType
    description: 'Developer: read and repair the state tables'
  }
}

resource userBlobData 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(storage.id, userPrincipalId, roles.storageBlobDataOwner)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataOwner)
    principalId: userPrincipalId
    principalType: userPrincipalType
    description: 'Developer: run the Functions host locally against this storage'
  }
}

resource userKeyVaultSecrets 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantUser) {
  name: guid(keyVault.id, userPrincipalId, roles.keyVaultSecretsOfficer)
  scope: keyVault
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.keyVaultSecretsOfficer)
    principalId: userPrincipalId
    principalType: userPrincipalType
    description: 'Developer: make the input encryption key once (postprovision hook) and rotate it'
  }
}

// ---- Storefronts' readers (optional) -----------------------------------------------------------------

resource storefrontStatusReceivers 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (storefront, i) in storefrontReaders: {
    name: guid(storefrontStatusQueues[i].id, storefront.principalId, roles.serviceBusDataReceiver)
    scope: storefrontStatusQueues[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataReceiver)
      principalId: storefront.principalId
      principalType: 'ServicePrincipal'
      description: 'Storefront ${storefront.name}: receive its status messages, on its own queue only'
    }
  }
]
