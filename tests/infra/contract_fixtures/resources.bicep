// Plain resources against the published resource type of their API version.
resource storage 'Microsoft.Storage/storageAccounts@2024-01-01' existing = {
  name: 'st'
  location: 'westeurope' // expect: an existing resource takes only name, scope and parent
}

resource assignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid('a')
  scope: storage
  properties: { // expect: missing required property 'principalId'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'x')
    createdOn: '2024-01-01' // expect: read-only property 'createdOn' cannot be set
    principalID: 'p' // expect: the contract spells it 'principalId'
  }
}

resource group 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: 'rg-x'
  location: 'westeurope'
  tags: {
    env: 1 // expect: 1 is an int, a string is expected
  }
  managedby: 'me' // expect: unknown property 'managedby': the contract spells it 'managedBy'
}
