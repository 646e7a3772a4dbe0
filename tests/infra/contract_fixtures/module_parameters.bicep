// Mistakes in the parameters of Azure Verified Module calls. Each marked line must be reported there.
@allowed([
  'Standard'
  'Enterprise'
])
param tier string = 'Standard'

param retention int = 30

module casing 'br/public:avm/res/managed-identity/user-assigned-identity:0.5.0' = {
  name: 'casing'
  params: { // expect: missing required parameter 'name' ('Name' is spelled differently)
    Name: 'id-x' // expect: unknown parameter 'Name': the contract spells it 'name'
  }
}

module unknownParam 'br/public:avm/res/managed-identity/user-assigned-identity:0.5.0' = {
  name: 'unknown'
  params: {
    name: 'id-y'
    locaton: 'westeurope' // expect: unknown parameter 'locaton' (did you mean 'location'?)
  }
}

module literals 'br/public:avm/res/operational-insights/workspace:0.15.0' = {
  name: 'literals'
  params: {
    name: 'log-x'
    skuName: 'PerGB2019' // expect: 'PerGB2019' is not one of the allowed values
    dataRetention: 731 // expect: 731 is above the maximum 730
    dailyQuotaGb: 10 // expect: 10 is an int, a string is expected
  }
}

module nested 'br/public:avm/res/service-bus/namespace:0.16.1' = {
  name: 'nested'
  params: {
    name: 'sb-x'
    skuObject: {
      name: tier // expect: the parameter allows 'Enterprise', which is not among the allowed values
    }
    queues: [
      {
        name: 'q1'
        lockduration: 'PT1M' // expect: unknown property 'lockduration': the contract spells it 'lockDuration'
        maxDeliveryCount: '5' // expect: '5' is a string, an int is expected
      }
      { // expect: missing required property 'name'
        requiresSession: false
      }
    ]
    disableLocalAuth: 'true' // expect: 'true' is a string, a bool is expected
    zoneRedundant: null
    minimumTlsVersion: retention // expect: an int value where a string is expected
  }
}

module wrongShape 'br/public:avm/res/web/serverfarm:0.7.0' = {
  name: 'shape'
  params: {
    name: null // expect: null for required parameter 'name'
    skuName: [ // expect: an array where a string is expected
      'FC1'
    ]
    tags: 'none' // expect: 'none' is a string, an object is expected
  }
}
