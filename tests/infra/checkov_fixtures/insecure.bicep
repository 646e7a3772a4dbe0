// Insecure on purpose: `infra/run_checkov.py --self-test` proves every custom check fails here.
// Never deployed; not under infra/, so the real scan does not see it.

@description('Region.')
param location string = 'westeurope'

module namespace 'br/public:avm/res/service-bus/namespace:0.16.1' = {
  name: 'namespace'
  params: {
    name: 'sb-insecure'
    location: location
    disableLocalAuth: false
  }
}

module account 'br/public:avm/res/storage/storage-account:0.32.1' = {
  name: 'account'
  params: {
    name: 'stinsecure'
    location: location
    allowSharedKeyAccess: true
  }
}

module component 'br/public:avm/res/insights/component:0.7.1' = {
  name: 'component'
  params: {
    name: 'appi-insecure'
    location: location
    workspaceResourceId: 'unused'
  }
}

// Access policies instead of Azure RBAC.
module vault 'br/public:avm/res/key-vault/vault:0.14.0' = {
  name: 'vault'
  params: {
    name: 'kv-insecure'
    location: location
    enableRbacAuthorization: false
    enablePurgeProtection: true
  }
}

// Purge protection left to the module's default: it must be written out.
module unprotectedVault 'br/public:avm/res/key-vault/vault:0.14.0' = {
  name: 'unprotected-vault'
  params: {
    name: 'kv-insecure-2'
    location: location
    enableRbacAuthorization: true
  }
}

resource plainNamespace 'Microsoft.ServiceBus/namespaces@2024-01-01' = {
  name: 'sb-insecure-plain'
  location: location
  sku: {
    name: 'Standard'
  }
  properties: {
    disableLocalAuth: false
  }
}

resource plainAccount 'Microsoft.Storage/storageAccounts@2024-01-01' = {
  //checkov:skip=CKV_AZURE_44
  name: 'stinsecureplain'
  location: location
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    minimumTlsVersion: 'TLS1_2'
  }
}

resource plainComponent 'Microsoft.Insights/components@2020-02-02' = {
  name: 'appi-insecure-plain'
  location: location
  kind: 'web'
  properties: {
    Application_Type: 'web'
    DisableLocalAuth: false
  }
}

resource plainVault 'Microsoft.KeyVault/vaults@2024-11-01' = {
  name: 'kv-insecure-plain'
  location: location
  properties: {
    tenantId: subscription().tenantId
    sku: {
      family: 'A'
      name: 'standard'
    }
    enableRbacAuthorization: false
    accessPolicies: []
  }
}
