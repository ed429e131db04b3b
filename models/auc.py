"""Exact AUC, overall and over a rolling window of the most recent (score, label) pairs.

AUC is the Mann–Whitney statistic: the fraction of (positive, negative) pairs ranked in
the right order, ties counted ½. With no positives or no negatives it is undefined and
both helpers return NaN, never 0 or ½.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _auc_kernels as K
from ._memory import array_bytes

__all__ = ["RollingAUC", "auc", "u_statistic"]


def _labels01(y: Any, n: int) -> np.ndarray:
    a = np.asarray(y)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"labels must be 1-D with {n} entries; got shape {a.shape}.")
    if a.dtype == np.bool_:
        return a
    af = a.astype(np.float64)
    ok = (af == 0) | (af == 1) | (af == -1)
    if not ok.all():
        raise ValueError("labels must be in {0, 1} or {-1, +1}.")
    if (af == 0).any() and (af == -1).any():
        raise ValueError("labels mix 0 and -1; use {0, 1} or {-1, +1}, not both.")
    return af == 1


def _finite_scores(s: Any) -> np.ndarray:
    a = np.asarray(s, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"scores must be 1-D; got shape {a.shape}.")
    if not np.isfinite(a).all():
        raise ValueError("scores must be finite.")
    return a


def auc(y_true: Any, scores: Any) -> float:
    """Exact ROC AUC with ties counted ½; NaN when a class is absent.

    >>> auc([1, 0, 1, 0], [0.9, 0.1, 0.5, 0.5])
    0.875
    >>> auc([1, 1], [0.2, 0.3])
    nan
    """
    s = _finite_scores(scores)
    pos = _labels01(y_true, s.shape[0])
    n_pos = int(pos.sum())
    n_neg = s.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float(u_statistic(s, pos) / (n_pos * n_neg))


def u_statistic(scores: np.ndarray, pos: np.ndarray) -> float:
    """Mann–Whitney U of float ``scores`` against boolean labels ``pos``: the number of
    (positive, negative) pairs ranked in the right order, ties counted ½.

    >>> u_statistic(np.array([0.9, 0.1, 0.5, 0.5]), np.array([True, False, True, False]))
    3.5
    """
    order = np.argsort(scores, kind="mergesort")
    sorted_s = scores[order]
    # Mid-ranks: every member of a group of tied scores gets the group's mean rank.
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], scores.shape[0]]
    mid = (starts + ends + 1) / 2.0
    ranks = np.empty(scores.shape[0])
    ranks[order] = np.repeat(mid, ends - starts)
    n_pos = int(pos.sum())
    return float(ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0)


class RollingAUC:
    """Exact AUC over the last ``window`` (score, label) pairs, O(log W) per update.

    >>> r = RollingAUC(window=3)
    >>> r.update([0.9, 0.1, 0.5], [1, 0, 0])
    >>> r.value
    1.0
    >>> r.update([0.2], [1])          # the 0.9 positive leaves the window
    >>> r.value
    0.5
    >>> RollingAUC(window=10).value   # undefined until both classes are present
    nan
    """

    def __init__(self, window: int) -> None:
        if isinstance(window, bool) or not isinstance(window, int | np.integer) or window < 1:
            raise ValueError(f"window must be an int >= 1; got {window!r}.")
        self.window = int(window)
        self._reset()

    def _reset(self) -> None:
        w = self.window
        self._ring_s = np.zeros(w)
        self._ring_y = np.zeros(w, np.int8)
        self._ring = np.zeros(2, np.int64)  # head, filled
        self._counts = np.zeros(3, np.int64)  # n_neg, n_pos, 2U
        self._pos = K.new_tree(w)
        self._neg = K.new_tree(w)

    @property
    def nbytes(self) -> int:
        """Bytes of memory its arrays take."""
        return array_bytes(self)

    def update(self, scores: Any, labels: Any) -> None:
        """Push pairs in order; the oldest leave once the window is full."""
        s = np.atleast_1d(_finite_scores(np.atleast_1d(scores)))
        y = _labels01(np.atleast_1d(labels), s.shape[0]).astype(np.int8)
        K.rolling_update(s, y, self._ring_s, self._ring_y, self._ring, self._counts,
                         *self._pos, *self._neg)

    @property
    def n_neg(self) -> int:
        return int(self._counts[0])

    @property
    def n_pos(self) -> int:
        return int(self._counts[1])

    @property
    def value(self) -> float:
        """The window's AUC, or NaN while a class is missing from it."""
        n_neg, n_pos, u2 = (int(v) for v in self._counts)
        if n_neg == 0 or n_pos == 0:
            return float("nan")
        return u2 / (2.0 * n_pos * n_neg)

    def get_state(self) -> dict[str, Any]:
        """The window's pairs, oldest first (the trees are rebuilt from them)."""
        head, filled = (int(v) for v in self._ring)
        idx = (np.arange(filled) + (head if filled == self.window else 0)) % self.window
        return {
            "window": self.window,
            "scores": self._ring_s[idx].copy(),
            "labels": self._ring_y[idx].copy(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RollingAUC:
        r = cls(int(state["window"]))
        scores = np.asarray(state["scores"], dtype=np.float64)
        if scores.shape[0] > r.window:
            raise ValueError("a RollingAUC state holds more pairs than its window.")
        r.update(scores, np.asarray(state["labels"]).astype(np.int64))
        return r
