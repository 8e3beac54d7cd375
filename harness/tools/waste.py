"""Analytic memory waste of uniform paging (vLLM v0.6.3 PagedAttention) against the ideal.

    python -m harness.tools.waste model=llama3_2_11b_vision text_tokens=43 image_tokens=6193 [context=N]

Uniform paging stores every token in every cache-storing layer: ``tokens × Σ bytes/token of all
token-based types`` (the paper's (T+I)·(32+8)·E for Llama-3.2-Vision). The ideal stores, per layer
type, only what that type still reads when the request holds ``context`` text-side tokens:
self-attention types their needed range (full: all; sliding window W: the last W-1; chunked: the
current chunk; token-drop: the kept budget); cross-attention types the image tokens. Mamba states
are the same in both and cancel out of the waste; vision embeddings are not in the KV pool of
uniform paging and are left out. No page rounding on either side.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from harness.config import ConfigError
from harness.models import ModelProfile, zoo_profile
from jenga.spec import CrossAttentionSpec, TokenDropSpec


@dataclass(frozen=True)
class Waste:
    uniform_bytes: int
    ideal_bytes: int
    per_type_ideal: dict[str, int]

    @property
    def waste_fraction(self) -> float:
        """(uniform − ideal) / uniform."""
        return 0.0 if self.uniform_bytes == 0 else (self.uniform_bytes - self.ideal_bytes) / self.uniform_bytes


def analytic_waste(profile: ModelProfile, text_tokens: int, image_tokens: int = 0,
                   context: int | None = None) -> Waste:
    """Uniform vs ideal bytes for one request. ``context`` = text-side tokens held (prompt plus
    generated; for decoder-only VLMs the image tokens are text-side too). Default: the prompt."""
    if text_tokens < 0 or image_tokens < 0:
        raise ValueError(f"text_tokens and image_tokens must be >= 0, got {text_tokens}, {image_tokens}")
    cross_model = any(isinstance(s, CrossAttentionSpec) for s in profile.specs)
    if context is None:
        context = text_tokens if cross_model else text_tokens + image_tokens
    if context < 0:
        raise ValueError(f"context must be >= 0, got {context}")
    stored = context + (image_tokens if cross_model else 0)  # what uniform paging puts in every layer
    uniform = ideal = 0
    per_type: dict[str, int] = {}
    for s in profile.specs:
        if not s.token_based or s.kind == "vision_embedding":
            continue
        uniform += stored * s.bytes_per_token
        if isinstance(s, CrossAttentionSpec):
            need = image_tokens
        elif isinstance(s, TokenDropSpec):
            need = s.kept_tokens(context)
        else:
            lo, hi = s.needed_token_range(context)
            need = hi - lo
        per_type[s.name] = need * s.bytes_per_token
        ideal += per_type[s.name]
    return Waste(uniform, ideal, per_type)


def workload_waste(profile: ModelProfile, requests) -> float:
    """Analytic uniform-paging waste over a workload's requests, at their prompts:
    (uniform − ideal) / uniform bytes summed over the requests (0 for an empty workload)."""
    uniform = ideal = 0
    for r in requests:
        w = analytic_waste(profile, r.prompt_len, r.num_image_tokens)
        uniform += w.uniform_bytes
        ideal += w.ideal_bytes
    return (uniform - ideal) / uniform if uniform else 0.0


_KEYS = ("model", "text_tokens", "image_tokens", "context")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = {}
        for a in argv:
            k, sep, v = a.partition("=")
            if not sep or k not in _KEYS:
                raise ConfigError(f"arguments are key=value with key in {list(_KEYS)}; got {a!r}")
            args[k] = v
        if "model" not in args or "text_tokens" not in args:
            raise ConfigError("model=<name> and text_tokens=<T> are required")
        prof = zoo_profile(args['model'])
        ctx = int(args["context"]) if "context" in args else None
        w = analytic_waste(prof, int(args["text_tokens"]), int(args.get("image_tokens", 0)), ctx)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"model {prof.name}: text_tokens={args['text_tokens']} image_tokens={args.get('image_tokens', 0)}"
          f"{'' if ctx is None else f' context={ctx}'}")
    print(f"uniform paging: {w.uniform_bytes} bytes ({w.uniform_bytes / 2**20:.2f} MiB)")
    print(f"ideal:          {w.ideal_bytes} bytes ({w.ideal_bytes / 2**20:.2f} MiB)  "
          + ", ".join(f"{k}={v}" for k, v in w.per_type_ideal.items()))
    print(f"waste of uniform paging: {100 * w.waste_fraction:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
