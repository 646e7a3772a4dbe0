# azd `postprovision` hook on Windows (azure.yaml): the same as postprovision.sh. Makes sure the Key Vault
# holds the input encryption key, the secret input-encryption-key that the app setting
# INPUT_ENCRYPTION_KEY references: "<key id>:<base64 of 32 random bytes>", the key id "k" and today's
# date (UTC). Made once, here, not in Bicep (which would draw a new one at every deployment); no
# deployment parameter, output or azd variable ever holds it, and this script never reads it back.
#
# azd hands the environment's values to hooks as variables (AZURE_KEY_VAULT_NAME,
# INPUT_ENCRYPTION_KEY_SECRET_NAME, AZURE_RESOURCE_GROUP, AZURE_FUNCTION_APP_NAME: main.bicep's outputs).
#   INPUT_ENCRYPTION_KEY_SETUP=skip   leave the vault alone (azd env set INPUT_ENCRYPTION_KEY_SETUP skip)
$ErrorActionPreference = 'Stop'

function Fail([string] $message) {
    Write-Error "postprovision: $message" -ErrorAction Continue
    exit 1
}

if ($env:INPUT_ENCRYPTION_KEY_SETUP -eq 'skip') {
    Write-Host 'postprovision: INPUT_ENCRYPTION_KEY_SETUP is skip, the input encryption key is left alone'
    exit 0
}
if (-not (Get-Command az -ErrorAction SilentlyContinue)) {
    Fail 'the Azure CLI (az) makes the input encryption key: install it, or set INPUT_ENCRYPTION_KEY_SETUP=skip'
}
if (-not $env:AZURE_KEY_VAULT_NAME) { Fail 'AZURE_KEY_VAULT_NAME is not set: run azd provision first' }
if (-not $env:AZURE_RESOURCE_GROUP) { Fail 'AZURE_RESOURCE_GROUP is not set: run azd provision first' }
if (-not $env:AZURE_FUNCTION_APP_NAME) { Fail 'AZURE_FUNCTION_APP_NAME is not set: run azd provision first' }
if (-not $env:INPUT_ENCRYPTION_KEY_SECRET_NAME) { Fail 'INPUT_ENCRYPTION_KEY_SECRET_NAME is not set: run azd provision first' }
$vault = $env:AZURE_KEY_VAULT_NAME
$secret = $env:INPUT_ENCRYPTION_KEY_SECRET_NAME
# Both go into a JMESPath query and a command line: a vault name and a secret name only.
if ($vault -notmatch '^[A-Za-z0-9-]+$') { Fail "AZURE_KEY_VAULT_NAME holds $vault, which is not a vault name" }
if ($secret -notmatch '^[A-Za-z0-9-]+$') { Fail "INPUT_ENCRYPTION_KEY_SECRET_NAME holds $secret, which is not a secret name" }

# Whether the secret exists, from the list of the vault's secrets (no values). A role assignment made by
# this provisioning can take minutes to reach the vault: the list is tried again, 10 s apart, ~3 minutes.
$tries = 0
while ($true) {
    $count = az keyvault secret list --vault-name $vault --query "length([?name=='$secret'])" -o tsv
    if ($LASTEXITCODE -eq 0) { break }
    $tries++
    if ($tries -ge 18) {
        Fail "could not list the secrets of the Key Vault ${vault}: does the principal running azd hold Key Vault Secrets Officer on it (AZURE_PRINCIPAL_ID)?"
    }
    Write-Host "postprovision: the Key Vault $vault does not answer yet (a new role assignment takes a few minutes); trying again"
    Start-Sleep -Seconds 10
}
if ("$count".Trim() -ne '0') {
    Write-Host "postprovision: the Key Vault $vault has its $secret"
    exit 0
}

# 32 random bytes, base64; the value goes to az in a file, never as an argument.
$bytes = [System.Security.Cryptography.RandomNumberGenerator]::GetBytes(32)
$keyId = 'k' + [DateTime]::UtcNow.ToString('yyyyMMdd')
$file = New-TemporaryFile
try {
    "${keyId}:$([Convert]::ToBase64String($bytes))" | Set-Content -Path $file -NoNewline
    az keyvault secret set --vault-name $vault --name $secret --file "$file" --encoding utf-8 `
        --content-type 'input encryption key: <key id>:<base64 of 32 bytes>' -o none
    if ($LASTEXITCODE -ne 0) { Fail "could not set the secret $secret in the Key Vault $vault" }
} finally {
    Remove-Item -Force $file
}
Write-Host "postprovision: made the $secret in the Key Vault $vault (key id $keyId)"

# The app fetched its Key Vault references when it started, before the secret existed: have it fetch
# them again now. Best effort: it also does on any change of its configuration, and every 24 hours.
$app = $env:AZURE_FUNCTION_APP_NAME
$appId = az functionapp show -g $env:AZURE_RESOURCE_GROUP -n $app --query id -o tsv
if ($LASTEXITCODE -eq 0) {
    az rest --method post -o none --url "$appId/config/configreferences/appsettings/refresh?api-version=2022-03-01"
}
if ($LASTEXITCODE -eq 0) {
    Write-Host "postprovision: $app fetches its Key Vault references again"
} else {
    Write-Warning "postprovision: could not have $app fetch its Key Vault references again; it does at its next change of configuration or within 24 hours"
}
exit 0
