"""ASAM, SAM and PSAM against the numpy reference, by hand, and their invariants
(dissertation Algorithms 10 and 11, Appendix A)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aucstream.models.sam as sam_module
from aucstream import models
from aucstream.models import _sam_kernels as K
from aucstream.models._sparse import csr_to_dense, dense_to_csr
from tests.helpers import assert_close, assert_states_equal, csr_slice, sparse_stream, stream
from tests.reference.sam import SAMRef, prox_hinge

NAMES = ("asam", "sam", "psam")
EPS = np.finfo(np.float64).eps
# The lazy average q·w̃ = c·u − Ã cancels by up to 1/σ ≥ 1/SAM_MIN_SCALE (as SOLAM's, see
# tests/test_solam.py): its rounding is amplified as much.
LAZY_AVG_RTOL = max(1e-9, 50 * EPS / K.SAM_MIN_SCALE)


def _params(name: str, **extra) -> dict:
    """Small reservoirs that wrap, several pairs per event, skips that do not divide
    each other; ASAM/SAM with a λ whose shrink matters."""
    p = {"capacity": 20, "pairs": 3, "r_skip": 5}
    if name != "sam":
        p["a_skip"] = 7
    if name != "psam":
        p["lam"] = 1e-2
    p.update(extra)
    return p


def _ref(name: str, d: int, seed: int, params: dict) -> SAMRef:
    return SAMRef(d, variant=name, seed=seed, **{k: v for k, v in params.items()
                                                  if k != "storage"})


def buffer_rows(lrn, c: int) -> np.ndarray:
    """Rows of class ``c``'s reservoir in insertion order, dense."""
    s = lrn.get_state()
    cap = s["order_"].shape[1]
    slots = s["order_"][c, :int(min(s["n_seen_"][c], cap))]
    if "buf_" in s:
        return s["buf_"][c, slots]
    out = np.zeros((slots.shape[0], lrn.n_features))
    for r, slot in enumerate(slots):
        k = s["bnnz_"][c, slot]
        out[r, s["bidx_"][c, slot, :k]] = s["bval_"][c, slot, :k]
    return out


def _check_against_reference(lrn, ref: SAMRef, avg_rtol: float = 1e-9) -> None:
    s = lrn.get_state()
    assert s["t_"][0] == ref.t
    assert list(s["n_seen_"]) == ref.res.n
    for c in (0, 1):
        np.testing.assert_array_equal(buffer_rows(lrn, c), np.array(ref.res.rows[c]))
    np.testing.assert_array_equal(s["rng_"], ref.rng)
    if "cal_" in s:
        eta0 = 0.0 if ref.eta0 is None else ref.eta0
        assert s["cal_"][0] == ref.cal_n
        assert_close(s["cal_"][1:], [ref.cal_sum, eta0], rtol=1e-13, what="cal_")
    assert_close(lrn.weights("last"), ref.w, what="w")
    if ref.averaging:
        assert_close(lrn.weights("average"), ref.wbar, rtol=avg_rtol, what="w̃")
    assert_close(lrn.weights(), ref.served(), rtol=avg_rtol, what="served")


def _ref_stream(seed: int, n: int = 400, d: int = 7):
    X, y = stream(n, d, seed=seed)
    X[np.abs(X) < 0.4] = 0.0  # real zeros: sparse rows with different patterns
    return X, y


