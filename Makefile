# Every target creates .venv and installs what it needs when missing, so a fresh clone works.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test bench lint venv clean screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/gpu-credits demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(BENCH_STAMP)
	$(BIN)/python -m tools.bench $(if $(QUICK),--quick,)

# Every page of the web view at 1280 and 390 px, over the demo month, in a headless Chromium.
screenshots: $(STAMP)
	$(BIN)/python -m tools.web.screenshots docs/screenshots

clean:
	rm -rf $(VENV) build *.egg-info
