"""OPAUC against the numpy reference, its class statistics and its gradient (spec §4.1)."""

from __future__ import annotations

import numpy as np
import pytest

from aucstream import models
from aucstream.models import _opauc_kernels as K
from tests.helpers import assert_close, stream
from tests.reference.opauc import OPAUCReference


@pytest.mark.parametrize("eta, lam", [(2.0**-6, 1e-4), (0.05, 1e-2)])
def test_matches_the_reference(eta, lam):
    X, y = stream(300, 8, seed=13)
    X = X * 0.8 + 0.3  # uncentred, so the means matter
    lrn = models.create("opauc", n_features=8, eta=eta, lam=lam)
    lrn.learn(X[:90], y[:90]).learn(X[90:91], y[90:91]).learn(X[91:], y[91:])
    ref = OPAUCReference(8, eta=eta, lam=lam).learn(X, y)
    st_ = lrn.get_state()
    assert_close(st_["w_"], ref.w, what="w")
    assert_close(st_["mean_"], [ref.c_neg, ref.c_pos], what="means")
    assert_close(st_["cov_"][0], ref.G_neg, what="Γ₋")
    assert_close(st_["cov_"][1], ref.G_pos, what="Γ₊")
    assert st_["n_seen_"].tolist() == [ref.n_neg, ref.n_pos]
    assert_close(lrn.score(X[:40]), X[:40] @ ref.w, what="scores")


def test_class_statistics_are_the_population_moments():
    X, y = stream(250, 6, seed=4)
    X = 3.0 * X - 1.0
    for stop in (1, 7, 60, 250):
        lrn = models.create("opauc", n_features=6).learn(X[:stop], y[:stop])
        st_ = lrn.get_state()
        for c in (0, 1):
            rows = X[:stop][y[:stop] == c]
            assert st_["n_seen_"][c] == len(rows)
            if len(rows) == 0:
                assert not st_["mean_"][c].any() and not st_["cov_"][c].any()
                continue
            assert_close(st_["mean_"][c], rows.mean(axis=0), rtol=1e-12, what="mean")
            cov = np.cov(rows, rowvar=False, bias=True).reshape(6, 6)
            assert_close(st_["cov_"][c], cov, rtol=1e-12, what="covariance")
            assert np.array_equal(st_["cov_"][c], st_["cov_"][c].T)  # exactly symmetric


def _objective(w, x, t, opposite, lam):
    """λ/2‖w‖² + mean_j ½(1 − y_t wᵀ(x_t − x_j))² over the opposite-class events."""
    margins = 1.0 - t * ((x - opposite) @ w)
    return 0.5 * lam * w @ w + np.mean(0.5 * margins**2)


@pytest.mark.parametrize("label", [0, 1])
def test_the_step_is_the_gradient_of_the_mean_pairwise_loss(label):
    X, y = stream(120, 5, seed=8)
    X = X + 0.5
    eta, lam = 0.05, 0.03
    lrn = models.create("opauc", n_features=5, eta=eta, lam=lam).learn(X[:100], y[:100])
    x = X[100] * 1.3
    t = 1.0 if label == 1 else -1.0
    opposite = X[:100][y[:100] == 1 - label]
    w0 = lrn.get_state()["w_"]
    h = 1e-6
    fd = np.array([(_objective(w0 + h * e, x, t, opposite, lam)
                    - _objective(w0 - h * e, x, t, opposite, lam)) / (2 * h)
                   for e in np.eye(5)])
    # through the learner: w1 = w0 − η g
    w1 = lrn.learn(x[None, :], [label]).get_state()["w_"]
    assert_close((w0 - w1) / eta, fd, rtol=1e-7, what="learner step / η")
    # and the kernel's gradient on the opposite class's statistics
    twin = models.create("opauc", n_features=5, eta=eta, lam=lam).learn(X[:100], y[:100])
    s = twin.get_state()
    o = 1 - label
    g = np.empty(5)
    K.gradient(w0, x, t, s["mean_"][o], s["cov_"][o], lam, np.empty(5), g)
    assert_close(g, fd, rtol=1e-7, what="gradient")


def test_no_step_until_the_opposite_class_has_been_seen():
    X, _ = stream(50, 4, seed=1)
    lrn = models.create("opauc", n_features=4).learn(X[:30], np.ones(30, int))
    st_ = lrn.get_state()
    assert not st_["w_"].any() and st_["n_seen_"].tolist() == [0, 30]
    assert_close(st_["mean_"][1], X[:30].mean(axis=0), rtol=1e-12, what="mean")
    assert not lrn.score(X).any()
    lrn.learn(X[30:31], [0])  # the first negative takes a step against the positives
    assert lrn.get_state()["w_"].any()


def test_defaults():
    lrn = models.create("opauc", n_features=3)
    assert lrn.params == {"eta": 2.0**-6, "lam": 1e-4}
    with pytest.raises(ValueError, match="dense input only"):
        lrn.learn((np.array([0, 1]), np.array([0]), np.array([1.0])), [1])
