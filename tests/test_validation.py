"""Input validation of sparse batches: each malformed CSR gets its own worded error."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aucstream.models._validation import check_matrix

D = 10


def _reference_problem(indptr, indices, values, n_features):
    """The checks written in numpy, in the order the messages are given (None if fine)."""
    indptr = np.asarray(indptr, np.int64)
    indices = np.asarray(indices, np.int64)
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.size:
        return "indptr must start at 0"
    if indices.size != values.size:
        return "differ in length"
    if indices.size and (indices.min() < 0 or indices.max() >= n_features):
        return "column index is outside"
    if not np.isfinite(values).all():
        row = int(np.searchsorted(indptr, np.argmax(~np.isfinite(values)), side="right") - 1)
        return f"first at row {row}"
    return None


@pytest.mark.parametrize(("indptr", "indices", "values", "match"), [
    ([1, 2], [3], [1.0], "indptr must start at 0"),
    ([0, 2, 1, 3], [1, 2, 3], [1.0, 1.0, 1.0], "indptr must start at 0"),
    ([0, 2], [1, 2, 3], [1.0, 1.0, 1.0], "indptr must start at 0"),
    ([0, 2], [1, 2], [1.0], "differ in length"),
    ([0, 1, 2], [1, D], [1.0, 1.0], r"outside \[0, 10\)"),
    ([0, 1, 2], [-1, 3], [1.0, 1.0], r"outside \[0, 10\)"),
    ([0, 1, 3], [1, 2, 3], [1.0, 1.0, np.nan], "first at row 1"),
    ([0, 2, 3], [1, 2, 3], [np.inf, 1.0, 1.0], "first at row 0"),
])
def test_malformed_csr_is_refused_by_name(indptr, indices, values, match):
    with pytest.raises(ValueError, match=match):
        check_matrix("cbr_diag_fifo", (np.array(indptr), np.array(indices),
                                       np.array(values)), D, True)


_small = st.integers(-2, 12)


@settings(max_examples=300, deadline=None)
@given(indptr=hnp.arrays(np.int64, st.integers(1, 5), elements=st.integers(-1, 6)),
       indices=hnp.arrays(np.int64, st.integers(0, 6), elements=_small),
       values=hnp.arrays(np.float64, st.integers(0, 6),
                         elements=st.sampled_from([1.0, -0.5, np.nan, np.inf])))
def test_the_first_problem_is_the_one_reported(indptr, indices, values):
    expected = _reference_problem(indptr, indices, values, D)
    if expected is None:
        batch = check_matrix("x", (indptr, indices, values), D, True)
        assert batch.n == indptr.size - 1
    else:
        with pytest.raises(ValueError, match=expected):
            check_matrix("x", (indptr, indices, values), D, True)
