"""Random allocator streams against every system, checked after every operation (issue 12).

One *stream* is drawn from one seed: a system (every name in :data:`jenga.SYSTEM_NAMES`, the
oracle included; with ``--all-systems`` every registry name, the study variants and the what-if
rules too, a stream whose what-if rule refuses its mix at start-up counted apart), a layer mix
(:data:`MIXES`: full, sliding window, chunked local, token drop, cross-attention, vision
embeddings, Mamba, KV sharing, coprime page sizes), ``tokens_per_page``, prefix caching on or off
and a capacity from one page of every type to a few dozen; then a list of
operations a scheduler could issue: new requests (``lookup_prefix`` then a first ``allocate``,
prompts sharing prefixes so that the cache hits), prefill chunks, decode tokens, allocations far too
large to fit, ``allocate(r, 0)``, engine steps (``begin_step``), frees, double frees and frees of
unknown requests.

Checked after every operation: ``usage().check()`` and :func:`jenga.testing.check_invariants`
(pages, reference counts, pool counters, needed <= held; the oracle's exact-byte rules); after
every failed ``allocate``: :func:`jenga.testing.state_fingerprint` is what it was before the call
(a failed allocate changes nothing); after a double free: nothing changed either (``free`` of a
request that holds nothing is a defined no-op, ``MemoryManager.free``).

    python -m jenga.fuzz --seeds 0:2000          # make fuzz ARGS="--seeds 0:20000"
    python -m jenga.fuzz --seeds 0:2000 --all-systems

prints one line per failing seed (system, mix, operation, message) and exits non-zero if any
failed; ``--seed N -v`` replays one stream operation by operation.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from dataclasses import dataclass, field

import jenga
from jenga.interface import ImageSpan
from jenga.spec import (
    ChunkedLocalSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    SlidingWindowSpec,
    SpecError,
    TokenDropSpec,
    VisionEmbeddingSpec,
)
from jenga.testing import check_invariants, state_fingerprint

MIXES = {
    "full": [FullAttentionSpec("full", 2, 64)],
    "full+swa": [FullAttentionSpec("full", 2, 64), SlidingWindowSpec("swa", 3, 64, window=5)],
    "swa+swa": [SlidingWindowSpec("w4", 1, 32, window=4), SlidingWindowSpec("w9", 2, 32, window=9)],
    "full+chunked": [FullAttentionSpec("full", 1, 64), ChunkedLocalSpec("local", 3, 64, chunk=8)],
    "token_drop": [FullAttentionSpec("full", 1, 64),
                   TokenDropSpec("drop", 2, 64, keep_ratio=0.5, min_tokens=4, sink=2)],
    "self+cross": [FullAttentionSpec("self", 3, 128), CrossAttentionSpec("cross", 2, 128)],
    "llava+vision": [FullAttentionSpec("full", 2, 64), ChunkedLocalSpec("local", 2, 64, chunk=8),
                     VisionEmbeddingSpec("vision", 1, 96)],
    "mamba": [MambaSpec("mamba", 3, 1, state_bytes_per_layer=300, conv_bytes_per_layer=20, checkpoint_interval=4)],
    "full+mamba": [FullAttentionSpec("full", 1, 64),
                   MambaSpec("mamba", 2, 1, state_bytes_per_layer=200, conv_bytes_per_layer=40,
                             checkpoint_interval=8)],
    "kv_sharing": [FullAttentionSpec("full", 2, 64, num_compute_layers=4),
                   SlidingWindowSpec("swa", 1, 64, num_compute_layers=3, window=4)],
    # Page sizes with no common factor: large pages of 3 * 5 * 7 small-page units.
    "coprime": [FullAttentionSpec("full", 1, 3), SlidingWindowSpec("swa", 1, 5, window=6),
                TokenDropSpec("drop", 1, 7, keep_ratio=0.5, min_tokens=3, sink=1)],
    "spec_decode": [FullAttentionSpec("draft/full", 1, 32), FullAttentionSpec("target/full", 4, 96)],
    "everything": [FullAttentionSpec("full", 1, 64), SlidingWindowSpec("swa", 1, 64, window=6),
                   TokenDropSpec("drop", 1, 64, keep_ratio=0.5, min_tokens=4, sink=2),
                   VisionEmbeddingSpec("vision", 1, 48),
                   MambaSpec("mamba", 1, 1, state_bytes_per_layer=500, conv_bytes_per_layer=50,
                             checkpoint_interval=8)],
}
IMAGE_MIXES = {"self+cross", "llava+vision", "everything"}


@dataclass
class Req:
    """A request as the allocator sees it (``jenga.interface.RequestView``), plus its goal."""

    request_id: str
    prompt_token_ids: list
    images: tuple = ()
    output_token_ids: list = field(default_factory=list)
    out_len: int = 1


@dataclass
class StreamFailure:
    seed: int
    system: str
    mix: str
    tpp: int
    cache: bool
    capacity: int
    op_index: int
    op: str
    message: str

    def line(self) -> str:
        return (f"seed={self.seed} system={self.system} mix={self.mix} tpp={self.tpp} cache={self.cache} "
                f"capacity={self.capacity} op#{self.op_index} {self.op}: {self.message}  [replay: python -m "
                f"jenga.fuzz --seeds {self.seed} --system {self.system} --mix {self.mix} -v]")


def _check(m) -> None:
    check_invariants(m)


def _new_request(rng: random.Random, i: int, mix: str) -> Req:
    base = rng.randrange(3)
    shared = rng.choice([0, 4, 8, 17, 24, 40])
    suffix = rng.randrange(1, 30)
    prompt = list(range(500 + 1000 * base, 500 + 1000 * base + shared)) + \
        list(range(100_000 + 100 * i, 100_000 + 100 * i + suffix))
    images = ()
    if mix in IMAGE_MIXES and rng.random() < 0.6:
        image_id = rng.randrange(4)
        n = 2 + 3 * image_id  # the same image always has the same size
        offset = min(2, len(prompt) - 1)
        if mix == "self+cross":
            images = (ImageSpan(image_id, n, offset),)
        elif offset + n <= len(prompt):
            prompt[offset:offset + n] = [7] * n  # placeholder ids; content comes from image_id
            images = (ImageSpan(image_id, n, offset),)
    return Req(f"r{i}", prompt, images, [], rng.randrange(1, 12))


def admit_or_free(m, rng: random.Random, mix: str, ops: int, p_free: float) -> list[Req]:
    """A stream of admissions (each looked up first; freed at once when it does not fit) and, with
    probability ``p_free``, frees of a random running request, with shared prefixes: on a small
    pool, hits, evictions and failed allocations all happen. Returns the requests still running."""
    running: list[Req] = []
    for i in range(ops):
        if running and rng.random() < p_free:
            m.free(running.pop(rng.randrange(len(running))))
            continue
        r = _new_request(rng, i, mix)
        hit = m.lookup_prefix(r)
        if m.allocate(r, len(r.prompt_token_ids) - hit):
            running.append(r)
        else:
            m.free(r)
    return running


def make_stream_manager(rng: random.Random, system: str, mix: str):
    """A manager with a random tokens_per_page, cache flag and a small capacity (1-40 large pages)."""
    specs = MIXES[mix]
    tpp = rng.choice([1, 2, 3, 4, 8])
    cache = rng.random() < 0.6
    geo = jenga.page_geometry(specs, tpp)
    units = rng.choice([1, 2, 3, 5, 8, 13, 21, 40])
    capacity = geo.large_page_bytes * units + rng.randrange(geo.large_page_bytes)
    # The artifact's sliding-window retention / widened hit check (SlidingPolicy) on the systems
    # that take them: half the streams run with them on, so their paths are fuzzed too.
    cls = jenga.registry.REGISTRY[system].factory
    names = getattr(getattr(cls, "func", cls), "option_names", ())
    opts = {k: rng.choice([0, 0, 3, 8]) for k in ("sliding_retention_tokens", "sliding_hit_extra_tokens")
            if k in names}
    # vLLM v1's every-copy-under-its-hash rule (D4, jenga/prefix.py) on the systems that take it.
    if "keep_block_copies" in names:
        opts["keep_block_copies"] = rng.random() < 0.5
    # Out-of-window pages at their release time instead of first (a what-if knob, Policy.stale_ts).
    if "stale_pages_first" in names:
        opts["stale_pages_first"] = rng.random() < 0.7
    for _ in range(8):
        try:
            return jenga.make_manager(system, specs, capacity, tokens_per_page=tpp, enable_prefix_cache=cache,
                                      **opts), \
                tpp, cache, capacity
        except SpecError:
            capacity *= 2  # too small for one page of every type (static partition: one large page each)
    if jenga.registry.REGISTRY[system].cell:  # a cell system starts on every mix: its refusal is a failure
        raise RuntimeError(f"no capacity fits {system} {mix}")
    raise Refused(f"{system} refuses mix {mix} at every capacity")


class Refused(Exception):
    """A study or what-if system refuses the layer mix at start-up, whatever the capacity (an
    engine rule: TensorRT-LLM's pools start only on its hybrid-linear families, vLLM with its
    hybrid manager off refuses Mamba): not a failure, counted apart. (A cell system that refuses
    is a failure.)"""


def run_stream(seed: int, num_ops: int = 60, system: str | None = None, mix: str | None = None,
               verbose: bool = False, all_systems: bool = False) -> StreamFailure | None:
    """Run one seeded stream; the first broken check as a :class:`StreamFailure`, else None.
    ``all_systems``: draw the system from every registry name (the study variants and the what-if
    rules too), not only the cell systems. Raises :class:`Refused` when the system refuses the
    stream's mix at start-up."""
    rng = random.Random(seed)
    # Drawn even when given, so that a forced system or mix leaves the rest of the stream as it was.
    names = jenga.registry.ALL_SYSTEM_NAMES if all_systems else jenga.SYSTEM_NAMES
    drawn_system, drawn_mix = rng.choice(names), rng.choice(sorted(MIXES))
    system, mix = system or drawn_system, mix or drawn_mix
    m, tpp, cache, capacity = make_stream_manager(rng, system, mix)
    running: list[Req] = []
    gone: list[Req] = []
    desc = "init"

    def fail(i, msg):
        return StreamFailure(seed, system, mix, tpp, cache, capacity, i, desc, msg)

    for i in range(num_ops):
        x = rng.random()
        try:
            if x < 0.3 or not running:
                r = _new_request(rng, i, mix)
                hit = m.lookup_prefix(r)
                desc = f"new {r.request_id} prompt={len(r.prompt_token_ids)} hit={hit}"
                assert 0 <= hit < len(r.prompt_token_ids) and (hit == 0 or cache), f"bad hit {hit}"
                left = len(r.prompt_token_ids) - hit
                n = left if rng.random() < 0.5 else rng.randrange(1, left + 1)
                if _allocate(m, r, n, desc):
                    running.append(r)
                else:
                    m.free(r)  # drops its pending hit
            elif x < 0.75:
                r = rng.choice(running)
                done, plen = m.num_computed_tokens(r), len(r.prompt_token_ids)
                if done < plen:
                    n = rng.randrange(1, plen - done + 1)
                else:  # decode: the last step produced a token
                    r.output_token_ids.append(3000 + done)
                    n = len(r.prompt_token_ids) + len(r.output_token_ids) - done
                desc = f"step {r.request_id} computed={done} n={n}"
                if not _allocate(m, r, n, desc):
                    if done >= plen:
                        r.output_token_ids.pop()
                    m.free(r)  # preempted, as a scheduler would
                    running.remove(r)
                    gone.append(r)
                elif len(r.output_token_ids) >= r.out_len:
                    m.free(r)
                    running.remove(r)
                    gone.append(r)
            elif x < 0.82:
                r = rng.choice(running)
                # Far more than the pool holds: must fail for any mix that keeps every token.
                n = 2 * capacity // max(1, min(s.bytes_per_token for s in m.specs)) + 1
                n = min(n, 50_000)
                desc = f"huge {r.request_id} n={n}"
                if _allocate(m, r, n, desc):
                    m.free(r)
                    running.remove(r)
                    gone.append(r)
            elif x < 0.84:
                # A new engine step: last step's one-step Mamba checkpoints join the cache or stay
                # held as their request's latest (prefix.py hold_last_checkpoints).
                desc = "begin_step"
                m.begin_step()
            elif x < 0.86:
                r = rng.choice(running)
                desc = f"zero {r.request_id}"
                before = m.num_computed_tokens(r)
                assert m.allocate(r, 0) and m.num_computed_tokens(r) == before, "allocate(r, 0) changed the request"
            elif x < 0.95:
                r = rng.choice(running)
                desc = f"free {r.request_id}"
                m.free(r)
                running.remove(r)
                gone.append(r)
                assert m.num_computed_tokens(r) == 0
            else:
                r = rng.choice(gone) if gone and rng.random() < 0.7 else Req("never-seen", [1, 2, 3])
                desc = f"double free {r.request_id}"
                before = state_fingerprint(m)
                m.free(r)
                assert state_fingerprint(m) == before, "freeing a request that holds nothing changed state"
            _check(m)
        except Exception as e:  # noqa: BLE001 - every failure is reported with its stream
            if verbose:
                traceback.print_exc()
            return fail(i, f"{type(e).__name__}: {e}".splitlines()[0][:300])
        if verbose:
            u = m.usage()
            print(f"#{i} {desc}: needed={u.needed_bytes} cached={u.cached_bytes} free={u.free_bytes}")
    try:
        desc = "free all"
        for r in running:
            m.free(r)
        _check(m)
        u = m.usage()
        assert u.allocated_bytes == 0, f"{u.allocated_bytes} bytes still allocated after freeing everything"
    except Exception as e:  # noqa: BLE001
        return fail(num_ops, f"{type(e).__name__}: {e}".splitlines()[0][:300])
    return None


