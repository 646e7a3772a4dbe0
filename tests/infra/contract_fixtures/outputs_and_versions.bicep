// Module outputs that do not exist, and versions with no pinned contract.
module identity 'br/public:avm/res/managed-identity/user-assigned-identity:0.5.0' = {
  name: 'identity'
  params: {
    name: 'id-x'
  }
}

module local 'modules/local-target.bicep' = {
  name: 'local'
  params: { // expect: missing required parameter 'required'
    size: 'XL' // expect: 'XL' is not one of the allowed values 'S', 'M'
    count: 0 // expect: 0 is below the minimum 1
    extra: true // expect: unknown parameter 'extra'
  }
}

module unpinned 'br/public:avm/res/web/site:0.1.0' = { // expect: no pinned contract for avm/res/web/site:0.1.0
  name: 'unpinned'
  params: {}
}

resource unpinnedApi 'Microsoft.Storage/storageAccounts@2019-06-01' existing = { // expect: no pinned definition
  name: 'st'
}

output clientId string = identity.outputs.clientID // expect: module identity has no output 'clientID'; it declares 'clientId'
output principal string = identity.outputs.principalId
output localMissing string = local.outputs.nothing // expect: module local has no output 'nothing'
output localOk string = local.outputs.echo

@minValue(1)
param shards int = 0 // expect: 0 is below the minimum 1

@allowed([
  'a'
])
param letter string = 'b' // expect: 'b' is not one of the allowed values 'a'

output count int = identity.outputs.principalId // expect: a string value where an int is expected
output names array = 'one' // expect: 'one' is a string, an array is expected
