// Alerts and where they go. The log alerts query Application Insights for the exact custom-event names
// the engine emits (src/engine/telemetry.py; tests/infra checks they agree):
// - an order entered Error (OrderEnteredError): an operator must look at it and resubmit or cancel;
// - a message was rejected as poison (PoisonMessageRejected) on its way to the dead-letter queue, and,
//   from the broker's side, any queue's dead-letter sub-queue holds messages (DeadletteredMessages);
// - a message or stored record was not understood (NotUnderstood): written by a later release (passed over,
//   offered again to an instance that reads it) or corrupted; expected for minutes at most during a rollout;
// - an approval was not given by its deadline (ApprovalOverdue): its order was undone or put in Error,
//   and the approval queue may be growing faster than people work through it;
// - the Supervisor stopped sweeping (no SupervisorSweepCompleted in 15 minutes, i.e. many missed runs of
//   its schedule): without it, nothing recovers stuck orders.

@description('Unique token of the deployment, used in the rule names.')
param resourceToken string

@description('Azure region of the log alert rules.')
param location string

@description('Tags of the alert resources.')
param tags object

@description('E-mail address notified by the action group; empty creates the group without receivers.')
param alertEmail string = ''

@description('Resource ID of Application Insights (scope of the log alerts).')
param applicationInsightsResourceId string

@description('Resource ID of the Service Bus namespace (scope of the dead-letter metric alert).')
param serviceBusNamespaceResourceId string

@description('How long without a completed sweep before the Supervisor alert fires (ISO 8601).')
param supervisorSilenceWindow string = 'PT15M'

var emailReceivers = empty(alertEmail) ? [] : [
  {
    name: 'operator-email'
    emailAddress: alertEmail
    useCommonAlertSchema: true
  }
]

module actionGroup 'br/public:avm/res/insights/action-group:0.8.0' = {
  name: 'action-group'
  params: {
    name: 'ag-orders-${resourceToken}'
    location: 'global'
    tags: tags
    groupShortName: 'orders'
    enabled: true
    emailReceivers: emailReceivers
  }
}