def _allocate(m, r: Req, n: int, desc: str) -> bool:
    """``allocate`` with the failure contract checked: False leaves every bit of state as it was."""
    before = state_fingerprint(m)
    computed = m.num_computed_tokens(r)
    ok = m.allocate(r, n)
    if ok:
        assert not computed or m.num_computed_tokens(r) == computed + n, "allocate(True) did not add n tokens"
    else:
        assert state_fingerprint(m) == before, "a failed allocate changed state"
    return ok


def run_seeds(seeds, num_ops: int = 60, system: str | None = None, mix: str | None = None,
              all_systems: bool = False) -> list[StreamFailure]:
    """The failing streams of ``seeds`` (streams whose system refuses their mix are skipped)."""
    out = []
    for s in seeds:
        try:
            f = run_stream(s, num_ops, system, mix, all_systems=all_systems)
        except Refused:
            continue
        if f is not None:
            out.append(f)
    return out


SEEDS_FORMS = "LO:HI with 0 <= LO < HI (half-open), or one seed >= 0"


def _seed_range(text: str) -> range:
    """``--seeds``: ``LO:HI`` (half-open, 0 <= LO < HI) or one seed >= 0. Anything else (a word,
    an empty range such as ``5:2`` that would run no stream and pass, a negative seed) is an
    :class:`argparse.ArgumentTypeError`, so argparse prints one line naming ``--seeds`` and exits 2."""
    lo, sep, hi = text.strip().partition(":")
    if lo.startswith("-") and lo[1:].isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: seeds are >= 0; expected {SEEDS_FORMS}")
    if not lo.isdigit() or (sep and not hi.isdigit()):   # isdigit: no sign, no blanks, no "_"
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed range: expected {SEEDS_FORMS}")
    lo_i, hi_i = int(lo), (int(hi) if sep else int(lo) + 1)
    if hi_i <= lo_i:
        raise argparse.ArgumentTypeError(f"{text!r} is an empty range (no stream would run): expected {SEEDS_FORMS}")
    return range(lo_i, hi_i)


