# `make run`: set up .venv from nothing and solve the bundled example. `make test`: set up with dev extras and test.
# torch is installed first and pinned (the CPU build), so that no resolver ever picks a multi-GB CUDA build.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  := torch==2.13.0
# TorchRec (the [torchrec] extra) and its runtime deps, all with --no-deps: torchrec's metadata pulls the CUDA fbgemm-gpu
# (2.7 GB) over fbgemm-gpu-cpu, and no resolver may choose torch. Same pins as shardopt/data/torchrec_io.py (a test checks).
TORCHREC      := torchrec==1.8.0
TORCHREC_DEPS := tensordict==0.15.3 pyvers==0.2.3 torchmetrics==1.0.3 lightning-utilities==0.15.3 tqdm==4.70.1 \
                 pyre-extensions==0.0.32 typing-inspect==0.9.0 mypy-extensions==1.2.0
EXAMPLE := instances/examples/small.json

.PHONY: run test test-all test-unit lint bench install install-dev clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed: $(PY) pyproject.toml
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e ".[cpu]"
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed-torchrec
	$(PIP) install -q -e ".[cpu,dev,ray]"
	touch $@

# the step both install and install-dev go through: after the CPU stack is in place, then a check that torch and the
# CPU fbgemm are still the ones installed above (and that the CUDA fbgemm-gpu is not there)
$(VENV)/.installed-torchrec: $(VENV)/.installed
	$(PIP) install -q --no-deps $(TORCHREC) $(TORCHREC_DEPS)
	$(PY) -c "import importlib.metadata as m, torch, fbgemm_gpu, torchrec; \
	assert torch.__version__.split('+')[0] == '2.13.0', torch.__version__; \
	assert m.version('fbgemm-gpu-cpu') == '1.8.0'; \
	assert not [d for d in m.distributions() if d.metadata['Name'] == 'fbgemm-gpu'], 'CUDA fbgemm-gpu installed'"
	touch $@

install: $(VENV)/.installed-torchrec
install-dev: $(VENV)/.installed-dev

run: install
	$(VENV)/bin/shardopt solve $(EXAMPLE)

# the suite on TEST_WORKERS processes (pytest-xdist), a test file per worker at a time (its fixtures and gloo / Ray
# set-ups stay in one process)
TEST_WORKERS ?= 2
test: install-dev
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-all: install-dev
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m ""

# the unit tests alone (no gloo, Ray, calibration or subprocess runs): the quick loop while editing
test-unit: install-dev
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow and not integration"

# ruff, configured in pyproject.toml ([tool.ruff]); .ci/run calls it before the tests
lint: install-dev
	$(VENV)/bin/ruff check .

bench: install
	$(PY) benchmarks/bench_analytic.py
	$(PY) benchmarks/bench_heuristics.py
	$(PY) benchmarks/bench_suite_quality.py
	$(PY) benchmarks/bench_stats.py

clean:
	rm -rf $(VENV) build *.egg-info
