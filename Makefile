# Verbs for the round trip. Every target creates or reuses the virtual environment .venv.
#   make book       install everything, build the HTML book (executes every chapter)
#   make test       install everything, lint (ruff), run unit tests and every chapter through nbval
#   make test-seeds tests marked slow: multi-seed checks of the claims, long end-to-end checks (CI runs them)
#   make test-fast  unit tests only (no notebooks, no multi-seed checks)
#   make notebooks  regenerate notebooks/*.ipynb from book/*.md (committed, for Colab)
#   make check-exported  run exported notebooks in a fresh environment outside the repository
#   make students   students' edition: notebooks with exercise solutions removed
#   make bench      run the benchmarks and print their tables
#   make clean      remove build outputs (keeps .venv)
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export OMP_NUM_THREADS ?= 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# pip installs with --no-compile: compiling every file of torch, transformers and scipy takes
# about a minute; instead Python writes the bytecode of each module on its first import, so
# it must be allowed to write it (some machines set PYTHONDONTWRITEBYTECODE).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install book test test-seeds test-fast test-notebooks notebooks check-exported students bench browser-test clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11 or run make PYTHON=python3"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-compile -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

book: $(STAMP)
	rm -rf _build/.jupyter_cache _build/.doctrees _build/jupyter_execute _build/html
	$(BIN)/jupyter-book build . -W --keep-going
	$(BIN)/python scripts/make_notebooks.py --out _build/html/notebooks
	@echo "Book written to _build/html/index.html"

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest tests book --nbval-lax -n 2 --dist loadfile --durations=15 -m "not slow"

test-seeds: $(STAMP)
	$(BIN)/python -m pytest tests -n 2 --dist loadfile --durations=15 -m slow

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -m "not slow" -q

test-notebooks: $(STAMP)
	$(BIN)/python -m pytest book --nbval-lax -n 2 --dist loadfile --durations=15

notebooks: $(STAMP)
	$(BIN)/python scripts/make_notebooks.py --out notebooks

check-exported:
	PYTHON=$(PYTHON) bash scripts/check_exported.sh

students: $(STAMP)
	$(BIN)/python scripts/make_notebooks.py --out _build/students --strip-solutions

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

browser-test: $(STAMP)
	$(BIN)/python -m pytest tests/test_browser.py -v

clean:
	rm -rf _build .pytest_cache
