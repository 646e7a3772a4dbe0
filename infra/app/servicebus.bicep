// Messaging: a Service Bus namespace (Standard by default, or Premium) with the workflow's queues (engine/queues.py names them).
// SAS is switched off (disableLocalAuth) and no authorization rule is created: senders and receivers use
// Microsoft Entra ID and the data roles granted in rbac.bicep.
//
// The queues and their properties come from catalog.json, which `python -m orders.generate` writes from the
// declared workflows (src/orders/catalog.py) and the queue properties of each kind (src/engine/queues.py,
// where the values are explained); local/servicebus-config.json, which the local emulators read, comes
// from the same source. The properties set nothing tier-specific, so the same list is valid on Standard
// and Premium. Each storefront (main.bicep) adds its own status queue, order-status-<name>, with the
// properties of the shared status queue: only that storefront reads it (rbac.bicep).

@description('Name of the Service Bus namespace (globally unique).')
param name string

@description('Azure region of the namespace.')
param location string

@description('Tags of the namespace.')
param tags object

@description('Tier of the namespace.')
@allowed([
  'Standard'
  'Premium'
])
param sku string = 'Standard'

@description('Messaging units of a Premium namespace; not sent for Standard, which has none.')
@allowed([
  1
  2
  4
  8
  16
])
param capacity int = 1

@description('Names of the storefronts (main.bicep checks them): each gets the status queue order-status-<name>.')
param storefrontNames array = []

var isPremium = sku == 'Premium'

// Every queue of every deployed workflow version, as the module's queues items.
var catalogQueues = loadJsonContent('catalog.json').queues
// A storefront's status queue carries what the shared one does, for fewer readers: the same properties.
// (queue.name) in parentheses: pycep, the parser of the offline checks, reads `queue.name == x` as
// `queue.(name == x)`.
var statusQueue = filter(catalogQueues, queue => (queue.name) == 'order-status')[0]
var storefrontQueues = [for storefront in storefrontNames: union(statusQueue, { name: 'order-status-${storefront}' })]
// Without storefronts the module gets the catalog's list itself, which the offline contract check
// (make check-infra) follows item by item; it cannot see through flatten(), and each storefront's queue
// differs from the checked status queue by its name only.
var queues = empty(storefrontQueues) ? catalogQueues : flatten([catalogQueues, storefrontQueues])

module namespace 'br/public:avm/res/service-bus/namespace:0.16.1' = {
  name: 'service-bus-namespace'
  params: {
    name: name
    location: location
    tags: tags
    skuObject: isPremium ? { name: 'Premium', capacity: capacity } : { name: 'Standard' }
    // Zone redundancy needs Premium (the module's default of true would fail on Standard).
    zoneRedundant: isPremium
    // Microsoft Entra ID only: no SAS keys, and no RootManageSharedAccessKey rule to leak.
    disableLocalAuth: true
    authorizationRules: []
    minimumTlsVersion: '1.2'
    publicNetworkAccess: 'Enabled'
    queues: queues
  }
}

@description('Name of the namespace.')
output name string = namespace.outputs.name

@description('Resource ID of the namespace (dead-letter alert, role assignments).')
output resourceId string = namespace.outputs.resourceId

@description('ServiceBusConnection__fullyQualifiedNamespace.')
output fullyQualifiedNamespace string = '${name}.servicebus.windows.net'

@description('Names of the queues created.')
output queueNames array = [for queue in queues: queue.name]
