"""All-or-nothing learning (models._atomic): the journal of the sparse layouts, the
bisection for the failing row, SOLAM's folds, the scaler, and NonFiniteError itself.

The per-learner contract (poison rows, injected failures, extreme values) is in
``tests/test_contract.py``; this file checks the machinery behind it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import aucstream.models.solam as solam_module
from aucstream import models
from aucstream.models._kernels import NO_SCORES
from aucstream.models._validation import check_labels, check_matrix
from aucstream.models.preprocessing import StandardScaler
from tests.helpers import assert_states_equal, sparse_stream, stream

D = 40

# Every sparse layout, with small buffers so that rows are evicted within a batch.
SPARSE_LAYOUTS = {
    "cbr_diag_fifo": {"capacity": 3, "C": 0.5},
    "cbr_diag_rs-prec": {"capacity": 3, "C": 0.5, "diag_mode": "prec"},
    "cbr_diag_fifo-paper": {"capacity": 3, "C": 0.5, "diag_mode": "paper"},
    "oam_seq": {"capacity": 3, "C": 0.5},
    "oam_gra": {"capacity": 3, "C": 0.5},
    "solam": {"normalize": False, "zeta": 5.0, "R": 2.0},
}


def _make(layout: str, seed: int = 0) -> models.Learner:
    return models.create(layout.split("-")[0], n_features=D, seed=seed, storage="sparse",
                         **SPARSE_LAYOUTS[layout])


@st.composite
def csr_rows(draw, max_rows: int = 8, max_nnz: int = 6):
    """A CSR batch over D columns (sorted, unique columns; non-zero values) and labels."""
    n = draw(st.integers(1, max_rows))
    indptr, indices, values = [0], [], []
    for _ in range(n):
        cols = sorted(draw(st.sets(st.integers(0, D - 1), min_size=1, max_size=max_nnz)))
        indices += cols
        values += [draw(st.sampled_from([-2.5, -1.0, -0.3, 0.4, 1.0, 3.0])) for _ in cols]
        indptr.append(len(indices))
    labels = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    return (np.array(indptr, np.int64), np.array(indices, np.int64),
            np.array(values)), np.array(labels)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int64)


class _MinScale:
    """SOLAM's fold threshold raised for a block, so that folds happen often."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __enter__(self):
        self.kept = solam_module.SOLAM_MIN_SCALE
        solam_module.SOLAM_MIN_SCALE = self.value

    def __exit__(self, *exc):
        solam_module.SOLAM_MIN_SCALE = self.kept


# (layout, SOLAM fold threshold): 0.9 makes SOLAM fold every few events.
JOURNAL_CASES = [(layout, None) for layout in SPARSE_LAYOUTS] + [("solam", 0.9)]


