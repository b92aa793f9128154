# Two commands do all the set-up on a fresh machine:
#   make demo   - the main job: emulator, balanced consumers, checkpoints, Spark sink (embedded defaults)
#   make test   - lint, type-check and the whole test suite (starts the emulator, Azurite and Spark itself)
# Both bootstrap .venv (Python deps from PyPI) and node_modules (Azurite from npm) on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.rxhubs-installed
NODE_STAMP := node_modules/.rxhubs-installed

.PHONY: all demo test lint typecheck unit bench examples clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[spark,dev]'
	touch $(STAMP)

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

demo: $(STAMP)
	$(BIN)/rxhubs demo $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check rxhubs tests examples

typecheck: $(STAMP)
	$(BIN)/mypy

test: $(STAMP) $(NODE_STAMP) lint typecheck
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP) $(NODE_STAMP)
	$(BIN)/rxhubs bench all

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis
