"""OAM family (OAM_seq, OAM_gra, FOAM, NOAM): agreement with the numpy references in
``tests/reference/oam.py`` and the hand-checkable properties of the specs (§7)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aucstream import models
from aucstream.models import _oam_kernels as K
from aucstream.models._buffers import RESERVOIR
from aucstream.models._features import gaussian_gram
from aucstream.models._sparse import csr_to_dense
from tests.helpers import assert_close, assert_states_equal, sparse_stream, stream
from tests.reference.oam import FOAMRef, NOAMRef, OAMRef, kappa, unit


def buffer_rows(state: dict, c: int) -> np.ndarray:
    """Rows of class ``c``'s buffer in insertion order, dense, from a learner state."""
    cap = state["order_"].shape[1]
    size = int(min(state["n_seen_"][c], cap))
    slots = state["order_"][c, :size]
    if "buf_" in state:
        return state["buf_"][c, slots]
    out = np.zeros((size, state["n_features"]))
    for r, s in enumerate(slots):
        nnz = state["bnnz_"][c, s]
        out[r, state["bidx_"][c, s, :nnz]] = state["bval_"][c, s, :nnz]
    return out


def normalize(x: np.ndarray) -> np.ndarray:
    return np.array([unit(r) for r in x])


def assert_buffers_match(state: dict, ref_rows: list[list], what: str) -> None:
    for c in (0, 1):
        got = buffer_rows(state, c)
        assert got.shape[0] == len(ref_rows[c]), (what, c)
        if len(ref_rows[c]):
            assert_close(got, np.array(ref_rows[c]), what=f"{what} buffer {c}")


# ---------------------------------------------------------------- reference: OAM
@pytest.mark.parametrize("storage", ["dense", "sparse"])
@pytest.mark.parametrize("name", ["oam_seq", "oam_gra"])
def test_oam_matches_reference_on_a_dense_stream(name, storage):
    X, y = stream(400, 8, seed=11)
    C = 0.05
    lrn = models.create(name, n_features=8, seed=4, C=C, capacity=20, storage=storage)
    lrn.learn(X[:150], y[:150]).learn(X[150:], y[150:])
    ref = OAMRef(8, C=C, capacity=20, seed=4, sequential=name == "oam_seq").learn(X, y)
    st_ = lrn.get_state()
    assert ref.res.n == [int((y == 0).sum()), int((y == 1).sum())] == list(st_["n_seen_"])
    assert min(ref.res.n) > 60  # both reservoirs are full and have replaced rows
    assert_close(st_["w_"], ref.w, what="w")
    assert_buffers_match(st_, ref.res.rows, name)
    assert_close(lrn.score(X), X @ ref.w, what="scores")


@pytest.mark.parametrize("name", ["oam_seq", "oam_gra"])
def test_oam_matches_reference_on_a_sparse_stream(name):
    d = 3000
    (indptr, indices, values), y = sparse_stream(300, d, nnz=15, seed=5)
    X = csr_to_dense(indptr, indices, values, d)
    lrn = models.create(name, n_features=d, seed=1, C=0.1, capacity=25, storage="sparse")
    lrn.learn((indptr, indices, values), y)
    ref = OAMRef(d, C=0.1, capacity=25, seed=1, sequential=name == "oam_seq").learn(X, y)
    st_ = lrn.get_state()
    assert_close(st_["w_"], ref.w, what="w")
    assert_buffers_match(st_, ref.res.rows, name)


@pytest.mark.parametrize("name", ["oam_seq", "oam_gra"])
def test_oam_dense_and_sparse_storage_agree(name):
    X, y = stream(300, 10, seed=3)
    X[np.abs(X) < 0.7] = 0.0
    a = models.create(name, n_features=10, C=0.2, capacity=15, storage="dense").learn(X, y)
    b = models.create(name, n_features=10, C=0.2, capacity=15, storage="sparse").learn(X, y)
    assert_close(a.get_state()["w_"], b.get_state()["w_"], rtol=1e-12, what="w")
    np.testing.assert_array_equal(a.get_state()["order_"], b.get_state()["order_"])


