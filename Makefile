# `make test` sets up everything on a fresh machine (virtual environments, Python and npm packages)
# and runs the whole suite. `make demo` runs the whole system under a fault profile.
PYTHON ?= python3
# The Python the app runs on in Azure (infra/app/function-app.bicep); pyenv reads the same file.
PYTHON_VERSION := $(shell cat .python-version)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
IS_PYTHON_VERSION := import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$(PYTHON_VERSION)')
# Checkov has its own virtual environment: its pins clash with the test tools'.
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed

.PHONY: install test lint check-infra generate refresh-contracts demo devhost bench bench-simulation bench-history bench-waiting bench-groups bench-emulator bench-emulator-compare emulator clean simulate simulate-long simulate-hunt

install: $(STAMP) node_modules/.installed

# The message classes the devhost sends azure-functions-runtime, generated from the repository's .proto.
PROTO_DIR := tools/devhost/protos

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml .python-version $(PROTO_DIR)/function_rpc.proto
	@# A .venv of another Python (an older checkout's) is made anew, not patched.
	$(BIN)/python -c "$(IS_PYTHON_VERSION)" 2>/dev/null || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	@$(BIN)/python -c "$(IS_PYTHON_VERSION)" || { echo "$(PYTHON) is not Python $(PYTHON_VERSION): make PYTHON=python$(PYTHON_VERSION)" >&2; exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m grpc_tools.protoc -I $(PROTO_DIR) --python_out=$(PROTO_DIR) $(PROTO_DIR)/function_rpc.proto
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(CHECKOV_STAMP): requirements-checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -r requirements-checkov.txt
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check src tools tests bench function_app.py infra
	$(BIN)/ruff format --check src tools tests bench function_app.py infra
	$(BIN)/mypy  # settings (files, the pydantic plugin) in pyproject.toml

# Every module call and resource in infra/ against the pinned contract of the version it names
# (infra/contracts), then the check's self-test on deliberately broken fixtures.
# Checkov on infra/ with the custom checks in infra/checks: fails on any failed check not skipped with
# a reason and on any file it cannot parse; then proves every custom check still fails on bad Bicep.
check-infra: $(STAMP) $(CHECKOV_STAMP)
	$(BIN)/bicep-contracts check --infra infra --contracts infra/contracts --self-test tests/infra/contract_fixtures
	$(BIN)/python infra/run_checkov.py --checkov $(CHECKOV_VENV)/bin/checkov
	$(BIN)/python infra/run_checkov.py --checkov $(CHECKOV_VENV)/bin/checkov --self-test

# After editing the declaration (src/orders/catalog.py, src/orders/services/): rewrite the files derived
# from it (local/servicebus-config.json, infra/app/catalog.json, local.settings.sample.json, the tables of
# docs/customizing.md). The tests fail, naming the files, when one is behind.
generate: $(STAMP)
	$(BIN)/python -m orders.generate

# After bumping a module or API version in infra/: regenerate infra/contracts from local clones of
# Azure/bicep-registry-modules (with tags) and Azure/bicep-types-az, e.g.
# make refresh-contracts AVM_REPO=../bicep-registry-modules TYPES_REPO=../bicep-types-az
refresh-contracts: $(STAMP)
	$(BIN)/bicep-contracts refresh --avm-repo $(AVM_REPO) --types-repo $(TYPES_REPO)

# What comes before the suite runs side by side, as each part uses about one core: the three installs, then
# the linters beside the infra's checks (each one's output kept together). About a minute less than one by one.
test:
	@$(MAKE) --no-print-directory -j3 --output-sync=target install $(CHECKOV_STAMP)
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint check-infra
	$(BIN)/python -m pytest

# The deterministic simulation of the engine (docs/simulation.md): the fixed seeds make test runs, or one
# seed, e.g. make simulate SEED=42 (a failing seed's report names its ORDERS too).
simulate: $(STAMP)
	$(BIN)/python -m simulation $(if $(SEED),--seed $(SEED)) $(if $(ORDERS),--orders $(ORDERS)) $(if $(BESIDE),--beside $(BESIDE))

# Consecutive seeds from a random start (or START=n) for SECONDS (default 600), printing every failing seed.
# A new seed for a regression whose seed drifted (BUG=<name>; without it, the list of regressions).
simulate-hunt: $(STAMP)
	$(BIN)/python -m tests.simulation.regressions $(BUG) $(if $(START),--start $(START)) $(if $(SECONDS),--seconds $(SECONDS))

simulate-long: $(STAMP)
	$(BIN)/python -m simulation --seconds $(or $(SECONDS),600) $(if $(START),--start $(START))

# The whole system under a fault profile, e.g. DEMO_ARGS="--orders 200 --hang 0.05" make demo
demo: install
	$(BIN)/python -m devhost.demo $(DEMO_ARGS)

# The local stack in the foreground; Ctrl+C stops every component.
devhost: install
	$(BIN)/orders-devhost $(DEVHOST_ARGS)

# Per-step overhead, throughput and costs, then the demo's 100 orders (about 30 s) for its p50 latency.
bench: install
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/orders_throughput.py
	$(BIN)/python -m devhost.demo

# Operator reads, searches, a sweep and a submission with 1,000, 10,000 and 100,000 finished orders stored
# (about eight minutes), e.g. HISTORY_ARGS="--rounds 100" make bench-history
bench-simulation: $(STAMP)
	$(BIN)/python bench/simulation.py

bench-history: $(STAMP)
	$(BIN)/python bench/history.py $(HISTORY_ARGS)

# The Supervisor's sweep, listings, counts, a GET and a submission with 1,000, 10,000 and 100,000 orders
# parked (about two minutes, most of it filling), e.g. WAITING_ARGS="--sizes 1000 10000" make bench-waiting
bench-waiting: $(STAMP)
	$(BIN)/python bench/waiting.py $(WAITING_ARGS)

# A group's steps side by side against one step, every service 200 ms late (about 40 s), e.g.
# GROUPS_ARGS="--orders 30" make bench-groups
bench-groups: $(STAMP)
	$(BIN)/python bench/groups.py $(GROUPS_ARGS)

bench-emulator: $(STAMP)
	$(BIN)/python bench/servicebus_emulator_throughput.py

.PHONY: profile test-under-load bench-emulator-compare bench-compare

# Where one order's time goes, a table per step transition (bench/order_path.py); then py-spy on every
# Python process of the stack under make bench's end-to-end load: CPU and top frames per process,
# e.g. PROFILE_ARGS="--seconds 30 --out prof" make profile
profile: install
	$(BIN)/python bench/order_path.py
	$(BIN)/python bench/pipeline_profile.py $(PROFILE_ARGS)

# The tests with two CPU hogs running beside them (not part of make test), e.g.
# make test-under-load PYTEST_ARGS=tests/e2e
test-under-load: install
	$(BIN)/python tests/load/run_under_load.py --hogs 2 -- $(BIN)/python -m pytest $(PYTEST_ARGS)

# The same benchmark against another revision's emulator and this tree's, alternately, e.g.
# COMPARE_ARGS="--base main --rounds 8" make bench-emulator-compare
bench-emulator-compare: $(STAMP)
	$(BIN)/python bench/compare_emulator.py $(COMPARE_ARGS)

# make bench's three timings on another revision (its own virtual environment, .venv-base) and on this tree,
# alternately, e.g. BENCH_COMPARE_ARGS="--base 7c4b05e --base-python python3.11 --rounds 3" make bench-compare
bench-compare: install
	$(BIN)/python bench/compare_devhost.py $(BENCH_COMPARE_ARGS)

emulator: $(STAMP)
	$(BIN)/servicebus-emulator --config local/servicebus-config.json

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) node_modules
