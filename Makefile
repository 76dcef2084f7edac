# `make run`: set up .venv from nothing and solve the bundled example. `make test`: set up with dev extras and test.
# torch is installed first and pinned (the CPU build), so that no resolver ever picks a multi-GB CUDA build.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  := torch==2.13.0
EXAMPLE := instances/examples/small.json

.PHONY: run test test-all bench install install-dev clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed: $(PY) pyproject.toml
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e ".[cpu]"
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install -q -e ".[cpu,dev]"
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

run: install
	$(VENV)/bin/shardopt solve $(EXAMPLE)

test: install-dev
	$(PY) -m pytest -q

test-all: install-dev
	$(PY) -m pytest -q -m ""

bench: install
	$(PY) benchmarks/bench_analytic.py
	$(PY) benchmarks/bench_heuristics.py
	$(PY) benchmarks/bench_suite_quality.py

clean:
	rm -rf $(VENV) build *.egg-info
