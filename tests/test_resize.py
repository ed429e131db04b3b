"""Learner.resize: a learner grown step by step learns exactly as one sized so from the
start (compact feature indices rely on it)."""

from __future__ import annotations

import numpy as np
import pytest

from aucstream import models
from aucstream.models._sparse import dense_to_csr
from tests.cases import all_cases
from tests.helpers import assert_states_equal

CASES = all_cases()


def _resizable() -> list[str]:
    out = []
    for name in models.available():
        cls = models.base._lookup(name)
        if not cls.accepts_sparse:
            continue
        params = {**CASES[name].params, **(CASES[name].sparse_params or {})}
        if "storage" in cls.param_table:
            params["storage"] = "sparse"
        try:
            models.create(name, n_features=8, **params).resize(16)
        except TypeError:
            continue
        out.append(name)
    return out


RESIZABLE = _resizable()


def test_every_sparse_learner_with_a_sparse_layout_is_resizable():
    assert {"cbr_diag_fifo", "solam", "logistic_nag", "auto", "sam", "uni_exp"} <= set(RESIZABLE)


def _params(name: str) -> dict:
    cls = models.base._lookup(name)
    params = {**CASES[name].params, **(CASES[name].sparse_params or {})}
    if "storage" in cls.param_table:
        params["storage"] = "sparse"
    return params


@pytest.mark.parametrize("name", RESIZABLE)
def test_grown_in_steps_learns_as_sized_from_the_start(name):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(240, 40))
    X[rng.random(X.shape) < 0.6] = 0.0
    # columns come into use over time, as a stream's features do
    for c in range(40):
        X[: 6 * c, c] = 0.0
    y = (X[:, :10].sum(1) + 0.3 * rng.normal(size=240) > 0).astype(int)
    params = _params(name)
    whole = models.create(name, n_features=64, seed=3, **params)
    expected = whole.score_then_learn(dense_to_csr(np.pad(X, ((0, 0), (0, 24)))), y)
    grown = models.create(name, n_features=8, seed=3, **params)
    got = []
    for a in range(0, 240, 40):
        used = int(np.flatnonzero(np.abs(X[: a + 40]).sum(0)).max()) + 1
        width = grown.n_features
        while width < used:
            width *= 2
        grown.resize(width)
        part = np.zeros((40, width))
        part[:, :40 if width >= 40 else width] = X[a:a + 40, :width]
        got.append(grown.score_then_learn(dense_to_csr(part), y[a:a + 40]))
    np.testing.assert_array_equal(np.concatenate(got), expected)
    grown.resize(64)
    assert_states_equal(grown.get_state(), whole.get_state())
    # a saved grown learner restores at its size
    again = models.from_state(grown.get_state())
    probe = dense_to_csr(rng.normal(size=(10, 64)))
    np.testing.assert_array_equal(again.score(probe), whole.score(probe))


def test_only_growing_and_only_sparse_layouts():
    lrn = models.create("cbr_diag_fifo", n_features=16, storage="sparse")
    with pytest.raises(ValueError, match="only grow"):
        lrn.resize(8)
    with pytest.raises(TypeError):
        models.create("cbr_diag_fifo", n_features=16, storage="dense").resize(32)
    with pytest.raises(TypeError):
        models.create("cbr_fifo", n_features=16).resize(32)
    with pytest.raises(RuntimeError):
        lrn.snapshot().resize(32)