def test_oam_c_t_grows_with_the_opposite_count():
    # one positive against 50 buffered negatives, capacity 10: C_t = C·50/10
    rng = np.random.default_rng(0)
    neg = rng.normal(size=(50, 4))
    pos = rng.normal(size=(1, 4)) + 3.0
    lrn = models.create("oam_gra", n_features=4, C=0.1, capacity=10).learn(neg, np.zeros(50))
    assert not lrn.get_state()["w_"].any()
    st_ = lrn.get_state()
    lrn.learn(pos, [1])
    buf = buffer_rows(st_, 0)
    expected = (0.1 * 50 / 10 / 2) * (len(buf) * pos[0] - buf.sum(0))
    assert_close(lrn.get_state()["w_"], expected, rtol=1e-12)


# ---------------------------------------------------------------- reference: FOAM
@pytest.mark.parametrize(
    "params",
    [
        {"eta": 0.02, "n_components": 12},
        {"eta": 3.0, "n_components": 10, "rff_scale": "sqrt_m", "normalize": False,
         "sigma": 2.0},
    ],
)
def test_foam_matches_reference(params):
    X, y = stream(350, 5, seed=8)
    full = {"sigma": 1.0, "capacity": 20, "normalize": True, "rff_scale": "none", **params}
    lrn = models.create("foam", n_features=5, seed=2, **full)
    lrn.learn(X[:100], y[:100]).learn(X[100:], y[100:])
    ref = FOAMRef(5, seed=2, **full).learn(X, y)
    st_ = lrn.get_state()
    np.testing.assert_array_equal(st_["theta_"], ref.theta)
    assert list(st_["n_seen_"]) == ref.res.n and min(ref.res.n) > 60
    assert_close(st_["w_"], ref.w, what="w")
    assert_buffers_match(st_, ref.res.rows, "foam")
    assert_close(lrn.score(X[:50]), ref.score(X[:50]), what="scores")
    np.testing.assert_array_equal(st_["rng_"], ref.res.rng)


def test_foam_minibatch_step_by_hand_in_the_kernel():
    # |B| = 3 negatives, two of which violate: w += (η/(2·3))·y·(2 z_t − z_a − z_b)
    eta = 0.3
    z_t = np.array([[1.0, 0.0]])
    buf = np.zeros((2, 3, 2))
    buf[0] = [[0.0, 0.0], [0.5, 0.0], [-3.0, 0.0]]  # margins 0.5, 0.25, 2.0 at w below
    w = np.array([0.5, 0.0])
    order = np.array([[0, 1, 2], [0, 0, 0]])
    n_seen = np.array([3, 0])
    rng = models._rng.new_state(0)
    total = K.minibatch_learn(z_t, np.array([1.0]), w, buf, order, n_seen, rng, RESERVOIR,
                              eta, False, np.zeros(0))
    assert total == 2
    expected = np.array([0.5, 0.0]) + eta / 6 * (2 * z_t[0] - buf[0, 0] - buf[0, 1])
    np.testing.assert_allclose(w, expected, rtol=0, atol=1e-15)


def test_foam_minibatch_step_by_hand_through_the_learner():
    eta = 0.05
    lrn = models.create("foam", n_features=3, seed=0, eta=eta, capacity=3, n_components=6)
    rng = np.random.default_rng(1)
    x_t = np.array([1.0, 0.2, 0.1])
    near = x_t + 0.05 * rng.normal(size=(2, 3))
    far = np.array([[-1.0, 0.3, -0.9]])
    negatives = np.vstack([near, far])
    z_t = lrn._features(x_t[None])[0]
    z = lrn._features(negatives)
    state = lrn.get_state()
    diff_c = z_t - z[2]
    state["w_"] = 2.0 * diff_c / (diff_c @ diff_c)  # margin 2 against the far negative
    state["buf_"][0] = z
    state["order_"][0] = [0, 1, 2]
    state["n_seen_"][:] = [3, 0]
    margins = (z_t - z) @ state["w_"]
    assert margins[0] < 1 and margins[1] < 1 and margins[2] >= 1
    lrn = models.from_state(state)
    lrn.learn(x_t[None], [1])
    expected = state["w_"] + eta / (2 * 3) * (2 * z_t - z[0] - z[1])
    assert_close(lrn.get_state()["w_"], expected, rtol=1e-14)


