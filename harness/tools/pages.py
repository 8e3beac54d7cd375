"""Page geometry of one model or the whole zoo (the paper's §4.4 compatibility table).

    python -m harness.tools.pages model=jamba_1_5_mini [tokens_per_page=16]
    python -m harness.tools.pages                 # or model=all: one row per model of the zoo

Per layer type: layers (storing / computing), bytes per token, small-page bytes; the LCM large page
and each type's large/small ratio; and the MAX-page alternative: the tokens per page a token-based
type would need for its page to reach the largest small page (no padding). For Mamba models it
also shows the artifact's layout, where the conv and SSM states are separate types.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.config import ConfigError, options
from harness.models import ModelProfile, zoo_profile
from jenga.spec import page_geometry

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class TypeRow:
    name: str
    kind: str
    layers: int
    compute_layers: int
    bytes_per_token: int | None     # None for state-based types
    small_page_bytes: int
    ratio: int                      # large page / small page
    max_page_tokens: int | None     # tokens per page matching the largest small page


@dataclass(frozen=True)
class Geometry:
    model: str
    tokens_per_page: int
    rows: tuple[TypeRow, ...]
    large_page_bytes: int

    @property
    def max_ratio(self) -> int:
        return max(r.ratio for r in self.rows)

    @property
    def max_page_tokens(self) -> int:
        return max((r.max_page_tokens or 0) for r in self.rows)


def geometry(profile: ModelProfile, tokens_per_page: int = 16) -> Geometry:
    """LCM page geometry of a profile's specs."""
    geo = page_geometry(profile.specs, tokens_per_page)
    biggest = geo.max_small_page_bytes
    rows = []
    for s in profile.specs:
        small = geo.small_page_bytes[s.name]
        rows.append(TypeRow(
            name=s.name, kind=s.kind, layers=s.num_layers, compute_layers=s.num_compute_layers or s.num_layers,
            bytes_per_token=s.bytes_per_token if s.token_based else None, small_page_bytes=small,
            ratio=geo.small_pages_per_large(s.name),
            max_page_tokens=math.ceil(tokens_per_page * biggest / small) if s.token_based else None))
    return Geometry(profile.name, tokens_per_page, tuple(rows), geo.large_page_bytes)


