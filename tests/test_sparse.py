"""Canonical CSR rows: sorted, duplicates summed in input order, for short and long rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aucstream.models._sparse import _SHORT_ROW, canonical_csr


def reference(indptr, indices, values):
    ptr, idx, val = [0], [], []
    for r in range(len(indptr) - 1):
        acc: dict[int, float] = {}
        for j in range(indptr[r], indptr[r + 1]):  # input order: the summation order
            acc[int(indices[j])] = acc.get(int(indices[j]), 0.0) + float(values[j])
        for c in sorted(acc):
            idx.append(c)
            val.append(acc[c])
        ptr.append(len(idx))
    return np.array(ptr), np.array(idx, np.int64), np.array(val)


# Small indices (many duplicates), and indices too large to pack with a position.
columns = st.one_of(st.integers(0, 40), st.integers(2**55, 2**57 + 3))
rows = st.lists(
    st.lists(st.tuples(columns, st.floats(-1e3, 1e3, allow_nan=False)),
             max_size=2 * _SHORT_ROW + 5),
    min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(rows)
def test_canonical_csr_sorts_and_sums_duplicates_in_input_order(data):
    # as given, and each row already in order with its repeats adjacent (the fast path
    # for rows a feature index mapped and sorted)
    for rows_ in (data, [sorted(r, key=lambda t: t[0]) for r in data]):
        indptr = np.cumsum([0] + [len(r) for r in rows_])
        indices = np.array([c for r in rows_ for c, _ in r], np.int64)
        values = np.array([v for r in rows_ for _, v in r], np.float64)
        got = canonical_csr(indptr, indices, values)
        want = reference(indptr, indices, values)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)  # exact: same summation order
