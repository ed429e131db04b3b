"""NSAUC (seed 002, Algorithm 3 on the k-means++ Nyström map): agreement with the numpy
reference in ``tests/reference/nsauc.py`` and properties of Algorithm 3 that could fail."""

from __future__ import annotations

import numpy as np
import pytest

from aucstream import models
from tests.helpers import assert_close, stream
from tests.reference.nsauc import Algorithm3, nsauc_ref

PARAMS = {"r_skip": 4, "a_skip": 3, "capacity": 9, "n_components": 10, "warmup": 60}


def buffer_rows(state: dict, c: int) -> np.ndarray:
    cap = state["order_"].shape[1]
    size = int(min(state["n_seen_"][c], cap))
    return state["buf_"][c, state["order_"][c, :size]]


@pytest.mark.parametrize("cuts", [(), (1, 59, 60, 61), (33, 200), (60,)])
def test_nsauc_matches_the_reference_across_batch_splits(cuts):
    X, y = stream(300, 5, seed=12)
    lrn = models.create("nsauc", n_features=5, seed=8, **PARAMS)
    ref = nsauc_ref(5, seed=8, **PARAMS)
    prior = np.concatenate([lrn.score_then_learn(X[a:b], y[a:b])
                            for a, b in zip((0, *cuts), (*cuts, 300), strict=True)])
    expected = []
    for x, label in zip(X, y, strict=True):
        expected.append(ref.score(x[None])[0])
        ref.learn_one(x, label)
    s = lrn.get_state()
    alg = ref.learner
    assert lrn.rank == ref.map.r
    assert int(s["t_"][0]) == alg.t > 100  # the η0 calibration closed, shrinks and averages ran
    assert s["cal_"][0] == alg.cal_n and s["cal_"][1] == pytest.approx(alg.cal_sum, rel=1e-12)
    assert s["cal_"][2] == pytest.approx(alg.eta0, rel=1e-12)
    assert_close(s["w_"], alg.w, what="w")
    assert_close(s["wbar_"], alg.wbar, what="w̃")
    assert_close(lrn.weights(), alg.served(), what="served")
    for c in (0, 1):
        assert_close(buffer_rows(s, c), np.array(alg.res.rows[c]), what=f"buffer {c}")
    assert (prior[:60] == 0).all()
    assert_close(prior, np.array(expected), what="prequential scores")
    assert_close(lrn.score(X), ref.score(X), what="scores")


def test_the_loss_step_is_minus_the_hinge_gradient():
    """Line 5 with the dloss reading: a violated pair moves w by −η_t·∇_w max(0, 1 − wᵀx_t),
    the gradient taken by central finite differences (the printed +ℓ′ with ℓ′ = −1 would
    climb it)."""
    rng = np.random.default_rng(0)
    alg = Algorithm3(6, np.zeros(4, np.uint64), lam=1e-2, eta_scale=1.0, r_skip=1000,
                     a_skip=1000, capacity=5, pairs=1)
    alg.w = rng.normal(size=6) * 0.1
    x_t = rng.normal(size=6)
    assert alg.w @ x_t < 1
    w0 = alg.w.copy()
    alg.iterate(x_t)
    eta_t = 1.0 / (alg.lam * (1 + 1.0 / (alg.lam * alg.eta0)))

    def hinge(w):
        return max(0.0, 1.0 - w @ x_t)

    h = 1e-6
    grad = np.array([(hinge(w0 + h * e) - hinge(w0 - h * e)) / (2 * h) for e in np.eye(6)])
    assert_close(alg.w - w0, -eta_t * grad, rtol=1e-8, what="step")
    assert hinge(alg.w) < hinge(w0)


def test_shrink_and_average_follow_the_printed_schedule():
    X, y = stream(200, 4, seed=3)
    lrn = models.create("nsauc", n_features=4, seed=1, r_skip=7, a_skip=5, n_components=6,
                        warmup=30).learn(X, y)
    ref = nsauc_ref(4, seed=1, r_skip=7, a_skip=5, n_components=6, warmup=30).learn(X, y)
    alg = ref.learner
    t = int(lrn.get_state()["t_"][0])
    assert alg.rcount == 7 - t % 7 and alg.acount == 5 - t % 5 and alg.q == t // 5
    assert_close(lrn.weights("average"), alg.wbar, what="w̃")
    assert_close(lrn.weights("last"), alg.w, what="w")


def test_nsauc_learns_a_nonlinear_boundary_that_a_linear_model_cannot():
    """Positives inside a ball, negatives outside: no linear score ranks them, the
    Gaussian-kernel features do (and a sign error would drive the AUC towards 0)."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(3000, 3))
    y = (np.linalg.norm(X, axis=1) < 1.2).astype(int)
    lrn = models.create("nsauc", n_features=3, seed=0, n_components=50, warmup=500)
    lrn.learn(X[:2500], y[:2500])
    assert models.auc(y[2500:], lrn.score(X[2500:])) > 0.95
    linear = models.create("asam", n_features=3, seed=0).learn(X[:2500], y[:2500])
    assert models.auc(y[2500:], linear.score(X[2500:])) < 0.7


def test_served_weights_before_the_first_average_and_before_the_map():
    X, y = stream(80, 4, seed=2)
    lrn = models.create("nsauc", n_features=4, seed=0, a_skip=1000, n_components=6,
                        warmup=30)
    assert lrn.weights().shape == (0,)
    lrn.learn(X, y)
    assert int(lrn.get_state()["t_"][0]) < 1000
    np.testing.assert_array_equal(lrn.weights(), lrn.weights("last"))
    assert not lrn.weights("average").any()
    with pytest.raises(ValueError, match="which must be one of"):
        lrn.weights("bogus")
