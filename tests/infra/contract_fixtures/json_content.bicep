// Content read with loadJsonContent (json_content.json, beside this file) is checked like literals, each
// mistake in it reported on the line of the call that reads it; loops over its arrays and objects are
// followed item by item, and each known part of a union(...) is checked. Each marked line must be
// reported there.
var wrongType = loadJsonContent('json_content.json').wrongType // expect: '5' is a string, an int is expected
var misspelt = loadJsonContent('json_content.json').misspelt // expect: the contract spells it 'lockDuration'
var unnamed = loadJsonContent('json_content.json').unnamed // expect: missing required property 'name'
var absent = loadJsonContent('no-such-file.json') // expect: no-such-file.json not found
var services = loadJsonContent('json_content.json').services
var settings = [for service in items(services): service.value.setting]
var misnamed = [for service in items(services): service.value.settng] // expect: no property 'settng'
var nowhere = loadJsonContent('json_content.json').nowhere // expect: no property 'nowhere'

module typed 'br/public:avm/res/service-bus/namespace:0.16.1' = {
  name: 'typed'
  params: {
    name: 'sb-1'
    queues: wrongType
  }
}

module spelled 'br/public:avm/res/service-bus/namespace:0.16.1' = {
  name: 'spelled'
  params: {
    name: 'sb-2'
    queues: misspelt
  }
}

module named 'br/public:avm/res/service-bus/namespace:0.16.1' = {
  name: 'named'
  params: {
    name: 'sb-3'
    queues: unnamed
  }
}

module looped 'br/public:avm/res/service-bus/namespace:0.16.1' = {
  name: 'looped'
  params: {
    name: 'sb-4'
    queues: [for queue in loadJsonContent('json_content.json').limits: { name: queue.name, maxDeliveryCount: queue.limit }] // expect: '10' is a string, an int is expected
  }
}

module merged 'br/public:avm/res/web/site:0.24.0' = {
  name: 'merged'
  params: {
    name: 'app-1'
    kind: 'functionapp'
    serverFarmResourceId: 'plan'
    configs: [
      {
        name: 'appsettings'
        properties: union(json('{}'), { SETTINGS: string(length(settings)), COUNT: 3 }) // expect: 3 is an int, a string is expected
      }
    ]
  }
}

output misnamedCount int = length(misnamed)
output absentContent object = absent
output nowhereContent object = nowhere