def _positive_int(text: str) -> int:
    """An integer >= 1 (``--ops``); otherwise one argparse error line naming the flag."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer: expected an integer >= 1") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= 1")
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jenga.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=_seed_range, default="0:2000", metavar="LO:HI|SEED",
                    help=f"{SEEDS_FORMS} (default 0:2000)")
    ap.add_argument("--ops", type=_positive_int, default=60, help="operations per stream (>= 1)")
    ap.add_argument("--system", choices=jenga.registry.ALL_SYSTEM_NAMES, help="only this system")
    ap.add_argument("--all-systems", action="store_true",
                    help="draw from every registry system (study variants and what-if rules too), not only the cell systems")
    ap.add_argument("--mix", choices=sorted(MIXES), help="only this layer mix")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every operation (one seed)")
    a = ap.parse_args(argv)
    seeds = a.seeds
    t0 = time.perf_counter()
    failures = []
    refused = 0
    for s in seeds:
        try:
            f = run_stream(s, a.ops, a.system, a.mix, verbose=a.verbose, all_systems=a.all_systems)
        except Refused:
            refused += 1
            continue
        if f is not None:
            failures.append(f)
            print(f.line(), flush=True)
    kinds = {}
    for f in failures:
        kinds.setdefault(f.message.split(":")[0], []).append(f.seed)
    print(f"fuzz: {len(seeds)} streams x {a.ops} ops, {len(failures)} failed"
          + (f", {refused} refused at start-up (their system's rule)" if refused else "")
          + f" ({time.perf_counter() - t0:.0f} s)" + "".join(f"; {k}: seeds {v[:5]}" for k, v in kinds.items()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
