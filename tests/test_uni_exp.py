"""Online Uni-Exp against the numpy reference, by hand, and its lazy sparse layout."""

from __future__ import annotations

import math

import numpy as np
import pytest

import aucstream.models.uni_exp as uni_exp_module
from aucstream import models
from aucstream.models import _uni_exp_kernels as K
from aucstream.models._sparse import dense_to_csr
from tests.helpers import assert_close, assert_states_equal, csr_slice, sparse_stream, stream
from tests.reference.uni_exp import UniExpReference, event_loss, pairwise_loss, weighted_loss


def _uni_exp(**params):
    return models.create("uni_exp", **params)


def _ref_stream(seed: int, n: int = 400, d: int = 7):
    X, y = stream(n, d, seed=seed)
    X[np.abs(X) < 0.4] = 0.0  # real zeros: sparse rows with different patterns
    return 0.5 * X + 0.2, y  # uncentred, so the intercept matters


def _check(lrn, ref, X):
    st_ = lrn.get_state()
    assert_close(lrn.weights(), ref.w, what="w")
    assert_close(st_["bias_"], [ref.b], what="b")
    assert st_["n_seen_"].sum() == ref.t
    assert st_["n_seen_"][1] / ref.t == pytest.approx(ref.p, rel=1e-12)
    Xs = dense_to_csr(X) if lrn.params["storage"] == "sparse" else X
    assert_close(lrn.score(Xs), ref.score(X), what="scores")


@pytest.mark.parametrize("storage", ["dense", "sparse"])
@pytest.mark.parametrize(("eta", "lam"), [(2.0**-8, 1e-4), (0.05, 0.5), (0.03, 0.0)])
@pytest.mark.parametrize("seed", [20, 22])
def test_matches_the_reference(storage, eta, lam, seed):
    X, y = _ref_stream(seed)
    lrn = _uni_exp(n_features=7, normalize=False, eta=eta, lam=lam, storage=storage)
    lrn.learn(dense_to_csr(X[:150]), y[:150]).learn(X[150:151], y[150:151])
    lrn.learn(X[151:], y[151:])
    ref = UniExpReference(7, eta=eta, lam=lam).learn(X, y)
    _check(lrn, ref, X[:50])


@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_prequential_scores_match_the_reference(storage):
    X, y = _ref_stream(3, n=250)
    lrn = _uni_exp(n_features=7, normalize=False, eta=0.04, lam=0.2, storage=storage)
    prior = lrn.score_then_learn(X, y)
    ref = UniExpReference(7, eta=0.04, lam=0.2)
    expected = np.empty(len(y))
    for t in range(len(y)):
        expected[t] = ref.score(X[t:t + 1])[0]
        ref.learn_one(X[t], 1 if y[t] == 1 else -1)
    assert_close(prior, expected, what="prequential scores")
    _check(lrn, ref, X[:30])


def test_two_hand_computed_events():
    """d = 2, η = ½, λ = 0.1 (shrink 0.95), both storages."""
    X = np.array([[1.0, 0.0], [0.0, 2.0]])
    for storage in ("dense", "sparse"):
        lrn = _uni_exp(n_features=2, normalize=False, eta=0.5, lam=0.1, storage=storage)
        # t = 1, x = (1, 0), y = +1: π̂₊ = 1/1, f = 0, k = ½·1·e⁰ = ½:
        # w = 0.95·0 + ½·(1, 0) = (½, 0), b = ½.
        lrn.learn(X[:1], [1])
        assert_close(lrn.weights(), [0.5, 0.0], rtol=1e-15, what="w after 1")
        assert lrn.get_state()["bias_"][0] == 0.5
        # t = 2, x = (0, 2), y = −1: π̂₋ = 1/2, f = wᵀx + b = ½, k = ½·2·e^{½}:
        # w = 0.95·(½, 0) − e^{½}·(0, 2), b = ½ − e^{½}.
        lrn.learn(X[1:], [0])
        e = math.exp(0.5)
        assert_close(lrn.weights(), [0.475, -2.0 * e], rtol=1e-15, what="w after 2")
        assert lrn.get_state()["bias_"][0] == pytest.approx(0.5 - e, rel=1e-15)
        assert lrn.score_one(np.array([1.0, 1.0])) == pytest.approx(
            0.475 - 2.0 * e + 0.5 - e, rel=1e-14)


