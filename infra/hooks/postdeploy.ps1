# azd `postdeploy` hook on Windows (azure.yaml): the same check as postdeploy.sh. A few orders must
# reach Processed through the public API of the app just deployed (tools/smoke, `orders-smoke`).
#
# azd hands the environment's values to hooks as variables: the outputs of infra/main.bicep
# (SERVICE_API_URI, AZURE_RESOURCE_GROUP, AZURE_FUNCTION_APP_NAME) and whatever `azd env set` stored.
#   SKIP_SMOKE_TEST=true   skip the check (azd env set SKIP_SMOKE_TEST true)
#   SMOKE_SUBMISSION_KEY   use this submission key instead of reading it with the Azure CLI
#   SMOKE_PYTHON           a Python that has httpx and pydantic (default: .venv, python, or a venv
#                          created under .azure\ with the versions pinned in requirements.txt)
#   SMOKE_ARGS             extra orders-smoke options, e.g. "--orders 5 --timeout 300"
$ErrorActionPreference = 'Stop'

if ($env:SKIP_SMOKE_TEST -eq 'true') {
    Write-Host 'postdeploy: SKIP_SMOKE_TEST is true, smoke test skipped'
    exit 0
}

function Fail([string] $message) {
    Write-Error "postdeploy: $message" -ErrorAction Continue
    exit 1
}

if (-not $env:SERVICE_API_URI) { Fail 'SERVICE_API_URI is not set: run azd provision first' }
$root = (Resolve-Path (Join-Path $PSScriptRoot '..\..')).Path

# The smoke test submits and reads orders as a storefront does: with the submission key (the app setting
# SUBMISSION_KEY, made by the predeploy hook), which the signed-in identity (azd's user or the pipeline)
# may read. Never a host or master key: the API takes none.
$key = $env:SMOKE_SUBMISSION_KEY
if (-not $key) {
    if (-not (Get-Command az -ErrorAction SilentlyContinue)) {
        Fail 'the Azure CLI (az) reads the submission key: install it, or set SMOKE_SUBMISSION_KEY or SKIP_SMOKE_TEST=true'
    }
    if (-not $env:AZURE_RESOURCE_GROUP) { Fail 'AZURE_RESOURCE_GROUP is not set' }
    if (-not $env:AZURE_FUNCTION_APP_NAME) { Fail 'AZURE_FUNCTION_APP_NAME is not set' }
    $key = az functionapp config appsettings list -g $env:AZURE_RESOURCE_GROUP -n $env:AZURE_FUNCTION_APP_NAME `
        --query "[?name=='SUBMISSION_KEY'].value | [0]" -o tsv
    if ($LASTEXITCODE -ne 0) { Fail "could not read the submission key of $env:AZURE_FUNCTION_APP_NAME" }
    if (-not $key) { Fail "$env:AZURE_FUNCTION_APP_NAME has no SUBMISSION_KEY setting: run azd deploy (its predeploy hook makes one)" }
}

function Test-Dependencies([string] $candidate) {
    if (-not (Get-Command $candidate -ErrorAction SilentlyContinue)) { return $false }
    & $candidate -c 'import httpx, pydantic' 2>$null | Out-Null
    return $LASTEXITCODE -eq 0
}

$python = $env:SMOKE_PYTHON
if (-not $python) {
    foreach ($candidate in @((Join-Path $root '.venv\Scripts\python.exe'), 'python')) {
        if (Test-Dependencies $candidate) { $python = $candidate; break }
    }
}
if (-not $python) {
    # A machine with only azd and Python: a private venv with the deployed app's pins of the two packages.
    $venv = Join-Path $root '.azure\smoke-venv'
    $pins = @(Get-Content (Join-Path $root 'requirements.txt') | Where-Object { $_ -match '^(httpx|pydantic)==' })
    Write-Host "postdeploy: installing $($pins -join ' ') into $venv"
    python -m venv $venv
    if ($LASTEXITCODE -ne 0) { Fail 'python -m venv failed: install Python 3.13 or set SKIP_SMOKE_TEST=true' }
    $python = Join-Path $venv 'Scripts\python.exe'
    & $python -m pip install --quiet --disable-pip-version-check @pins
    if ($LASTEXITCODE -ne 0) { Fail 'could not install httpx and pydantic' }
}

Write-Host "postdeploy: smoke test against $env:SERVICE_API_URI"
$env:ORDERS_SMOKE_KEY = $key
$env:PYTHONPATH = if ($env:PYTHONPATH) { "$root\src;$env:PYTHONPATH" } else { "$root\src" }
$extra = if ($env:SMOKE_ARGS) { $env:SMOKE_ARGS -split '\s+' | Where-Object { $_ } } else { @() }
& $python -m smoke --url $env:SERVICE_API_URI @extra
exit $LASTEXITCODE
