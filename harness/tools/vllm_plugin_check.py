"""``make plugin-check``: the real vLLM engine with and without the jenga_vllm plugin, bit for bit.

Three tiny hybrid checkpoints with *random* weights written to safetensors (vLLM's dummy loader
draws weights of about ±1e-3, which makes attention nearly irrelevant, so equal outputs under it
would prove little):

- ``llama_swa``: Llama with ``layer_types`` -- 3 sliding-window (256) + 2 full layers. The counts do
  not divide, so vLLM's hybrid manager pads a group while the plugin's page-layer small pages are
  3 and 2 layer pages (ratios 2 and 3 per large page);
- ``gemma2``: Gemma-2 (attention and final logit softcaps, query_pre_attn_scalar) -- 2 sliding + 1 full;
- ``llama4_chunked``: Llama 4 text (``Llama4ForCausalLM``, config.json from the harness's own writer)
  -- 4 RoPE layers with chunked local attention (256-token chunks) + 1 NoPE full layer, MoE with a
  shared expert on every 2nd layer. A control arm serves the same weights with chunking off
  (``attention_chunk_size`` unset) under stock vLLM and must change every sequence: the 400-token
  prompts cross a chunk boundary, so this shows vLLM's CPU backend really ran chunked attention.

Each is served greedily (``logprobs=1``, fp32, prefix caching on) by four engines in this one
process: stock vLLM with the hybrid manager on (``hma_on``), off (``hma_off``), the plugin
(``jenga``, ``JENGA_VLLM=1``) and the plugin with a deliberately broken layout
(``JENGA_VLLM_BROKEN_LAYOUT=1``: every layer of a type writes the same slice). The workload has two
waves sharing a 256-token prefix (prefix hits), a repeat of two prompts, then long prompts that make
new prompts that take over large pages the earlier waves left cached (large pages move between
types through jenga's large-page LRU eviction).

    python -m harness.tools.vllm_plugin_check [--json PATH] [--models llama_swa gemma2 llama4_chunked]

prints ``plugin-check: N/N sequences identical to HMA on, N/N to HMA off; broken layout changed
K/K; large pages moved between types: R`` and exits non-zero on any mismatch, on a broken layout
that changes nothing, on no prefix hit through the plugin, on no large page moving or on a
chunking control that changes nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
from pathlib import Path

from harness.backends.vllm.hf_config import hf_config_dict
from harness.backends.vllm.plan import require_vllm
from harness.backends.vllm.tiny import tiny_llama4_profile

# The plugin arms first: vLLM loads its plugins once per process, at the first engine, and the
# entry point installs the hooks only if JENGA_VLLM=1 then (the stock arms switch it off per engine).
LONG_LEN, LONG_N = 600, 4
KV_BYTES = 4 << 20
MODES = ("jenga", "jenga_broken", "hma_on", "hma_off")
VOCAB, HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, WINDOW = 1024, 64, 128, 2, 1, 32, 256
MODELS = {
    "llama_swa": {"arch": "llama", "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                                                   "sliding_attention", "full_attention"]},
    "gemma2": {"arch": "gemma2", "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
               "long": False},
    # Llama 4 text (harness.backends.vllm.tiny.tiny_llama4_profile, config from hf_config): chunked local
    # attention (256-token chunks) on RoPE layers + a NoPE full layer, Scout's MoE with a shared expert.
    "llama4_chunked": {"arch": "llama4", "long": False, "chunk_control": True},
}


def write_random_llama4(directory: Path, seed: int = 0, chunk: int | None = None) -> Path:
    """The tiny Llama-4 text model: ``config.json`` from the harness's own writer (the file
    ``backend=vllm`` would hand vLLM) and random weights under vLLM's Llama 4 names (per-expert
    ``experts.{e}.{gate,up,down}_proj``, ``router``, ``shared_expert``). ``chunk=0``: the same weights
    with ``attention_chunk_size`` unset (every layer full attention): the chunking control."""
    import torch
    from safetensors.torch import save_file

    cfg = hf_config_dict(tiny_llama4_profile())
    if chunk is not None:
        cfg["attention_chunk_size"] = chunk or None
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg, indent=1))
    g = torch.Generator().manual_seed(seed)
    hidden, heads, kv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]

    def lin(o: int, i: int, scale: float = 1.0):
        return (torch.randn(o, i, generator=g) * scale / i ** 0.5).contiguous()

    def mlp(prefix: str, inter: int) -> None:
        w[prefix + "gate_proj.weight"] = lin(inter, hidden)
        w[prefix + "up_proj.weight"] = lin(inter, hidden)
        w[prefix + "down_proj.weight"] = lin(hidden, inter)

    w = {"model.embed_tokens.weight": torch.randn(cfg["vocab_size"], hidden, generator=g),
         "model.norm.weight": torch.ones(hidden), "lm_head.weight": lin(cfg["vocab_size"], hidden)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        # Sharp attention (q, k scaled up; RoPE layers also L2-normalise q and k) so which tokens a
        # layer reads changes its output.
        w[p + "self_attn.q_proj.weight"] = lin(heads * hd, hidden, 3.0)
        w[p + "self_attn.k_proj.weight"] = lin(kv * hd, hidden, 3.0)
        w[p + "self_attn.v_proj.weight"] = lin(kv * hd, hidden)
        w[p + "self_attn.o_proj.weight"] = lin(hidden, heads * hd)
        w[p + "input_layernorm.weight"] = torch.ones(hidden)
        w[p + "post_attention_layernorm.weight"] = torch.ones(hidden)
        if i in cfg["moe_layers"]:
            w[p + "feed_forward.router.weight"] = lin(cfg["num_local_experts"], hidden, 3.0)
            mlp(p + "feed_forward.shared_expert.", cfg["intermediate_size"])
            for e in range(cfg["num_local_experts"]):
                mlp(p + f"feed_forward.experts.{e}.", cfg["intermediate_size"])
        else:
            mlp(p + "feed_forward.", cfg["intermediate_size_mlp"])
    save_file(w, str(directory / "model.safetensors"))
    return directory


def write_random_checkpoint(name: str, directory: Path, seed: int = 0) -> Path:
    """config.json + model.safetensors with random weights scaled so attention matters."""
    import torch
    from safetensors.torch import save_file
    spec = MODELS[name]
    if spec["arch"] == "llama4":
        return write_random_llama4(directory, seed)
    gemma = spec["arch"] == "gemma2"
    n = len(spec["layer_types"])
    cfg = {"architectures": ["Gemma2ForCausalLM" if gemma else "LlamaForCausalLM"],
           "model_type": spec["arch"], "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": INTER,
           "num_hidden_layers": n, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
           "head_dim": HEAD_DIM, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
           "sliding_window": WINDOW, "layer_types": spec["layer_types"], "tie_word_embeddings": gemma}
    if gemma:
        cfg.update({"hidden_activation": "gelu_pytorch_tanh", "attn_logit_softcapping": 50.0,
                    "final_logit_softcapping": 30.0, "query_pre_attn_scalar": HEAD_DIM})
    else:
        cfg.update({"hidden_act": "silu"})
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg, indent=1))
    g = torch.Generator().manual_seed(seed)

    def lin(o: int, i: int, scale: float = 1.0):
        return (torch.randn(o, i, generator=g) * scale / i ** 0.5).contiguous()

    norm = (torch.zeros if gemma else torch.ones)(HIDDEN)  # Gemma norms scale by (1 + w)
    w = {"model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN, generator=g) * (0.125 if gemma else 1.0),
         "model.norm.weight": norm.clone()}
    for i in range(n):
        p = f"model.layers.{i}."
        # Sharp attention (q, k scaled up) so which tokens a layer reads changes its output.
        w[p + "self_attn.q_proj.weight"] = lin(HEADS * HEAD_DIM, HIDDEN, 3.0)
        w[p + "self_attn.k_proj.weight"] = lin(KV_HEADS * HEAD_DIM, HIDDEN, 3.0)
        w[p + "self_attn.v_proj.weight"] = lin(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = lin(HIDDEN, HEADS * HEAD_DIM)
        w[p + "mlp.gate_proj.weight"] = lin(INTER, HIDDEN)
        w[p + "mlp.up_proj.weight"] = lin(INTER, HIDDEN)
        w[p + "mlp.down_proj.weight"] = lin(HIDDEN, INTER)
        for ln in ("input_layernorm", "post_attention_layernorm") + (
                ("pre_feedforward_layernorm", "post_feedforward_layernorm") if gemma else ()):
            w[p + ln + ".weight"] = norm.clone()
    if not gemma:
        w["lm_head.weight"] = lin(VOCAB, HIDDEN)
    save_file(w, str(directory / "model.safetensors"))
    return directory


def prompts(long: bool = True) -> list[list[list[int]]]:
    """Waves of token-id prompts: 2 x 4 prompts of 400 tokens sharing a 256-token prefix (the
    second wave hits it), then (``long``) 4 prompts of 600 tokens that take over large pages the
    earlier waves left cached (large pages move between types, large-page LRU eviction).

    Bit-identity needs every arm to run the same batches: the CPU GEMMs' last bits depend on the
    batch a row is in (tried: with KV tight enough that the arms admitted different numbers of
    long prompts per step, stock HMA on and HMA off already differed by 5e-6 in logprob). So the
    budget (``KV_BYTES``, 4 MiB) admits each wave whole in every arm, and no prompt repeats (a
    repeat would hit deeper with the hybrid manager off, which keeps out-of-window blocks)."""
    shared = [3 + (j * 7) % 50 for j in range(256)]
    mid = [shared + [100 + (i * 37 + j * 11) % 900 for j in range(144)] for i in range(8)]
    waves = [mid[:4], mid[4:]]
    if long:
        waves.append([[20 + (7 * i + 13 * j) % 1000 for j in range(LONG_LEN)] for i in range(LONG_N)])
    return waves


def run_engine(model_dir: Path, mode: str, kv_bytes: int, out_len: int = 24, long: bool | None = None) -> dict:
    import time
    t0 = time.perf_counter()
    os.environ["JENGA_VLLM"] = "1" if mode.startswith("jenga") else "0"
    os.environ["JENGA_VLLM_BROKEN_LAYOUT"] = "1" if mode == "jenga_broken" else "0"
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(model=str(model_dir), skip_tokenizer_init=True, dtype="float32", max_model_len=1024,
              max_num_seqs=8, max_num_batched_tokens=4096, enforce_eager=True, kv_cache_memory_bytes=kv_bytes,
              enable_prefix_caching=True, disable_hybrid_kv_cache_manager=(mode == "hma_off"),
              disable_log_stats=False, seed=0)
    sp = SamplingParams(max_tokens=out_len, min_tokens=out_len, ignore_eos=True, detokenize=False,
                        temperature=0.0, logprobs=1)
    tokens, logprobs = [], []
    for wave in prompts(long=MODELS[model_dir.name].get("long", True) if long is None else long):
        for o in llm.generate([TokensPrompt(prompt_token_ids=p) for p in wave], sp, use_tqdm=False):
            out = o.outputs[0]
            tokens.append(list(out.token_ids))
            logprobs.append([float(d[t].logprob) for t, d in zip(out.token_ids, out.logprobs)])
    sched = llm.llm_engine.engine_core.engine_core.scheduler
    alloc = getattr(sched.kv_cache_manager, "jenga", None)
    if mode.startswith("jenga") and alloc is None:
        raise RuntimeError("JENGA_VLLM=1 but the engine ran vLLM's own allocator: the jenga_vllm entry point "
                           "was not loaded (is the project installed in this venv? VLLM_PLUGINS set?)")
    hits = 0
    for m in llm.get_metrics():
        if m.name == "vllm:prefix_cache_hits":
            hits = int(getattr(m, "value", 0))
    res = {"mode": mode, "tokens": tokens, "logprobs": logprobs, "prefix_hit_tokens": hits,
           "num_gpu_blocks": llm.llm_engine.vllm_config.cache_config.num_gpu_blocks,
           "groups": [len(g.layer_names) for g in sched.kv_cache_config.kv_cache_groups],
           "jenga": alloc.summary() if alloc is not None else None, "wall_s": round(time.perf_counter() - t0, 1)}
    del llm, sched, alloc
    gc.collect()
    return res


def compare(a: dict, b: dict) -> tuple[int, float, list[int]]:
    """(sequences identical in tokens and logprobs, max |Δ logprob| over common positions, the
    indices of the sequences that differ)."""
    same, worst, differ = 0, 0.0, []
    for i, (ta, tb, la, lb) in enumerate(zip(a["tokens"], b["tokens"], a["logprobs"], b["logprobs"])):
        if ta == tb and la == lb:
            same += 1
        else:
            differ.append(i)
        worst = max([worst] + [abs(x - y) for x, y in zip(la, lb)])
    return same, worst, differ


def check(models: list[str], kv_bytes: int = KV_BYTES) -> dict:
    """Run every arm in this process (call it in a fresh one: ``python -m harness.tools.vllm_plugin_check``)."""
    # vLLM loads its plugins once per process, at the first engine: the plugin arms run first with
    # JENGA_VLLM=1 so the entry point installs the hooks; the stock arms switch it off per engine
    # (every hook checks it when called).
    os.environ["JENGA_VLLM"] = "1"
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # stdout keeps only the summary line
    require_vllm()  # VLLM_TARGET_DEVICE (cpu unless a GPU is visible), HF_HUB_OFFLINE
    with tempfile.TemporaryDirectory(prefix="jenga_plugin_check_") as tmp:
        runs, failed = {}, {}
        for name in models:
            try:
                runs[name] = _run_model(name, Path(tmp), kv_bytes)
            except Exception as e:  # noqa: BLE001 -- one model's failure (e.g. a kernel a GPU build lacks)
                # must not lose the others' results; it fails the check and is named in the JSON.
                failed[name] = f"{type(e).__name__}: {str(e)[:500]}"
                print(f"[plugin-check] {name} FAILED: {failed[name]}", file=sys.stderr, flush=True)
    n = on = off = broken = moved = hits = 0
    control_ok = True
    detail = {}
    for name, r in runs.items():
        ref = r["jenga"]
        k = len(ref["tokens"])
        s_on, d_on, x_on = compare(ref, r["hma_on"])
        s_off, d_off, x_off = compare(ref, r["hma_off"])
        s_br, d_br, _ = compare(r["jenga_broken"], r["hma_on"])
        n, on, off, broken = n + k, on + s_on, off + s_off, broken + (k - s_br)
        moved += ref["jenga"]["large_pages_moved_between_types"] if ref["jenga"] else 0
        hits += ref["prefix_hit_tokens"]
        detail[name] = {"sequences": k, "identical_hma_on": s_on, "identical_hma_off": s_off,
                        "max_dlogprob_hma_on": d_on, "max_dlogprob_hma_off": d_off,
                        "differ_hma_on": x_on, "differ_hma_off": x_off, "broken_changed": k - s_br,
                        "broken_max_dlogprob": d_br, "prefix_hit_tokens": {m: r[m]["prefix_hit_tokens"] for m in MODES},
                        "groups": {m: r[m]["groups"] for m in MODES}, "jenga": ref["jenga"]}
        if "unchunked" in r:
            s_un, d_un, _ = compare(r["unchunked"], r["hma_on"])
            detail[name].update(chunk_control_changed=k - s_un, chunk_control_max_dlogprob=d_un)
            control_ok = control_ok and s_un == 0
    line = (f"plugin-check: {on}/{n} sequences identical to HMA on, {off}/{n} to HMA off; "
            f"broken layout changed {broken}/{n}; large pages moved between types: {moved}")
    ok = on == n and off == n and broken == n and moved > 0 and hits > 0 and control_ok and not failed
    detail.update({name: {"error": err} for name, err in failed.items()})
    return {"line": line, "ok": ok, "prefix_hit_tokens_jenga": hits, "models": detail}


def _run_model(name: str, tmp: Path, kv_bytes: int) -> dict:
    """Every arm for one model (plus the chunking control where the model has one)."""
    d = write_random_checkpoint(name, tmp / name)
    runs = {}
    for m in MODES:
        runs[m] = run_engine(d, m, kv_bytes)
        print(f"[plugin-check] {name} {m}: groups {runs[m]['groups']}, "
              f"prefix hits {runs[m]['prefix_hit_tokens']}, {runs[m]['wall_s']} s", file=sys.stderr, flush=True)
    if MODELS[name].get("chunk_control"):
        # Control: the same weights with chunking off must answer differently (prompts are longer
        # than a chunk), else identity would not show that chunked attention ran at all.
        dc = write_random_llama4(tmp / f"{name}_unchunked", chunk=0)
        runs["unchunked"] = run_engine(dc, "hma_on", kv_bytes, long=MODELS[name].get("long", True))
        print(f"[plugin-check] {name} unchunked control (hma_on): groups {runs['unchunked']['groups']}, "
              f"{runs['unchunked']['wall_s']} s", file=sys.stderr, flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--kv-bytes", type=int, default=KV_BYTES)
    ap.add_argument("--json", type=Path, help="write the full comparison here")
    args = ap.parse_args(argv)
    res = check(args.models, args.kv_bytes)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    print(res["line"])
    if not res["ok"]:
        print(json.dumps(res["models"], indent=1), file=sys.stderr)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
