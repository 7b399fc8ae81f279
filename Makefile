# One entry point per job.  `make setup` is idempotent; the other targets call it.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The whole local stack, supervised, with one round of demo traffic; Ctrl-C stops it.
demo: setup
	$(VENV)/bin/streamshop up --demo

test: setup lint
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: setup
	$(PY) -m loadtest.bench_broker
	$(PY) -m loadtest.bench_groups
	$(PY) -m loadtest.bench_services

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
