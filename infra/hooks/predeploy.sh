#!/bin/sh
# azd `predeploy` hook (azure.yaml): makes sure the Function App has its submission key, the app setting
# SUBMISSION_KEY with which a storefront submits and reads orders (the API's submitter role, and only
# that), the key of each declared storefront (STOREFRONT_<NAME>_KEY) and the callback secret of each
# service that answers later (<SERVICE>_CALLBACK_SECRET). Each is made once, here, not in Bicep: the site
# module keeps the settings it does not set (retainCurrentAppSettings), so the key a storefront holds
# survives every deployment, and no deployment parameter, output or azd variable ever holds it. Rotating
# one: docs/deploying.md.
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

# One setting at a time: read it, and make it only if the app has none. The submission key, then the
# callback secret of each service that answers later (CALLBACK_SECRET_SETTINGS, a main.bicep output
# from infra/app/catalog.json, comma-separated): the service signs its callbacks with it; then each
# storefront's key (STOREFRONT_KEY_SETTINGS, a main.bicep output from its storefronts parameter).
make_once() {
  name=$1
  existing=$(az functionapp config appsettings list -g "$AZURE_RESOURCE_GROUP" -n "$app" \
    --query "[?name=='$name'].value | [0]" -o tsv) \
    || fail "could not read the app settings of $app"
  if [ -n "$existing" ]; then
    echo "predeploy: $app has its $name"
    return 0
  fi
  # 32 random bytes as hex; the value goes to az in a file readable by this user only, never as an
  # argument (which every local user could read in the process list).
  key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  [ "${#key}" -eq 64 ] || fail "could not draw a random key"
  settings=$(umask 077 && mktemp)
  printf '[{"name": "%s", "value": "%s", "slotSetting": false}]\n' "$name" "$key" >"$settings"
  if ! az functionapp config appsettings set -g "$AZURE_RESOURCE_GROUP" -n "$app" \
    --settings "@$settings" -o none; then
    rm -f "$settings"
    fail "could not set the $name of $app"
  fi
  rm -f "$settings"
  echo "predeploy: made the $name of $app; read it with"
  echo "  az functionapp config appsettings list -g $AZURE_RESOURCE_GROUP -n $app --query \"[?name=='$name'].value | [0]\" -o tsv"
}

make_once SUBMISSION_KEY
for name in $(echo "${CALLBACK_SECRET_SETTINGS:-}" | tr ',' ' '); do
  case $name in
    *[!A-Z0-9_]* | "") fail "CALLBACK_SECRET_SETTINGS holds $name, which is not a setting name" ;;
  esac
  make_once "$name"
done
for name in $(echo "${STOREFRONT_KEY_SETTINGS:-}" | tr ',' ' '); do
  case $name in
    *[!A-Z0-9_]* | "") fail "STOREFRONT_KEY_SETTINGS holds $name, which is not a setting name" ;;
    STOREFRONT_?*_KEY) ;;
    *) fail "STOREFRONT_KEY_SETTINGS holds $name, which is not a storefront's key setting" ;;
  esac
  make_once "$name"
done