@pytest.mark.parametrize("storage", ["dense", "sparse"])
@pytest.mark.parametrize("label", [0, 1])
def test_the_step_is_the_gradient_of_the_weighted_event_loss(storage, label):
    X, y = _ref_stream(8, n=120, d=5)
    eta, lam = 0.05, 0.3
    lrn = _uni_exp(n_features=5, normalize=False, eta=eta, lam=lam, storage=storage)
    lrn.learn(X[:100], y[:100])
    x = X[100] * 1.3
    t = 1 if label == 1 else -1
    n_seen = lrn.get_state()["n_seen_"]
    pi = (n_seen[label] + 1) / (n_seen.sum() + 1)  # the event counts in π̂
    w0, b0 = lrn.weights(), lrn.get_state()["bias_"][0]
    h = 1e-6
    fd_w = np.array([(event_loss(w0 + h * e, b0, x, t, pi, lam)
                      - event_loss(w0 - h * e, b0, x, t, pi, lam)) / (2 * h)
                     for e in np.eye(5)])
    fd_b = (event_loss(w0, b0 + h, x, t, pi, lam)
            - event_loss(w0, b0 - h, x, t, pi, lam)) / (2 * h)
    lrn.learn(x[None, :], [label])
    assert_close((w0 - lrn.weights()) / eta, fd_w, rtol=1e-7, what="w step / η")
    assert (b0 - lrn.get_state()["bias_"][0]) / eta == pytest.approx(fd_b, rel=1e-7)


def test_the_intercept_turns_the_weighted_loss_into_the_pairwise_one():
    """min_b [A e^{−b} + B e^{b}] = 2√(AB) at b* = ½ log(A/B), and A·B is the mean pairwise
    exponential loss: with the intercept free, the weighted univariate loss ranks as
    RankBoost's (review-second-wave §7)."""
    rng = np.random.default_rng(4)
    for _ in range(5):
        X = rng.normal(size=(80, 4)) + rng.normal(size=4)
        y = (rng.random(80) < 0.3).astype(int)
        w = 0.5 * rng.normal(size=4)
        s = X @ w
        b_star = 0.5 * math.log(np.mean(np.exp(-s[y == 1])) / np.mean(np.exp(s[y == 0])))
        best = weighted_loss(w, b_star, X, y)
        assert best == pytest.approx(2.0 * math.sqrt(pairwise_loss(w, X, y)), rel=1e-12)
        for db in (-1e-3, 1e-3, -0.5, 0.5):
            assert weighted_loss(w, b_star + db, X, y) > best


def test_the_two_storages_agree_on_a_hashed_stream():
    d = 1 << 14
    X, y = sparse_stream(400, d, nnz=10, seed=4)
    dense = _uni_exp(n_features=d, normalize=False, storage="dense", eta=0.01, lam=0.01)
    lazy = _uni_exp(n_features=d, normalize=False, storage="sparse", eta=0.01, lam=0.01)
    dense.learn(X, y)
    lazy.learn(X, y)
    assert_close(lazy.weights(), dense.weights(), rtol=1e-12, what="w")
    assert lazy.get_state()["bias_"][0] == pytest.approx(dense.get_state()["bias_"][0],
                                                         rel=1e-12)
    Xs = csr_slice(X, 0, 100)
    assert_close(lazy.score(Xs), dense.score(Xs), rtol=1e-12, what="scores")


def _counting_folds(monkeypatch):
    calls = []
    real = K.fold

    def fold(u, scale):
        calls.append(float(scale[0]))
        real(u, scale)

    monkeypatch.setattr(K, "fold", fold)
    return calls


