#!/bin/sh
# Creates, or brings up to date, the Microsoft Entra ID app registration people sign in to the API with
# (App Service authentication), and stores its client ID in the azd environment as AZURE_AUTH_CLIENT_ID;
# the next `azd provision` turns authentication on with it. Run it after a first `azd up`, which gives the
# app its address, with the Azure CLI signed in as someone who may create app registrations:
#
#   sh infra/hooks/create-app-registration.sh [--assign-me]
#
# Idempotent: it finds the registration by its display name (AUTH_APP_NAME, default orders-<environment>)
# and makes only what is missing or different. What it sets:
#   - the app roles Orders.Operator, Orders.Reader and Orders.Approver (the API's operator, reader and
#     approver), for users;
#   - the sign-in redirect <SERVICE_API_URI>/.auth/login/aad/callback and ID tokens (no client secret);
#   - its application ID URI api://<client id>, for bearer tokens;
#   - a service principal that only people assigned a role may sign in to (appRoleAssignmentRequired).
# --assign-me also gives the signed-in user Orders.Operator. Others: docs/deploying.md.
set -eu

OPERATOR_ROLE_ID=85571cce-cb4b-47e8-8042-d3fd63fa180e
READER_ROLE_ID=1f5b1675-4d73-4cff-b307-ecfa23777f9c
APPROVER_ROLE_ID=a0d078a7-9d79-4601-b329-8b0e54757102

fail() {
  echo "create-app-registration: $*" >&2
  exit 1
}

assign_me=false
for argument in "$@"; do
  case $argument in
    --assign-me) assign_me=true ;;
    *) fail "unknown argument $argument (usage: create-app-registration.sh [--assign-me])" ;;
  esac
done

command -v az >/dev/null 2>&1 || fail "the Azure CLI (az) is needed: install it and run az login"
command -v azd >/dev/null 2>&1 || fail "the Azure Developer CLI (azd) is needed"
env_name=${AZURE_ENV_NAME:-$(azd env get-value AZURE_ENV_NAME 2>/dev/null || true)}
[ -n "$env_name" ] || fail "no azd environment: run azd env new or azd up first"
api=${SERVICE_API_URI:-$(azd env get-value SERVICE_API_URI 2>/dev/null || true)}
[ -n "$api" ] || fail "SERVICE_API_URI is not set: run azd up first, so that the app has its address"
name=${AUTH_APP_NAME:-orders-$env_name}
redirect="${api%/}/.auth/login/aad/callback"

roles=$(mktemp)
trap 'rm -f "$roles"' EXIT
cat >"$roles" <<JSON
[
  {"allowedMemberTypes": ["User"], "id": "$OPERATOR_ROLE_ID", "isEnabled": true, "value": "Orders.Operator",
   "displayName": "Orders operator",
   "description": "Reads everything and acts on orders and dead letters: resubmit, cancel, retry, extend, skip, approve, reject, replay, purge."},
  {"allowedMemberTypes": ["User"], "id": "$READER_ROLE_ID", "isEnabled": true, "value": "Orders.Reader",
   "displayName": "Orders reader",
   "description": "Reads orders, counts, audit trails, breakers and dead letters, and opens the console without its actions."},
  {"allowedMemberTypes": ["User"], "id": "$APPROVER_ROLE_ID", "isEnabled": true, "value": "Orders.Approver",
   "displayName": "Orders approver",
   "description": "Reads as a reader does, and approves or rejects the steps that wait for an approval."}
]
JSON

app_id=$(az ad app list --display-name "$name" --query "[0].appId" -o tsv) \
  || fail "could not list app registrations"
if [ -z "$app_id" ]; then
  echo "create-app-registration: creating $name"
  app_id=$(az ad app create --display-name "$name" --sign-in-audience AzureADMyOrg \
    --web-redirect-uris "$redirect" --enable-id-token-issuance true --app-roles "@$roles" \
    --query appId -o tsv) || fail "could not create the app registration $name"
else
  echo "create-app-registration: $name exists ($app_id); bringing it up to date"
  az ad app update --id "$app_id" --web-redirect-uris "$redirect" --enable-id-token-issuance true \
    --app-roles "@$roles" || fail "could not update the app registration $name"
fi
[ -n "$app_id" ] || fail "the app registration $name has no client ID"
az ad app update --id "$app_id" --identifier-uris "api://$app_id" \
  || fail "could not set the application ID URI of $name"

sp_id=$(az ad sp list --filter "appId eq '$app_id'" --query "[0].id" -o tsv) \
  || fail "could not look up the service principal of $name"
if [ -z "$sp_id" ]; then
  sp_id=$(az ad sp create --id "$app_id" --query id -o tsv) \
    || fail "could not create the service principal of $name"
fi
az ad sp update --id "$app_id" --set appRoleAssignmentRequired=true \
  || fail "could not require role assignments on $name"

if [ "$assign_me" = true ]; then
  me=$(az ad signed-in-user show --query id -o tsv) || fail "could not read the signed-in user"
  assignments="https://graph.microsoft.com/v1.0/servicePrincipals/$sp_id/appRoleAssignedTo"
  held=$(az rest --method GET --uri "$assignments" \
    --query "length(value[?principalId=='$me' && appRoleId=='$OPERATOR_ROLE_ID'])" -o tsv) \
    || fail "could not read the role assignments of $name"
  if [ "$held" = "0" ]; then
    az rest --method POST --uri "$assignments" --headers "Content-Type=application/json" \
      --body "{\"principalId\": \"$me\", \"resourceId\": \"$sp_id\", \"appRoleId\": \"$OPERATOR_ROLE_ID\"}" \
      -o none || fail "could not assign you Orders.Operator"
    echo "create-app-registration: you are now an Orders.Operator"
  fi
fi

azd env set AZURE_AUTH_CLIENT_ID "$app_id" || fail "could not store AZURE_AUTH_CLIENT_ID in the azd environment"
echo "create-app-registration: AZURE_AUTH_CLIENT_ID=$app_id; run azd provision to turn authentication on"