# ------------------------------------------------------------------ the reference
@pytest.mark.parametrize("storage", ["dense", "sparse"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("extra", [{}, {"defaults": True}, {"pairs": 1, "r_skip": 1,
                                                             "a_skip": 1}])
def test_matches_the_reference(name, storage, extra):
    X, y = _ref_stream(21)
    if extra.get("defaults"):
        params = {"capacity": 20}
    else:
        params = _params(name, **extra)
        if name == "sam":
            params.pop("a_skip", None)
    lrn = models.create(name, n_features=7, seed=3, storage=storage, **params)
    lrn.learn(dense_to_csr(X[:150]), y[:150]).learn(X[150:], y[150:])
    ref = _ref(name, 7, 3, params).learn(X, y)
    assert min(ref.res.n) > 100 and ref.t > 300  # reservoirs replaced, calibration frozen
    _check_against_reference(lrn, ref, LAZY_AVG_RTOL if storage == "sparse" else 1e-9)
    for Xs in (X[:60], dense_to_csr(X[:60])):
        assert_close(lrn.score(Xs), ref.score(X[:60]),
                     rtol=LAZY_AVG_RTOL if storage == "sparse" else 1e-9, what="scores")


@pytest.mark.parametrize("storage", ["dense", "sparse"])
@pytest.mark.parametrize("name", NAMES)
def test_matches_the_reference_on_a_sparse_stream(name, storage):
    d = 3000
    X, y = sparse_stream(300, d, nnz=15, seed=5)
    params = _params(name, capacity=25)
    lrn = models.create(name, n_features=d, seed=1, storage=storage, **params).learn(X, y)
    ref = _ref(name, d, 1, params).learn(csr_to_dense(*X, d), y)
    _check_against_reference(lrn, ref, LAZY_AVG_RTOL if storage == "sparse" else 1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_lazy_algebra_is_exact_with_frequent_folds(name, monkeypatch):
    """With σ folded back at 0.5, c·u − Ã does not cancel: w̃ matches to 1e-9 too, and the
    folds (which stop and resume the kernel inside an event's 5 pairs: r_skip = 2) change
    nothing but the layout."""
    monkeypatch.setattr(sam_module, "SAM_MIN_SCALE", 0.5)
    folds = []
    real_fold = K.fold

    def counted(*args):
        folds.append(1)
        real_fold(*args)

    monkeypatch.setattr(K, "fold", counted)
    X, y = _ref_stream(24)
    params = _params(name, pairs=5, r_skip=2, lam=1.0) if name != "psam" else \
        _params(name, pairs=5, r_skip=2, gamma=1.0)
    lrn = models.create(name, n_features=7, seed=2, storage="sparse", **params)
    lrn.learn(X[:200], y[:200]).learn(X[200:], y[200:])
    assert len(folds) >= 5  # σ ≈ t0/t halves with each doubling of t
    ref = _ref(name, 7, 2, params).learn(X, y)
    _check_against_reference(lrn, ref)


def test_two_storages_agree_on_a_hashed_stream():
    d = 1 << 14
    X, y = sparse_stream(300, d, nnz=10, seed=4)
    for name in NAMES:
        dense = models.create(name, n_features=d, storage="dense", seed=7).learn(X, y)
        lazy = models.create(name, n_features=d, storage="sparse", seed=7).learn(X, y)
        assert_close(lazy.weights("last"), dense.weights("last"), what=f"{name} w")
        assert_close(lazy.weights(), dense.weights(), rtol=LAZY_AVG_RTOL, what=f"{name} served")
        Xs = csr_slice(X, 0, 100)
        assert_close(lazy.score(Xs), dense.score(Xs), rtol=LAZY_AVG_RTOL, what=f"{name} scores")


# ------------------------------------------------------------------ by hand
@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_hand_computed_steps(storage):
    """d = 2, one pair per event, r_skip = a_skip = 2; events x1 = (1, 0) −, x2 = (0, 2) +,
    x3 = (1, 1) −. The opposite reservoir holds one row each time, so every draw is it."""
    X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    y = np.array([0, 1, 0])
    common = {"capacity": 10, "pairs": 1, "r_skip": 2, "storage": storage}

    # ASAM, λ = 1. x1: no positive yet, nothing learned.
    # x2: x_1 = x2 − x1 = (−1, 2), t = 1; η0 = 1/‖x_1‖² = 1/5, t0 = 1/(λη0) = 5; m = 0 < 1:
    #     w = 0 + x_1/(λ(1 + 5)) = (−1/6, 1/3). No shrink, no average yet.
    # x3: x_2 = x2 − x3 = (−1, 1), t = 2; η0 = 2/(5 + 2) = 2/7, t0 = 3.5; m = 1/6 + 1/3 = 1/2:
    #     w += x_2/(2 + 3.5) → (−1/6 − 2/11, 1/3 + 2/11); shrink (t = 2): × (1 − 2/5.5) = 7/11;
    #     average (t = 2): w̃ = (0·w̃ + w)/1 = w.
    lrn = models.create("asam", n_features=2, lam=1.0, a_skip=2, **common)
    lrn.learn(X[:2], y[:2])
    assert_close(lrn.weights("last"), [-1 / 6, 1 / 3], rtol=1e-15, what="w after x2")
    assert not lrn.weights("average").any()
    assert_close(lrn.weights(), [-1 / 6, 1 / 3], rtol=1e-15, what="served before q = 1")
    np.testing.assert_allclose(lrn.get_state()["cal_"], [1.0, 5.0, 0.2], rtol=1e-15)
    lrn.learn(X[2:], y[2:])
    w = np.array([-1 / 6 - 2 / 11, 1 / 3 + 2 / 11]) * (7 / 11)
    assert_close(lrn.weights("last"), w, rtol=1e-15, what="w after x3")
    assert_close(lrn.weights("average"), w, rtol=1e-15, what="w̃ after x3")
    np.testing.assert_allclose(lrn.get_state()["cal_"], [2.0, 7.0, 2 / 7], rtol=1e-15)
    assert lrn.score(np.array([[1.0, 0.0]]))[0] == pytest.approx(w[0], rel=1e-15)
    sam = models.create("sam", n_features=2, lam=1.0, **common).learn(X, y)
    np.testing.assert_array_equal(sam.weights(), lrn.weights("last"))

    # PSAM, γ = 1, t0 = 1. x2: λ_1 = 1/(1·2) = 1/2, m = 0, ‖x_1‖² = 5, z = 1/(½·5) = 0.4:
    #     g = −0.4, w = 0 − λ_1·g·x_1 = 0.2·x_1 = (−0.2, 0.4) (the margin becomes exactly 1).
    # x3: λ_2 = 1/3, m = 0.2 + 0.4 = 0.6, ‖x_2‖² = 2, z = 0.4/(2/3) = 0.6: w += 0.2·x_2 →
    #     (−0.4, 0.6); shrink × (1 − 2/3) → (−0.4/3, 0.2); average: w̃ = w.
    lrn = models.create("psam", n_features=2, gamma=1.0, t0=1.0, a_skip=2, **common)
    lrn.learn(X[:2], y[:2])
    assert_close(lrn.weights("last"), [-0.2, 0.4], rtol=1e-15, what="PSAM w after x2")
    lrn.learn(X[2:], y[2:])
    assert_close(lrn.weights(), [-0.4 / 3, 0.2], rtol=1e-15, what="PSAM w̃ after x3")
    # γ = 10: λ_1 = 1/20, z = 1/(5/20) = 4 ≥ 1, g = −1: the full step w = λ_1·x_1.
    lrn = models.create("psam", n_features=2, gamma=10.0, t0=1.0, a_skip=2, **common)
    lrn.learn(X[:2], y[:2])
    assert_close(lrn.weights("last"), [-0.05, 0.1], rtol=1e-15, what="PSAM full step")


# ------------------------------------------------------------------ the steps
def test_prox_closed_form_solves_the_prox_problem():
    """v = w + τ·x with τ = prox_coef(wᵀx, ‖x‖², λ) minimises λ·max(0, 1 − vᵀx) + ½‖v − w‖²:
    the optimality condition v − w ∈ −λ·∂f(v)·x holds, no perturbation does better,
    the reference's Appendix A formula agrees, and all three regimes occur."""
    rng = np.random.default_rng(0)
    regimes = set()
    for _ in range(3000):
        d = int(rng.integers(1, 6))
        w, x = rng.normal(size=d) * 2, rng.normal(size=d)
        lam = float(np.exp(rng.uniform(-4, 3)))
        m, sq = float(w @ x), float(x @ x)
        tau = K.prox_coef(m, sq, lam)
        v = w + tau * x

        def obj(v, w=w, x=x, lam=lam):
            return lam * max(0.0, 1.0 - v @ x) + 0.5 * (v - w) @ (v - w)

        margin = v @ x
        if m >= 1:
            regimes.add("passive")
            assert tau == 0.0
        elif tau == pytest.approx(lam, rel=1e-15):
            regimes.add("full")
            assert margin <= 1 + 1e-12  # g = −1 is a subgradient only where vᵀx ≤ 1
        else:
            regimes.add("projection")
            assert margin == pytest.approx(1.0, abs=1e-12)
            assert 0.0 < tau < lam
        assert_close(v, prox_hinge(w, x, lam), rtol=1e-13, what="reference prox")
        best = obj(v)
        for _ in range(5):
            assert obj(v + 1e-4 * rng.normal(size=d)) >= best - 1e-12
        for s in np.linspace(-1, 1, 21):  # along x, where the minimiser lies
            assert obj(w + (tau + 1e-3 * s) * x) >= best - 1e-12
    assert regimes == {"passive", "full", "projection"}


def test_hinge_step_is_minus_eta_times_the_gradient():
    """ASAM's loss step w ← w + coef·x equals w − η_t·∇_w max(0, 1 − wᵀx), by central
    finite differences, away from the kink."""
    rng = np.random.default_rng(1)
    h = 1e-6
    for _ in range(200):
        d = 4
        w, x = rng.normal(size=d), rng.normal(size=d)
        if abs(w @ x - 1.0) < 1e-3:
            continue
        lam, t, t0 = float(np.exp(rng.uniform(-8, 2))), int(rng.integers(1, 1000)), 3.0
        eta = 1.0 / (lam * (t + t0))

        def hinge(w_, x=x):
            return max(0.0, 1.0 - w_ @ x)

        grad = np.array([(hinge(w + h * e) - hinge(w - h * e)) / (2 * h) for e in np.eye(d)])
        coef = K.hinge_coef(float(w @ x), lam, t, t0)
        assert_close(coef * x, -eta * grad, rtol=1e-7, what="step")


@pytest.mark.parametrize("r_skip", [1, 7])
@pytest.mark.parametrize("t0", [1.0, 1e-6, 250.0])
def test_shrinks_telescope_with_one_based_t(r_skip, t0):
    """PSAM with sparse storage keeps the shrinks in σ: after T pairs, σ is the product of
    the printed factors 1 − r_skip/(t + t0) at t = r_skip, 2·r_skip, …, which telescopes
    to t0/(T' + t0), T' the last multiple of r_skip (review-second-wave §2): positive for
    any t0 > 0, and the same for every r_skip. (Folds are off: σ is never reset.)"""
    X, y = _ref_stream(8, n=80)
    lrn = models.create("psam", n_features=7, storage="sparse", t0=t0, r_skip=r_skip,
                        pairs=2, capacity=10)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sam_module, "SAM_MIN_SCALE", 0.0)
        lrn = models.from_state(lrn.get_state())
        lrn.learn(X, y)
    T = int(lrn.get_state()["t_"][0])
    last = T // r_skip * r_skip
    sigma = lrn.get_state()["lazy_"][0]
    expected = np.prod([1.0 - r_skip / (t + t0) for t in range(r_skip, last + 1, r_skip)])
    assert sigma == pytest.approx(expected, rel=1e-12)
    assert sigma == pytest.approx(t0 / (last + t0), rel=1e-9)
    assert sigma > 0.0


# ------------------------------------------------------------------ the schedule
@pytest.mark.parametrize("storage", ["dense", "sparse"])
@pytest.mark.parametrize("name", ["asam", "psam"])
@pytest.mark.parametrize("a_skip", [1, 3])
def test_the_average_is_the_mean_of_the_snapshots(name, storage, a_skip):
    """One pair per event: w̃ is the plain mean of w after pairs a_skip, 2·a_skip, …"""
    X, y = _ref_stream(9, n=120)
    lrn = models.create(name, n_features=7, storage=storage, pairs=1, a_skip=a_skip,
                        capacity=15, r_skip=4)
    snapshots = []
    for i in range(len(y)):
        lrn.learn_one(X[i], y[i])
        t = int(lrn.get_state()["t_"][0])
        if t and t % a_skip == 0 and len(snapshots) < t // a_skip:
            snapshots.append(lrn.weights("last"))
    assert len(snapshots) > 20
    assert_close(lrn.weights("average"), np.mean(snapshots, axis=0),
                 rtol=LAZY_AVG_RTOL if storage == "sparse" else 1e-12, what="w̃")


@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_averaging_never_feeds_back_asam_w_is_sam_w(storage):
    X, y = _ref_stream(10)
    a = models.create("asam", n_features=7, storage=storage, seed=4, pairs=2).learn(X, y)
    s = models.create("sam", n_features=7, storage=storage, seed=4, pairs=2).learn(X, y)
    np.testing.assert_array_equal(a.weights("last"), s.weights())
    np.testing.assert_array_equal(a.get_state()["cal_"], s.get_state()["cal_"])
    assert not np.array_equal(a.weights(), s.weights())


@pytest.mark.parametrize("name", NAMES)
def test_t_counts_pairs_and_scores_start_at_zero(name):
    X, y = _ref_stream(11, n=60)
    lrn = models.create(name, n_features=7, pairs=4, capacity=5)
    assert not lrn.score(X).any()
    lrn.learn(X, y)
    first_opposite = [np.argmax(y != y[0])]  # events before it have no partner
    events_with_pairs = len(y) - first_opposite[0]
    assert lrn.get_state()["t_"][0] == 4 * events_with_pairs


def test_calibration_waits_for_a_pair_with_distinct_rows():
    """150 pairs of identical rows leave w = 0 and η0 undefined (the calibration stays
    open past 100 pairs); then the stream goes on as the reference's."""
    X, y = _ref_stream(12)
    X[:60] = 1.0
    for name in ("asam", "sam", "psam"):
        params = _params(name)
        lrn = models.create(name, n_features=7, seed=5, **params).learn(X[:60], y[:60])
        assert lrn.get_state()["t_"][0] > 100 and not lrn.weights("last").any()
        if name != "psam":
            n_cal, total, eta0 = lrn.get_state()["cal_"]
            assert n_cal == lrn.get_state()["t_"][0] and total == 0.0 and eta0 == 0.0
        lrn.learn(X[60:], y[60:])
        _check_against_reference(lrn, _ref(name, 7, 5, params).learn(X, y))


def test_lambda_is_inert_on_the_benchmark_grid():
    """With t0 = 1/(λη0), η_t = η0/(1 + λη0·t): λ ∈ 10^[−10:−7] gives the same model to
    about λη0·T (review-second-wave §2)."""
    X, y = _ref_stream(13, n=300)
    ws = [models.create("asam", n_features=7, lam=lam).learn(X, y).weights()
          for lam in (1e-10, 1e-8, 1e-7)]
    for w in ws[1:]:
        assert_close(w, ws[0], rtol=1e-3, what="λ grid")


# ------------------------------------------------------------------ layouts and I/O
@pytest.mark.parametrize("name", NAMES)
def test_a_failed_batch_with_folds_restores_the_state(name, monkeypatch):
    """Sparse storage: a batch that folds σ (rewriting u and Ã whole) and then fails is
    undone bit for bit, and the learner goes on as a twin."""
    monkeypatch.setattr(sam_module, "SAM_MIN_SCALE", 0.5)
    X, y = _ref_stream(14)
    extra = {"gamma": 1.0} if name == "psam" else {"lam": 1.0}
    lrn = models.create(name, n_features=7, storage="sparse", r_skip=2, **extra)
    lrn.learn(X[:100], y[:100])
    before = lrn.get_state()
    real, real_fold = lrn._learn, K.fold
    folds = []

    def counted(*args):
        folds.append(1)
        real_fold(*args)

    def learn_then_fail(batch, labels, prior):
        real(batch, labels, prior)
        lrn._state["t_"][0] = -1
        raise ZeroDivisionError("injected")

    monkeypatch.setattr(K, "fold", counted)
    lrn._learn = learn_then_fail
    with pytest.raises(models.NonFiniteError):
        lrn.learn(X[100:200], y[100:200])
    assert folds
    assert_states_equal(lrn.get_state(), before)
    del lrn._learn
    twin = models.from_state(before)
    assert_states_equal(lrn.learn(X[100:], y[100:]).get_state(),
                        twin.learn(X[100:], y[100:]).get_state())


@pytest.mark.parametrize("name", ["asam", "psam"])
def test_sparse_snapshot_scores_the_same_bits_from_one_vector(name):
    rng = np.random.default_rng(5)
    d, n = 1 << 12, 400
    indptr = np.arange(n + 1) * 6
    indices = rng.integers(0, 64, n * 6)  # collisions within rows
    values = rng.normal(size=n * 6)
    y = rng.integers(0, 2, n)
    X = (indptr, indices, values)
    lrn = models.create(name, n_features=d, storage="sparse")
    assert not lrn.snapshot().score(X).any()
    lrn.learn(X, y)
    snap = lrn.snapshot()
    assert set(snap._state) == {"num_", "t_", "n_seen_"}
    before = lrn.score(X)
    assert snap.score(X).tobytes() == before.tobytes()
    lrn.learn(X, 1 - y)
    assert snap.score(X).tobytes() == before.tobytes()


def test_scipy_csr_and_tuple_input_give_the_same_model():
    sparse = pytest.importorskip("scipy.sparse")
    d = 1 << 12
    X, y = sparse_stream(200, d, nnz=8, seed=6)
    M = sparse.csr_matrix((X[2], X[1], X[0]), shape=(200, d))
    for name in NAMES:
        for storage in ("dense", "sparse"):
            a = models.create(name, n_features=d, storage=storage).learn(X, y)
            b = models.create(name, n_features=d, storage=storage).learn(M, y)
            assert_states_equal(a.get_state(), b.get_state())
            np.testing.assert_array_equal(a.score(M), b.score(X))


def test_weights_rejects_unknown_choices():
    with pytest.raises(ValueError, match="which must be one of served, last, average"):
        models.create("asam", n_features=3).weights("mean")
    with pytest.raises(ValueError, match="which must be one of served, last; got 'average'"):
        models.create("sam", n_features=3).weights("average")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    name=st.sampled_from(NAMES),
    storage=st.sampled_from(["dense", "sparse"]),
    pairs=st.integers(1, 6),
    r_skip=st.integers(1, 20),
    a_skip=st.integers(1, 20),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    cuts=st.lists(st.integers(1, 60), min_size=1, max_size=4),
)
def test_any_parameters_and_cuts_match_the_reference(seed, name, storage, pairs, r_skip,
                                                     a_skip, scale, cuts):
    rng = np.random.default_rng(seed)
    n, d = 120, 5
    X = rng.normal(size=(n, d)) * scale
    X[rng.random((n, d)) < 0.3] = 0.0
    y = (X[:, 0] + rng.normal(size=n) * scale > 0).astype(int)
    params = {"pairs": pairs, "r_skip": r_skip, "capacity": 9}
    if name != "sam":
        params["a_skip"] = a_skip
    lrn = models.create(name, n_features=d, seed=seed, storage=storage, **params)
    start = 0
    for c in [*cuts, n]:
        stop = min(n, start + c)
        lrn.learn(X[start:stop], y[start:stop])
        start = stop
        if stop == n:
            break
    ref = _ref(name, d, seed, params).learn(X, y)
    _check_against_reference(lrn, ref, LAZY_AVG_RTOL if storage == "sparse" else 1e-9)
