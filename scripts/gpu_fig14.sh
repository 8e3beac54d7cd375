#!/usr/bin/env bash
# Fig. 14's cells on the real vLLM engine, on this machine's NVIDIA GPU(s): hybrid KV cache manager
# off (system=vllm), on (system=hybrid_groups) and the jenga_vllm plugin (system=jenga: jenga/'s LCM
# allocator inside the engine, JENGA_VLLM=1 per cell; docs/vllm.md). Dummy weights from written
# config.json files, exact prompt token ids from the workloads, the artifact's engine settings per
# model (experiments/fig14.yaml). Cannot run in CI (no GPU). Before the cells, the plugin's bit-identity
# check runs once on this GPU (PLUGIN_CHECK=0 skips it; it needs vllm 0.32/0.33).
#
#   make gpu-fig14                         # = bash scripts/gpu_fig14.sh (after make setup-vllm)
#   GPU=h200 bash scripts/gpu_fig14.sh      # conf/gpu name of this GPU: h100 (default), h200, l4
#   bash scripts/gpu_fig14.sh mode=smoke    # extra Hydra overrides go to every cell
#   bash scripts/gpu_fig14.sh --dry-run     # write the experiment file to a temporary directory
#                                           # (printed; nothing under the repo, git status clean) and stop
#
# Output of a real run: results/fig14_vllm/{experiment.yaml,summary*.csv,fig14_vllm*.png} and one
# record per cell under results/runs/vllm/<gpu>/... (resolved KV cache groups, block sizes, num
# blocks, hybrid manager in effect, vLLM version, GPU, per-step stats). A dry run writes nothing
# under the repository (no GPU, no plugin check, no vLLM needed: PY=.venv/bin/python works).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv-vllm/bin/python}
GPU=${GPU:-h100}
ARGS=()
for a in "$@"; do
  case "$a" in
    --dry-run) ARGS+=(--dry-run) ;;
    *) ARGS+=("$a") ;;
  esac
done
if [[ ! -x "$PY" ]]; then
  echo "gpu_fig14.sh: $PY not found; run \`make setup-vllm\` first (on a GPU host it installs the official vllm wheel)." >&2
  exit 2
fi
if [[ " ${ARGS[*]:-} " != *" --dry-run "* ]] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_fig14.sh: no NVIDIA GPU visible (nvidia-smi -L failed). On a CPU host use \`make crosscheck\`" \
       "(vLLM's own scheduler, backend=vllm_sched) or \`make reproduce-fig14\` (backend=sim)." >&2
  exit 2
fi
export HF_HUB_OFFLINE=1
# Llama 4's chunked local attention: vLLM turns its hybrid KV cache manager off for it when this is 0
# (vllm/config/vllm.py, "latency regression" warning); 1 is vLLM 0.32's default, pinned here so
# system=hybrid_groups really runs the hybrid manager on the Llama 4 cell (the record says so:
# hybrid_kv_cache_manager_in_effect).
export VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=${VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE:-1}
if [[ " ${ARGS[*]:-} " != *" --dry-run "* && "${PLUGIN_CHECK:-1}" == "1" ]]; then
  mkdir -p results/fig14_vllm
  # The plugin vs stock vLLM (hybrid manager on/off), random-weight tiny models, greedy, logprobs.
  # On a GPU the kernels are not bit-exact across batch shapes; read the printed max |d logprob|.
  "$PY" -m harness.tools.vllm_plugin_check --json results/fig14_vllm/plugin_check.json || \
    echo "gpu_fig14.sh: plugin-check reported a mismatch (results/fig14_vllm/plugin_check.json); continuing" >&2
fi
exec "$PY" -m harness.study.gpu_fig14 --gpu "$GPU" "${ARGS[@]}"
