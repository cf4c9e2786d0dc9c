# robolearn: `make run` and `make test` set everything up on first use (.venv with python3.12).
SHELL := /bin/bash
VENV := .venv
# python3.12 on PATH, else a pyenv install of 3.12 (pyenv's shim alone may not select it)
PYTHON ?= $(shell for p in python3.12 $(HOME)/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo $$p; break; }; done)
export HF_HUB_OFFLINE := 1
export MUJOCO_GL := egl
MINUTES ?= 3
PYTEST := $(VENV)/bin/python -m pytest

.PHONY: setup chromium run test test-all bench bench-reach bench-buffer bench-experts bench-delay-sweep bench-control-loop \
	bench-inference-rtt bench-learner-speed bench-hil bench-learn-async bench-chaos bench-reward bench-gui bench-fleet \
	bench-data-plane bench-vla bench-vla-dsrl bench-learn-tasks bench-table lint clean

setup: $(VENV)/.installed

$(VENV)/bin/python:
	@test -n "$(PYTHON)" || { echo "error: python3.12 not found (install it, or pass PYTHON=/path/to/python3.12)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# re-installs only when pyproject.toml changes; uv (from PyPI, into the venv) downloads in parallel: `make setup`
# from an empty cache took 50 s here against pip's ~3 minutes, the same versions resolved
$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q 'uv>=0.5'
	$(VENV)/bin/uv pip install --python $(VENV)/bin/python -e '.[dev]'
	touch $@

run: setup
	$(VENV)/bin/robolearn run task=reach budget.minutes=$(MINUTES)

# the GUI's browser tests drive Debian's chromium (never a downloaded browser)
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# fast tier + short end-to-end runs (what CI runs); slow tests with `make test-all`
test: setup chromium
	$(PYTEST) -m "not slow" --durations=10

test-all: setup chromium
	$(PYTEST) --durations=10

bench-reach: setup
	$(VENV)/bin/python benchmarks/learn_reach.py $(ARGS)

bench-buffer: setup
	$(VENV)/bin/python benchmarks/buffer.py $(ARGS)

bench-experts: setup
	$(VENV)/bin/python benchmarks/experts.py $(ARGS)

bench-delay-sweep: setup
	$(VENV)/bin/python benchmarks/delay_sweep.py $(ARGS)

bench-control-loop: setup
	$(VENV)/bin/python benchmarks/control_loop.py $(ARGS)

bench-inference-rtt: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/python benchmarks/inference_rtt.py $(ARGS)

bench-learner-speed: setup
	$(VENV)/bin/python benchmarks/learner_speed.py $(ARGS)

bench-hil: setup
	$(VENV)/bin/python benchmarks/hil.py $(ARGS)

bench-learn-async: setup
	$(VENV)/bin/python benchmarks/learn_async.py $(ARGS)

bench-chaos: setup
	$(VENV)/bin/python benchmarks/chaos.py $(ARGS)

bench-gui: setup chromium
	$(VENV)/bin/python benchmarks/gui_latency.py $(ARGS)

bench-reward: setup
	MUJOCO_GL=egl HF_HUB_OFFLINE=1 $(VENV)/bin/python benchmarks/reward_classifier.py $(ARGS)

bench-fleet: setup
	$(VENV)/bin/python benchmarks/fleet.py $(ARGS)

bench-vla: setup
	$(VENV)/bin/python benchmarks/vla.py $(ARGS)

bench-vla-dsrl: setup
	$(VENV)/bin/python benchmarks/vla_dsrl.py $(ARGS)

bench-data-plane: setup
	$(VENV)/bin/python benchmarks/data_plane.py $(ARGS)

bench-learn-tasks: setup
	$(VENV)/bin/python benchmarks/learn_tasks.py $(ARGS)

# the summary table in BENCHMARKS.md, from benchmarks/results/*.json
bench-table: setup
	$(VENV)/bin/python benchmarks/table.py

bench: bench-reach bench-buffer bench-experts bench-delay-sweep bench-control-loop bench-inference-rtt \
	bench-learner-speed bench-hil bench-learn-async bench-chaos bench-reward bench-gui bench-fleet bench-data-plane
	$(MAKE) bench-table

lint: setup
	$(VENV)/bin/ruff check robolearn tests benchmarks
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) runs .pytest_cache
