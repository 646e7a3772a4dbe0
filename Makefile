# `make test` sets up everything on a fresh machine (virtual environment, Python and npm packages)
# and runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint bench-emulator emulator clean

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
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

test: install lint
	$(BIN)/python -m pytest

emulator: $(STAMP)
	$(BIN)/servicebus-emulator --config local/servicebus-config.json

bench-emulator: $(STAMP)
	$(BIN)/python bench/servicebus_emulator_throughput.py

clean:
	rm -rf $(VENV) node_modules
