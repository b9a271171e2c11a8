# The README's two commands:
#   make run    set up .venv if needed, materialise every asset on the embedded sample, print the report
#   make test   set up .venv if needed, run the test suite
SHELL := /bin/bash
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup run test dev lint bench

setup:
	@scripts/setup.sh

run: setup
	.venv/bin/erag-dagster run $(ARGS)

test: setup
	@scripts/ensure-chromium.sh
	.venv/bin/python -m pytest -q $(PYTEST_ARGS)

dev: setup
	.venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p $${PORT:-3000}

lint: setup
	.venv/bin/ruff check erag_dagster tests bench scripts

bench: setup
	.venv/bin/python bench/retrieval.py
	.venv/bin/python bench/labels.py
