# jenga-harness — every target installs what it needs into .venv on first use (stamp file).
PY_BOOT ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.setup-stamp
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.setup-stamp
ARGS ?=

.PHONY: setup test bench lint reproduce-fig13 reproduce-fig14 setup-vllm test-vllm crosscheck clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PY_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch 2.13.0 is the CPU build lying on this machine's disk; a bare `torch` pulls a multi-GB CUDA build.
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[harness,dev]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

bench: $(STAMP)
	$(PY) -m bench.allocator $(ARGS)

lint: $(STAMP)
	$(PY) -m ruff check jenga harness tests bench

reproduce-fig13: $(STAMP)
	$(PY) -m harness.experiment experiments/fig13.yaml $(ARGS)

reproduce-fig14: $(STAMP)
	$(PY) -m harness.experiment experiments/fig14.yaml $(ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .hypothesis
