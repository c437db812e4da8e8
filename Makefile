# The only two set-up commands a fresh machine needs are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all docs bench bench-regression bench-torch bench-dask lint typecheck format install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Installs the package (editable) with the test extras; re-runs when pyproject.toml changes.
# torch is pinned first (the CPU wheel on this machine's disk) so that the extras never pull a
# CUDA build: "torch>=2.6" in the extras is then already satisfied.
TORCH_PIN ?= torch==2.13.0
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet "$(TORCH_PIN)"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/privopt demo

# Fast suite (statistical checks marked `slow` are deselected; `make test-all` runs them too).
# Both suites run on every core (pytest-xdist, tests shared out by work stealing) and print their time.
PYTEST_WORKERS ?= auto
test: $(STAMP)
	@start=$$(date +%s); \
	$(BIN)/python -m pytest -q -m "not slow" -n $(PYTEST_WORKERS) --dist worksteal; status=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s"; exit $$status

test-all: $(STAMP)
	@start=$$(date +%s); \
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal --durations=25; status=$$?; \
	echo "make test-all: $$(( $$(date +%s) - start )) s"; exit $$status

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py --out benchmarks/results.json

# The private-regression sweep of issue 4 (about 40 minutes on 2 cores).
bench-regression: $(STAMP)
	$(BIN)/python benchmarks/regression_sweep.py --out benchmarks/regression_results.json
	$(BIN)/python benchmarks/regression_sweep.py --public-only --out benchmarks/regression_public_results.json

# privopt.torch against a non-private step and Opacus 1.6 DP-SGD (digits CNN, CPU). Opacus lives
# only in its own venv (torch pinned first, opacus without dependencies, so it cannot pull another
# torch); the benchmark runs its Opacus part there as a subprocess. Never a privopt dependency.
OPACUS_VENV ?= /tmp/opacusenv
$(OPACUS_VENV)/.installed:
	$(PYTHON) -m venv $(OPACUS_VENV)
	$(OPACUS_VENV)/bin/python -m pip install --quiet "$(TORCH_PIN)"
	$(OPACUS_VENV)/bin/python -m pip install --quiet --no-deps "opacus==1.6.*"
	$(OPACUS_VENV)/bin/python -m pip install --quiet numpy scipy opt_einsum
	touch $(OPACUS_VENV)/.installed

bench-torch: $(STAMP) $(OPACUS_VENV)/.installed
	$(BIN)/python benchmarks/torch_bench.py --opacus-python $(OPACUS_VENV)/bin/python \
		--out benchmarks/torch_results.json
	$(BIN)/python benchmarks/torch_seq_bench.py --opacus-python $(OPACUS_VENV)/bin/python \
		--out benchmarks/torch_seq_results.json
	$(BIN)/python benchmarks/torch_hf_bench.py
	$(BIN)/python benchmarks/torch_ddp_bench.py

# Out-of-core fits on a 2-worker LocalCluster (issue 19); ROWS=50000000 for the full size
# (about 8.4 GB of Parquet under /tmp).
bench-dask: $(STAMP)
	$(BIN)/python benchmarks/dask_bench.py --rows $(or $(ROWS),5000000) \
		--out benchmarks/dask_results.json

# The documentation site (mkdocs.yml, docs/): warnings are errors, every internal link resolves.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

# mypy (default strictness) on the public API, the audit package and the CLI helpers
# (files and third-party overrides in pyproject.toml's [tool.mypy]).
typecheck: $(STAMP)
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks examples
	$(BIN)/ruff check --fix src tests benchmarks examples

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
