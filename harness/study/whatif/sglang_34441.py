"""sglang#34441: SGLang's ``--enable-unified-memory`` puts full-attention KV and Mamba states in one
byte arena, growing toward each other. Under load the Mamba side asserts ``Can not alloc mamba
cache``: the envelope 100 % allocated, the free gap (21.2 MB) smaller than the 53.6 MB one Mamba slot
needs, while the full side holds evictable prefix KV -- a Mamba shortfall only evicts Mamba's own
cached states (zero-sum). sglang#36713 (merged) evicts full KV for a Mamba byte shortfall.

Ours: the report's slot (53.6 MB) and a 723 kB/token full-attention layer set (40-token pages) in an
arena of 20 full pages, driven through the allocators directly (no step-time model, nothing
simulated): two finished prompts leave their full KV and Mamba states cached, then single-page
requests arrive one at a time. Each rule's arena at the end: live, cached, free bytes, and whether
each arrival got its state."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import jenga
from harness.study.whatif.common import source_line
from jenga.spec import FullAttentionSpec, MambaSpec, SpecError
from jenga.testing import StubRequest


def _req(rid: str, tokens) -> StubRequest:
    return StubRequest(rid, np.asarray(tokens, dtype=np.int32), ())


def _drive(study: dict, rule: str, options: dict) -> dict:
    slot, per_token, page_tokens = study["mamba_slot_bytes"], study["full_bytes_per_token"], study["page_tokens"]
    specs = [FullAttentionSpec("full", 1, per_token), MambaSpec("mamba", 1, slot, state_bytes_per_layer=slot)]
    capacity = study["arena_full_pages"] * page_tokens * per_token
    mm = jenga.make_manager(rule, specs, capacity, tokens_per_page=page_tokens, enable_prefix_cache=True, **options)
    for i in range(study["warm_prompts"]):
        r = _req(f"w{i}", [i * 1000 + k for k in range(study["warm_prompt_tokens"])])
        mm.lookup_prefix(r)
        mm.allocate(r, study["warm_prompt_tokens"])
        mm.begin_step()
        mm.free(r)
    admitted = []
    for i in range(study["arrivals"]):
        r = _req(f"a{i}", [10**6 + i * 1000 + k for k in range(page_tokens)])
        mm.lookup_prefix(r)
        admitted.append(bool(mm.allocate(r, page_tokens)))
        mm.begin_step()
    u = mm.usage()
    ar = mm.pool
    gap = getattr(ar, "gap_bytes", None)
    live = u.capacity_bytes - u.cached_bytes - u.free_bytes
    first_fail = next((i + 1 for i, ok in enumerate(admitted) if not ok), None)
    return {"admitted": sum(admitted), "arrivals": len(admitted), "first_failure": first_fail or "-",
            "capacity_mb": round(u.capacity_bytes / 1e6, 2), "live_mb": round(live / 1e6, 2),
            "cached_mb": round(u.cached_bytes / 1e6, 2), "free_mb": round(u.free_bytes / 1e6, 2),
            "gap_mb": round(gap / 1e6, 2) if gap is not None else "-",
            "allocated_pct": round(100 * (1 - (gap if gap is not None else u.free_bytes) / u.capacity_bytes), 1),
            "mamba_slot_mb": round(slot / 1e6, 2),
            "evict_full_for_mamba": u.path_counts.get("evict_donor", 0)}


def run(study: dict, out: Path) -> list[dict]:
    rows = []
    for v in study["variants"]:
        try:
            got = _drive(study, v["rule"], v.get("options") or {})
        except SpecError as e:     # a rule that cannot build this arena at all (e.g. Jenga's LCM page)
            got = {"refused": str(e)}
        rows.append({"variant": v["label"], "rule": v["rule"], **got, "simulated": False})
    _figure(study, [r for r in rows if "refused" not in r], out)
    return rows


def _figure(study, rows, out):
    import matplotlib.pyplot as plt

    from harness.plots import save
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={"width_ratios": [3, 2]})
    labels = [r["variant"] for r in rows]
    y = range(len(rows))
    left = [0.0] * len(rows)
    for key, color, name in (("live_mb", "tab:blue", "live (running requests)"),
                             ("cached_mb", "tab:orange", "cached (evictable prefix)"),
                             ("free_mb", "tab:green", "free")):
        vals = [r[key] for r in rows]
        axes[0].barh(list(y), vals, left=left, color=color, label=name)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    axes[0].set_yticks(list(y), labels, fontsize=7)
    axes[0].invert_yaxis()
    axes[0].set_xlabel("arena bytes at the end (MB)")
    axes[0].legend(fontsize=6, loc="lower right")
    gaps = [r["gap_mb"] if r["gap_mb"] != "-" else r["free_mb"] for r in rows]
    axes[1].barh(list(y), gaps, color="tab:green", label="free gap (ours)")
    axes[1].axvline(study["mamba_slot_bytes"] / 1e6, color="k", ls="--", label="one Mamba slot (53.6 MB)")
    axes[1].axvline(study["reported"]["gap_mb"], color="tab:red", ls=":", label="reported gap (21.2 MB)")
    axes[1].set_yticks(list(y), [f"{r['admitted']}/{r['arrivals']} admitted" for r in rows], fontsize=7)
    axes[1].invert_yaxis()
    axes[1].set_xlabel("free gap (unified) or free bytes (others), MB")
    axes[1].legend(fontsize=6, loc="lower right")
    fig.suptitle("sglang#34441: unified arena, a gap smaller than one Mamba slot (allocator-level, not simulated)",
                 fontsize=9)
    fig.tight_layout()
    save(fig, out / f"{study['name']}.png")


def report(study: dict, rows: list[dict], out: Path) -> str:
    rep = study["reported"]
    lines = [f"# {study['name']}: {study['description']}", "", source_line(study), ""]
    lines += [f"- {q}" for q in rep.get("quotes", [])]
    lines += ["", ("Nothing here is simulated: the allocators are driven directly, byte for byte (no step-time "
                   "model). The arena is scaled down (20 full pages of 40 x 723 kB, "
                   f"{study['arena_full_pages'] * study['page_tokens'] * study['full_bytes_per_token'] / 1e6:.1f} MB, vs the report's 56.84 GiB per rank); the Mamba slot and the "
                   "gap are the report's."), "",
              (f"Trace: {study['warm_prompts']} prompts of {study['warm_prompt_tokens']} tokens finish (their "
              f"full KV and Mamba states stay cached), then {study['arrivals']} one-page requests arrive one "
              "at a time."), "",
              ("| variant | admitted | first failure (arrival #) | allocated % | gap MB | Mamba slot MB | "
              "cached (evictable) MB | free MB | full pages evicted for Mamba | reported |"),
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        said = rep.get("by_rule", {}).get(r["variant"], "")
        if "refused" in r:
            lines.append(f"| {r['variant']} | refused: {r['refused']} | | | | | | | | {said} |")
            continue
        lines.append(f"| {r['variant']} | {r['admitted']}/{r['arrivals']} | {r['first_failure']} | "
                     f"{r['allocated_pct']} | {r['gap_mb']} | {r['mamba_slot_mb']} | {r['cached_mb']} | "
                     f"{r['free_mb']} | {r['evict_full_for_mamba']} | {said} |")
    lines += ["", study["finding"], ""]
    return "\n".join(lines)
