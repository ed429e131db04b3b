"""rank_svm and FBAM (models.batch) against the numpy reference, fit_batch, the solve
schedule, the Fourier map, and the contract suite on the paths the contract case skips."""

from __future__ import annotations

import inspect
import math
import warnings

import numpy as np
import pytest

from aucstream import models
from aucstream.models import _newton as N
from aucstream.models._sparse import dense_to_csr
from tests import test_contract as contract
from tests.helpers import Case, assert_close, assert_states_equal, csr_slice, sparse_stream, stream
from tests.reference.newton import (
    BatchRef,
    NBAMRef,
    fourier,
    nystrom,
    objective,
    truncated_newton,
)


def _stream(n=260, d=6, seed=11):
    X, y = stream(n, d, seed=seed)
    X[np.abs(X) < 0.3] = 0.0  # real zeros: sparse rows of different patterns
    return X, y


def _pieces(lrn, X, y, cuts=(1, 7, 8, 90), sparse=False):
    """score_then_learn over uneven pieces (CSR pieces if ``sparse``); the scores."""
    out, start = [], 0
    for stop in (*cuts, len(y)):
        part = dense_to_csr(X[start:stop]) if sparse else X[start:stop]
        out.append(lrn.score_then_learn(part, y[start:stop]))
        start = stop
    return np.concatenate(out)


def _reference_scores(ref, X, y):
    """The reference's prequential scores: each event scored, then learned."""
    out = np.empty(len(y))
    for t in range(len(y)):
        out[t] = ref.score(X[t:t + 1])[0]
        ref.learn_one(X[t], y[t])
    return out


_CONFIGS = {
    "rank_svm-dense-reservoir": ("rank_svm", {"storage": "dense", "buffer": "reservoir"}),
    "rank_svm-dense-fifo": ("rank_svm", {"storage": "dense", "buffer": "fifo"}),
    "rank_svm-sparse-reservoir": ("rank_svm", {"storage": "sparse", "buffer": "reservoir"}),
    "rank_svm-sparse-fifo": ("rank_svm", {"storage": "sparse", "buffer": "fifo"}),
    "fbam-reservoir": ("fbam", {"buffer": "reservoir", "n_components": 24}),
    "fbam-fifo-fixed-b": ("fbam", {"buffer": "fifo", "n_components": 24, "bandwidth": 3.0}),
}
# Step for step, the same Newton and CG iterations, w and scores to 1e-9: where the
# Hessian is well conditioned. FBAM at C̃ ≥ 1e3 needs 100-200 CG iterations per solve,
# which amplify the rounding of two summation orders; it is compared solve by solve
# below instead.
_EXACT = [(config, C) for config in _CONFIGS for C in (10.0, 1e4)
          if config.startswith("rank_svm") or C == 10.0]


@pytest.mark.parametrize(("config", "C"), _EXACT)
def test_learners_match_the_reference(config, C):
    name, extra = _CONFIGS[config]
    X, y = _stream()
    params = {"C": C, "capacity": 25, "retrain_every": 20, **extra}
    lrn = models.create(name, n_features=6, seed=4, **params)
    prior = _pieces(lrn, X, y, sparse="sparse" in config)
    ref_params = {k: v for k, v in params.items() if k != "storage"}
    ref = BatchRef(6, seed=4, **ref_params)
    expected = _reference_scores(ref, X, y)
    st_ = lrn.get_state()
    assert_close(st_["w_"], ref.w, rtol=1e-9, what="w")
    assert_close(prior, expected, rtol=1e-9, what="prequential scores")
    assert_close(lrn.score(X[:60]), ref.score(X[:60]), rtol=1e-9, what="scores")
    stats = lrn.solve_stats
    assert stats["solves"] == ref.solves
    assert stats["newton_iters"] == len(ref.trace.steps)
    assert stats["cg_iters"] == ref.trace.cg_iters
    assert stats["status"] == ref.trace.status
    assert stats["objective"] == pytest.approx(ref.trace.objective, rel=1e-10)
    assert [int(v) for v in st_["n_seen_"]] == ref.buffers.n
    if name == "fbam":
        assert st_["bw_"][0] == pytest.approx(ref.b, rel=1e-12)


