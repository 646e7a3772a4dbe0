// One storage account for the Functions host (AzureWebJobsStorage: timer leases, host keys), the Flex
// Consumption deployment package (a blob container) and the state store (the state table, its watch
// table, and the ledger of the simulators the app hosts for a demo). Shared keys are off: every client authenticates with Microsoft Entra ID.

@description('Name of the storage account (3-24 lower-case letters and digits, globally unique).')
param name string

@description('Azure region of the storage account.')
param location string

@description('Tags of the storage account.')
param tags object

@description('Blob container that holds the Flex Consumption deployment package.')
param deploymentContainerName string

@description('The state table (STATE_TABLE_NAME); its watch table is this name followed by "watch" (adapters.table_store.watch_table_name), its history table by "history", its search table by "search" (adapters.table_store.search_table_name), the hosted simulators\' ledger this name followed by "sim" (simulators.table_ledger.ledger_table_name).')
param stateTableName string

module account 'br/public:avm/res/storage/storage-account:0.32.1' = {
  name: 'storage-account'
  params: {
    name: name
    location: location
    tags: tags
    kind: 'StorageV2'
    skuName: 'Standard_LRS'
    accessTier: 'Hot'
    // Entra ID only: no account keys, no SAS signed with them.
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    // Flex Consumption without a virtual network reaches the account over its public endpoint.
    publicNetworkAccess: 'Enabled'
    networkAcls: {
      defaultAction: 'Allow'
      bypass: 'AzureServices'
    }
    blobServices: {
      containers: [
        {
          name: deploymentContainerName
          publicAccess: 'None'
        }
      ]
    }
    tableServices: {
      tables: [
        {
          name: stateTableName
        }
        {
          name: '${stateTableName}watch'
        }
        {
          name: '${stateTableName}history'
        }
        {
          name: '${stateTableName}search'
        }
        {
          name: '${stateTableName}sim'
        }
      ]
    }
  }
}

@description('Name of the storage account.')
output name string = account.outputs.name

@description('Resource ID of the storage account.')
output resourceId string = account.outputs.resourceId

@description('Blob endpoint (AzureWebJobsStorage__blobServiceUri, the deployment container).')
output blobEndpoint string = 'https://${name}.blob.${environment().suffixes.storage}/'

@description('Table endpoint (STATE_STORE_ENDPOINT).')
output tableEndpoint string = 'https://${name}.table.${environment().suffixes.storage}'
