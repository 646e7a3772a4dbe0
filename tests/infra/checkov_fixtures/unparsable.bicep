// Not Bicep: Checkov must report it as a parsing error, which `run_checkov.py` turns into a failure.
resource broken 'Microsoft.Storage/storageAccounts@2024-01-01' = {
  name: 'st'
  properties: {