def test_the_lazy_layout_is_exact_with_frequent_folds(monkeypatch):
    """σ folded back at ½: with η·λ = 0.1 a fold every 7 events; still the reference."""
    monkeypatch.setattr(uni_exp_module, "UNI_EXP_MIN_SCALE", 0.5)
    calls = _counting_folds(monkeypatch)
    X, y = _ref_stream(24)
    lrn = _uni_exp(n_features=7, normalize=False, eta=0.05, lam=2.0, storage="sparse")
    lrn.learn(X[:200], y[:200]).learn(X[200:], y[200:])
    assert len(calls) == 400 // 7 and all(s < 0.5 for s in calls)
    ref = UniExpReference(7, eta=0.05, lam=2.0).learn(X, y)
    _check(lrn, ref, X[:50])
    assert 0.5 * 0.9 <= lrn.get_state()["scale_"][0] <= 1.0


def test_a_batch_that_folds_then_fails_is_restored_whole(monkeypatch):
    monkeypatch.setattr(uni_exp_module, "UNI_EXP_MIN_SCALE", 0.5)
    calls = _counting_folds(monkeypatch)
    X, y = _ref_stream(5, n=120)
    lrn = _uni_exp(n_features=7, normalize=False, eta=0.05, lam=2.0, storage="sparse")
    lrn.learn(X[:50], y[:50])
    before = lrn.get_state()
    batch = X[50:80].copy()
    batch[25] = 1e200 * np.sign(lrn.weights() + 0.1) * (-1.0 if y[75] == 1 else 1.0)
    folds = len(calls)
    with pytest.raises(models.NonFiniteError) as err:
        lrn.learn(batch, y[50:80])
    assert err.value.row == 25
    assert len(calls) > folds  # the batch folded before it failed
    assert_states_equal(lrn.get_state(), before)
    twin = models.from_state(before)
    assert_states_equal(lrn.learn(X[50:80], y[50:80]).get_state(),
                        twin.learn(X[50:80], y[50:80]).get_state())


def test_learning_starts_with_the_first_event():
    """The univariate loss needs no event of the other class: the first event steps."""
    X, _ = stream(30, 4, seed=1)
    lrn = _uni_exp(n_features=4, normalize=False, eta=0.1, lam=0.0).learn(X[:1], [0])
    # π̂₋ = 1, f = 0: k = η, w = −η x, b = −η.
    assert_close(lrn.weights(), -0.1 * X[0], rtol=1e-15, what="w")
    assert lrn.get_state()["bias_"][0] == -0.1


def test_eta_times_lam_must_be_below_one():
    _uni_exp(n_features=3, normalize=False, eta=2.0, lam=0.49)
    with pytest.raises(ValueError) as err:
        _uni_exp(n_features=3, normalize=False, eta=2.0, lam=0.5)
    assert str(err.value) == ("The 'lam' parameter of uni_exp must be a float in [0, 1/eta) "
                              "= [0, 0.5) (the shrink factor 1 − eta·lam must stay "
                              "positive); got 0.5.")


def test_defaults():
    lrn = _uni_exp(n_features=3)
    assert lrn.params == {"eta": 2.0**-8, "lam": 1e-4, "normalize": True, "storage": "dense"}
    assert _uni_exp(n_features=5000).params["storage"] == "sparse"
    st_ = _uni_exp(n_features=5000).get_state()
    assert st_["scale_"].tolist() == [1.0] and st_["bias_"].tolist() == [0.0]


@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_normalize_learns_and_scores_unit_rows(storage):
    X, y = stream(200, 6, seed=9)
    X = X * 50.0  # large rows: raw, the default step would run away
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    a = _uni_exp(n_features=6, storage=storage).learn(X, y)
    b = _uni_exp(n_features=6, storage=storage, normalize=False).learn(unit, y)
    assert_states_equal(a.get_state() | {"normalize": False}, b.get_state())
    assert np.array_equal(a.score(X[:20]), b.score(unit[:20]))
    assert_close(a.score(X[:20] * 3.0), b.score(unit[:20]), rtol=1e-12, what="scale-free")

