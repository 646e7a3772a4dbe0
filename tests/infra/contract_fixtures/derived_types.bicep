// Properties typed by the module from a resource type (resource-derived types) and discriminated unions.
module site 'br/public:avm/res/web/site:0.24.0' = {
  name: 'site'
  params: {
    name: 'func-x'
    kind: 'functionapp,linux'
    serverFarmResourceId: 'plan-id'
    siteConfig: {
      alwaysOn: 'yes' // expect: 'yes' is a string, a bool is expected
      minTLSVersion: '1.2' // expect: unknown property 'minTLSVersion': the contract spells it 'minTlsVersion'
      managedPipelineMode: 'integrated' // expect: 'integrated' is not one of the allowed values 'Integrated', 'Classic' (did you mean 'Integrated'?)
    }
    functionAppConfig: {
      runtime: {
        name: 'python'
        version: 3 // expect: 3 is an int, a string is expected
      }
      scaleAndConcurrency: {
        instanceMemoryMB: 512
        maximumInstances: 10 // expect: unknown property 'maximumInstances' (did you mean 'maximumInstanceCount'?)
      }
    }
  }
}

module logAlert 'br/public:avm/res/insights/scheduled-query-rule:0.6.0' = {
  name: 'log-alert'
  params: {
    name: 'alert-x'
    scopes: []
    severity: 5 // expect: 5 is not one of the allowed values
    criterias: {
      allOf: [
        {
          query: 'customEvents'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: '0' // expect: '0' is a string, an int is expected
          failingPeriod: { // expect: unknown property 'failingPeriod' (did you mean 'failingPeriods'?)
            numberOfEvaluationPeriods: 1
          }
        }
      ]
    }
  }
}

module metricAlert 'br/public:avm/res/insights/metric-alert:0.4.1' = {
  name: 'metric-alert'
  params: {
    name: 'alert-y'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceCriteria' // expect: is not one of
      allof: []
    }
  }
}

module metricAlertCase 'br/public:avm/res/insights/metric-alert:0.4.1' = {
  name: 'metric-alert-case'
  params: {
    name: 'alert-z'
    criteria: { // expect: missing required property 'allof'
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [] // expect: the contract spells it 'allof'
    }
  }
}

module noDiscriminator 'br/public:avm/res/insights/metric-alert:0.4.1' = {
  name: 'metric-alert-none'
  params: {
    name: 'alert-w'
    criteria: { // expect: missing required property 'odata.type'
      allof: []
    }
  }
}
