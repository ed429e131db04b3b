"""Sanity on real data shipped in packages: one pass with default parameters, fixed seed.

Min-max scaling is fitted on the training part only. These are not the papers' protocol
(that lives in bench/): they catch a learner that stopped learning or inverted its ranking.
"""

from __future__ import annotations

import numpy as np
import pytest

from aucstream import models
from bench import datasets

CHANCE_MARGIN = 0.75  # "clearly better than chance" for every learner, default parameters


def _split(name: str):
    ds = datasets.load(name)
    order = np.random.default_rng(0).permutation(ds.y.shape[0])
    X, y = ds.X[order], ds.y[order]
    n = int(0.7 * len(y))
    lo, hi = X[:n].min(0), X[:n].max(0)
    span = np.where(hi > lo, hi - lo, 1.0)
    X = (X - lo) / span
    return X[:n], y[:n], X[n:], y[n:]


@pytest.fixture(scope="module", params=["breast_cancer", "phishing"])
def split(request):
    return request.param, _split(request.param)


@pytest.mark.parametrize("name", models.available())
def test_every_learner_ranks_real_data_well_above_chance(name, split):
    dataset, (Xtr, ytr, Xte, yte) = split
    params = {}
    if "warmup" in models.create(name, n_features=Xtr.shape[1]).params:
        # the Nyström learners fit their map on the first 16 000 events by default, more
        # than either set holds: fit it on the first half, with W/10 landmarks (specs)
        warmup = len(ytr) // 2
        params = {"warmup": warmup, "n_components": warmup // 10}
    lrn = models.create(name, n_features=Xtr.shape[1], seed=0, **params).learn(Xtr, ytr)
    auc = models.auc(yte, lrn.score(Xte))
    assert auc >= CHANCE_MARGIN, f"{name} on {dataset}: test AUC {auc:.3f}"


def test_cbr_fifo_reaches_095_on_breast_cancer():
    Xtr, ytr, Xte, yte = _split("breast_cancer")
    lrn = models.create("cbr_fifo", n_features=Xtr.shape[1], seed=0).learn(Xtr, ytr)
    assert models.auc(yte, lrn.score(Xte)) >= 0.95