def test_foam_scaled_features_are_the_unscaled_model_with_eta_over_m():
    X, y = stream(300, 4, seed=6)
    m = 16
    a = models.create("foam", n_features=4, n_components=m, eta=0.01, capacity=20).learn(X, y)
    b = models.create("foam", n_features=4, n_components=m, eta=0.01 * m, capacity=20,
                      rff_scale="sqrt_m").learn(X, y)
    assert_close(b.get_state()["w_"], a.get_state()["w_"] * math.sqrt(m), rtol=1e-9)
    assert_close(b.score(X), a.score(X), rtol=1e-9)


@pytest.mark.parametrize("scale", ["sqrt_m", "none"])
def test_random_fourier_features_approximate_the_gaussian_kernel(scale):
    m, sigma = 4096, 1.0
    lrn = models.create("foam", n_features=3, seed=7, n_components=m, sigma=sigma,
                        normalize=False, rff_scale=scale)
    rng = np.random.default_rng(0)
    x = rng.normal(scale=0.6, size=(20, 3))
    yv = rng.normal(scale=0.6, size=(20, 3))
    zx, zy = lrn._features(x), lrn._features(yv)
    approx = np.einsum("ij,ij->i", zx, zy) / (1.0 if scale == "sqrt_m" else m)
    exact = np.array([kappa(a, b, sigma) for a, b in zip(x, yv, strict=True)])
    assert exact.min() < 0.3 < 0.8 < exact.max()
    assert np.abs(approx - exact).max() < 0.05
    np.testing.assert_allclose(np.einsum("ij,ij->i", zx, zx),
                               1.0 if scale == "sqrt_m" else m, rtol=1e-12)


# ---------------------------------------------------------------- reference: NOAM
NOAM_PARAMS = {"eta": 1.5, "sigma": 0.8, "budget": 15, "rank_fraction": 0.4,
               "capacity": 12, "normalize": True}


def _switch_index(lrn_params: dict, X, y) -> int:
    ref = NOAMRef(X.shape[1], seed=3, **lrn_params)
    for t in range(len(y)):
        ref.learn(X[t:t + 1], y[t:t + 1])
        if ref.phase == 2:
            return t + 1
    raise AssertionError("the stream never switched")


def test_noam_matches_reference_in_both_phases():
    X, y = stream(320, 6, seed=9)
    t0 = _switch_index(NOAM_PARAMS, X, y)
    assert 10 < t0 < 120
    before = t0 - 1  # phase 1 still: the next event triggers the switch

    lrn = models.create("noam", n_features=6, seed=3, **NOAM_PARAMS)
    lrn.learn(X[:before], y[:before])
    ref = NOAMRef(6, seed=3, **NOAM_PARAMS).learn(X[:before], y[:before])
    st_ = lrn.get_state()
    assert st_["phase_"][0] == 0 and ref.phase == 1
    q = int(st_["n_sv_"][0])
    assert q == len(ref.S) > 0
    np.testing.assert_array_equal(st_["sv_id_"][:q], list(ref.S))
    assert_close(st_["sv_x_"][:q], np.array([v[0] for v in ref.S.values()]), what="SVs")
    assert_close(st_["sv_alpha_"][:q], np.array([v[1] for v in ref.S.values()]), what="α")
    for c in (0, 1):
        rows = ref.res.rows[c]
        slots = st_["order_"][c, :len(rows)]
        np.testing.assert_array_equal(st_["rbuf_id_"][c, slots], [i for i, _ in rows])
        assert_close(st_["rbuf_"][c, slots], np.array([x for _, x in rows]), what="raw buffer")
    assert_close(lrn.score(X[-40:]), ref.score(X[-40:]), what="phase-1 scores")

    lrn.learn(X[before:], y[before:])
    ref.learn(X[before:], y[before:])
    st_ = lrn.get_state()
    assert st_["phase_"][0] == 1 and ref.phase == 2 and ref.switched_at == t0
    q, k = int(st_["n_sv_"][0]), int(st_["rank_"][0])
    assert q == len(ref.L) >= 15 and k == ref.P.shape[1] == 6
    assert list(st_["n_seen_"]) == ref.res.n and min(ref.res.n) > 90
    assert_close(st_["sv_x_"][:q], np.array(ref.L), what="landmarks")
    assert_close(st_["proj_"][:q, :k], ref.P, what="P")
    assert not st_["proj_"][q:].any() and not st_["proj_"][:, k:].any()
    assert_close(st_["w_"][:k], ref.w, what="w")
    assert not st_["w_"][k:].any()
    assert_buffers_match({**st_, "buf_": st_["buf_"][:, :, :k]}, ref.res.rows, "noam")
    assert_close(lrn.score(X[:60]), ref.score(X[:60]), what="phase-2 scores")


