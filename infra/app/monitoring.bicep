// Monitoring: a Log Analytics workspace and a workspace-based Application Insights component.
// Local (instrumentation-key) authentication is off: telemetry is accepted only with a Microsoft Entra
// token, which the app's identity gets through Monitoring Metrics Publisher (rbac.bicep) and the
// APPLICATIONINSIGHTS_AUTHENTICATION_STRING app setting.

@description('Name of the Log Analytics workspace.')
param logAnalyticsName string

@description('Name of the Application Insights component.')
param applicationInsightsName string

@description('Azure region of both resources.')
param location string

@description('Tags of both resources.')
param tags object

@description('Days the workspace keeps data (30 is included in the price).')
param retentionInDays int = 30

module workspace 'br/public:avm/res/operational-insights/workspace:0.15.0' = {
  name: 'log-analytics-workspace'
  params: {
    name: logAnalyticsName
    location: location
    tags: tags
    skuName: 'PerGB2018'
    dataRetention: retentionInDays
  }
}

module component 'br/public:avm/res/insights/component:0.7.1' = {
  name: 'application-insights'
  params: {
    name: applicationInsightsName
    location: location
    tags: tags
    kind: 'web'
    applicationType: 'web'
    workspaceResourceId: workspace.outputs.resourceId
    retentionInDays: retentionInDays
    // Entra ID only: the connection string alone cannot send telemetry.
    disableLocalAuth: true
  }
}

@description('Resource ID of the Log Analytics workspace.')
output logAnalyticsResourceId string = workspace.outputs.resourceId

@description('Name of the Application Insights component.')
output applicationInsightsName string = component.outputs.name

@description('Resource ID of the Application Insights component (scope of the log alerts).')
output applicationInsightsResourceId string = component.outputs.resourceId

@description('APPLICATIONINSIGHTS_CONNECTION_STRING (not a secret once local authentication is off).')
output applicationInsightsConnectionString string = component.outputs.connectionString
