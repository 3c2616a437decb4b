# Two entry points for a fresh machine: `make demo` and `make test`. Both create the
# virtualenv and install pinned dependencies first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-shifted lint typecheck unit integration proto bench clean

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "tidesync needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --constraint constraints.txt --editable ".[test]"
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tidesync demo

# Two test processes, each with its own database servers and broker; a test file runs whole in
# one of them (module fixtures and the order within a file stay as written).
test: $(STAMP) lint typecheck
	$(BIN)/pytest -q -n 2 --dist loadfile

# The suites whose code reads clocks, run again with the wall clock of pytest and of every
# process it starts shifted by +400 and -400 days (libfaketime; tests/timeshift/run). A test
# or a comparison that depends on today's date fails here first. The unit tests of both shifts
# run side by side (they only use the CPU); the service-backed suites one shift after another.
SHIFTS := +400d -400d
SHIFTED_PYTEST := $(BIN)/pytest -q -p no:cacheprovider
SHIFTED_INTEGRATION := \
	tests/integration/test_arbiter.py tests/integration/test_apply_processor.py \
	tests/integration/test_projection_views.py tests/integration/test_projection_rebuild.py \
	tests/integration/test_projections_cli.py tests/integration/test_console.py \
	tests/integration/test_ingress.py tests/integration/test_ship_client.py

test-shifted: $(STAMP)
	@tests/timeshift/run +0d true
	@for offset in $(SHIFTS); do \
		tests/timeshift/run $$offset $(BIN)/python -m tests.timeshift.check $$offset || exit 1; \
	done
	@pids=""; for offset in $(SHIFTS); do \
		tests/timeshift/run $$offset $(SHIFTED_PYTEST) tests/unit \
			> $(VENV)/timeshift/unit$$offset.log 2>&1 & pids="$$pids $$!"; \
	done; \
	status=0; for pid in $$pids; do wait $$pid || status=1; done; \
	for offset in $(SHIFTS); do \
		echo "== unit tests, wall clock shifted by $$offset"; \
		cat $(VENV)/timeshift/unit$$offset.log; \
	done; \
	exit $$status
	@for offset in $(SHIFTS); do \
		echo "== service-backed suites, wall clock shifted by $$offset"; \
		tests/timeshift/run $$offset $(SHIFTED_PYTEST) -k "not _down_ and not sigkill" $(SHIFTED_INTEGRATION) \
			|| exit 1; \
	done

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
