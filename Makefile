# Every target creates .venv and installs what it needs when missing, so a fresh clone works.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo serve test bench bench-service bench-sim lint venv clean sim screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The fold's modules that setup.py compiles with mypyc (projections.native.COMPILED): an
# edit reinstalls, so the compiled build follows its source (until then the source runs,
# with a warning). GPU_CREDITS_PURE_PYTHON=1 make ... installs and runs plain Python.
FOLD_SOURCES := projections/ledger.py projections/creditbook.py projections/outcomes.py \
	projections/jobqueue.py projections/copying.py projections/native.py

# setup.py and the C sources too: an edit rebuilds the C accelerators (the chain check,
# the event builders).
$(STAMP): pyproject.toml setup.py eventstore/_chain.c projections/_eventbuild.c $(FOLD_SOURCES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

$(BENCH_STAMP): pyproject.toml setup.py $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $@

venv: $(STAMP)

# The demo database, for demo and serve alike: gpu-credits' own default ($$GPU_CREDITS_DB,
# else ./gpu-credits.db) unless DEMO_DB names another: make demo DEMO_DB=sqlite:///d.db
DEMO_DB ?=
DEMO_DB_OPTION = $(if $(DEMO_DB),--db $(DEMO_DB),)

demo: $(STAMP)
	$(BIN)/gpu-credits $(DEMO_DB_OPTION) demo

# The HTTP service on the demo database (written first if missing; the same seed twice
# appends nothing, and a database holding other events is refused: give another DEMO_DB).
# DEMO_DB, HOST and PORT may be overridden: make serve PORT=8080
HOST ?= 127.0.0.1
PORT ?= 8000
serve: $(STAMP)
	$(BIN)/gpu-credits $(DEMO_DB_OPTION) demo > /dev/null
	$(BIN)/gpu-credits $(DEMO_DB_OPTION) serve --host $(HOST) --port $(PORT)

# The whole suite (on the compiled fold, when it is built), then the fold's own tests
# (projections, replay) again on its Python source: both must hold. Each run is split
# over TEST_WORKERS pytest-xdist processes (default 2, the machine's cores; 0 runs in one
# process), handing tests out by work-stealing so a slow file is not left alone at the
# end: docs/operations.md, "Running the tests".
TEST_WORKERS ?= 2
PYTEST_SPLIT = -n $(TEST_WORKERS) $(if $(filter 0,$(TEST_WORKERS)),,--dist worksteal)
#
# The second run draws half the examples of each property test (times any
# GPU_CREDITS_EXAMPLES given), and leaves out test_native.py, whose tests start each build
# themselves whatever this run's switch. PYTHONDONTWRITEBYTECODE is emptied for both: each
# pytest process (the workers, the second run, the pure-Python child) would otherwise
# rewrite every test module's asserts again, 18 s of collection against 7 s cached
# (__pycache__ is ignored by git).
RERUN_EXAMPLES = $(shell awk 'BEGIN { f = ENVIRON["GPU_CREDITS_EXAMPLES"]; print (f == "" ? 1 : f) * 0.5 }')
test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest $(PYTEST_SPLIT)
	PYTHONDONTWRITEBYTECODE= GPU_CREDITS_PURE_PYTHON=1 GPU_CREDITS_EXAMPLES=$(RERUN_EXAMPLES) \
		$(BIN)/python -m pytest $(PYTEST_SPLIT) -m "not slow" \
		--ignore tests/projections/test_native.py tests/projections tests/replay

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The library's benchmarks, then the HTTP service's (PostgreSQL from $$GPU_CREDITS_BENCH_PG,
# else the local test database).
bench: $(BENCH_STAMP)
	$(BIN)/python -m tools.bench $(if $(QUICK),--quick,)
	$(BIN)/python -m tools.bench.service $(if $(QUICK),--quick,)

# The simulator: SEED (default 1), SEEDS seeds from it (default 5), STEPS ops each
# (default 20000), JOBS seeds at once in processes of their own (default 1); SIMFLAGS
# more options (SIMFLAGS="--postgres URL": each world in a schema of its own there). A
# failure is shrunk and written to sim-failures/ with the command to replay it.
sim: $(STAMP)
	$(BIN)/python -m tools.sim --seed $(or $(SEED),1) --seeds $(or $(SEEDS),5) --steps $(or $(STEPS),20000) --jobs $(or $(JOBS),1) $(SIMFLAGS)

# Simulated steps per second (tools.sim on the memory journal), with and without its
# checks, 2 runs each (the median): the figures in docs/benchmarks.md, "Simulator".
# BASELINE=DIR: a checkout of another commit, run beside this one (the ratio).
bench-sim: $(STAMP)
	$(BIN)/python -m tools.bench.sim $(if $(STEPS),--steps $(STEPS),) $(if $(RUNS),--runs $(RUNS),) $(if $(BASELINE),--baseline $(BASELINE),)

# The HTTP service under load on loopback (PostgreSQL from $$GPU_CREDITS_BENCH_PG).
bench-service: $(STAMP)
	$(BIN)/python -m tools.bench.service $(if $(QUICK),--quick,)

# Every page of the web view at 1280 and 390 px, over the demo month, in a headless Chromium.
screenshots: $(STAMP)
	$(BIN)/python -m tools.web.screenshots docs/screenshots

clean:
	rm -rf $(VENV) build *.egg-info eventstore/*.so projections/*.so projections/_compiled.json
