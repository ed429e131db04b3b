"""Online standardisation: running mean and variance per feature (Welford).

``learn_transform`` updates the statistics with each row in order and standardises the
row with the statistics that include it, as River's ``StandardScaler`` does; a feature
with zero variance so far is centred but not scaled. It is all or nothing, as a
learner's ``learn``: a batch that would make the statistics or the output non-finite
changes nothing and raises ``models.NonFiniteError``. The statistics are part of the
saved state, so replaying a stream from a checkpoint gives the same transformed rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from ._memory import array_bytes
from .base import NonFiniteError

__all__ = ["StandardScaler"]


@njit(cache=True, nogil=True)
def _learn_transform(X, count, mean, m2):
    """Learn and standardise the rows in order. Returns ``(out, bad)``: ``bad`` is -1, or
    the first row after which the statistics or that row's output are not finite (the
    kernel stops there; the caller restores the statistics)."""
    n, d = X.shape
    out = np.empty_like(X)
    for r in range(n):
        count[0] += 1
        k = count[0]
        chk = 0.0  # x·0 is NaN for x = ±inf or NaN, else 0
        for i in range(d):
            delta = X[r, i] - mean[i]
            mean[i] += delta / k
            m2[i] += delta * (X[r, i] - mean[i])
            var = m2[i] / k
            out[r, i] = (X[r, i] - mean[i]) / np.sqrt(var) if var > 0.0 else X[r, i] - mean[i]
            chk += mean[i] * 0.0 + m2[i] * 0.0 + out[r, i] * 0.0
        if chk != 0.0:
            return out, r
    return out, -1


@njit(cache=True, nogil=True)
def _transform(X, count, mean, m2):
    n, d = X.shape
    out = np.empty_like(X)
    k = max(count[0], 1)
    for r in range(n):
        for i in range(d):
            var = m2[i] / k
            out[r, i] = (X[r, i] - mean[i]) / np.sqrt(var) if var > 0.0 else X[r, i] - mean[i]
    return out


class StandardScaler:
    """Running standardisation of dense rows.

    >>> import numpy as np
    >>> s = StandardScaler(n_features=1)
    >>> s.learn_transform(np.array([[1.0], [3.0]])).ravel().tolist()
    [0.0, 1.0]
    >>> s.transform(np.array([[2.0]])).ravel().tolist()
    [0.0]
    """

    def __init__(self, n_features: int) -> None:
        self.n_features = int(n_features)
        self.count_ = np.zeros(1, np.int64)
        self.mean_ = np.zeros(self.n_features)
        self.m2_ = np.zeros(self.n_features)

    def learn_transform(self, X: np.ndarray) -> np.ndarray:
        """Update the statistics row by row; return each row standardised on arrival.

        All or nothing: if a row would make the statistics or its output non-finite,
        the statistics are restored and :class:`models.NonFiniteError` names that row.
        """
        saved = (self.count_.copy(), self.mean_.copy(), self.m2_.copy())
        try:
            out, bad = _learn_transform(np.ascontiguousarray(X, np.float64), self.count_,
                                        self.mean_, self.m2_)
        except BaseException:
            self.count_, self.mean_, self.m2_ = saved
            raise
        if bad >= 0:
            self.count_, self.mean_, self.m2_ = saved
            raise NonFiniteError("StandardScaler", bad)
        return out

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Standardise with the current statistics (changes nothing)."""
        return _transform(np.ascontiguousarray(X, np.float64), self.count_, self.mean_, self.m2_)

    @property
    def nbytes(self) -> int:
        """Bytes of memory its arrays take."""
        return array_bytes(self)

    def copy(self) -> StandardScaler:
        return StandardScaler.from_state(self.get_state())

    def get_state(self) -> dict[str, Any]:
        return {"count_": self.count_.copy(), "mean_": self.mean_.copy(), "m2_": self.m2_.copy()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> StandardScaler:
        mean = np.asarray(state["mean_"], np.float64)
        s = cls(mean.shape[0])
        s.count_ = np.array(state["count_"], np.int64).reshape(1)
        s.mean_ = mean.copy()
        s.m2_ = np.array(state["m2_"], np.float64)
        if s.m2_.shape != s.mean_.shape:
            raise ValueError("StandardScaler state: mean_ and m2_ differ in shape.")
        return s
