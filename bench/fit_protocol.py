"""The papers' training protocol for the batch and Nyström learners, as ``bench.eval`` methods.

``bench.protocol`` trains a learner by one ``learn`` pass over the training part. The papers
of issue 13's kernel learners train differently, and these two factories (``Method(...,
factory=...)``) reproduce that on each training part, CV folds included:

- :class:`BatchFit` (``rank_svm``, ``fbam``, ``nbam``, ``nbauc``): dissertation ch. 3 and
  Khalid et al. 2018 §3.3 fit once on the stored training set (at most 80k rows) by
  PRSVM+'s truncated Newton: ``models.fit_batch(name, X, y, C=...)``, one solve from w = 0
  on every row (the Nyström learners fit their map on those rows first).
- :class:`WholeWindow` (``noam_seq``, ``noam_gra``, ``nsauc``, and any learner on the shared
  Nyström map): the papers fit the k-means Nyström map on the training set ("the first
  80k instances", m = 1600 landmarks), then run the stochastic learner on the embedded
  rows. Here the learner's warm-up window is the whole training part (at most 80 000
  rows), so the map is fitted on it and the window is replayed through the learner: one
  pass over the embedded training rows.

Both take ``n_components`` (the landmarks or Fourier features, default the papers' 1600)
and use ``min(n_components, rows)`` when a training part has fewer rows than that (only
``bench.eval``'s compile warm-up on 40 rows does; the tables' training parts are larger).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from aucstream import models

__all__ = ["MAX_WINDOW", "PAPER_COMPONENTS", "BatchFit", "WholeWindow", "batch_factory",
           "window_factory"]

PAPER_COMPONENTS = 1600  # dissertation ch. 3, 6, 7 and Khalid et al. 2018: m = 1600
MAX_WINDOW = 80_000  # "the first 80k instances" (the map's window; the learners' cap)
_NYSTROM_BATCH = ("nbam", "nbauc")


class BatchFit:
    """A batch learner fitted by ``models.fit_batch`` on each ``learn`` call's rows."""

    def __init__(self, name: str, n_features: int, seed: int, **params: Any) -> None:
        self.name, self.n_features, self.seed, self.params = name, n_features, seed, params
        self.model: models.Learner | None = None

    def _fit_params(self, rows: int) -> dict[str, Any]:
        params = dict(self.params)
        if self.name in _NYSTROM_BATCH or self.name == "fbam":
            m = params.pop("n_components", PAPER_COMPONENTS)
            params["n_components"] = min(m, rows) if self.name in _NYSTROM_BATCH else m
        return params

    def learn(self, X: np.ndarray, y: np.ndarray) -> BatchFit:
        X = np.asarray(X)
        if self.name in _NYSTROM_BATCH and X.shape[0] > MAX_WINDOW:
            raise ValueError(f"{self.name}: the map's window is at most {MAX_WINDOW} rows")
        self.model = models.fit_batch(self.name, X, y, seed=self.seed,
                                      n_features=self.n_features,
                                      **self._fit_params(X.shape[0]))
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        if self.model is None:
            return np.zeros(np.asarray(X).shape[0])
        return self.model.score(X)

    def score_then_learn(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Scores before the fit (0: nothing learned yet), then the fit."""
        prior = self.score(X)
        self.learn(X, y)
        return prior


class WholeWindow:
    """An online Nyström learner whose warm-up window is the whole first ``learn`` call."""

    def __init__(self, name: str, n_features: int, seed: int, **params: Any) -> None:
        self.name, self.n_features, self.seed, self.params = name, n_features, seed, params
        self.model: models.Learner | None = None

    def learn(self, X: np.ndarray, y: np.ndarray) -> WholeWindow:
        X = np.asarray(X)
        if self.model is None:
            rows = min(X.shape[0], MAX_WINDOW)
            params = dict(self.params)
            params["n_components"] = min(params.get("n_components", PAPER_COMPONENTS), rows)
            self.model = models.create(self.name, n_features=self.n_features, seed=self.seed,
                                       warmup=rows, **params)
        self.model.learn(X, y)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        if self.model is None:
            return np.zeros(np.asarray(X).shape[0])
        return self.model.score(X)

    def score_then_learn(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        if self.model is None:  # the window is this call's rows: nothing to score with
            self.learn(X, y)
            return np.zeros(np.asarray(X).shape[0])
        return self.model.score_then_learn(X, y)


def batch_factory(name: str) -> partial[BatchFit]:
    """``Method(factory=...)`` for a batch learner fitted by ``fit_batch`` (picklable, for
    ``bench.eval --jobs``)."""
    return partial(BatchFit, name)


def window_factory(name: str) -> partial[WholeWindow]:
    """``Method(factory=...)`` for an online Nyström learner on the whole training part."""
    return partial(WholeWindow, name)
