#!/bin/sh
# azd `postdeploy` hook (azure.yaml): checks the app just deployed with the smoke test (tools/smoke,
# `orders-smoke`): a few orders must reach Processed through the public API.
#
# azd hands the environment's values to hooks as variables: the outputs of infra/main.bicep
# (SERVICE_API_URI, AZURE_RESOURCE_GROUP, AZURE_FUNCTION_APP_NAME) and whatever `azd env set` stored.
#   SKIP_SMOKE_TEST=true   skip the check (azd env set SKIP_SMOKE_TEST true)
#   SMOKE_SUBMISSION_KEY   use this submission key instead of reading it with the Azure CLI
#   SMOKE_PYTHON           a Python that has httpx and pydantic (default: .venv, python3, or a venv
#                          created under .azure/ with the versions pinned in requirements.txt)
#   SMOKE_ARGS             extra orders-smoke options, e.g. "--orders 5 --timeout 300"
set -eu

if [ "${SKIP_SMOKE_TEST:-false}" = "true" ]; then
  echo "postdeploy: SKIP_SMOKE_TEST is true, smoke test skipped"
  exit 0
fi

fail() {
  echo "postdeploy: $*" >&2
  exit 1
}

[ -n "${SERVICE_API_URI:-}" ] || fail "SERVICE_API_URI is not set: run azd provision first"
root=$(CDPATH='' cd -- "$(dirname -- "$0")/../.." && pwd)

# The smoke test submits and reads orders as a storefront does: with the submission key (the app setting
# SUBMISSION_KEY, made by the predeploy hook), which the signed-in identity (azd's user or the pipeline)
# may read. Never a host or master key: the API takes none.
key=${SMOKE_SUBMISSION_KEY:-}
if [ -z "$key" ]; then
  command -v az >/dev/null 2>&1 \
    || fail "the Azure CLI (az) reads the submission key: install it, or set SMOKE_SUBMISSION_KEY or SKIP_SMOKE_TEST=true"
  [ -n "${AZURE_RESOURCE_GROUP:-}" ] || fail "AZURE_RESOURCE_GROUP is not set"
  [ -n "${AZURE_FUNCTION_APP_NAME:-}" ] || fail "AZURE_FUNCTION_APP_NAME is not set"
  key=$(az functionapp config appsettings list -g "$AZURE_RESOURCE_GROUP" -n "$AZURE_FUNCTION_APP_NAME" \
    --query "[?name=='SUBMISSION_KEY'].value | [0]" -o tsv) \
    || fail "could not read the submission key of $AZURE_FUNCTION_APP_NAME"
  [ -n "$key" ] || fail "$AZURE_FUNCTION_APP_NAME has no SUBMISSION_KEY setting: run azd deploy (its predeploy hook makes one)"
fi

has_dependencies() {
  "$1" -c 'import httpx, pydantic' >/dev/null 2>&1
}

python=${SMOKE_PYTHON:-}
if [ -z "$python" ]; then
  for candidate in "$root/.venv/bin/python" python3; do
    if command -v "$candidate" >/dev/null 2>&1 && has_dependencies "$candidate"; then
      python=$candidate
      break
    fi
  done
fi
if [ -z "$python" ]; then
  # A machine with only azd and Python: a private venv with the deployed app's pins of the two packages.
  venv="$root/.azure/smoke-venv"
  pins=$(grep -E '^(httpx|pydantic)==' "$root/requirements.txt")
  echo "postdeploy: installing $(echo "$pins" | tr '\n' ' ')into $venv"
  python3 -m venv "$venv" || fail "python3 -m venv failed: install Python 3.13 or set SKIP_SMOKE_TEST=true"
  # shellcheck disable=SC2086 # one requirement per word
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $pins \
    || fail "could not install httpx and pydantic"
  python="$venv/bin/python"
fi

echo "postdeploy: smoke test against $SERVICE_API_URI"
ORDERS_SMOKE_KEY=$key
export ORDERS_SMOKE_KEY
PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
# shellcheck disable=SC2086 # SMOKE_ARGS holds several options on purpose
exec "$python" -m smoke --url "$SERVICE_API_URI" ${SMOKE_ARGS:-}