@pytest.mark.parametrize("C", [1e3, 1e4])
def test_fbam_solves_agree_with_the_reference_solve_by_solve(C):
    """Ill-conditioned solves (cosine features, small windows, large C̃): after every
    solve, the reference solves the same window (its own features) from the same warm
    start. Both stop by the same rule, so F agrees to second order (measured ≤ 5e-11)
    and w lies in the rule's ball around the optimum: ‖w − w_ref‖²_H ≤ 4·1e-4·F (each
    is within F − F* ≤ ½·1e-4·F of it); measured w agrees to ≤ 1e-5 relative."""
    X, y = _stream()
    params = {"C": C, "capacity": 25, "retrain_every": 20, "n_components": 24}
    lrn = models.create("fbam", n_features=6, seed=4, **params)
    solves = 0
    for t in range(len(y)):
        w0 = lrn.get_state()["w_"]
        lrn.learn(X[t:t + 1], y[t:t + 1])
        st_ = lrn.get_state()
        if lrn.solve_stats["solves"] == solves:
            continue
        solves += 1
        Xw, pos = N.window_dense(st_["buf_"], st_["order_"], st_["n_seen_"])
        b = np.mean(np.sum((X[:t + 1] - X[:t + 1].mean(0)) ** 2, axis=1))
        assert st_["bw_"][0] == pytest.approx(b, rel=1e-12)
        Z = fourier(Xw, st_["freq_"], st_["phase_"], b)
        w_ref, trace = truncated_newton(Z, pos, C, w0)
        assert trace.status == lrn.solve_stats["status"] == "converged"
        f, _, hd = objective(Z, pos, C, st_["w_"], st_["w_"] - w_ref)
        f_ref = objective(Z, pos, C, w_ref)[0]
        assert f == pytest.approx(f_ref, rel=1e-9)
        assert f == pytest.approx(lrn.solve_stats["objective"], rel=1e-9)
        assert float((st_["w_"] - w_ref) @ hd) <= 4 * N.NEWTON_DECREMENT_TOL * f
    assert solves > 10


@pytest.mark.parametrize("buffer", ["reservoir", "fifo"])
def test_the_state_does_not_depend_on_batches_or_scoring(buffer):
    X, y = _stream(seed=12)
    params = {"capacity": 9, "retrain_every": 13, "buffer": buffer, "n_components": 12}
    whole = models.create("fbam", n_features=6, seed=1, **params).learn(X, y).get_state()
    for cuts in ((1, 2, 3), (13, 26, 27), (100,), tuple(range(5, 260, 5))):
        lrn = models.create("fbam", n_features=6, seed=1, **params)
        _pieces(lrn, X, y, cuts=cuts)
        assert_states_equal(lrn.get_state(), whole)


def test_solves_happen_at_the_scheduled_events():
    """Solves after events 1, 2, 4, 8 (powers of two below 10), then every 10 events;
    w changes only there (not before both classes are buffered)."""
    X, y = _stream(n=60, seed=13)
    y[:3] = [0, 0, 1]  # the first positive is event 3
    lrn = models.create("rank_svm", n_features=6, capacity=50, retrain_every=10)
    changed = []
    w = lrn.get_state()["w_"]
    for t in range(60):
        lrn.learn(X[t:t + 1], y[t:t + 1])
        new = lrn.get_state()["w_"]
        if not np.array_equal(new, w):
            changed.append(t + 1)
        w = new
    assert changed == [4, 8, 10, 20, 30, 40, 50, 60]
    assert lrn.solve_stats["solves"] == 8


def test_sparse_storage_agrees_with_dense_on_a_hashed_stream():
    d = 1 << 12
    X, y = sparse_stream(300, d, nnz=9, seed=5)
    params = {"C": 100.0, "capacity": 60, "retrain_every": 50}
    sparse = models.create("rank_svm", n_features=d, storage="sparse", **params).learn(X, y)
    dense = models.create("rank_svm", n_features=d, storage="dense", **params).learn(X, y)
    assert_close(sparse.get_state()["w_"], dense.get_state()["w_"], rtol=1e-10, what="w")
    Xs = csr_slice(X, 0, 100)
    assert_close(sparse.score(Xs), dense.score(Xs), rtol=1e-10, what="scores")
    assert sparse.solve_stats == pytest.approx(dense.solve_stats, rel=1e-10)


