# `make test` sets up everything on a fresh machine (virtual environment, Python and npm packages)
# and runs the whole suite. `make demo` runs the whole system under a fault profile.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint demo devhost bench bench-emulator emulator clean

install: $(STAMP) node_modules/.installed

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check src tests bench function_app.py
	$(BIN)/ruff format --check src tests bench function_app.py

test: install lint
	$(BIN)/python -m pytest

# The whole system under a fault profile, e.g. DEMO_ARGS="--orders 200 --hang 0.05" make demo
demo: install
	$(BIN)/python -m devhost.demo $(DEMO_ARGS)

# The local stack in the foreground; Ctrl+C stops every component.
devhost: install
	$(BIN)/orders-devhost $(DEVHOST_ARGS)

bench: install
	$(BIN)/python bench/orders_throughput.py

bench-emulator: $(STAMP)
	$(BIN)/python bench/servicebus_emulator_throughput.py

emulator: $(STAMP)
	$(BIN)/servicebus-emulator --config local/servicebus-config.json

clean:
	rm -rf $(VENV) node_modules
