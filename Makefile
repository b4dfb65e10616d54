# Every target creates or reuses the project's own venv; a fresh machine needs only python3 and gcc.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-fast lint demo bench bench-real e2e-real clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The full suite, as CI runs it (.ci/run).
test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Under a minute: tests/unit/, every test not marked slow (tests/conftest.py marks tests/system/).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check cudafix tests benchmarks scenarios
	$(BIN)/ruff format --check cudafix tests benchmarks scenarios
	$(BIN)/mypy

demo: $(STAMP)
	$(BIN)/python -m scenarios.demo

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

bench-real: $(STAMP)
	$(BIN)/python -m benchmarks.real $(BENCH_ARGS)

e2e-real: $(STAMP)
	$(BIN)/python -m benchmarks.e2e_real
	$(BIN)/python -m benchmarks.e2e_frameworks
	$(BIN)/python -m benchmarks.e2e_unlisted --empty-table all
	$(BIN)/python -m benchmarks.e2e_fleet
	$(BIN)/python -m benchmarks.e2e_fleet_hpc

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
