# Two entry points for a fresh machine: `make demo` and `make test`. Both create the
# virtualenv and install pinned dependencies first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint typecheck unit integration proto bench clean

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "tidesync needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --constraint constraints.txt --editable ".[test]"
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tidesync demo

test: $(STAMP) lint typecheck
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check tidesync tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/pytest -q tests/integration tests/e2e

proto: $(STAMP)
	$(BIN)/python -m tidesync.wire.generate

bench: $(STAMP)
	@for name in raw wire normalize ingest apply; do $(BIN)/python -m benchmarks $$name || exit 1; done

clean:
	rm -rf $(VENV) tidesync-demo .pytest_cache .mypy_cache .ruff_cache
