# azd `predeploy` hook on Windows (azure.yaml): the same as predeploy.sh. Sets the Function App's site
# update strategy, and makes sure it has its submission key, the app setting SUBMISSION_KEY with which a
# storefront submits and reads orders (the API's submitter role, and only that), each storefront's key (STOREFRONT_<NAME>_KEY) and each
# callback secret (<SERVICE>_CALLBACK_SECRET), once: the site module keeps the settings it does not set
# (retainCurrentAppSettings), so a key survives every deployment, and no deployment parameter, output or
# azd variable ever holds it.
#
# azd hands the environment's values to hooks as variables (AZURE_RESOURCE_GROUP, AZURE_FUNCTION_APP_NAME).
#   SUBMISSION_KEY_SETUP=skip   leave the app's settings alone (azd env set SUBMISSION_KEY_SETUP skip)
#   SITE_UPDATE_STRATEGY        Recreate (default), RollingUpdate, or skip to leave it as it is
$ErrorActionPreference = 'Stop'

function Fail([string] $message) {
    Write-Error "predeploy: $message" -ErrorAction Continue
    exit 1
}

function Assert-App([string] $what, [string] $skip) {
    if (-not (Get-Command az -ErrorAction SilentlyContinue)) {
        Fail "the Azure CLI (az) ${what}: install it, or set $skip=skip"
    }
    if (-not $env:AZURE_RESOURCE_GROUP) { Fail 'AZURE_RESOURCE_GROUP is not set: run azd provision first' }
    if (-not $env:AZURE_FUNCTION_APP_NAME) { Fail 'AZURE_FUNCTION_APP_NAME is not set: run azd provision first' }
}

# The site update strategy, set on purpose before every deployment (docs/upgrading.md); here, not in the
# Bicep: no API version of Microsoft.Web/sites in Bicep's types has the property yet.
$strategy = if ($env:SITE_UPDATE_STRATEGY) { $env:SITE_UPDATE_STRATEGY } else { 'Recreate' }
if ($strategy -eq 'skip') {
    Write-Host 'predeploy: SITE_UPDATE_STRATEGY is skip, the site update strategy is left alone'
} elseif ($strategy -ceq 'Recreate' -or $strategy -ceq 'RollingUpdate') {
    Assert-App 'sets the site update strategy' 'SITE_UPDATE_STRATEGY'
    az functionapp update-strategy config set --resource-group $env:AZURE_RESOURCE_GROUP `
        --name $env:AZURE_FUNCTION_APP_NAME --type $strategy -o none
    if ($LASTEXITCODE -ne 0) {
        Fail "could not set the site update strategy of $env:AZURE_FUNCTION_APP_NAME to $strategy (an Azure CLI older than update-strategy? update it, or set SITE_UPDATE_STRATEGY=skip)"
    }
    Write-Host "predeploy: the site update strategy of $env:AZURE_FUNCTION_APP_NAME is $strategy"
} else {
    Fail "SITE_UPDATE_STRATEGY holds ${strategy}: Recreate, RollingUpdate or skip"
}

if ($env:SUBMISSION_KEY_SETUP -eq 'skip') {
    Write-Host 'predeploy: SUBMISSION_KEY_SETUP is skip, the submission key is left alone'
    exit 0
}
Assert-App 'makes the submission key' 'SUBMISSION_KEY_SETUP'
$app = $env:AZURE_FUNCTION_APP_NAME

# One setting at a time: read it, and make it only if the app has none. The submission key, then the
# callback secret of each service that answers later (CALLBACK_SECRET_SETTINGS, a main.bicep output
# from infra/app/catalog.json, comma-separated): the service signs its callbacks with it; then each
# storefront's key (STOREFRONT_KEY_SETTINGS, a main.bicep output from its storefronts parameter).
function Set-Once([string] $name) {
    $existing = az functionapp config appsettings list -g $env:AZURE_RESOURCE_GROUP -n $app `
        --query "[?name=='$name'].value | [0]" -o tsv
    if ($LASTEXITCODE -ne 0) { Fail "could not read the app settings of $app" }
    if ($existing) {
        Write-Host "predeploy: $app has its $name"
        return
    }
    # 32 random bytes as hex; the value goes to az in a file, never as an argument.
    $bytes = [System.Security.Cryptography.RandomNumberGenerator]::GetBytes(32)
    $key = -join ($bytes | ForEach-Object { $_.ToString('x2') })
    $settings = New-TemporaryFile
    try {
        "[{""name"": ""$name"", ""value"": ""$key"", ""slotSetting"": false}]" | Set-Content -Path $settings -NoNewline
        az functionapp config appsettings set -g $env:AZURE_RESOURCE_GROUP -n $app --settings "@$settings" -o none
        if ($LASTEXITCODE -ne 0) { Fail "could not set the $name of $app" }
    } finally {
        Remove-Item -Force $settings
    }
    Write-Host "predeploy: made the $name of $app; read it with"
    Write-Host "  az functionapp config appsettings list -g $env:AZURE_RESOURCE_GROUP -n $app --query ""[?name=='$name'].value | [0]"" -o tsv"
}

Set-Once 'SUBMISSION_KEY'
# Each name is checked before it goes into a query; -cnotmatch because -notmatch ignores case.
foreach ($name in ("$env:CALLBACK_SECRET_SETTINGS" -split ',' | Where-Object { $_ })) {
    if ($name -cnotmatch '^[A-Z0-9_]+$') { Fail "CALLBACK_SECRET_SETTINGS holds $name, which is not a setting name" }
    Set-Once $name
}
foreach ($name in ("$env:STOREFRONT_KEY_SETTINGS" -split ',' | Where-Object { $_ })) {
    if ($name -cnotmatch '^[A-Z0-9_]+$') { Fail "STOREFRONT_KEY_SETTINGS holds $name, which is not a setting name" }
    if ($name -cnotmatch '^STOREFRONT_[A-Z0-9_]+_KEY$') { Fail "STOREFRONT_KEY_SETTINGS holds $name, which is not a storefront's key setting" }
    Set-Once $name
}
exit 0
