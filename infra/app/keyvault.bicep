// The Key Vault of the key that encrypts the declared sensitive input fields at rest (INPUT_ENCRYPTION_KEY).
// Bicep creates the vault and no secret: a secret's value written here would be drawn anew (newGuid()) at
// every deployment, and data encrypted under the old key could no longer be read. The postprovision hook
// (infra/hooks/postprovision.sh) makes the secret input-encryption-key once; the Function App reads it
// through a Key Vault reference (function-app.bicep) with its user-assigned identity.
//
// Azure RBAC only (no access policies): the app's identity gets Key Vault Secrets User, the deploying
// principal Key Vault Secrets Officer, both in rbac.bicep. Soft delete and purge protection: a deleted
// vault, with its key, can be recovered for softDeleteRetentionInDays and purged by nobody before.

@description('Name of the Key Vault (3-24 letters, digits and hyphens, globally unique).')
param name string

@description('Azure region of the Key Vault.')
param location string

@description('Tags of the Key Vault.')
param tags object

@minValue(7)
@maxValue(90)
@description('Days a deleted vault (and a deleted secret) can be recovered; purge protection keeps anyone from purging it sooner. Fixed once the vault exists.')
param softDeleteRetentionInDays int = 90

// The secrets the app reads (orders.settings: INPUT_ENCRYPTION_KEY and INPUT_ENCRYPTION_PREVIOUS_KEYS), each
// "<key id>:<base64 of 32 bytes>", the second a comma-separated list; made outside Bicep (see above).
var keySecretName = 'input-encryption-key'
var previousKeysSecretName = 'input-encryption-previous-keys'

module vault 'br/public:avm/res/key-vault/vault:0.14.0' = {
  name: 'key-vault'
  params: {
    name: name
    location: location
    tags: tags
    // Standard: the key is a secret, no HSM-protected keys are needed.
    sku: 'standard'
    // Data-plane access by Azure RBAC only (rbac.bicep); the module creates no access policy.
    enableRbacAuthorization: true
    enableSoftDelete: true
    softDeleteRetentionInDays: softDeleteRetentionInDays
    enablePurgeProtection: true
    // Nothing else reads this vault: no VM certificates, no template parameters, no disk encryption.
    enableVaultForDeployment: false
    enableVaultForTemplateDeployment: false
    enableVaultForDiskEncryption: false
    // Flex Consumption without a virtual network resolves the Key Vault reference over the public
    // endpoint, as it reaches the storage account and the Service Bus namespace.
    publicNetworkAccess: 'Enabled'
    networkAcls: {
      defaultAction: 'Allow'
      bypass: 'AzureServices'
    }
  }
}

@description('Name of the Key Vault (the Key Vault reference, the postprovision hook).')
output name string = vault.outputs.name

@description('Resource ID of the Key Vault (role assignments).')
output resourceId string = vault.outputs.resourceId

@description('URI of the Key Vault (its data-plane endpoint, AZURE_KEY_VAULT_ENDPOINT).')
output uri string = vault.outputs.uri

@description('Name of the secret holding the current key (INPUT_ENCRYPTION_KEY), made by the postprovision hook.')
output inputKeyName string = keySecretName

@description('Name of the secret holding the previous keys (INPUT_ENCRYPTION_PREVIOUS_KEYS), made by hand when a key is rotated.')
output previousInputKeysName string = previousKeysSecretName
