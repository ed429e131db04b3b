"""Compile (or load from numba's on-disk cache) every learner's kernels ahead of traffic.

Run at start-up in the background, and at image build time (``python -m aucstream.service.warmup``)
so that containers start with a filled cache and the first request is not a compile.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from aucstream import models
from aucstream.models._sparse import dense_to_csr
from aucstream.models.preprocessing import StandardScaler

from . import fastjson
from .encoding import FeatureEncoder

__all__ = ["warm_up"]

log = logging.getLogger("aucstream.warmup")


def warm_up(names: list[str] | None = None) -> float:
    """Run every learner once on a tiny stream (dense, and sparse where accepted)."""
    started = time.monotonic()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 4))
    y = np.array([0, 1] * 4)
    # a tiny budget so that NOAM switches to its Nyström map within the warm-up stream
    extra = {"noam": {"budget": 2, "capacity": 2}}
    for name in names or models.available():
        cls = models.base._lookup(name)
        storages = ("dense", "sparse") if "storage" in cls.param_table else (None,)
        for storage in storages:
            params = {} if storage is None else {"storage": storage}
            lrn = models.create(name, n_features=4, **params, **extra.get(name, {}))
            lrn.score_then_learn(X, y)
            lrn.learn(X, y)
            lrn.score(X)
            lrn.snapshot().score(X)
            if lrn.accepts_sparse:  # 'auto' decides by its candidates
                lrn.score_then_learn(dense_to_csr(X), y)
                lrn.score(dense_to_csr(X))
                unsorted = (np.array([0, 2]), np.array([3, 1]), np.array([1.0, 2.0]))
                lrn.score(unsorted)  # canonicalises the row
    scaler = StandardScaler(4)
    scaler.transform(scaler.learn_transform(X))
    rolling = models.RollingAUC(4)
    rolling.update(X[:, 0], y)
    models.RollingAUC.from_state(rolling.get_state())
    FeatureEncoder({"kind": "hashed", "bits": 8}).encode([{"features": {"a": "b", "c": 1.0}}])
    hashed = b'{"model": "w", "events": [{"features": {"a": "b", "n": {"c": 1.5}}, "label": 1}]}'
    dense = b'{"model": "w", "events": [{"x": [1.0, 2], "label": 0, "id": "e"}]}'
    fastjson.model_name(hashed)
    fastjson.parse_learn(hashed, {"kind": "hashed", "bits": 8}, 10)
    fastjson.parse_learn(dense, {"kind": "dense", "dim": 2}, 10)
    fastjson.parse_score(b'{"model": "w", "items": [{"x": [1, 2]}], "top_k": 1}',
                         {"kind": "dense", "dim": 2}, 10)
    elapsed = time.monotonic() - started
    log.info("kernels ready in %.1fs", elapsed)
    return elapsed


if __name__ == "__main__":
    print(f"warmed up every learner in {warm_up():.1f}s")
