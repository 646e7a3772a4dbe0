// The operations workbook: charts of the engine's telemetry (throughput, step latency, errors and
// compensations, retries, circuit breakers, queues, orders waiting, Supervisor sweeps, one order's trace).
// Its content is workbook.json, beside this file; every query there reads this Application Insights
// component's tables, under the metric, span and event names the engine emits (tests/infra checks them).
// There is no Azure Verified Module for workbooks, so this is a plain resource with a pinned contract.

@description('Name of the workbook as the portal lists it.')
param displayName string

@description('Azure region of the workbook (the Application Insights component\'s).')
param location string

@description('Tags of the workbook.')
param tags object

@description('Resource ID of the Application Insights component: the workbook is listed under it and queries it.')
param applicationInsightsResourceId string

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  // A workbook's name must be a GUID. Derived from the component, so every deployment updates the same
  // workbook instead of adding another.
  name: guid(applicationInsightsResourceId, 'orders-workbook')
  location: location
  tags: tags
  // Shared: everyone with read access to the resource group sees it, not only whoever deployed it.
  kind: 'shared'
  properties: {
    displayName: displayName
    category: 'workbook'
    // Lists the workbook under the component's Workbooks and runs its queries against the component.
    sourceId: applicationInsightsResourceId
    version: 'Notebook/1.0'
    // fallbackResourceIds: the resource the queries run against when the workbook is opened from the
    // resource group or Azure Monitor, outside the component.
    serializedData: string(union(loadJsonContent('workbook.json'), {
      fallbackResourceIds: [
        applicationInsightsResourceId
      ]
    }))
  }
}

@description('Resource ID of the workbook.')
output resourceId string = workbook.id

@description('Name (a GUID) of the workbook.')
output name string = workbook.name