def test_noam_switch_in_the_middle_of_a_batch_equals_event_by_event():
    X, y = stream(200, 6, seed=9)
    whole = models.create("noam", n_features=6, seed=3, **NOAM_PARAMS).learn(X, y)
    one = models.create("noam", n_features=6, seed=3, **NOAM_PARAMS)
    for i in range(len(y)):
        one.learn_one(X[i], y[i])
    assert_states_equal(whole.get_state(), one.get_state())


def _learn_until_switch(lrn, X, y):
    for i in range(len(y)):
        lrn.learn(X[i:i + 1], y[i:i + 1])
        if lrn.get_state()["phase_"][0] == 1:
            return i
    raise AssertionError("no switch")


def test_noam_switch_is_exact_when_k_covers_every_support_vector():
    X, y = stream(200, 5, seed=2)
    lrn = models.create("noam", n_features=5, seed=0, budget=10, rank_fraction=5.0,
                        capacity=8, sigma=0.25)
    _learn_until_switch(lrn, X, y)
    st_ = lrn.get_state()
    q = int(st_["n_sv_"][0])
    assert q >= 10 and int(st_["rank_"][0]) == q  # k = Q_eff, nothing dropped by the floor
    x = np.random.default_rng(1).normal(size=(50, 5))
    before = K.expansion_scores(normalize(x), st_["sv_x_"], st_["sv_alpha_"], q, 0.25)
    after = lrn.score(x)
    assert np.abs(before).max() > 1e-3
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-10 * np.abs(before).max())


def test_noam_switch_with_lower_rank_is_the_projection_on_the_top_eigenvectors():
    X, y = stream(200, 5, seed=2)
    lrn = models.create("noam", n_features=5, seed=0, budget=20, capacity=8, sigma=0.5)
    _learn_until_switch(lrn, X, y)
    st_ = lrn.get_state()
    q, k = int(st_["n_sv_"][0]), int(st_["rank_"][0])
    assert k == 8 < q
    L, alpha = st_["sv_x_"][:q], st_["sv_alpha_"][:q]
    lam, V = np.linalg.eigh(gaussian_gram(L, L, 0.5))
    Vk = V[:, np.argsort(lam)[::-1][:k]]
    x = normalize(np.random.default_rng(1).normal(size=(50, 5)))
    c = np.array([[kappa(lm, xi, 0.5) for lm in L] for xi in x])
    expected = c @ Vk @ Vk.T @ alpha
    np.testing.assert_allclose(lrn.score(x), expected, rtol=0,
                               atol=1e-10 * np.abs(expected).max())
    full = c @ alpha
    assert np.abs(full - expected).max() > 1e-6  # the switch really is lossy here


def test_noam_without_a_switch_scores_with_the_kernel_expansion():
    X, y = stream(60, 4, seed=1)
    lrn = models.create("noam", n_features=4, budget=4000, capacity=10).learn(X, y)
    st_ = lrn.get_state()
    assert st_["phase_"][0] == 0 and st_["n_sv_"][0] > 0
    ref = NOAMRef(4, seed=0, eta=2.0, sigma=1.0, budget=4000, rank_fraction=0.4, capacity=10,
                  normalize=True).learn(X, y)
    assert_close(lrn.score(X), ref.score(X), what="expansion scores")