def split_mamba_ratio(profile: ModelProfile, tokens_per_page: int = 16) -> tuple[int, int] | None:
    """(attention large/small ratio, MAX-page tokens) when conv and SSM states are separate types, as
    in the artifact's ``LinearAttentionManager`` (``i-conv``/``i-ssm`` layers). None if no Mamba."""
    mamba = [s for s in profile.specs if s.kind == "mamba"]
    if not mamba:
        return None
    n = mamba[0].num_layers
    pages = [s.small_page_bytes(tokens_per_page) for s in profile.specs if s.kind != "mamba"]
    attn = min(pages)
    # A state with no conv part (MiniMax lightning attention) is one type either way.
    states = [b * n for b in (profile.extra["mamba_conv_bytes_per_layer"], profile.extra["mamba_ssm_bytes_per_layer"])
              if b]
    large = math.lcm(*pages, *states)
    return large // attn, math.ceil(tokens_per_page * max(states) / attn)


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}" if n % size else f"{n // size} {unit}"
    return f"{n} B"


def _cells(r) -> tuple[str, str, str]:
    """A geometry row's printed layers (storing/computing under KV sharing), bytes per token
    ("state" for Mamba) and MAX-page tokens per page ("-" where none)."""
    layers = f"{r.layers}" if r.layers == r.compute_layers else f"{r.layers}/{r.compute_layers}"
    bpt = "state" if r.bytes_per_token is None else str(r.bytes_per_token)
    mpt = "-" if r.max_page_tokens is None else str(r.max_page_tokens)
    return layers, bpt, mpt


def describe(profile: ModelProfile, tokens_per_page: int = 16) -> str:
    """The per-model table as text."""
    g = geometry(profile, tokens_per_page)
    lines = [f"model {profile.name}  ({profile.hf_id}); {tokens_per_page} tokens per small page",
             (f"{'type':<22}{'kind':<18}{'layers':>10}{'bytes/token':>14}{'small page':>14}{'large/small':>13}"
             f"{'MAX-page tokens/page':>22}")]
    for r in g.rows:
        layers, bpt, mpt = _cells(r)
        lines.append(f"{r.name:<22}{r.kind:<18}{layers:>10}{bpt:>14}{r.small_page_bytes:>14}{r.ratio:>12}x"
                     f"{mpt:>22}")
    lines.append(f"LCM large page: {g.large_page_bytes} bytes ({_fmt_bytes(g.large_page_bytes)}); "
                 f"largest large/small ratio {g.max_ratio}x")
    split = split_mamba_ratio(profile, tokens_per_page)
    if split:
        lines.append(f"artifact layout (conv and SSM states as separate types): attention large/small "
                     f"ratio {split[0]}x (a large page = {split[0] * tokens_per_page} attention tokens), "
                     f"MAX-page tokens/page {split[1]}")
    if any(r.layers != r.compute_layers for r in g.rows):
        lines.append("layers shown as storing/computing: cross-layer KV sharing stores one cache per group")
    return "\n".join(lines)


def zoo_table(tokens_per_page: int = 16) -> str:
    """The paper's §4.4 table over the zoo: one row per (model, layer type) with layers, bytes per
    token, small page, the model's LCM large page, the type's large/small ratio and the MAX-page
    tokens per page; then the largest ratio found and the artifact-layout ratio of Mamba models."""
    head = (f"{'model':<24}{'type':<16}{'kind':<17}{'layers':>7}{'bytes/token':>12}{'small page':>12}"
            f"{'large page':>12}{'large/small':>12}{'MAX-page tok/page':>19}")
    lines, best, notes = [head], (0, ""), []
    for name in options("model"):
        prof = zoo_profile(name)
        g = geometry(prof, tokens_per_page)
        for r in g.rows:
            layers, bpt, mpt = _cells(r)
            lines.append(f"{name:<24}{r.name:<16}{r.kind:<17}{layers:>7}{bpt:>12}{r.small_page_bytes:>12}"
                         f"{_fmt_bytes(g.large_page_bytes):>12}{r.ratio:>11}x{mpt:>19}")
        if g.max_ratio > best[0]:
            best = (g.max_ratio, name)
        split = split_mamba_ratio(prof, tokens_per_page)
        if split:
            notes.append(f"{name}: with conv and SSM states as separate types (the artifact's layout) the "
                         f"attention ratio is {split[0]}x = {split[0] * tokens_per_page} tokens per large page")
    lines.append(f"largest large/small ratio in the zoo: {best[0]}x ({best[1]}); {tokens_per_page} tokens "
                 "per small page")
    return "\n".join(lines + notes)


def _args(argv: list[str]) -> dict[str, str]:
    out = {}
    for a in argv:
        if "=" not in a:
            raise ConfigError(f"arguments are key=value (model=<name>, tokens_per_page=16); got {a!r}")
        k, v = a.split("=", 1)
        if k not in ("model", "tokens_per_page"):
            raise ConfigError(f"unknown argument {k!r}; allowed: ['model', 'tokens_per_page']")
        out[k] = v
    return out


def zoo_frame(tokens_per_page: int = 16, models: list[str] | None = None) -> pd.DataFrame:
    """One row per (model, layer type) of every model config in ``harness/conf/model`` (or of
    ``models``)."""
    import pandas as pd  # here: the study's pool workers import this module and never need pandas (~0.4 s each)

    rows = []
    for name in models or options("model"):
        prof = zoo_profile(name)
        g = geometry(prof, tokens_per_page)
        split = split_mamba_ratio(prof, tokens_per_page)
        for r in g.rows:
            rows.append({"model": name, "type": r.name, "kind": r.kind, "layers": r.layers,
                         "compute_layers": r.compute_layers, "bytes_per_token": r.bytes_per_token,
                         "small_page_bytes": r.small_page_bytes, "large_page_bytes": g.large_page_bytes,
                         "ratio": r.ratio, "model_max_ratio": g.max_ratio, "max_page_tokens": r.max_page_tokens,
                         "artifact_layout_ratio": split[0] if split else None,
                         "tokens_per_page": tokens_per_page})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    try:
        args = _args(sys.argv[1:] if argv is None else argv)
        tpp = int(args.get("tokens_per_page", 16))
        model = args.get("model", "all")
        if model == "all":
            print(zoo_table(tpp))
        else:
            print(describe(zoo_profile(model), tpp))
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
