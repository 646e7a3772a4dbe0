# The same as create-app-registration.sh, on Windows: creates, or brings up to date, the Microsoft Entra ID
# app registration people sign in to the API with (App Service authentication), and stores its client ID
# in the azd environment as AZURE_AUTH_CLIENT_ID; the next `azd provision` turns authentication on with it.
# Run it after a first `azd up`, with the Azure CLI signed in as someone who may create app registrations:
#
#   pwsh infra/hooks/create-app-registration.ps1 [-AssignMe]
#
# Idempotent: it finds the registration by its display name (AUTH_APP_NAME, default orders-<environment>)
# and makes only what is missing or different: the app roles Orders.Operator, Orders.Reader and Orders.Approver, the
# sign-in redirect and ID tokens (no client secret), the application ID URI api://<client id>, and a
# service principal that only people assigned a role may sign in to. -AssignMe also gives the signed-in
# user Orders.Operator.
param([switch] $AssignMe)
$ErrorActionPreference = 'Stop'

$OperatorRoleId = '85571cce-cb4b-47e8-8042-d3fd63fa180e'
$ReaderRoleId = '1f5b1675-4d73-4cff-b307-ecfa23777f9c'
$ApproverRoleId = 'a0d078a7-9d79-4601-b329-8b0e54757102'

function Fail([string] $message) {
    Write-Error "create-app-registration: $message" -ErrorAction Continue
    exit 1
}

if (-not (Get-Command az -ErrorAction SilentlyContinue)) { Fail 'the Azure CLI (az) is needed: install it and run az login' }
if (-not (Get-Command azd -ErrorAction SilentlyContinue)) { Fail 'the Azure Developer CLI (azd) is needed' }
$envName = if ($env:AZURE_ENV_NAME) { $env:AZURE_ENV_NAME } else { azd env get-value AZURE_ENV_NAME 2>$null }
if (-not $envName) { Fail 'no azd environment: run azd env new or azd up first' }
$api = if ($env:SERVICE_API_URI) { $env:SERVICE_API_URI } else { azd env get-value SERVICE_API_URI 2>$null }
if (-not $api) { Fail 'SERVICE_API_URI is not set: run azd up first, so that the app has its address' }
$name = if ($env:AUTH_APP_NAME) { $env:AUTH_APP_NAME } else { "orders-$envName" }
$redirect = "$($api.TrimEnd('/'))/.auth/login/aad/callback"

$roles = New-TemporaryFile
try {
    @(
        @{ allowedMemberTypes = @('User'); id = $OperatorRoleId; isEnabled = $true; value = 'Orders.Operator'
           displayName = 'Orders operator'
           description = 'Reads everything and acts on orders and dead letters: resubmit, cancel, retry, extend, skip, approve, reject, replay, purge.' },
        @{ allowedMemberTypes = @('User'); id = $ReaderRoleId; isEnabled = $true; value = 'Orders.Reader'
           displayName = 'Orders reader'
           description = 'Reads orders, counts, audit trails, breakers and dead letters, and opens the console without its actions.' },
        @{ allowedMemberTypes = @('User'); id = $ApproverRoleId; isEnabled = $true; value = 'Orders.Approver'
           displayName = 'Orders approver'
           description = 'Reads as a reader does, and approves or rejects the steps that wait for an approval.' }
    ) | ConvertTo-Json -Depth 4 | Set-Content -Path $roles

    $appId = az ad app list --display-name $name --query '[0].appId' -o tsv
    if ($LASTEXITCODE -ne 0) { Fail 'could not list app registrations' }
    if (-not $appId) {
        Write-Host "create-app-registration: creating $name"
        $appId = az ad app create --display-name $name --sign-in-audience AzureADMyOrg `
            --web-redirect-uris $redirect --enable-id-token-issuance true --app-roles "@$roles" `
            --query appId -o tsv
        if ($LASTEXITCODE -ne 0) { Fail "could not create the app registration $name" }
    } else {
        Write-Host "create-app-registration: $name exists ($appId); bringing it up to date"
        az ad app update --id $appId --web-redirect-uris $redirect --enable-id-token-issuance true `
            --app-roles "@$roles"
        if ($LASTEXITCODE -ne 0) { Fail "could not update the app registration $name" }
    }
} finally {
    Remove-Item -Force $roles
}
if (-not $appId) { Fail "the app registration $name has no client ID" }
az ad app update --id $appId --identifier-uris "api://$appId"
if ($LASTEXITCODE -ne 0) { Fail "could not set the application ID URI of $name" }

$spId = az ad sp list --filter "appId eq '$appId'" --query '[0].id' -o tsv
if ($LASTEXITCODE -ne 0) { Fail "could not look up the service principal of $name" }
if (-not $spId) {
    $spId = az ad sp create --id $appId --query id -o tsv
    if ($LASTEXITCODE -ne 0) { Fail "could not create the service principal of $name" }
}
az ad sp update --id $appId --set appRoleAssignmentRequired=true
if ($LASTEXITCODE -ne 0) { Fail "could not require role assignments on $name" }

if ($AssignMe) {
    $me = az ad signed-in-user show --query id -o tsv
    if ($LASTEXITCODE -ne 0) { Fail 'could not read the signed-in user' }
    $assignments = "https://graph.microsoft.com/v1.0/servicePrincipals/$spId/appRoleAssignedTo"
    $held = az rest --method GET --uri $assignments `
        --query "length(value[?principalId=='$me' && appRoleId=='$OperatorRoleId'])" -o tsv
    if ($LASTEXITCODE -ne 0) { Fail "could not read the role assignments of $name" }
    if ($held -eq '0') {
        $body = @{ principalId = $me; resourceId = $spId; appRoleId = $OperatorRoleId } | ConvertTo-Json -Compress
        az rest --method POST --uri $assignments --headers 'Content-Type=application/json' --body $body -o none
        if ($LASTEXITCODE -ne 0) { Fail 'could not assign you Orders.Operator' }
        Write-Host 'create-app-registration: you are now an Orders.Operator'
    }
}

azd env set AZURE_AUTH_CLIENT_ID $appId
if ($LASTEXITCODE -ne 0) { Fail 'could not store AZURE_AUTH_CLIENT_ID in the azd environment' }
Write-Host "create-app-registration: AZURE_AUTH_CLIENT_ID=$appId; run azd provision to turn authentication on"
exit 0
