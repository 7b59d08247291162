# The two commands a newcomer needs: `make demo` and `make test`. Both install first when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Icechunk (the reference system) needs Python >= 3.12: benchmarks compare against it in a venv
# of its own when such an interpreter exists (python3.12 on PATH, or pyenv's). The first one
# that runs: pyenv's python3.12 shim is on PATH even when 3.12 is not the selected version, and
# then only says "command not found".
PY312 ?= $(shell for p in $$(command -v python3.12) $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python 2>/dev/null | sort -r); do $$p -c '' 2>/dev/null && echo $$p && break; done)
ICECHUNK_VENV := bench/.venv312
# Pinned so side-by-side figures compare against a known release (the benchmarks print it).
ICECHUNK_VERSION := 2.3.0
# VirtualiZarr's own Icechunk writer, beside ours (bench_virtual.py --part 3). Not the 2.5.1 our
# extra pins: up to 2.6.0 it imports zarr's RegularChunkGrid, gone from the zarr (3.4) that
# Icechunk 2.3 installs with; 2.6.1 is the first that fits, this the newest.
VIRTUALIZARR_BENCH_VERSION := 2.8.0

# Azurite, the Azure Storage emulator the tests start, comes from npm into .emulators/ (never
# committed) when node is on PATH; without node the Azure tests skip and say why. 3.35 is the
# newest release that runs on Node 20 (3.36 needs 21, 3.37 needs 22).
AZURITE_VERSION := 3.35.0
AZURITE := .emulators/node_modules/.bin/azurite-blob

.PHONY: install test lint demo bench clean azurite notebooks

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# compat mode: Spark finds the pyspark_icechunk source by scanning sys.path, which the
	# default editable install hides.
	$(BIN)/python -m pip install --quiet -e '.[test]' --config-settings editable_mode=compat
	# Our own modules compiled once. Where PYTHONDONTWRITEBYTECODE is set (as on this machine)
	# every process the tests start (CLI runs, process pools, Spark's Python workers, kernels)
	# would otherwise compile the package again, ~0.2 s each. Python checks a compiled file
	# against its source, so an edited module is compiled afresh, never stale; a failure here
	# costs speed only (the tests then show a module that does not compile).
	-$(BIN)/python -m compileall -q -j 2 -x '/\.venv' icechunk_spark pyspark_icechunk jobs tests bench > /dev/null
	touch $(STAMP)

install: $(STAMP) azurite

azurite:
	@if [ -x $(AZURITE) ]; then :; \
	elif command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		npm install --prefix .emulators --no-save --no-package-lock --no-audit --no-fund \
			--loglevel=error azurite@$(AZURITE_VERSION); \
	else echo "node/npm not found: Azurite is not installed, the Azure tests will skip"; fi

# Two workers, one per core. Every Spark test runs on the same worker (xdist group "spark"),
# so there is still one SparkSession (and one Connect server, one cluster) per run. The 25
# slowest tests are listed at the end: CI's budget is 20 minutes on 2 cores.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=25

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

$(ICECHUNK_VENV)/bin/python:
	@if [ -n "$(PY312)" ]; then $(PY312) -m venv $(ICECHUNK_VENV) && $(ICECHUNK_VENV)/bin/python -m pip install --quiet icechunk==$(ICECHUNK_VERSION) numpy \
		virtualizarr==$(VIRTUALIZARR_BENCH_VERSION) psutil; \
	else echo "no Python 3.12: benchmarks run without the Icechunk column"; fi

# The main jobs on local files: a computed datacube and a virtual dataset of sample NetCDF
# files, both into ./demo-repo, through spark-submit in local mode.
DEMO_REPO := file://$(CURDIR)/demo-repo
SPARK_SUBMIT := PYSPARK_PYTHON=$(CURDIR)/$(BIN)/python PYSPARK_DRIVER_PYTHON=$(CURDIR)/$(BIN)/python \
	$(BIN)/spark-submit --properties-file conf/spark-defaults.conf \
	--driver-java-options "-Dlog4j2.configurationFile=file://$(CURDIR)/conf/log4j2.properties"

demo: $(STAMP)
	rm -rf demo-repo demo-data
	$(SPARK_SUBMIT) jobs/ingest_datacube.py --repo $(DEMO_REPO)
	$(BIN)/python jobs/ingest_virtual.py --make-sample demo-data --days 10 > /dev/null
	$(SPARK_SUBMIT) jobs/ingest_virtual.py --repo $(DEMO_REPO) --files 'demo-data/*.nc' --group /virtual
	$(BIN)/icechunk-spark log $(DEMO_REPO)
	$(BIN)/icechunk-spark ls $(DEMO_REPO)

# Run the notebooks and store them with their outputs (what a reader of the repository sees).
notebooks: $(STAMP)
	$(BIN)/python notebooks/execute.py

bench: $(STAMP)
	-@$(MAKE) --no-print-directory $(ICECHUNK_VENV)/bin/python
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_splitting.py
	$(BIN)/python bench/bench_small_commits.py
	$(BIN)/python bench/bench_big_array_commit.py
	$(BIN)/python bench/bench_zarr.py
	$(BIN)/python bench/bench_dask_write.py
	$(BIN)/python bench/bench_virtual.py --icechunk
	$(BIN)/python bench/bench_spark.py
	$(BIN)/python bench/bench_values.py

clean:
	rm -rf $(VENV) .emulators demo-repo demo-data .pytest_cache .mypy_cache
