#!/bin/sh
# azd `predeploy` hook (azure.yaml): makes sure the Function App has its submission key, the app setting
# SUBMISSION_KEY with which a storefront submits and reads orders (the API's submitter role, and only
# that). It is made once, here, not in Bicep: the site module keeps the settings it does not set
# (retainCurrentAppSettings), so the key a storefront holds survives every deployment, and no deployment
# parameter, output or azd variable ever holds it. Rotating it: docs/deploying.md.
#
# azd hands the environment's values to hooks as variables (AZURE_RESOURCE_GROUP, AZURE_FUNCTION_APP_NAME).
#   SUBMISSION_KEY_SETUP=skip   leave the app's settings alone (azd env set SUBMISSION_KEY_SETUP skip)
set -eu

fail() {
  echo "predeploy: $*" >&2
  exit 1
}

if [ "${SUBMISSION_KEY_SETUP:-}" = "skip" ]; then
  echo "predeploy: SUBMISSION_KEY_SETUP is skip, the submission key is left alone"
  exit 0
fi
command -v az >/dev/null 2>&1 \
  || fail "the Azure CLI (az) makes the submission key: install it, or set SUBMISSION_KEY_SETUP=skip"
[ -n "${AZURE_RESOURCE_GROUP:-}" ] || fail "AZURE_RESOURCE_GROUP is not set: run azd provision first"
[ -n "${AZURE_FUNCTION_APP_NAME:-}" ] || fail "AZURE_FUNCTION_APP_NAME is not set: run azd provision first"
app=$AZURE_FUNCTION_APP_NAME

existing=$(az functionapp config appsettings list -g "$AZURE_RESOURCE_GROUP" -n "$app" \
  --query "[?name=='SUBMISSION_KEY'].value | [0]" -o tsv) \
  || fail "could not read the app settings of $app"
if [ -n "$existing" ]; then
  echo "predeploy: $app has its submission key"
  exit 0
fi

# 32 random bytes as hex; the value goes to az in a file readable by this user only, never as an argument
# (which every local user could read in the process list).
key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
[ "${#key}" -eq 64 ] || fail "could not draw a random key"
umask 077
settings=$(mktemp)
trap 'rm -f "$settings"' EXIT
printf '[{"name": "SUBMISSION_KEY", "value": "%s", "slotSetting": false}]\n' "$key" >"$settings"
az functionapp config appsettings set -g "$AZURE_RESOURCE_GROUP" -n "$app" --settings "@$settings" -o none \
  || fail "could not set the submission key of $app"
echo "predeploy: made the submission key of $app; a storefront reads it with"
echo "  az functionapp config appsettings list -g $AZURE_RESOURCE_GROUP -n $app --query \"[?name=='SUBMISSION_KEY'].value | [0]\" -o tsv"