@pytest.mark.parametrize(("layout", "min_scale"), JOURNAL_CASES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(warm=csr_rows(max_rows=10), batch=csr_rows())
def test_the_journal_lists_every_column_a_batch_changes(layout, min_scale, warm, batch):
    """For random sparse batches, every column of the O(d) vectors whose bits change is in
    the journal's column list (or the vector was copied whole first: SOLAM's fold), and
    restoring the journal gives the state before the batch bit for bit."""
    with _MinScale(min_scale or solam_module.SOLAM_MIN_SCALE):
        lrn = _make(layout).learn(*warm)
        before = lrn.get_state()
        vectors = lrn._journaled()
        assert vectors, "a sparse layout journals its O(d) vectors"
        X, y = batch
        b = check_matrix(lrn.name, X, D, True)
        journal = lrn._open_journal(b)
        try:
            lrn._learn(b, check_labels(lrn.name, y, b.n), NO_SCORES)
        finally:
            lrn._journal = None
    listed = set(journal.cols[:journal.done[0]].tolist())
    for key in vectors:
        changed = np.flatnonzero(_bits(before[key]) != _bits(lrn._state[key]))
        if key in journal.whole:
            event("folded")
            continue  # rewritten whole (a fold), copied whole before
        assert set(changed.tolist()) <= listed, (key, sorted(set(changed) - listed))
    assert journal.finite(lrn._state)
    journal.restore(lrn._state)
    assert_states_equal(lrn.get_state(), before)


@pytest.mark.parametrize("layout", SPARSE_LAYOUTS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(warm=csr_rows(max_rows=10), batch=csr_rows(), huge=st.sampled_from([1e160, 1e200, 1e300]))
def test_a_refused_sparse_batch_leaves_the_state_as_it_was(layout, warm, batch, huge):
    lrn = _make(layout).learn(*warm)
    X, y = batch
    indptr, indices, values = X
    values = values.copy()
    values[-1] = huge  # the last row gets a huge value
    before = lrn.get_state()
    try:
        lrn.learn((indptr, indices, values), y)
    except models.NonFiniteError:
        assert_states_equal(lrn.get_state(), before)
    else:
        assert all(np.isfinite(v).all() for v in lrn.get_state().values()
                   if isinstance(v, np.ndarray) and v.dtype.kind == "f")


@pytest.mark.parametrize("normalize", [True, False])
def test_solam_rolls_back_across_folds(normalize):
    """With folds every few events, a batch that folds and then fails is restored bit for
    bit (whole copies first, then the log), and the learner goes on as its twin. Raw rows
    get a huge value in row 150; unit rows (which no value can break) a failure injected
    once row 150 is learned."""
    d = 1 << 12
    X, y = sparse_stream(400, d, nnz=8, seed=7)
    indptr, indices, values = X
    params = {"storage": "sparse", "normalize": normalize, "zeta": 50.0, "R": 1.0}
    with _MinScale(0.5):
        lrn = models.create("solam", n_features=d, **params)
        twin = models.create("solam", n_features=d, **params)
        head = (indptr[:101], indices[:indptr[100]], values[:indptr[100]])
        lrn.learn(head, y[:100])
        twin.learn(head, y[:100])
        lo = indptr[100]
        tail_ptr = indptr[100:301] - lo
        tail = (tail_ptr, indices[lo:indptr[300]], values[lo:indptr[300]].copy())
        poisoned = (tail[0], tail[1], tail[2].copy())
        poisoned[2][tail_ptr[150]:tail_ptr[151]] = 1e300 if not normalize else 4242.0
        folds = []
        keep, real = lrn._keep_whole, lrn._learn
        lrn._keep_whole = lambda *k: (folds.append(k), keep(*k))

        def learn(batch, labels, prior):
            real(batch, labels, prior)
            if (batch.values == 4242.0).any():
                raise ZeroDivisionError

        lrn._learn = learn
        before = lrn.get_state()
        with pytest.raises(models.NonFiniteError) as err:
            lrn.learn(poisoned, y[100:300])
        assert folds, "the batch folded before failing"
        assert err.value.row == 150
        assert_states_equal(lrn.get_state(), before)
        del lrn._keep_whole, lrn._learn
        lrn.learn(tail, y[100:300])
        twin.learn(tail, y[100:300])
        assert_states_equal(lrn.get_state(), twin.get_state())


def test_the_failing_row_is_found_in_log2_trials():
    X, y = stream(200, 6, seed=1)
    lrn = models.create("cbr_fifo", n_features=6, capacity=5).learn(X[:100], y[:100])
    calls = []
    real = lrn._learn

    def counted(batch, labels, prior):
        calls.append(batch.n)
        real(batch, labels, prior)

    lrn._learn = counted
    for row in (0, 1, 63, 99):
        P = X[100:].copy()
        P[row, :] = 1e200
        calls.clear()
        with pytest.raises(models.NonFiniteError) as err:
            lrn.learn(P, y[100:])
        assert err.value.row == row
        assert len(calls) <= 1 + math.ceil(math.log2(100)), calls


def test_a_batch_that_learns_is_not_journaled_twice():
    X, y = stream(120, 6, seed=1)
    lrn = models.create("opauc", n_features=6)
    calls = []
    real = lrn._learn
    lrn._learn = lambda b, yy, p: (calls.append(b.n), real(b, yy, p))
    lrn.learn(X, y)
    assert calls == [120]


def test_non_finite_error_is_public_and_carries_the_row():
    assert "NonFiniteError" in models.__all__
    err = models.NonFiniteError("cbr_fifo", 3)
    assert isinstance(err, ValueError) and err.row == 3 and err.learner == "cbr_fifo"
    assert str(err) == ("cbr_fifo: learning row 3 of this batch would make the model's state "
                        "non-finite; nothing was learned.")


def test_a_state_saved_with_an_out_of_range_parameter_is_refused():
    """States written before the ranges existed are re-validated when restored."""
    state = models.create("noam", n_features=3).get_state()
    state["sigma"] = 1e-300
    with pytest.raises(ValueError, match=r"The 'sigma' parameter of noam must be a float in "
                                         r"\[1e-06, 1e\+06\]; got 1e-300\."):
        models.from_state(state)


# ------------------------------------------------------------------ the scaler
def test_the_scaler_refuses_a_batch_whole_and_names_the_row():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    scaler = StandardScaler(4)
    scaler.learn_transform(X[:20])
    twin = scaler.copy()
    before = scaler.get_state()
    for row, value, cols in ((5, 1e200, [1]), (0, 1.7976931348623157e308, [0, 2]),
                             (29, 1e160, [3])):
        P = X[20:].copy()
        P[row, cols] = value
        with pytest.raises(models.NonFiniteError) as err:
            scaler.learn_transform(P)
        assert err.value.row == row
        assert str(err.value).startswith(f"StandardScaler: learning row {row} of this batch")
        for k, v in scaler.get_state().items():
            assert v.tobytes() == before[k].tobytes(), k
    np.testing.assert_array_equal(scaler.learn_transform(X[20:]), twin.learn_transform(X[20:]))
    for k, v in scaler.get_state().items():
        assert v.tobytes() == twin.get_state()[k].tobytes(), k


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(st.sampled_from([0.0, 1.0, -3.5, 1e100, -1e155, 1e160, 1e200,
                                               1.7976931348623157e308, 5e-324]),
                              min_size=3, max_size=3), min_size=1, max_size=8))
def test_the_scaler_is_finite_or_unchanged(rows):
    X = np.array(rows)
    scaler = StandardScaler(3)
    scaler.learn_transform(np.array([[0.5, -1.0, 2.0], [1.5, 0.0, -2.0]]))
    before = scaler.get_state()
    try:
        out = scaler.learn_transform(X)
    except models.NonFiniteError as err:
        for k, v in scaler.get_state().items():
            assert v.tobytes() == before[k].tobytes(), k
        # the reported row is the first prefix that fails
        probe = StandardScaler.from_state(before)
        if err.row:
            probe.learn_transform(X[:err.row])
        with pytest.raises(models.NonFiniteError):
            StandardScaler.from_state(before).learn_transform(X[:err.row + 1])
        return
    assert np.isfinite(out).all()
    assert all(np.isfinite(v).all() for v in scaler.get_state().values())