// (a) An order entered Error.
module orderErrorAlert 'br/public:avm/res/insights/scheduled-query-rule:0.6.0' = {
  name: 'alert-order-error'
  params: {
    name: 'alert-order-error-${resourceToken}'
    location: location
    tags: tags
    alertDisplayName: 'Order entered Error'
    alertDescription: 'The Supervisor or the Scheduler put an order in Error (OrderEnteredError). Find it with GET /api/orders?processState=Error, fix the cause, then resubmit or cancel it.'
    severity: 1
    enabled: true
    scopes: [
      applicationInsightsResourceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    autoMitigate: true
    criterias: {
      allOf: [
        {
          query: 'customEvents | where name == "OrderEnteredError"'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroupResourceIds: [
        actionGroup.outputs.resourceId
      ]
    }
  }
}

// (b) Messages dead-lettered, seen by the broker: any queue's dead-letter sub-queue is not empty.
module deadLetterAlert 'br/public:avm/res/insights/metric-alert:0.4.1' = {
  name: 'alert-dead-lettered'
  params: {
    name: 'alert-dead-lettered-${resourceToken}'
    location: 'global'
    tags: tags
    alertDescription: 'A Service Bus queue holds dead-lettered messages (poison input, or MaxDeliveryCount exceeded). Inspect <queue>/$DeadLetterQueue, fix the cause, then resubmit or purge.'
    severity: 2
    enabled: true
    scopes: [
      serviceBusNamespaceResourceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    autoMitigate: true
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allof: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'DeadletteredMessagesOnAnyQueue'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
        }
      ]
    }
    actions: [
      actionGroup.outputs.resourceId
    ]
  }
}

// (b2) A release met what a later one wrote, or a record it cannot read: passed over, never failed on.
module notUnderstoodAlert 'br/public:avm/res/insights/scheduled-query-rule:0.6.0' = {
  name: 'alert-not-understood'
  params: {
    name: 'alert-not-understood-${resourceToken}'
    location: location
    tags: tags
    alertDisplayName: 'Message or record not understood'
    alertDescription: 'An instance passed over a message or a stored record it cannot read (NotUnderstood): written by a later release, or corrupted. During a rollout or a rollback this is expected for minutes; if it lasts, an older release is running after the formats switch (docs/upgrading.md). customDimensions name the order, the queue or record, and what was not understood.'
    severity: 2
    enabled: true
    scopes: [
      applicationInsightsResourceId
    ]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT15M'
    autoMitigate: true
    criterias: {
      allOf: [
        {
          query: 'customEvents | where name == "NotUnderstood"'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroupResourceIds: [
        actionGroup.outputs.resourceId
      ]
    }
  }
}

// (b) The same from the application's side: the engine rejected a message it could not parse.
module poisonMessageAlert 'br/public:avm/res/insights/scheduled-query-rule:0.6.0' = {
  name: 'alert-poison-message'
  params: {
    name: 'alert-poison-message-${resourceToken}'
    location: location
    tags: tags
    alertDisplayName: 'Poison message rejected'
    alertDescription: 'The engine rejected a message it could not parse (PoisonMessageRejected); Service Bus dead-letters it after MaxDeliveryCount deliveries. customDimensions name the queue and the reason.'
    severity: 2
    enabled: true
    scopes: [
      applicationInsightsResourceId
    ]
    // The broker-side metric alert above already watches the dead-letter queues every 5 minutes;
    // this one adds the reason, so a 15-minute rule (the cheapest log alert frequency) is enough.
    evaluationFrequency: 'PT15M'
    windowSize: 'PT15M'
    autoMitigate: true
    criterias: {
      allOf: [
        {
          query: 'customEvents | where name == "PoisonMessageRejected"'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroupResourceIds: [
        actionGroup.outputs.resourceId
      ]
    }
  }
}

// (d) Approvals waiting too long: one passed its deadline with no decision (the order was undone, or put
// in Error, as its workflow declares).
module approvalOverdueAlert 'br/public:avm/res/insights/scheduled-query-rule:0.6.0' = {
  name: 'alert-approval-overdue'
  params: {
    name: 'alert-approval-overdue-${resourceToken}'
    location: location
    tags: tags
    alertDisplayName: 'Approval not given in time'
    alertDescription: 'An order waited for an approval past its deadline (ApprovalOverdue); its policy was applied: the order was undone, or put in Error. See GET /api/orders?processState=Waiting&waitingFor=approval for the queue, and the runbook in docs/operating.md.'
    severity: 2
    enabled: true
    scopes: [
      applicationInsightsResourceId
    ]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT15M'
    autoMitigate: true
    criterias: {
      allOf: [
        {
          query: 'customEvents | where name == "ApprovalOverdue"'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroupResourceIds: [
        actionGroup.outputs.resourceId
      ]
    }
  }
}

// (c) The Supervisor has not completed a sweep for several of its periods.
module supervisorSilentAlert 'br/public:avm/res/insights/scheduled-query-rule:0.6.0' = {
  name: 'alert-supervisor-silent'
  params: {
    name: 'alert-supervisor-silent-${resourceToken}'
    location: location
    tags: tags
    alertDisplayName: 'Supervisor not running'
    alertDescription: 'No SupervisorSweepCompleted event in the window: the timer is not firing or every sweep fails, so stuck orders are not recovered. Check the supervisor function\'s invocations and exceptions.'
    severity: 1
    enabled: true
    scopes: [
      applicationInsightsResourceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: supervisorSilenceWindow
    autoMitigate: true
    criterias: {
      allOf: [
        {
          // Count of rows: no row in the window counts 0, which is below 1.
          query: 'customEvents | where name == "SupervisorSweepCompleted"'
          timeAggregation: 'Count'
          operator: 'LessThan'
          threshold: 1
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroupResourceIds: [
        actionGroup.outputs.resourceId
      ]
    }
  }
}

@description('Resource ID of the action group.')
output actionGroupResourceId string = actionGroup.outputs.resourceId
