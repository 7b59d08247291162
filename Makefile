# The two commands a newcomer needs: `make demo` and `make test`. Both install first when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Icechunk (the reference system) needs Python >= 3.12: benchmarks compare against it in a venv
# of its own when such an interpreter exists (pyenv's, or python3.12 on PATH).
PY312 ?= $(shell command -v python3.12 2>/dev/null || ls -d $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python 2>/dev/null | tail -n 1)
ICECHUNK_VENV := bench/.venv312

.PHONY: install test lint demo bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

$(ICECHUNK_VENV)/bin/python:
	@if [ -n "$(PY312)" ]; then $(PY312) -m venv $(ICECHUNK_VENV) && $(ICECHUNK_VENV)/bin/python -m pip install --quiet icechunk numpy; \
	else echo "no Python 3.12: benchmarks run without the Icechunk column"; fi

bench: $(STAMP)
	-@$(MAKE) --no-print-directory $(ICECHUNK_VENV)/bin/python
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_splitting.py

clean:
	rm -rf $(VENV) demo-repo .pytest_cache .mypy_cache
