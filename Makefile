# Two commands do all the set-up on a fresh machine:
#   make demo   - the main job: emulator, balanced consumers, checkpoints, Spark sink (embedded defaults)
#   make test   - lint, type-check and the whole test suite (starts the emulator, Azurite and Spark itself)
# Both bootstrap .venv (Python deps from PyPI) and node_modules (Azurite from npm) on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.rxhubs-installed
NODE_STAMP := node_modules/.rxhubs-installed

# Spark finds format("eventhubs") through top-level pyspark_* modules. A wheel installs them in site-packages;
# an editable install serves them through an import hook Spark's lookup cannot see, so the dev venv gets their
# folder on sys.path instead (see rxhubs/spark/_discovery/README.md).
define DISCOVERY_PTH
import pathlib, sysconfig
folder = pathlib.Path("rxhubs/spark/_discovery").resolve()
pathlib.Path(sysconfig.get_paths()["purelib"], "rxhubs-spark-discovery.pth").write_text(f"{folder}\n")
endef
export DISCOVERY_PTH

.PHONY: all demo test lint typecheck unit bench examples clean postgres

all: test

# The editable install also compiles the frame reader in place (setup.py); it must build here (REQUIRE), and is
# rebuilt when its source changes.
$(STAMP): pyproject.toml setup.py rxhubs/transport/_frames_py.py rxhubs/transport/_frames_c.pxd rxhubs/transport/_framing_py.py rxhubs/transport/_framing_c.pxd \
		rxhubs/transport/_encode_py.py rxhubs/transport/_encode_c.pxd rxhubs/transport/_events_py.py rxhubs/transport/_events_c.pxd \
          rxhubs/spark/_arrow_values_py.py rxhubs/spark/_arrow_values_c.pxd rxhubs/spark/_arrow_frames_py.py rxhubs/spark/_arrow_frames_c.pxd
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	RXHUBS_REQUIRE_EXTENSIONS=1 $(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[spark,dev]'
	$(BIN)/python -c "$$DISCOVERY_PTH"
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

# The suite mostly waits (emulators, Azurite, Spark, real timeouts), so it runs in parallel processes
# (pytest-xdist): each worker starts its own emulator and Azurite on free ports. Tests go out one at a time as
# workers free up, longest first; Spark's run in lanes (tests/conftest.py). PYTEST_WORKERS=0: one process.
# 6 on two cores: at 4 the CPUs were busy a third of the time (8 min 40 s, 5 min 12 s of user CPU); at 8 the
# load reached 10.
PYTEST_WORKERS ?= 6

# The SQL sink's tests start a real PostgreSQL server (tests/support/postgres.py) from its binaries. A machine
# without them gets Debian's `postgresql` (as root, or through sudo); elsewhere this stops and says what to do.
# RXHUBS_PG_BIN names a folder holding initdb and postgres instead.
postgres:
	@if [ -n "$$RXHUBS_PG_BIN" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then \
	    :; \
	elif command -v apt-get >/dev/null 2>&1 && { [ "$$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; }; then \
	    SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO="sudo"; \
	    echo "PostgreSQL's server is missing (the SQL sink's tests need it): apt-get install postgresql"; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; \
	else \
	    echo "The SQL sink's tests need PostgreSQL's server binaries (initdb, postgres): install PostgreSQL" \
	         "(Debian/Ubuntu: sudo apt-get install postgresql), or set RXHUBS_PG_BIN to their folder" >&2; \
	    exit 1; \
	fi

# Python caches compiled modules, and pytest the test modules it rewrites, in __pycache__ (git-ignored). Where the
# environment turns that off (PYTHONDONTWRITEBYTECODE), each of the suite's processes compiles them again: each
# worker's collection took 11 s of CPU instead of 4.5 s, and every Python process it starts (CLI runs, examples,
# Spark's Python workers) compiled the rxhubs modules it imported (0.15 s of CPU or more each). The suite writes them.
test: $(STAMP) $(NODE_STAMP) postgres lint typecheck
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

bench: $(STAMP) $(NODE_STAMP)
	$(BIN)/rxhubs bench all

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis
