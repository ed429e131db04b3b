"""AdaOAM against the numpy reference, by hand, and the properties its Notes claim."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aucstream import models
from tests.helpers import assert_close, stream
from tests.reference.adaoam import AdaOAMReference, pairwise_objective


def _check(lrn, ref, X):
    st_ = lrn.get_state()
    assert_close(st_["w_"], ref.w, what="w")
    assert_close(st_["gsq_"], ref.sumsq, what="G = Σ g²")
    assert_close(st_["mean_"], [ref.c_neg, ref.c_pos], what="means")
    assert_close(st_["cov_"][0], ref.G_neg, what="Γ₋")
    assert_close(st_["cov_"][1], ref.G_pos, what="Γ₊")
    assert st_["n_seen_"].tolist() == [ref.T_neg, ref.T_pos]
    assert_close(lrn.score(X), X @ ref.w, what="scores")


@pytest.mark.parametrize(("eta", "delta", "lam"),
                         [(2.0**-7, 0.5, 1e-4), (0.3, 0.05, 1e-2), (2.0**4, 3.0, 0.0)])
@pytest.mark.parametrize("cuts", [(300,), (90, 91), (1, 2, 3, 150)])
def test_matches_the_reference(eta, delta, lam, cuts):
    X, y = stream(300, 8, seed=13)
    X = X * 0.8 + 0.3  # uncentred, so the means matter
    lrn = models.create("adaoam", n_features=8, eta=eta, delta=delta, lam=lam)
    start = 0
    for stop in (*cuts, 300):
        lrn.learn(X[start:stop], y[start:stop])
        start = stop
    ref = AdaOAMReference(8, eta=eta, delta=delta, lam=lam).learn(X, y)
    _check(lrn, ref, X[:40])


def test_prequential_scores_match_the_reference():
    X, y = stream(200, 5, seed=3)
    X = 2.0 * X - 0.7
    lrn = models.create("adaoam", n_features=5, eta=0.05)
    prior = lrn.score_then_learn(X, y)
    ref = AdaOAMReference(5, eta=0.05)
    expected = np.empty(len(y))
    for t in range(len(y)):
        expected[t] = X[t] @ ref.w
        ref.learn_one(X[t], 1 if y[t] == 1 else -1)
    assert_close(prior, expected, what="prequential scores")
    _check(lrn, ref, X[:30])


def test_three_hand_computed_events():
    """d = 2, η = 1, δ = ½, λ = 0, written out from Algorithm 1."""
    lrn = models.create("adaoam", n_features=2, eta=1.0, delta=0.5, lam=0.0)
    # x₁ = (1, 0), y = +1: T₊ = 1, c₊ = (1, 0), Γ₊ = 0; no negative yet, so no step.
    lrn.learn(np.array([[1.0, 0.0]]), [1])
    st_ = lrn.get_state()
    assert not st_["w_"].any() and not st_["gsq_"].any()
    # x₂ = (0, 1), y = −1: c₋ = (0, 1), Γ₋ = 0. g = λw + x − c₊ + (x − c₊)(x − c₊)ᵀw + Γ₊w
    # = (0, 1) − (1, 0) = (−1, 1); G = (1, 1); w = −(−1, 1)/(½ + 1) = (⅔, −⅔).
    lrn.learn(np.array([[0.0, 1.0]]), [0])
    st_ = lrn.get_state()
    assert_close(st_["w_"], [2 / 3, -2 / 3], rtol=1e-15, what="w after 2")
    assert_close(st_["gsq_"], [1.0, 1.0], rtol=0.0, what="G after 2")
    # x₃ = (2, 0), y = +1: c₊ = (1.5, 0), Γ₊ = diag(¼, 0). z = x − c₋ = (2, −1), zᵀw = 2,
    # g = −x + c₋ + z·(zᵀw) + Γ₋w = (−2, 1) + (4, −2) = (2, −1); G = (5, 2);
    # w = (⅔, −⅔) − (2/(½ + √5), −1/(½ + √2)).
    lrn.learn(np.array([[2.0, 0.0]]), [1])
    st_ = lrn.get_state()
    w3 = [2 / 3 - 2 / (0.5 + math.sqrt(5.0)), -2 / 3 + 1 / (0.5 + math.sqrt(2.0))]
    assert_close(st_["w_"], w3, rtol=1e-15, what="w after 3")
    assert_close(st_["gsq_"], [5.0, 2.0], rtol=0.0, what="G after 3")
    assert_close(st_["mean_"][1], [1.5, 0.0], rtol=0.0, what="c₊")
    assert_close(st_["cov_"][1], [[0.25, 0.0], [0.0, 0.0]], rtol=0.0, what="Γ₊")


@pytest.mark.parametrize("label", [0, 1])
def test_the_step_is_adagrad_on_the_gradient_of_the_mean_pairwise_loss(label):
    X, y = stream(120, 5, seed=8)
    X = X + 0.5
    eta, delta, lam = 0.05, 0.2, 0.03
    lrn = models.create("adaoam", n_features=5, eta=eta, delta=delta, lam=lam)
    lrn.learn(X[:100], y[:100])
    x = X[100] * 1.3
    t = 1 if label == 1 else -1
    opposite = X[:100][y[:100] == 1 - label]
    before = lrn.get_state()
    w0, G0 = before["w_"], before["gsq_"]
    h = 1e-6
    fd = np.array([(pairwise_objective(w0 + h * e, x, t, opposite, lam)
                    - pairwise_objective(w0 - h * e, x, t, opposite, lam)) / (2 * h)
                   for e in np.eye(5)])
    after = lrn.learn(x[None, :], [label]).get_state()
    assert_close(after["gsq_"] - G0, fd * fd, rtol=1e-7, what="G increment = g²")
    step = eta * fd / (delta + np.sqrt(G0 + fd * fd))
    assert_close(w0 - after["w_"], step, rtol=1e-7, what="w step = η g/(δ + √G)")


def test_every_coordinate_moves_less_than_eta_per_event():
    """|Δw_i| = η|g_i|/(δ + √G_i) < η since G_i ≥ g_i²: true at any scale and any η."""
    X, y = stream(300, 6, seed=5)
    X = 50.0 * X + 20.0  # large, uncentred rows: OPAUC at this η diverges on them
    eta = 0.5
    lrn = models.create("adaoam", n_features=6, eta=eta, delta=1e-3)
    w = lrn.get_state()["w_"]
    moved = 0.0
    for t in range(len(y)):
        lrn.learn(X[t:t + 1], y[t:t + 1])
        w_new = lrn.get_state()["w_"]
        moved = max(moved, float(np.abs(w_new - w).max()))
        w = w_new
    assert 0.5 * eta < moved < eta
    with pytest.raises(models.NonFiniteError):
        models.create("opauc", n_features=6, eta=eta).learn(X, y)


def test_default_steps_never_increase_the_event_loss_on_unit_rows():
    """The Notes' stability bound: with P = diag(1/(δ + s)) ≤ I/δ and η/δ = 2^−6, each
    step decreases the per-event objective L_t (a quadratic with λ_max(H) ≤ λ + ‖z‖² +
    λ_max(Γ) ≤ 4 + λ on unit rows), from the very first step on."""
    X, y = stream(250, 7, seed=9)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    lrn = models.create("adaoam", n_features=7)
    lam = lrn.params["lam"]
    seen: list[list[np.ndarray]] = [[], []]
    checked = 0
    for t in range(len(y)):
        c = int(y[t])
        w0 = lrn.get_state()["w_"]
        lrn.learn(X[t:t + 1], y[t:t + 1])
        seen[c].append(X[t])
        if seen[1 - c]:
            sign = 1 if c == 1 else -1
            opp = np.array(seen[1 - c])
            w1 = lrn.get_state()["w_"]
            before = pairwise_objective(w0, X[t], sign, opp, lam)
            after = pairwise_objective(w1, X[t], sign, opp, lam)
            assert after < before, t
            checked += 1
    assert checked > 200


def test_a_huge_delta_makes_it_opauc_with_step_eta_over_delta():
    """H_t = δI + diag(s_t) ≈ δI when δ ≫ s_t: AdaOAM(η, δ) takes OPAUC's steps with η/δ
    (relative difference ≈ s_t/δ)."""
    X, y = stream(200, 6, seed=11)
    X = X + 0.2
    delta = 1e6
    ada = models.create("adaoam", n_features=6, eta=0.02 * delta, delta=delta).learn(X, y)
    opauc = models.create("opauc", n_features=6, eta=0.02).learn(X, y)
    s = np.sqrt(ada.get_state()["gsq_"]).max()
    assert 0.0 < s / delta < 1e-4
    assert_close(ada.get_state()["w_"], opauc.get_state()["w_"], rtol=100 * s / delta,
                 what="w")
    assert_close(ada.get_state()["cov_"], opauc.get_state()["cov_"], rtol=0.0, what="Γ")


def test_no_step_until_the_opposite_class_has_been_seen():
    X, _ = stream(50, 4, seed=1)
    lrn = models.create("adaoam", n_features=4).learn(X[:30], np.zeros(30, int))
    st_ = lrn.get_state()
    assert not st_["w_"].any() and not st_["gsq_"].any()
    assert st_["n_seen_"].tolist() == [30, 0]
    assert not lrn.score(X).any()
    lrn.learn(X[30:31], [1])  # the first positive takes a step against the negatives
    st_ = lrn.get_state()
    assert st_["w_"].any() and st_["gsq_"].all()


def test_defaults():
    lrn = models.create("adaoam", n_features=3)
    assert lrn.params == {"eta": 2.0**-7, "delta": 0.5, "lam": 1e-4}
    with pytest.raises(ValueError, match="dense input only"):
        lrn.learn((np.array([0, 1]), np.array([0]), np.array([1.0])), [1])
