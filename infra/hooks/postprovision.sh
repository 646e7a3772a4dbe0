#!/bin/sh
# azd `postprovision` hook (azure.yaml): makes sure the Key Vault holds the input encryption key, the
# secret input-encryption-key that the app setting INPUT_ENCRYPTION_KEY references: "<key id>:<base64 of
# 32 random bytes>", the key id "k" and today's date (UTC). The declared sensitive input fields are
# encrypted with it at rest. It is made once, here, not in Bicep: a value drawn in Bicep would be drawn
# anew at every deployment, and what was encrypted under the old key could no longer be read. No
# deployment parameter, output or azd variable ever holds it, and this script never reads it back.
# Rotating it: docs/deploying.md.
#
# azd hands the environment's values to hooks as variables (AZURE_KEY_VAULT_NAME,
# INPUT_ENCRYPTION_KEY_SECRET_NAME, AZURE_RESOURCE_GROUP, AZURE_FUNCTION_APP_NAME: main.bicep's outputs).
# It runs as the principal running azd, who holds Key Vault Secrets Officer on the vault (rbac.bicep).
#   INPUT_ENCRYPTION_KEY_SETUP=skip   leave the vault alone (azd env set INPUT_ENCRYPTION_KEY_SETUP skip)
set -eu

fail() {
  echo "postprovision: $*" >&2
  exit 1
}

if [ "${INPUT_ENCRYPTION_KEY_SETUP:-}" = "skip" ]; then
  echo "postprovision: INPUT_ENCRYPTION_KEY_SETUP is skip, the input encryption key is left alone"
  exit 0
fi
command -v az >/dev/null 2>&1 \
  || fail "the Azure CLI (az) makes the input encryption key: install it, or set INPUT_ENCRYPTION_KEY_SETUP=skip"
[ -n "${AZURE_KEY_VAULT_NAME:-}" ] || fail "AZURE_KEY_VAULT_NAME is not set: run azd provision first"
[ -n "${AZURE_RESOURCE_GROUP:-}" ] || fail "AZURE_RESOURCE_GROUP is not set: run azd provision first"
[ -n "${AZURE_FUNCTION_APP_NAME:-}" ] || fail "AZURE_FUNCTION_APP_NAME is not set: run azd provision first"
[ -n "${INPUT_ENCRYPTION_KEY_SECRET_NAME:-}" ] || fail "INPUT_ENCRYPTION_KEY_SECRET_NAME is not set: run azd provision first"
vault=$AZURE_KEY_VAULT_NAME
secret=$INPUT_ENCRYPTION_KEY_SECRET_NAME
# Both go into a JMESPath query and a command line: a vault name and a secret name only.
case $vault in
  *[!A-Za-z0-9-]*) fail "AZURE_KEY_VAULT_NAME holds $vault, which is not a vault name" ;;
esac
case $secret in
  *[!A-Za-z0-9-]*) fail "INPUT_ENCRYPTION_KEY_SECRET_NAME holds $secret, which is not a secret name" ;;
esac

# Whether the secret exists, from the list of the vault's secrets (names and attributes, no values). The
# role assignment made by this provisioning can take minutes to reach the vault's data plane: until
# then the vault answers 403, so the list is tried again, 10 seconds apart, for about three minutes.
tries=0
until count=$(az keyvault secret list --vault-name "$vault" --query "length([?name=='$secret'])" -o tsv); do
  tries=$((tries + 1))
  [ "$tries" -lt 18 ] \
    || fail "could not list the secrets of the Key Vault $vault: does the principal running azd hold Key Vault Secrets Officer on it (AZURE_PRINCIPAL_ID)?"
  echo "postprovision: the Key Vault $vault does not answer yet (a new role assignment takes a few minutes); trying again"
  sleep 10
done
if [ "$count" != "0" ]; then
  echo "postprovision: the Key Vault $vault has its $secret"
  exit 0
fi

# 32 random bytes, base64 (44 characters); the value goes to az in a file readable by this user only,
# never as an argument (which every local user could read in the process list).
command -v openssl >/dev/null 2>&1 || fail "openssl draws the input encryption key: install it"
key=$(openssl rand -base64 32)
[ "${#key}" -eq 44 ] || fail "could not draw a random key"
value="k$(date -u +%Y%m%d):$key"
file=$(umask 077 && mktemp)
printf '%s' "$value" >"$file"
if ! az keyvault secret set --vault-name "$vault" --name "$secret" --file "$file" --encoding utf-8 \
  --content-type "input encryption key: <key id>:<base64 of 32 bytes>" -o none; then
  rm -f "$file"
  fail "could not set the secret $secret in the Key Vault $vault"
fi
rm -f "$file"
echo "postprovision: made the $secret in the Key Vault $vault (key id ${value%%:*})"

# The app fetched its Key Vault references when it started, before the secret existed: have it fetch
# them again now. Best effort: it also fetches them on any change of its configuration, and every 24 hours.
app=$AZURE_FUNCTION_APP_NAME
if app_id=$(az functionapp show -g "$AZURE_RESOURCE_GROUP" -n "$app" --query id -o tsv) \
  && az rest --method post -o none \
    --url "$app_id/config/configreferences/appsettings/refresh?api-version=2022-03-01"; then
  echo "postprovision: $app fetches its Key Vault references again"
else
  echo "postprovision: could not have $app fetch its Key Vault references again; it does at its next change of configuration or within 24 hours" >&2
fi
