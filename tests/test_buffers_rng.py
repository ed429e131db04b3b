"""The generator and the buffers: exact streams, continuation, uniform reservoirs."""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy import stats

from aucstream.models import _rng
from aucstream.models._buffers import FIFO, RESERVOIR, admit

_MASK = (1 << 64) - 1


def _xoshiro_reference(state, n):
    """xoshiro256** written from Blackman & Vigna's C code, in python integers."""
    s = [int(v) for v in state]

    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & _MASK

    out = []
    for _ in range(n):
        out.append(rotl((s[1] * 5) & _MASK, 7) * 9 & _MASK)
        t = (s[1] << 17) & _MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
    return out


def test_seeding_is_splitmix64():
    # SplitMix64's first output for seed 0 (Vigna's reference implementation).
    assert int(_rng.new_state(0)[0]) == 0xE220A8397B1DCDAF


def test_generator_matches_the_reference_and_continues_from_a_copy():
    s = _rng.new_state(12345)
    expected = _xoshiro_reference(s, 50)
    got = [int(_rng.next_u64(s)) for _ in range(20)]
    saved = s.copy()
    got += [int(_rng.next_u64(saved)) for _ in range(30)]
    assert got == expected


def test_uniforms_and_normals_look_right():
    s = _rng.new_state(0)
    u = np.array([_rng.uniform(s) for _ in range(20000)])
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    # KS p-values of many normal samples are themselves uniform when the draws are right.
    pvalues = []
    for _ in range(40):
        z = np.empty(5000)
        _rng.normals(s, z)
        pvalues.append(stats.kstest(z, "norm").pvalue)
    assert stats.kstest(pvalues, "uniform").pvalue > 1e-3
    counts = np.bincount([_rng.below(s, 7) for _ in range(14000)], minlength=7)
    assert stats.chisquare(counts).pvalue > 1e-3


@njit(cache=False)
def _reservoir_inclusions(n_items, cap, repeats, seed_state):
    hits = np.zeros(n_items, np.int64)
    for _ in range(repeats):
        order = np.zeros((2, cap), np.int64)
        n_seen = np.zeros(2, np.int64)
        ids = np.zeros(cap, np.int64)
        for i in range(n_items):
            slot = admit(order, n_seen, 1, RESERVOIR, seed_state)
            if slot >= 0:
                ids[slot] = i
        for k in range(cap):
            hits[ids[k]] += 1
    return hits


def test_reservoir_is_a_uniform_sample():
    n_items, cap, repeats = 2000, 50, 2000
    hits = _reservoir_inclusions(n_items, cap, repeats, _rng.new_state(2024))
    assert hits.sum() == cap * repeats
    expected = cap * repeats / n_items  # 50 per item
    # Every item, early or late, is kept with probability cap / n.
    assert stats.chisquare(hits, np.full(n_items, expected)).pvalue > 1e-3
    first, last = hits[:500].mean(), hits[-500:].mean()
    assert abs(first - expected) < 2.0 and abs(last - expected) < 2.0


def test_buffers_keep_insertion_order_and_capacity():
    rng = _rng.new_state(0)
    for policy in (FIFO, RESERVOIR):
        order = np.zeros((2, 4), np.int64)
        n_seen = np.zeros(2, np.int64)
        stamp = np.full(4, -1)
        for i in range(40):
            slot = admit(order, n_seen, 0, policy, rng)
            if slot >= 0:
                stamp[slot] = i
            size = min(n_seen[0], 4)
            kept = stamp[order[0, :size]]
            assert sorted(set(order[0, :size].tolist())) == sorted(order[0, :size].tolist())
            assert np.all(np.diff(kept) > 0)  # oldest to newest
            if policy == FIFO:
                assert kept.tolist() == list(range(max(0, i - 3), i + 1))
        assert n_seen.tolist() == [40, 0]
