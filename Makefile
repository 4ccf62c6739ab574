# fr-analyze: the one entry point for humans and CI. `make help` lists the targets.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
REMOTE_STAMP := $(VENV)/.installed-remote
LIVE_STAMP := $(VENV)/.installed-live
BROWSER_STAMP := $(VENV)/.installed-browser
RAY_STAMP := $(VENV)/.installed-ray
DUMPS ?= sample_dumps

.DEFAULT_GOAL := help
.PHONY: help install run check test lint bench accuracy accuracy-et clean

help: ## Show this help
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

$(REMOTE_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,remote,test-remote]'
	@touch $(REMOTE_STAMP)

# torch (CPU) for the tests that run a real job; where it cannot be installed they skip
$(LIVE_STAMP): $(REMOTE_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,remote,test-remote,live-test]' \
		|| echo "torch could not be installed: tests/live/test_real_job.py will skip"
	@touch $(LIVE_STAMP)

# Ray for tests/cluster/test_ray_engine.py (`--engine ray` on a real local cluster); where it
# cannot be installed they skip
$(RAY_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]' \
		|| echo "Ray could not be installed: tests/cluster/test_ray_engine.py will skip"
	@touch $(RAY_STAMP)

# playwright and Debian's chromium for tests/render/test_html.py; where either cannot be installed
# they skip
$(BROWSER_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,html-test]' \
		|| echo "playwright could not be installed: tests/render/test_html.py will skip"
	command -v chromium >/dev/null || apt-get install -y -qq chromium \
		|| (apt-get update -qq && apt-get install -y -qq chromium) \
		|| sudo -n apt-get install -y -qq chromium \
		|| echo "chromium could not be installed: tests/render/test_html.py will skip"
	@touch $(BROWSER_STAMP)

install: $(STAMP) ## Create .venv and install fr-analyze with its test tools

run: $(STAMP) ## Analyze every bundled sample dump set in sample_dumps/
	@$(BIN)/python -m tools.run_samples --dumps $(DUMPS) --out run-reports $(if $(filter-out 0,$(VERBOSE)),--verbose)

check: lint ## The loop while editing: lint, then the fast tests (not those marked slow), on every core
	$(BIN)/python -m pytest -m "not slow" -n auto

# one worker per core; each test file stays on one worker, so a file's torch job, S3 server or
# browser is started once and its tests never compete with one another; the 15 slowest
# tests are listed at the end, so that a slow CI run says where its time went
test: $(LIVE_STAMP) $(BROWSER_STAMP) $(RAY_STAMP) ## Run the whole test suite, the slow tests too (with the remote extra, moto's S3 server, torch, chromium and a Ray cluster), on every core
	$(BIN)/python -m pytest -n auto --dist loadfile --durations=15

lint: $(REMOTE_STAMP) ## ruff and mypy (strict; with the remote extra, whose types it checks)
	$(BIN)/ruff check fr_analyzer tests tools benchmarks
	$(BIN)/ruff format --check fr_analyzer tests tools benchmarks
	$(BIN)/mypy

LIVE_BENCH_ARGS ?= --ranks 16384
# The same 3D job (417 groups at 1,024 ranks, coalesced blocks, p2p) in every writer's bytes, a
# row each with the reader each rank took: a slower path shows here (benchmarks/README.md)
WRITERS_BENCH_ARGS ?= --sizes 1024 --writer torch,pickle,pickle2,json,pyjson,gz --delete-after

bench: $(STAMP) ## Scale benchmark, every writer's row, then fr-analyze live against a fake fleet
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.run --out bench-results/writers.json $(WRITERS_BENCH_ARGS)
	$(BIN)/python -m benchmarks.live_fetch $(LIVE_BENCH_ARGS)
	$(BIN)/python -m benchmarks.outputs $(OUTPUTS_BENCH_ARGS)

ACCURACY_ARGS ?= --shapes all --cases 2100

accuracy: $(STAMP) ## Randomized fault campaign over every job shape: share right per shape and backend
	$(BIN)/python -m benchmarks.accuracy $(ACCURACY_ARGS)

ACCURACY_ET_ARGS ?= --shapes all --cases 200 --real 10

accuracy-et: $(LIVE_STAMP) ## The same campaign written as each rank's Chakra execution trace, then real gloo jobs (torch)
	$(BIN)/python -m benchmarks.accuracy --writer et $(ACCURACY_ET_ARGS)

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
