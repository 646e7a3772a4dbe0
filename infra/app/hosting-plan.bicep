// Hosting: a Flex Consumption (FC1) plan. It scales to zero and bills execution time only (no always-ready
// instances are configured).

@description('Name of the plan.')
param name string

@description('Azure region of the plan.')
param location string

@description('Tags of the plan.')
param tags object

module plan 'br/public:avm/res/web/serverfarm:0.7.0' = {
  name: 'flex-consumption-plan'
  params: {
    name: name
    location: location
    tags: tags
    kind: 'functionapp'
    skuName: 'FC1'
    // Linux.
    reserved: true
    zoneRedundant: false
  }
}

@description('Resource ID of the plan.')
output resourceId string = plan.outputs.resourceId
