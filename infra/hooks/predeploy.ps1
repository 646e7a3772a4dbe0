# azd `predeploy` hook on Windows (azure.yaml): the same as predeploy.sh. Makes sure the Function App has
# its submission key, the app setting SUBMISSION_KEY with which a storefront submits and reads orders
# (the API's submitter role, and only that), once: the site module keeps the settings it does not set
# (retainCurrentAppSettings), so the key survives every deployment, and no deployment parameter, output
# or azd variable ever holds it.
#
# azd hands the environment's values to hooks as variables (AZURE_RESOURCE_GROUP, AZURE_FUNCTION_APP_NAME).
#   SUBMISSION_KEY_SETUP=skip   leave the app's settings alone (azd env set SUBMISSION_KEY_SETUP skip)
$ErrorActionPreference = 'Stop'

function Fail([string] $message) {
    Write-Error "predeploy: $message" -ErrorAction Continue
    exit 1
}

if ($env:SUBMISSION_KEY_SETUP -eq 'skip') {
    Write-Host 'predeploy: SUBMISSION_KEY_SETUP is skip, the submission key is left alone'
    exit 0
}
if (-not (Get-Command az -ErrorAction SilentlyContinue)) {
    Fail 'the Azure CLI (az) makes the submission key: install it, or set SUBMISSION_KEY_SETUP=skip'
}
if (-not $env:AZURE_RESOURCE_GROUP) { Fail 'AZURE_RESOURCE_GROUP is not set: run azd provision first' }
if (-not $env:AZURE_FUNCTION_APP_NAME) { Fail 'AZURE_FUNCTION_APP_NAME is not set: run azd provision first' }
$app = $env:AZURE_FUNCTION_APP_NAME

$existing = az functionapp config appsettings list -g $env:AZURE_RESOURCE_GROUP -n $app `
    --query "[?name=='SUBMISSION_KEY'].value | [0]" -o tsv
if ($LASTEXITCODE -ne 0) { Fail "could not read the app settings of $app" }
if ($existing) {
    Write-Host "predeploy: $app has its submission key"
    exit 0
}

# 32 random bytes as hex; the value goes to az in a file, never as an argument.
$bytes = [System.Security.Cryptography.RandomNumberGenerator]::GetBytes(32)
$key = -join ($bytes | ForEach-Object { $_.ToString('x2') })
$settings = New-TemporaryFile
try {
    "[{""name"": ""SUBMISSION_KEY"", ""value"": ""$key"", ""slotSetting"": false}]" | Set-Content -Path $settings -NoNewline
    az functionapp config appsettings set -g $env:AZURE_RESOURCE_GROUP -n $app --settings "@$settings" -o none
    if ($LASTEXITCODE -ne 0) { Fail "could not set the submission key of $app" }
} finally {
    Remove-Item -Force $settings
}
Write-Host "predeploy: made the submission key of $app; a storefront reads it with"
Write-Host "  az functionapp config appsettings list -g $env:AZURE_RESOURCE_GROUP -n $app --query ""[?name=='SUBMISSION_KEY'].value | [0]"" -o tsv"
exit 0
