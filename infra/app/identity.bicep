// The one identity of the Function App: the host (AzureWebJobsStorage, deployment package), the
// Service Bus triggers and sender, the state store and the Application Insights exporter all use it.
// Its roles are granted in rbac.bicep, nowhere else.

@description('Name of the user-assigned managed identity.')
param name string

@description('Azure region of the identity.')
param location string

@description('Tags of the identity.')
param tags object

module identity 'br/public:avm/res/managed-identity/user-assigned-identity:0.5.0' = {
  name: 'user-assigned-identity'
  params: {
    name: name
    location: location
    tags: tags
  }
}

@description('Resource ID of the identity (assigned to the Function App).')
output resourceId string = identity.outputs.resourceId

@description('Client ID of the identity (the app settings name it so the SDKs pick this identity).')
output clientId string = identity.outputs.clientId

@description('Object (principal) ID of the identity (role assignments).')
output principalId string = identity.outputs.principalId
