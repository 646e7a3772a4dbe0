#!/bin/sh
# azd `predeploy` hook (azure.yaml): sets the Function App's site update strategy, and makes sure it has
# its submission key, the app setting SUBMISSION_KEY with which a storefront submits and reads orders (the
# API's submitter role, and only that), the key of each declared storefront (STOREFRONT_<NAME>_KEY) and the callback secret of each
# service that answers later (<SERVICE>_CALLBACK_SECRET). Each is made once, here, not in Bicep: the site
# module keeps the settings it does not set (retainCurrentAppSettings), so the key a storefront holds
# survives every deployment, and no deployment parameter, output or azd variable ever holds it. Rotating
# one: docs/deploying.md.
#
# azd hands the environment's values to hooks as variables (AZURE_RESOURCE_GROUP, AZURE_FUNCTION_APP_NAME).
#   SUBMISSION_KEY_SETUP=skip   leave the app's settings alone (azd env set SUBMISSION_KEY_SETUP skip)
#   SITE_UPDATE_STRATEGY        Recreate (default), RollingUpdate, or skip to leave it as it is
set -eu

fail() {
  echo "predeploy: $*" >&2
  exit 1
}

need_app() {
  command -v az >/dev/null 2>&1 || fail "the Azure CLI (az) $1: install it, or set $2=skip"
  [ -n "${AZURE_RESOURCE_GROUP:-}" ] || fail "AZURE_RESOURCE_GROUP is not set: run azd provision first"
  [ -n "${AZURE_FUNCTION_APP_NAME:-}" ] || fail "AZURE_FUNCTION_APP_NAME is not set: run azd provision first"
}

# The site update strategy, set on purpose before every deployment (docs/upgrading.md): Recreate stops
# every instance of the running release before the new one's start, well within the formats switch's 30
# minutes. Set here, not in the Bicep: no API version of Microsoft.Web/sites in Bicep's types has the
# property yet (infra/contracts). SITE_UPDATE_STRATEGY=RollingUpdate chooses the preview's batches (hold
# the formats switch until the last batch is done), skip leaves the app's as it is.
strategy=${SITE_UPDATE_STRATEGY:-Recreate}
case $strategy in
  skip) echo "predeploy: SITE_UPDATE_STRATEGY is skip, the site update strategy is left alone" ;;
  Recreate | RollingUpdate)
    need_app "sets the site update strategy" SITE_UPDATE_STRATEGY
    az functionapp update-strategy config set --resource-group "$AZURE_RESOURCE_GROUP" \
      --name "$AZURE_FUNCTION_APP_NAME" --type "$strategy" -o none \
      || fail "could not set the site update strategy of $AZURE_FUNCTION_APP_NAME to $strategy (an Azure CLI older than update-strategy? update it, or set SITE_UPDATE_STRATEGY=skip)"
    echo "predeploy: the site update strategy of $AZURE_FUNCTION_APP_NAME is $strategy"
    ;;
  *) fail "SITE_UPDATE_STRATEGY holds $strategy: Recreate, RollingUpdate or skip" ;;
esac

if [ "${SUBMISSION_KEY_SETUP:-}" = "skip" ]; then
  echo "predeploy: SUBMISSION_KEY_SETUP is skip, the submission key is left alone"
  exit 0
fi
need_app "makes the submission key" SUBMISSION_KEY_SETUP
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
