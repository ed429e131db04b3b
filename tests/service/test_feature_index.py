"""The compact feature index against a plain-Python reference: slots in order of first
appearance, rows mapped and sorted stably (short rows by rank, long ones by argsort),
scoring lookups with the unmapped columns in quadrature on column 0, all bit for bit."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aucstream.service.feature_index import FeatureIndex


class Reference:
    """What :class:`FeatureIndex` computes, one entry at a time."""

    def __init__(self) -> None:
        self.slot: dict[int, int] = {}

    def _rows(self, csr, column):
        indptr, indices, values = csr
        ptr, idx, val = [0], [], []
        for r in range(len(indptr) - 1):
            row, dropped = [], 0.0
            for k in range(indptr[r], indptr[r + 1]):
                col = column(int(indices[k]))
                if col is None:
                    dropped += values[k] * values[k]
                else:
                    row.append((col, values[k]))
            if dropped > 0.0:
                row.append((0, math.sqrt(dropped)))
            row.sort(key=lambda e: e[0])  # stable: a repeated column keeps its order
            idx += [c for c, _ in row]
            val += [v for _, v in row]
            ptr.append(len(idx))
        return (np.array(ptr, np.int64), np.array(idx, np.int64), np.array(val, np.float64))

    def assign(self, csr):
        def column(c):
            return self.slot.setdefault(c, len(self.slot)) + 1
        return self._rows(csr, column)

    def lookup(self, csr, limit):
        def column(c):
            s = self.slot.get(c)
            return None if s is None or s + 1 >= limit else s + 1
        return self._rows(csr, column)


def _csr(rows, rng):
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    indices = np.array([c for r in rows for c in r], np.int64)
    values = rng.standard_normal(indices.shape[0])
    return indptr, indices, values


def _same(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


rows_ = st.lists(st.one_of(st.lists(st.integers(0, 60), max_size=40),          # repeats
                           st.lists(st.integers(0, 2**22 - 1), min_size=60, max_size=150)),
                 max_size=12)


@settings(max_examples=80, deadline=None)
@given(batches=st.lists(rows_, min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_assign_and_lookup_match_the_reference(batches, seed):
    rng = np.random.default_rng(seed)
    index, ref = FeatureIndex(), Reference()
    for rows in batches:
        csr = _csr(rows, rng)
        _same(index.assign(csr), ref.assign(csr))
        assert index.count == len(ref.slot)
        assert index.columns().tolist() == list(ref.slot)
    seen = [r for rows in batches for r in rows][:10]
    csr = _csr([*seen, [2**22 + 5, 0, 1]], rng)
    again = FeatureIndex(index.columns())
    for limit in (0, 1, index.count // 2, index.count + 1, 2**40):
        _same(index.frozen().lookup(csr, limit), ref.lookup(csr, limit))
        _same(again.frozen().lookup(csr, limit), ref.lookup(csr, limit))


def test_a_batch_that_outgrows_the_table_assigns_as_the_reference():
    """Tens of thousands of new columns in one batch: the table grows mid-batch (the
    mapping starts over, what was assigned stays) and again on later batches."""
    rng = np.random.default_rng(7)
    index, ref = FeatureIndex(), Reference()
    for n_rows in (3000, 500, 4000):
        rows = [rng.integers(0, 2**22, rng.integers(1, 90)).tolist() for _ in range(n_rows)]
        csr = _csr(rows, rng)
        _same(index.assign(csr), ref.assign(csr))
    assert index.count == len(ref.slot) > 100_000
    assert index.columns().tolist() == list(ref.slot)


@settings(max_examples=60, deadline=None)
@given(columns=st.lists(st.integers(0, 2**22 - 1), unique=True, max_size=3000),
       cut=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_extending_to_a_later_state_equals_building_it(columns, cut, seed):
    """A follower's load: an index extended to a later state of itself (its columns
    first, then new ones) maps every batch as one built from that state, also across a
    growth of the table; a state it is not a prefix of leaves it unchanged (False)."""
    later = np.array(columns, np.int64)
    n = int(cut * len(columns))
    index = FeatureIndex(later[:n])
    assert index.extend_to(later)
    built = FeatureIndex(later)
    assert index.count == built.count == len(columns)
    assert index.columns().tolist() == columns
    rng = np.random.default_rng(seed)
    rows = [rng.choice([*columns[:50], 5, 2**22 - 3], size=int(rng.integers(0, 8))).tolist()
            for _ in range(20)]
    csr = _csr(rows, rng)
    for limit in (1, n + 1, len(columns) + 1):
        _same(index.frozen().lookup(csr, limit), built.frozen().lookup(csr, limit))
    _same(index.assign(csr), built.assign(csr))  # and it goes on assigning alike
    if len(columns) >= 2 and n >= 1:
        other = FeatureIndex(later[:n])
        assert not other.extend_to(later[::-1])  # not its prefix: unchanged
        assert other.columns().tolist() == columns[:n]


def test_extending_refuses_a_column_it_holds_and_stays_unchanged():
    index = FeatureIndex(np.array([5, 9, 2]))
    for bad in ([5, 9, 2, 7, 9], [5, 9, 2, 4, 4], [5, 9, 2, -1], [[5, 9, 2]]):
        try:
            index.extend_to(np.array(bad))
        except ValueError:
            pass
        else:
            raise AssertionError(f"{bad} accepted")
        assert index.columns().tolist() == [5, 9, 2]
    assert index.extend_to(np.array([5, 9, 2, 7]))
    assert index.columns().tolist() == [5, 9, 2, 7]
