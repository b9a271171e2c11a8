# The README's two commands:
#   make run    set up .venv if needed, materialise every asset on the embedded sample, print the report
#   make test   set up .venv if needed, lint (ruff check + ruff format --check + import
#               contracts + the quoted figures = reproductions/*.yaml + a strict build of the
#               docs site), run every test (the 25 slowest listed at the end)
# and for the edit loop / measurements:
#   make test-quick  lint, then the tests not marked slow (pytest -m "not slow")
#   make reproduce   the reproductions that take minutes (tests marked heavy; not in make test)
#   make bench       the benchmarks; tables on stdout, JSON rows in $(BENCH_OUT)/<bench>.json
#   make docs        the docs site (mkdocs.yml, pages in docs/) into site/; any warning fails it
SHELL := /bin/bash
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup run test test-quick reproduce dev lint docs bench llama-server-background

setup:
	@scripts/setup.sh

run: setup
	.venv/bin/erag-dagster run $(ARGS)

# Two pytest-xdist workers, each taking a whole test file at a time (module fixtures and the
# servers they start stay in one process), the slow files first (tests/conftest.py), each
# worker's torch on one thread: the two cores stay busy without oversubscription. PYTEST_WORKERS=
# (empty) runs in one process.
PYTEST_WORKERS ?= -n 2 --dist loadfile --no-loadscope-reorder
PYTEST_ENV := ERAG_TORCH_THREADS=1 OMP_NUM_THREADS=1

# The default run that tests/test_reproductions.py reads the README's default-run figures from:
# a real `erag-dagster run` into its own Dagster home, its label store seeded with the readers'
# answers of the measured default run (DEFAULT_RUN_ANSWERS, written by
# scripts/refresh_default_run_figures.py; tests/test_determinism.py has this machine's readers
# answer a sample of them anew), so it computes every report from them in about a minute. A
# reader whose fingerprint differs from the file's finds no answer there and generates them all.
TEST_RUN_HOME := $(CURDIR)/.dagster_home/test-default-run
DEFAULT_RUN_ANSWERS := reproductions/answers/default_run.jsonl

# llama.cpp's test server compiles once per machine (~2.5 min): started first, in the background
# at the lowest priority; the tests that use it wait for it (tests/llama_server.py).
llama-server-background: setup
	@scripts/ensure-llama-server.sh --background

# Lint runs beside the default run (each keeps about one of the two cores busy); both must pass,
# and lint's output is printed when it ends.
test: setup llama-server-background
	@scripts/ensure-chromium.sh
	@scripts/ensure-postgres.sh
	@mkdir -p $(TEST_RUN_HOME)/storage/erag && cp deploy/local/dagster.yaml $(TEST_RUN_HOME)/dagster.yaml
	@$(MAKE) --no-print-directory lint > $(TEST_RUN_HOME)/lint.out 2>&1 & lint=$$!; \
	  echo "default run into $(TEST_RUN_HOME) (lint beside it)"; \
	  .venv/bin/erag-dagster import-recovery $(DEFAULT_RUN_ANSWERS) --create --store $(TEST_RUN_HOME)/storage/erag/labels.sqlite \
	    && DAGSTER_HOME=$(TEST_RUN_HOME) .venv/bin/erag-dagster run > $(TEST_RUN_HOME)/run.out; run=$$?; \
	  wait $$lint; linted=$$?; cat $(TEST_RUN_HOME)/lint.out; \
	  if [ $$linted -ne 0 ]; then echo "make test: lint failed (above)" >&2; exit $$linted; fi; \
	  if [ $$run -ne 0 ]; then echo "make test: the default run failed ($(TEST_RUN_HOME)/run.out)" >&2; fi; \
	  exit $$run
	ERAG_REPRO_STORAGE=$(TEST_RUN_HOME)/storage/erag $(PYTEST_ENV) .venv/bin/python -m pytest \
	  -q -m "not heavy" --durations=25 $(PYTEST_WORKERS) $(PYTEST_ARGS)

# The reproductions that take minutes of work (tests marked heavy: SciFact's dense encoding).
reproduce: setup
	.venv/bin/python -m pytest -q -m heavy tests/test_reproductions.py $(PYTEST_ARGS)

test-quick: setup lint
	@scripts/ensure-postgres.sh
	$(PYTEST_ENV) .venv/bin/python -m pytest -q -m "not slow and not heavy" $(PYTEST_WORKERS) $(PYTEST_ARGS)

dev: setup
	.venv/bin/python -m erag_dagster.orchestration.dev_server -w workspace.yaml -h 127.0.0.1 -p $${PORT:-3000}

LINT_PATHS := erag_dagster tests bench scripts

lint: setup
	.venv/bin/ruff check $(LINT_PATHS)
	.venv/bin/ruff format --check $(LINT_PATHS)
	.venv/bin/lint-imports
	.venv/bin/python scripts/check_readme_figures.py
	.venv/bin/mkdocs build --strict --quiet --site-dir site

# The docs site: a warning (broken link or anchor, a page missing from the nav) is an error.
docs: setup
	.venv/bin/mkdocs build --strict --site-dir site

# BENCH_ARGS is passed to every bench (e.g. BENCH_ARGS=--quick for a smoke run of each).
BENCH_OUT ?= $(DAGSTER_HOME)/bench

bench: setup
	@mkdir -p $(BENCH_OUT)
	.venv/bin/python bench/retrieval.py --json $(BENCH_OUT)/retrieval.json $(BENCH_ARGS)
	.venv/bin/python bench/labels.py --json $(BENCH_OUT)/labels.json $(BENCH_ARGS)
	.venv/bin/python bench/efficiency.py --json $(BENCH_OUT)/efficiency.json $(BENCH_ARGS)
	.venv/bin/python bench/rerank.py --json $(BENCH_OUT)/rerank.json $(BENCH_ARGS)
	@scripts/ensure-postgres.sh
	.venv/bin/python bench/store.py --json $(BENCH_OUT)/store.json $(BENCH_ARGS)
	.venv/bin/python bench/openai_reader.py --json $(BENCH_OUT)/openai_reader.json $(BENCH_ARGS)
	.venv/bin/python bench/ray_labels.py --json $(BENCH_OUT)/ray_labels.json $(BENCH_ARGS)
