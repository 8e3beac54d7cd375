"""The pages a prefix search found, pinned by the admission that follows it without a second
lookup (``PrefixCacheMixin._cached_prefix_pages`` keeps them in ``_found``, ``_plan_hits`` reads
them; issue 20). Valid only while no index entry was dropped (an eviction) or given to another
page since the search: checked in lockstep against the same manager with the memo off, on random
streams of every system and layer mix where requests are looked up, then admitted after other
requests ran (evicting, registering), with a memo that hands wrong pages as the negative control;
and exactly, on an index entry given to another page between the search and the admission (with
a memo that ignores it as the negative control). An eviction between them needs no test of its
own: it makes the admission search again (_hit_at_admission), which renews the memo."""

from __future__ import annotations

import random

import pytest

import jenga
from jenga.fuzz import MIXES, Req, _new_request, make_stream_manager
from jenga.spec import FullAttentionSpec
from jenga.testing import check_invariants, state_fingerprint


class _NoMemo(dict):
    """A ``_found`` that never answers: every hit looked up again (the reference)."""

    def get(self, key, default=None):
        return default


class _WrongPages(dict):
    """A ``_found`` whose pages are other pages: the list reversed, a single page's id changed
    (negative control: a memo that is read must change the state, or break an allocation)."""

    def __setitem__(self, t, memo):
        found = memo[3]
        super().__setitem__(t, (*memo[:3], found[::-1] if len(set(found)) > 1 else [s ^ 1 for s in found]))


class _Stale(dict):
    """A ``_found`` that ignores every index change since the search (negative control)."""

    def __init__(self, mm):
        super().__init__()
        self.mm = mm

    def get(self, t, default=None):
        memo = super().get(t)
        if memo is None:
            return default
        return memo[0], self.mm._evictions, self.mm._owner_changes, memo[3]


def _lockstep(seed: int, system: str, mix: str, memo_kind: str, ops: int = 150) -> bool:
    """Drive the manager with its memo and a twin without it by one stream; a new request is
    looked up, then admitted at once or after 1-4 other operations. Returns whether both stayed
    identical (every answer, state and usage after every operation)."""
    a, *_ = make_stream_manager(random.Random(seed), system, mix)
    b, *_ = make_stream_manager(random.Random(seed), system, mix)
    b._found = _NoMemo()
    if memo_kind == "wrong":
        a._found = _WrongPages()
    elif memo_kind == "stale":
        a._found = _Stale(a)
    rng = random.Random(seed + 7)
    running: list[tuple[Req, Req]] = []
    waiting: list[tuple[Req, Req, int]] = []  # looked up, admitted after `delay` more operations

    def same() -> bool:
        return state_fingerprint(a) == state_fingerprint(b) and a.usage() == b.usage()

    for i in range(ops):
        if waiting and waiting[0][2] <= 0:
            r, r2, _ = waiting.pop(0)
            hit = a.pending.get(r.request_id, (0, None))[0]
            n = len(r.prompt_token_ids) - hit
            oks = a.allocate(r, n), b.allocate(r2, n)
            if oks[0] != oks[1]:
                return False
            if oks[0]:
                running.append((r, r2))
            else:
                a.free(r)
                b.free(r2)
        x = rng.random()
        if (x < 0.3 or not running) and not waiting:
            r = _new_request(rng, i, mix)
            r2 = Req(r.request_id, list(r.prompt_token_ids), r.images, [], r.out_len)
            if a.lookup_prefix(r) != b.lookup_prefix(r2):
                return False
            waiting.append((r, r2, rng.choice([0, 0, 1, 2, 4])))
        elif running and x < 0.85:
            r, r2 = rng.choice(running)
            n = rng.choice([1, 1, 2, 5, 9])
            for req in (r, r2):
                req.output_token_ids += [3000 + i] * n
            oks = a.allocate(r, n), b.allocate(r2, n)
            if oks[0] != oks[1]:
                return False
            if not oks[0] or len(r.output_token_ids) >= 40:
                a.free(r)
                b.free(r2)
                running.remove((r, r2))
        elif running:
            r, r2 = running.pop(rng.randrange(len(running)))
            a.free(r)
            b.free(r2)
        if waiting:
            waiting[0] = (*waiting[0][:2], waiting[0][2] - 1)
        if not same():
            return False
    check_invariants(a)
    return True


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_the_memo_changes_nothing_on_any_mix(mix):
    for seed in range(8):
        system = jenga.SYSTEM_NAMES[seed % len(jenga.SYSTEM_NAMES)]
        assert _lockstep(seed, system, mix, "memo"), (seed, system)


def _caught(seed: int, system: str, mix: str, memo_kind: str) -> bool:
    try:
        return not _lockstep(seed, system, mix, memo_kind)
    except Exception:  # noqa: BLE001 - a wrong page may also break the allocation outright
        return True


def test_a_memo_that_hands_wrong_pages_is_caught():
    """Non-vacuity: the admissions read the memo (a wrong one changes the state)."""
    runs = [(seed, mix) for seed in range(8) for mix in ("full", "full+swa", "full+chunked")]
    caught = sum(_caught(seed, "jenga", mix, "wrong") for seed, mix in runs)
    assert caught >= 5, caught  # 7 of the 24 streams admit a hit the memo answers


def _owner_change(found_cls) -> tuple[dict, list, bool]:
    """Request A computes prefix X and finishes (its pages cached); R's search finds them; S, given
    X without a search, computes it again and its pages take X's keys (A's are unheld); then R is
    admitted. Returns R's pages, which of them S holds too, and whether every invariant holds."""
    specs = [FullAttentionSpec("full", 1, 64)]
    m = jenga.make_manager("jenga", specs, 1 << 24, tokens_per_page=4, enable_prefix_cache=True)
    if found_cls is not None:
        m._found = found_cls(m) if found_cls is _Stale else found_cls()
    x = list(range(100, 116))  # 4 full pages
    a = Req("a", x + [1, 2], ())
    assert m.lookup_prefix(a) == 0 and m.allocate(a, len(a.prompt_token_ids))
    m.free(a)
    r = Req("r", x + [3, 4], ())
    assert m.lookup_prefix(r) == 16
    changes = m._owner_changes
    s = Req("s", x + [5, 6], ())
    assert m.allocate(s, len(s.prompt_token_ids))  # no search: X computed again
    assert m._owner_changes == changes + 4  # A's cached pages gave their keys to S's
    assert m.allocate(r, len(r.prompt_token_ids) - 16)
    pages_r, pages_s = m.reqs["r"].pages[0], m.reqs["s"].pages[0]
    try:
        check_invariants(m)
        ok = True
    except AssertionError:
        ok = False
    return dict(pages_r), [j for j in range(4) if pages_r[j] == pages_s[j]], ok


def test_an_owner_change_between_search_and_admission_is_seen():
    """Exact: R's hit takes the pages that own X's keys at admission -- S's, shared -- as the
    manager without the memo does; a memo that ignores the owner changes pins A's cached copies
    (the negative control)."""
    ref = _owner_change(_NoMemo)
    assert ref[1:] == ([0, 1, 2, 3], True)
    assert _owner_change(None) == ref
    # The stale memo holds A's pages, whose keys S's own now: R holds pages that own no key
    # (jenga.testing.check_invariants says so too).
    stale_pages, stale_shared, stale_ok = _owner_change(_Stale)
    assert stale_shared == [] and stale_pages != ref[0] and not stale_ok