def test_the_window_is_the_whole_objective():
    """After a solve, w minimises F over the buffered rows: the solver's rule holds at w,
    checked with the reference's brute-force gradient and an exact Newton solve."""
    X, y = _stream(n=200, seed=14)
    lrn = models.create("rank_svm", n_features=6, C=300.0, capacity=40, retrain_every=200)
    lrn.learn(X, y)
    st_ = lrn.get_state()
    Xw, pos = N.window_dense(st_["buf_"], st_["order_"], st_["n_seen_"])
    w = st_["w_"]
    f, g, _ = objective(Xw, pos, 300.0, w)
    assert lrn.solve_stats["objective"] == pytest.approx(f, rel=1e-12)
    w_ref, _ = truncated_newton(Xw, pos, 300.0, np.zeros(6))
    assert objective(Xw, pos, 300.0, w_ref)[0] == pytest.approx(f, rel=1e-8)
    assert float(g @ g) < 1e-6 * f


# ------------------------------------------------------------- FBAM's map
def test_fourier_features_approximate_the_kernel():
    """ψ(x)ᵀψ(y) ≈ exp(−‖x − y‖²/b) (variant A, θ ~ N(0, (2/b)·I)): Monte Carlo error
    ~ 1/√m, and the learner's map is the reference's cos(θx + φ) to rounding."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 5))
    b = 5.0
    lrn = models.create("fbam", n_features=5, n_components=4096, bandwidth=b, seed=2)
    st_ = lrn.get_state()
    Z = lrn._features(X, b)
    assert_close(Z, fourier(X, st_["freq_"], st_["phase_"], b), rtol=1e-12, what="ψ")
    K = np.exp(-((X[:, None, :] - X[None, :, :]) ** 2).sum(-1) / b)
    err = np.abs(Z @ Z.T - K)  # each entry: standard deviation ≤ 1/√m ≈ 0.016
    assert err.mean() < 0.02 and err.max() < 0.1
    assert st_["phase_"].min() >= 0.0 and st_["phase_"].max() < 2 * math.pi
    assert abs(st_["freq_"].std() - 1.0) < 0.01


def test_fbam_bandwidth_comes_from_the_first_events(monkeypatch):
    """b = mean‖x − x̄‖² over every event so far (not only the window), up to the
    80 000th (here 150), then frozen."""
    import aucstream.models.batch as batch_module

    X, y = _stream(n=260, seed=15)
    X[:, 0] += np.arange(260) / 50.0  # drift: b over the first events differs from later
    lrn = models.create("fbam", n_features=6, capacity=20, retrain_every=100,
                        n_components=16).learn(X[:100], y[:100])
    b100 = np.mean(np.sum((X[:100] - X[:100].mean(0)) ** 2, axis=1))
    assert lrn.get_state()["bw_"][0] == pytest.approx(b100, rel=1e-12)
    monkeypatch.setattr(batch_module, "BANDWIDTH_EVENTS", 150)
    params = {"capacity": 20, "retrain_every": 100, "n_components": 16}
    lrn = models.create("fbam", n_features=6, **params).learn(X, y)
    b150 = np.mean(np.sum((X[:150] - X[:150].mean(0)) ** 2, axis=1))
    assert lrn.get_state()["bw_"][0] == pytest.approx(b150, rel=1e-12)
    ref = BatchRef(6, C=1e3, buffer="reservoir", seed=0, bandwidth_events=150,
                   **params).learn(X, y)
    assert_close(lrn.get_state()["w_"], ref.w, rtol=1e-9, what="w")
    # equal rows: b = 0 keeps the previous value (1 before any)
    same = np.tile(X[:1], (6, 1))
    lrn = models.create("fbam", n_features=6, n_components=8).learn(same, [0, 1, 0, 1, 0, 1])
    assert lrn.get_state()["bw_"][0] == 1.0


def test_fbam_scores_zero_before_its_first_solve():
    lrn = models.create("fbam", n_features=3, n_components=8)
    assert (lrn.score(np.ones((2, 3))) == 0.0).all()


# ------------------------------------------------------------- NBAM / NBAUC
@pytest.mark.parametrize("buffer", ["reservoir", "fifo"])
@pytest.mark.parametrize("name", ["nbam", "nbauc"])
def test_nbam_matches_the_reference(name, buffer):
    """Warm-up of 60 events (scores 0), the map at event 60, its replay and one solve,
    then a solve every 20 events on windows of mapped rows."""
    X, y = _stream()
    params = {"C": 10.0, "capacity": 25, "retrain_every": 20, "buffer": buffer,
              "n_components": 12, "warmup": 60}
    lrn = models.create(name, n_features=6, seed=4, **params)
    prior = _pieces(lrn, X, y, cuts=(1, 59, 60, 61, 90))
    ref = NBAMRef(6, seed=4, **params)
    expected = _reference_scores(ref, X, y)
    st_ = lrn.get_state()
    np.testing.assert_array_equal(st_["landmarks_"], ref.map[0])
    assert (prior[:60] == 0.0).all()
    assert_close(st_["w_"], ref.w, rtol=1e-9, what="w")
    assert_close(prior, expected, rtol=1e-9, what="prequential scores")
    assert_close(lrn.score(X[:60]), ref.score(X[:60]), rtol=1e-9, what="scores")
    stats = lrn.solve_stats
    assert stats["solves"] == ref.solves == 1 + (260 - 60) // 20
    assert (stats["newton_iters"], stats["cg_iters"]) == (len(ref.trace.steps),
                                                          ref.trace.cg_iters)
    assert lrn.n_seen == tuple(ref.buffers.n)


def test_nbauc_is_nbam_under_another_name():
    X, y = _stream(n=150, seed=22)
    params = {"capacity": 30, "n_components": 10, "warmup": 40}
    a = models.create("nbam", n_features=6, **params).learn(X, y).get_state()
    b = models.create("nbauc", n_features=6, **params).learn(X, y).get_state()
    assert a.pop("learner") == "nbam" and b.pop("learner") == "nbauc"
    assert_states_equal(a, b)


def test_nbam_fit_batch_maps_every_row_then_solves_once():
    X, y = _stream(n=300, seed=23)
    lrn = models.fit_batch("nbam", X, y, C=100.0, seed=2)
    st_ = lrn.get_state()
    assert lrn.params["warmup"] == 300 and lrn.params["n_components"] == 30
    assert lrn.solve_stats["solves"] == 1
    Z = nystrom(X, st_["landmarks_"], st_["proj_"], st_["bandwidth_"][0])
    order = np.r_[np.flatnonzero(y == 0), np.flatnonzero(y == 1)]
    w_ref, _ = truncated_newton(Z[order], y[order] == 1, 100.0, np.zeros(Z.shape[1]))
    assert_close(st_["w_"], w_ref, rtol=1e-9, what="w")
    # rows beyond the warm-up: buffered without solves, then one solve on them all
    more = models.fit_batch("nbam", X, y, C=100.0, seed=2, warmup=200)
    st_ = more.get_state()
    assert more.solve_stats["solves"] == 2 and more.n_seen == ((y == 0).sum(), (y == 1).sum())
    Z = nystrom(X, st_["landmarks_"], st_["proj_"], st_["bandwidth_"][0])
    w_ref, _ = truncated_newton(Z[order], y[order] == 1, 100.0, np.zeros(Z.shape[1]))
    f = objective(Z[order], y[order] == 1, 100.0, st_["w_"])[0]
    assert f == pytest.approx(objective(Z[order], y[order] == 1, 100.0, w_ref)[0], rel=1e-9)
    with pytest.raises(ValueError, match="first warmup = 400 rows; got 300"):
        models.fit_batch("nbam", X, y, warmup=400)


# ------------------------------------------------------------- fit_batch
def test_fit_batch_is_one_solve_on_every_row():
    X, y = _stream(n=300, seed=16)
    lrn = models.fit_batch("rank_svm", X, y, C=50.0)
    w_ref, _ = truncated_newton(np.vstack([X[y == 0], X[y == 1]]),
                                    np.r_[np.zeros((y == 0).sum(), bool),
                                          np.ones((y == 1).sum(), bool)], 50.0, np.zeros(6))
    assert_close(lrn.get_state()["w_"], w_ref, rtol=1e-10, what="w")
    assert lrn.params["capacity"] == max((y == 0).sum(), (y == 1).sum())
    assert lrn.params["retrain_every"] == 30
    assert lrn.solve_stats["solves"] == 1 and lrn.n_seen == ((y == 0).sum(), (y == 1).sum())
    # an ordinary learner: CSR input gives the same, and it goes on learning
    csr = models.fit_batch("rank_svm", dense_to_csr(X), y, C=50.0, n_features=6,
                           storage="sparse")
    assert_close(csr.get_state()["w_"], lrn.get_state()["w_"], rtol=1e-10, what="w (CSR)")
    twin = models.from_state(lrn.get_state())
    assert_states_equal(twin.learn(X[:40], y[:40]).get_state(),
                        lrn.learn(X[:40], y[:40]).get_state())


def test_fit_batch_keeps_a_reservoir_sample_above_capacity():
    X, y = _stream(n=300, seed=17)
    lrn = models.fit_batch("rank_svm", X, y, capacity=30, seed=3)
    st_ = lrn.get_state()
    assert lrn.buffer_fill == (30, 30)
    Xw, pos = N.window_dense(st_["buf_"], st_["order_"], st_["n_seen_"])
    assert len(Xw) == 60
    w_ref, _ = truncated_newton(Xw, pos, 1e3, np.zeros(6))
    assert_close(st_["w_"], w_ref, rtol=1e-10, what="w on the reservoirs")


def test_fit_batch_tunes_C_on_a_holdout():
    X, y = _stream(n=400, seed=18)
    lrn = models.fit_batch("rank_svm", X, y, tune=True, seed=5)
    # the same split and grid by hand
    rng = np.random.default_rng(5)
    lab = np.where(y == 1, 1.0, -1.0)
    hold = np.zeros(400, bool)
    for c in (-1.0, 1.0):
        idx = np.flatnonzero(lab == c)
        hold[rng.permutation(idx)[:round(0.2 * len(idx))]] = True
    aucs = {}
    for C in (1.0, 10.0, 100.0, 1e3, 1e4):
        part = models.fit_batch("rank_svm", X[~hold], y[~hold], C=C)
        aucs[C] = models.auc(y[hold], part.score(X[hold]))
    best = max(aucs.values())
    assert lrn.params["C"] == min(C for C, a in aucs.items() if a == best)
    assert_close(lrn.get_state()["w_"],
                 models.fit_batch("rank_svm", X, y, C=lrn.params["C"]).get_state()["w_"],
                 rtol=1e-4, what="w (warm vs cold start)")


def test_fit_batch_tunes_the_nystrom_learners_on_one_map():
    """tune=True fits the map once on the 80 %, re-solves each C̃ on it, then refits
    everything (a new map: no warm start across maps)."""
    X, y = _stream(n=300, seed=24)
    lrn = models.fit_batch("nbauc", X, y, tune=True, seed=1, n_components=15)
    assert lrn.params["C"] in (1.0, 10.0, 100.0, 1e3, 1e4)
    assert lrn.params["warmup"] == 300 and lrn.solve_stats["status"] == "converged"
    cold = models.fit_batch("nbauc", X, y, C=lrn.params["C"], seed=1, n_components=15)
    assert_states_equal(lrn.get_state(), cold.get_state())


def test_fit_batch_refuses_what_it_cannot_fit():
    X, y = _stream(n=50, seed=19)
    with pytest.raises(ValueError, match="needs both classes"):
        models.fit_batch("rank_svm", X, np.zeros(50))
    with pytest.raises(ValueError, match="either C or tune"):
        models.fit_batch("rank_svm", X, y, C=1.0, tune=True)
    with pytest.raises(ValueError, match="batch learners"):
        models.fit_batch("oam_seq", X, y)
    with pytest.raises(ValueError, match="The 'C' parameter of fbam must be"):
        models.fit_batch("fbam", X, y, C=-1.0)
    with pytest.raises(ValueError, match="expects 7"):
        models.fit_batch("rank_svm", X, y, n_features=7)
    X[3, 2] = 1e200
    with pytest.raises(FloatingPointError):
        models.fit_batch("rank_svm", X, y)


def test_fbam_fit_batch_learns_a_nonlinear_boundary():
    """A radial boundary: linear RankSVM is at chance, FBAM is not."""
    rng = np.random.default_rng(20)
    X = rng.normal(size=(600, 2))
    y = (np.sum(X**2, axis=1) < 1.2).astype(int)
    lin = models.fit_batch("rank_svm", X[:400], y[:400])
    fb = models.fit_batch("fbam", X[:400], y[:400], n_components=300)
    assert abs(models.auc(y[400:], lin.score(X[400:])) - 0.5) < 0.1
    assert models.auc(y[400:], fb.score(X[400:])) > 0.95


def test_a_corrupted_fit_record_is_refused():
    X, y = _stream(n=40, seed=21)
    st_ = models.create("rank_svm", n_features=6).learn(X, y).get_state()
    st_["fit_"][1] = 9
    with pytest.raises(ValueError, match="'fit_' is out of range"):
        models.from_state(st_)


# ---------------------------------------------- the contract suite on the other paths
_VARIANTS = {
    "nbam-fifo-map-at-30": ("nbam", {"C": 100.0, "capacity": 7, "retrain_every": 5,
                                     "buffer": "fifo", "n_components": 6, "warmup": 30}),
    "rank_svm-reservoir": ("rank_svm", {"C": 100.0, "capacity": 7, "retrain_every": 5}),
    "rank_svm-reservoir-sparse": ("rank_svm", {"C": 100.0, "capacity": 7, "retrain_every": 6,
                                               "storage": "sparse"}),
    "fbam-reservoir-fixed-b": ("fbam", {"C": 100.0, "capacity": 7, "retrain_every": 5,
                                        "n_components": 8, "bandwidth": 2.0}),
}
_CONTRACT = [
    "test_same_seed_same_model",
    "test_any_split_with_save_restore_gives_the_same_state",
    "test_learning_changes_the_model_and_scores_are_finite",
    "test_score_never_mutates",
    "test_learn_one_is_learn_of_one_row",
    "test_label_encodings_are_equivalent",
    "test_bad_input_is_rejected_and_changes_nothing",
    "test_state_is_flat_arrays_scalars_and_strings",
    "test_malformed_states_are_refused",
    "test_score_then_learn_is_learn_plus_prequential_scores",
    "test_snapshot_scores_like_the_learner_and_stays_frozen",
    "test_corrupted_buffer_order_is_refused",
    "test_parameter_range_edges_learn_moderate_data",
    "test_a_failure_anywhere_in_a_batch_restores_every_state_array",
    "test_extreme_values_are_learned_finite_or_refused_whole",
]


def _contract_calls():
    for variant in _VARIANTS:
        for test in _CONTRACT:
            params = inspect.signature(getattr(contract, test)).parameters
            if "failure" in params:
                for failure in ("nan", "zero-division", "other"):
                    yield variant, test, {"failure": failure}
            else:
                yield variant, test, {}


@pytest.mark.parametrize("variant, test, extra", list(_contract_calls()),
                         ids=lambda v: v if isinstance(v, str) else "-".join(v.values()))
def test_the_contract_holds_on_every_path(monkeypatch, variant, test, extra):
    """The poison-row test is left to the contract's FIFO case: a reservoir may pass the
    poisoned row by, and then nothing breaks (correctly)."""
    name, params = _VARIANTS[variant]
    storage = params.get("storage")
    case = Case(params={k: v for k, v in params.items() if k != "storage"})
    monkeypatch.setitem(contract.CASES, name, case)
    fn = getattr(contract, test)
    if "storage" in inspect.signature(fn).parameters:
        fn(name, storage if name == "rank_svm" else None, **extra)
    elif storage is not None:
        monkeypatch.setitem(contract.CASES, name, Case(params=params))
        fn(name, **extra)
    else:
        fn(name, **extra)


def test_fbam_refuses_rows_whose_spread_overflows_only_in_its_sum() -> None:
    """Each column's spread finite, their sum not: the data-driven bandwidth would
    overflow, and the batch is refused whole, with no numpy warning on the way (the
    poison test's ±1e154 rows met this)."""
    a = 5.9e153  # two rows ±a: a column's spread 2a² is finite, three columns' sum is not
    lrn = models.create("fbam", n_features=3, seed=0, retrain_every=2)
    X = np.array([[a, a, a], [-a, -a, -a]] * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(models.NonFiniteError):
            lrn.learn(X, np.array([0, 1] * 2))
    assert lrn.get_state()["n_seen_"].sum() == 0
