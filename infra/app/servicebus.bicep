// Messaging: a Service Bus namespace (Standard by default, or Premium) with the workflow's queues (engine/queues.py names them).
// SAS is switched off (disableLocalAuth) and no authorization rule is created: senders and receivers use
// Microsoft Entra ID and the data roles granted in rbac.bicep.
//
// The queue properties are the ones in local/servicebus-config.json, which the local emulators use; a
// test (tests/infra/test_bicep.py) keeps the two identical. Why these values:
// - lockDuration PT1M: longer than a step's complete-by (30 s by default); the host also renews the lock
//   (host.json maxAutoLockRenewalDuration 5 min), so a slow call never loses its message mid-flight.
// - maxDeliveryCount 5 on the work queues: a message that failed five times is poison (or its handler
//   crashes); it goes to the dead-letter queue and the DeadletteredMessages alert fires. order-status
//   has no consumer in this app, and allows 10 for whoever subscribes to it.
// - defaultMessageTimeToLive PT1H: nothing in the workflow waits an hour; the Supervisor recovers
//   anything older from the state store.
// - deadLetteringOnMessageExpiration: true where an expired message means lost work to look at (the
//   Scheduler's commands and the agents' replies); false on the agent queues, whose requests carry the
//   step's deadline as their time-to-live and are meant to vanish when it passes (the Supervisor
//   retries the step), and on order-status (notifications nobody read).
// - requiresDuplicateDetection with a 10-minute window on the queues the engine sends to with a stable
//   message id, so a re-send after a crash is dropped by the broker; order-status is best-effort.
// The queues set nothing tier-specific (no enableExpress, which Premium refuses; no enablePartitioning,
// which Premium decides per namespace; no maxMessageSizeInKilobytes, which only Premium reads and whose
// 1 MB default is above anything the engine sends), so the same list is valid in both tiers.

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

var isPremium = sku == 'Premium'

var queues = [
  {
    name: 'scheduler'
    lockDuration: 'PT1M'
    maxDeliveryCount: 5
    defaultMessageTimeToLive: 'PT1H'
    deadLetteringOnMessageExpiration: true
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: 'PT10M'
    requiresSession: false
  }
  {
    name: 'scheduler-replies'
    lockDuration: 'PT1M'
    maxDeliveryCount: 5
    defaultMessageTimeToLive: 'PT1H'
    deadLetteringOnMessageExpiration: true
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: 'PT10M'
    requiresSession: false
  }
  {
    name: 'agent-inventory'
    lockDuration: 'PT1M'
    maxDeliveryCount: 5
    defaultMessageTimeToLive: 'PT1H'
    deadLetteringOnMessageExpiration: false
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: 'PT10M'
    requiresSession: false
  }
  {
    name: 'agent-payment'
    lockDuration: 'PT1M'
    maxDeliveryCount: 5
    defaultMessageTimeToLive: 'PT1H'
    deadLetteringOnMessageExpiration: false
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: 'PT10M'
    requiresSession: false
  }
  {
    name: 'agent-shipping'
    lockDuration: 'PT1M'
    maxDeliveryCount: 5
    defaultMessageTimeToLive: 'PT1H'
    deadLetteringOnMessageExpiration: false
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: 'PT10M'
    requiresSession: false
  }
  {
    name: 'order-status'
    lockDuration: 'PT1M'
    maxDeliveryCount: 10
    defaultMessageTimeToLive: 'PT1H'
    deadLetteringOnMessageExpiration: false
    requiresDuplicateDetection: false
    duplicateDetectionHistoryTimeWindow: 'PT10M'
    requiresSession: false
  }
]

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
