"""NAG logistic regression against its numpy reference, and against Vowpal Wabbit."""

from __future__ import annotations

import numpy as np
import pytest

from aucstream import models
from tests.helpers import stream
from tests.reference.logistic import NAGReference


def _scaled_stream(n, d, seed):
    X, y = stream(n, d, seed=seed)
    rng = np.random.default_rng(seed)
    X = X * rng.choice([0.01, 1.0, 300.0], size=d)  # features of very different scales
    X[rng.random(X.shape) < 0.3] = 0.0
    return X, y


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("eta", [0.5, 0.05, 4.0])
def test_matches_the_reference_event_by_event(sparse, eta):
    X, y = _scaled_stream(300, 6, seed=int(eta * 100))
    ref = NAGReference(6, eta)
    expected = np.array([ref.learn_one(X[i], y[i]) for i in range(len(y))])
    lrn = models.create("logistic_nag", n_features=6, eta=eta)
    data = X
    if sparse:
        from scipy.sparse import csr_matrix
        data = csr_matrix(X)
    prior = np.concatenate([lrn.score_then_learn(data[a:a + 37], y[a:a + 37])
                            for a in range(0, 300, 37)])
    np.testing.assert_allclose(prior, expected, rtol=1e-10, atol=1e-12)
    state = lrn.get_state()
    np.testing.assert_allclose(state["w_"], ref.w[1:], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state["bias_"][0], ref.w[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(state["scale_"], ref.s[1:])
    probe, _ = _scaled_stream(40, 6, seed=99)
    probe *= 2.0  # values beyond the scales seen: scored as learning would see them
    np.testing.assert_allclose(lrn.score(probe), [ref.score(x) for x in probe],
                               rtol=1e-10, atol=1e-12)


def test_scale_free_in_each_feature():
    """NAG's point: rescaling a feature leaves the scores unchanged (up to rounding)."""
    X, y = _scaled_stream(400, 5, seed=3)
    a = models.create("logistic_nag", n_features=5).score_then_learn(X, y)
    factors = np.array([1e-3, 7.0, 1.0, 250.0, 0.5])
    b = models.create("logistic_nag", n_features=5).score_then_learn(X * factors, y)
    np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_ranks_like_vowpal_wabbit_on_a9a():
    """Close to VW's default learner (NAG plus importance-invariant updates) on a real
    sparse stream: the same AUC to within 0.005 over a single pass."""
    vw = pytest.importorskip("vowpalwabbit")
    from bench import datasets

    ds = datasets.load("a9a")
    X, y = ds.X[:8000], ds.y[:8000]
    lrn = models.create("logistic_nag", n_features=X.shape[1])
    ours = lrn.score_then_learn(X, y)
    ws = vw.Workspace("--loss_function logistic --quiet -l 0.5 --random_seed 0")
    theirs = []
    dense = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
    for row, label in zip(dense, y, strict=True):
        feats = " ".join(f"{j}:{v:g}" for j in np.flatnonzero(row) for v in [row[j]])
        line = f"{1 if label > 0 else -1} | {feats}"
        theirs.append(ws.predict(line))
        ws.learn(line)
    ws.finish()
    a_ours = models.auc(y[1000:], ours[1000:])
    a_vw = models.auc(y[1000:], np.array(theirs)[1000:])
    assert abs(a_ours - a_vw) < 0.005, (a_ours, a_vw)
