"""One contract for every learner: determinism, save/restore, input and parameter checks.

Driven by the per-learner hooks in ``tests/cases``; a learner without a case fails here.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import models
from models._validation import Interval, Options
from tests.cases import all_cases
from tests.helpers import assert_states_equal, csr_slice, sparse_stream, stream

CASES = all_cases()
NAMES = models.available()
SPARSE = [n for n in NAMES if models.base._lookup(n).accepts_sparse]


def make(name: str, seed: int = 0, **extra):
    case = CASES[name]
    return models.create(name, n_features=case.n_features, seed=seed, **{**case.params, **extra})


def data(name: str, seed: int = 0):
    case = CASES[name]
    return stream(case.n_events, case.n_features, seed=seed)


def test_every_learner_has_a_case():
    assert sorted(CASES) == NAMES


def test_the_issue_table_is_available():
    required = {"cbr_fifo", "cbr_rs", "cbr_diag_fifo", "cbr_diag_rs", "fcbr_fifo", "fcbr_rs",
                "oam_seq", "oam_gra", "foam", "noam", "solam", "opauc"}
    missing = required - set(NAMES)
    assert not missing, f"learners still missing: {sorted(missing)}"


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_model(name):
    X, y = data(name)
    a = make(name, seed=3).learn(X, y)
    b = make(name, seed=3).learn(X, y)
    assert_states_equal(a.get_state(), b.get_state())


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(0, 10_000), min_size=1, max_size=3))
def test_any_split_with_save_restore_gives_the_same_state(name, cuts):
    X, y = data(name, seed=1)
    n = len(y)
    whole = make(name, seed=5).learn(X, y).get_state()
    points = [*sorted({c % (n + 1) for c in cuts}), n]
    lrn = make(name, seed=5)
    start = 0
    for p in points:
        lrn.learn(X[start:p], y[start:p])
        lrn = models.from_state(lrn.get_state())
        start = p
    assert_states_equal(lrn.get_state(), whole)


@pytest.mark.parametrize("name", NAMES)
def test_learning_changes_the_model_and_scores_are_finite(name):
    X, y = data(name)
    lrn = make(name)
    before = lrn.score(X)
    lrn.learn(X, y)
    after = lrn.score(X)
    assert after.dtype == np.float64 and after.shape == (len(y),)
    assert np.isfinite(after).all()
    assert not np.array_equal(before, after)
    assert lrn.n_seen == (int((y == 0).sum()), int((y == 1).sum()))


@pytest.mark.parametrize("name", NAMES)
def test_score_never_mutates(name):
    X, y = data(name)
    lrn = make(name).learn(X[:80], y[:80])
    before = lrn.get_state()
    s1 = lrn.score(X)
    s2 = lrn.score(X[::-1])[::-1]
    assert_states_equal(lrn.get_state(), before)
    np.testing.assert_array_equal(s1, s2)
    assert lrn.score(X[:0]).shape == (0,)


@pytest.mark.parametrize("name", NAMES)
def test_learn_one_is_learn_of_one_row(name):
    X, y = data(name)
    a = make(name)
    b = make(name)
    for i in range(30):
        a.learn_one(X[i], y[i])
    b.learn(X[:30], y[:30])
    assert_states_equal(a.get_state(), b.get_state())
    assert a.score_one(X[40]) == b.score(X[40:41])[0]


@pytest.mark.parametrize("name", NAMES)
def test_label_encodings_are_equivalent(name):
    X, y = data(name)
    a = make(name).learn(X, y)
    b = make(name).learn(X, 2 * y - 1)
    c = make(name).learn(X, y.astype(bool))
    assert_states_equal(a.get_state(), b.get_state())
    assert_states_equal(a.get_state(), c.get_state())


def _bad_inputs(d: int, X, y):
    nan = X[:5].copy()
    nan[2, 1] = np.nan
    inf = X[:5].copy()
    inf[4, 0] = np.inf
    return {
        "nan": (nan, y[:5], "NaN or infinite"),
        "inf": (inf, y[:5], "NaN or infinite"),
        "wrong dimension": (X[:5, :-1], y[:5], f"expects {d}"),
        "1-D X": (X[0], y[:1], "2-D"),
        "3-D X": (X[None, :5], y[:5], "2-D"),
        "label 2": (X[:5], np.array([0, 1, 2, 1, 0]), "labels must be in"),
        "label 0.5": (X[:5], np.array([0, 1, 0.5, 1, 0]), "labels must be in"),
        "labels mix 0 and -1": (X[:5], np.array([0, 1, -1, 1, 0]), "mix 0 and -1"),
        "too few labels": (X[:5], y[:4], "one label per row"),
        "string labels": (X[:5], np.array(["a"] * 5), "labels must be"),
        "strings in X": (np.array([["a"] * d]), y[:1], "X must be"),
    }


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_is_rejected_and_changes_nothing(name):
    case = CASES[name]
    X, y = data(name)
    lrn = make(name).learn(X[:50], y[:50])
    before = lrn.get_state()
    for what, (bx, by, msg) in _bad_inputs(case.n_features, X, y).items():
        with pytest.raises(ValueError, match=msg):
            lrn.learn(bx, by)
        assert_states_equal(lrn.get_state(), before), what
    with pytest.raises(ValueError, match="NaN or infinite"):
        lrn.score(np.full((1, case.n_features), np.nan))


@pytest.mark.parametrize("name", NAMES)
def test_unknown_parameter_is_named(name):
    with pytest.raises(ValueError, match=rf"{name} got an unexpected parameter 'bogus'"):
        make(name, bogus=1)


def _out_of_range(rule):
    if isinstance(rule, Options):
        return ["no-such-option", 3.5]
    vals = ["text", True, float("nan")]
    if rule.low is not None:
        vals.append(rule.low - 1)
        if rule.closed in ("neither", "right"):
            vals.append(rule.low)
    if rule.high is not None:
        vals.append(rule.high + 1)
    if rule.kind is int:
        vals.append(1.5)
    return vals


@pytest.mark.parametrize("name", NAMES)
def test_invalid_parameters_get_the_standard_message(name):
    table = models.base._lookup(name).param_table
    assert table, "every learner declares its parameters"
    for pname, spec in table.items():
        for bad in _out_of_range(spec.rule):
            with pytest.raises(ValueError) as err:
                make(name, **{pname: bad})
            msg = str(err.value)
            assert msg.startswith(f"The {pname!r} parameter of {name} must be "), msg
            assert msg.endswith(f"got {bad!r}."), msg
    for meta, bad in (("n_features", 0), ("n_features", 2.0), ("seed", -1)):
        with pytest.raises(ValueError, match=f"The '{meta}' parameter of {name}"):
            models.create(name, **{"n_features": 4, "seed": 0, meta: bad})
    assert all(isinstance(s.rule, Interval | Options) for s in table.values())


@pytest.mark.parametrize("name", NAMES)
def test_state_is_flat_arrays_scalars_and_strings(name):
    X, y = data(name)
    lrn = make(name).learn(X, y)
    st_ = lrn.get_state()
    assert st_["learner"] == name
    for k, v in st_.items():
        assert isinstance(v, np.ndarray | int | float | str | bool), (k, type(v))
        if isinstance(v, np.ndarray):
            assert v.dtype != object and k.endswith("_"), k
    # the saved copy is detached from the live learner
    for key, v in st_.items():
        if isinstance(v, np.ndarray) and v.size:
            v[...] = 7
            assert not np.array_equal(lrn.get_state()[key], v) or np.all(v == 7), key
    assert_states_equal(lrn.get_state(), make(name).learn(X, y).get_state())


@pytest.mark.parametrize("name", NAMES)
def test_malformed_states_are_refused(name):
    X, y = data(name)
    good = make(name).learn(X, y).get_state()
    arrays = [k for k, v in good.items() if isinstance(v, np.ndarray)]
    broken = {
        "missing array": {k: v for k, v in good.items() if k != arrays[0]},
        "extra entry": {**good, "bogus_": np.zeros(1)},
        "wrong version": {**good, "state_version": 999},
        "wrong dtype": {**good, arrays[0]: good[arrays[0]].astype(np.float32)},
        "bad parameter": {**good, next(iter(models.base._lookup(name).param_table)): "x"},
        "unknown learner": {**good, "learner": "nope"},
    }
    for what, st_ in broken.items():
        with pytest.raises(ValueError):
            models.from_state(st_)
        assert what


@pytest.mark.parametrize("name", SPARSE)
def test_sparse_and_dense_input_give_the_same_model(name):
    case = CASES[name]
    X, y = data(name)
    for storage in ("dense", "sparse"):
        dense = make(name, storage=storage).learn(X, y)
        from models._sparse import dense_to_csr

        sparse = make(name, storage=storage).learn(dense_to_csr(X), y)
        assert_states_equal(dense.get_state(), sparse.get_state())
        np.testing.assert_array_equal(dense.score(X), sparse.score(dense_to_csr(X)))
    assert case.sparse_params is not None


@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_csr_input_is_never_written_to(name, storage):
    # Canonical int64 CSR goes through validation without a copy: the learner reads the
    # caller's arrays and must leave them as they were.
    from models._sparse import dense_to_csr

    X, y = data(name)
    csr = dense_to_csr(X)
    kept = [a.copy() for a in csr]
    lrn = make(name, storage=storage).learn(csr, y)
    lrn.score(csr)
    lrn.score_then_learn(csr, y)
    for a, b in zip(csr, kept, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", SPARSE)
def test_sparse_stream_in_a_large_hashed_space(name):
    case = CASES[name]
    d = 1 << 20
    X, y = sparse_stream(300, d, nnz=12, seed=2)
    params = {**case.params, **(case.sparse_params or {})}
    lrn = models.create(name, n_features=d, seed=0, **params)
    assert lrn.params.get("storage", "sparse") == "sparse"
    lrn.learn(csr_slice(X, 0, 150), y[:150])
    lrn = models.from_state(lrn.get_state())
    lrn.learn(csr_slice(X, 150, 300), y[150:])
    whole = models.create(name, n_features=d, seed=0, **params).learn(X, y)
    assert_states_equal(lrn.get_state(), whole.get_state())
    s = lrn.score(csr_slice(X, 0, 300))
    assert np.isfinite(s).all()
    assert models.auc(y, s) > 0.6
    with pytest.raises(ValueError, match="outside"):
        lrn.learn((np.array([0, 1]), np.array([d]), np.array([1.0])), [1])


@pytest.mark.parametrize("name", sorted(set(NAMES) - set(SPARSE)))
def test_dense_only_learners_refuse_sparse_input(name):
    from models._sparse import dense_to_csr

    X, y = data(name)
    with pytest.raises(ValueError, match="dense input only"):
        make(name).learn(dense_to_csr(X), y)


def test_create_rejects_unknown_learners_with_the_list():
    with pytest.raises(ValueError, match="Unknown learner 'nope'; available learners are: "):
        models.create("nope", n_features=3)


@pytest.mark.parametrize("name", NAMES)
def test_score_then_learn_is_learn_plus_prequential_scores(name):
    X, y = data(name, seed=2)
    a = make(name)
    prior = a.score_then_learn(X, y)
    b = make(name).learn(X, y)
    assert_states_equal(a.get_state(), b.get_state())
    stepwise = make(name)
    expected = np.empty(len(y))
    for t in range(len(y)):
        expected[t] = stepwise.score(X[t:t + 1])[0]
        stepwise.learn(X[t:t + 1], y[t:t + 1])
    scale = max(1.0, float(np.abs(expected).max()))
    assert np.abs(prior - expected).max() <= 1e-12 * scale
    assert make(name).score_then_learn(X[:0], y[:0]).shape == (0,)


@pytest.mark.parametrize("name", NAMES)
def test_snapshot_scores_like_the_learner_and_stays_frozen(name):
    X, y = data(name)
    lrn = make(name).learn(X[:60], y[:60])
    snap = lrn.snapshot()
    before = lrn.score(X)
    np.testing.assert_array_equal(snap.score(X), before)
    lrn.learn(X[60:], y[60:])
    np.testing.assert_array_equal(snap.score(X), before)
    assert snap.n_seen == (int((y[:60] == 0).sum()), int((y[:60] == 1).sum()))
    with pytest.raises(RuntimeError, match="snapshot"):
        snap.learn(X[:2], y[:2])
    with pytest.raises(RuntimeError, match="snapshot"):
        snap.get_state()


@pytest.mark.parametrize("name", [n for n in NAMES if "order_" in make(n)._state])
def test_corrupted_buffer_order_is_refused(name):
    X, y = data(name)
    st_ = make(name).learn(X, y).get_state()
    st_["order_"][0, 0] = st_["order_"].shape[1] + 5  # a slot outside the buffer
    with pytest.raises(ValueError, match="order_"):
        models.from_state(st_)
