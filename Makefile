# The only two set-up commands a fresh machine needs are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all bench bench-regression lint format install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Installs the package (editable) with the test extras; re-runs when pyproject.toml changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/privopt demo

# Fast suite (statistical checks marked `slow` are deselected; `make test-all` runs them too).
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-all: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py --out benchmarks/results.json

# The private-regression sweep of issue 4 (about 40 minutes on 2 cores).
bench-regression: $(STAMP)
	$(BIN)/python benchmarks/regression_sweep.py --out benchmarks/regression_results.json
	$(BIN)/python benchmarks/regression_sweep.py --public-only --out benchmarks/regression_public_results.json

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks examples
	$(BIN)/ruff check --fix src tests benchmarks examples

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