def test_noam_refuses_inconsistent_counters():
    X, y = stream(100, 4, seed=1)
    good = models.create("noam", n_features=4, budget=10, capacity=5).learn(X, y).get_state()
    for key, value in (("phase_", 2), ("n_sv_", 10_000), ("rank_", 999)):
        with pytest.raises(ValueError, match="inconsistent"):
            models.from_state({**good, key: np.array([value])})
    bad_order = good["order_"].copy()
    bad_order[0, 0] = bad_order[0, 1]
    with pytest.raises(ValueError, match="order_"):
        models.from_state({**good, "order_": bad_order})


# ---------------------------------------------------------------- OAM_seq guard
@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_oam_seq_skips_a_duplicate_pair_without_nan(storage):
    x = np.array([[0.3, -1.2, 2.0]])
    lrn = models.create("oam_seq", n_features=3, C=1.0, capacity=5, storage=storage)
    lrn.learn(x, [0]).learn(x, [1])  # the only pair has δ = 0
    assert np.isfinite(lrn.get_state()["w_"]).all()
    assert not lrn.get_state()["w_"].any()
    other = np.array([[1.0, 0.0, 0.0]])
    lrn.learn(other, [1])  # the next pair is a real one and moves w
    w = lrn.get_state()["w_"]
    assert np.isfinite(w).all() and w.any()
    # the duplicate positive still sits in the buffer; a later negative is fine too
    lrn.learn(x, [0])
    assert np.isfinite(lrn.get_state()["w_"]).all()


# ---------------------------------------------------------------- properties
_LEARNERS = {
    "oam_seq": {"C": 0.1},
    "oam_gra": {"C": 0.01},
    "foam": {"n_components": 4},
    "noam": {"budget": 6},
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(_LEARNERS)),
    capacity=st.integers(1, 9),
    labels=st.lists(st.booleans(), min_size=1, max_size=60),
    seed=st.integers(0, 2**32),
)
def test_buffers_never_exceed_capacity_and_hold_each_slot_once(name, capacity, labels, seed):
    y = np.array(labels)
    X = np.random.default_rng(seed).normal(size=(len(y), 3))
    lrn = models.create(name, n_features=3, seed=seed, capacity=capacity, **_LEARNERS[name])
    for start in range(0, len(y), 7):
        lrn.learn(X[start:start + 7], y[start:start + 7])
        neg, pos = lrn.n_seen
        fill = lrn.buffer_fill
        assert fill == (min(neg, capacity), min(pos, capacity))
        order = lrn.get_state()["order_"]
        for c, size in enumerate(fill):
            assert sorted(order[c, :size]) == list(range(size))
    assert lrn.n_seen == (int((~y).sum()), int(y.sum()))
    assert np.isfinite(lrn.score(X)).all()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), capacity=st.integers(2, 12), budget=st.integers(1, 30))
def test_noam_support_set_stays_within_budget_plus_capacity(seed, capacity, budget):
    X, y = stream(80, 4, seed=seed % 1000)
    lrn = models.create("noam", n_features=4, seed=seed, capacity=capacity, budget=budget)
    lrn.learn(X, y)
    st_ = lrn.get_state()
    q = int(st_["n_sv_"][0])
    assert q <= budget + capacity
    if st_["phase_"][0]:
        assert q >= budget and 1 <= st_["rank_"][0] <= min(q, lrn._rank_cap)
        assert len(set(st_["sv_id_"][:q])) == q
    else:
        assert q < budget
    assert np.isfinite(lrn.score(X)).all()


def test_defaults_rank_reasonably_on_a_nonlinear_stream():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, 3))
    y = ((X ** 2).sum(1) < 2.0).astype(int)
    for name in ("foam", "noam"):
        lrn = models.create(name, n_features=3, normalize=False).learn(X[:1000], y[:1000])
        assert models.auc(y[1000:], lrn.score(X[1000:])) > 0.9, name
