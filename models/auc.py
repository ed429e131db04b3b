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


def _labels_int8(y: Any, n: int) -> np.ndarray:
    """Labels as contiguous int8 in {-1, 0, 1} (> 0 is positive), accepted and refused
    exactly as by ``_labels01``; bool, integer and float arrays take a few passes fewer
    (this runs on every rolling update)."""
    a = np.asarray(y)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim == 1 and a.shape[0] == n and n:
        if a.dtype == np.bool_:
            return np.ascontiguousarray(a).view(np.int8)
        if a.dtype.kind in "iuf":
            lo, hi = a.min(), a.max()
            if lo >= -1 and hi <= 1:  # False for NaN
                a8 = a.astype(np.int8)
                if ((a.dtype.kind != "f" or (a8 == a).all())
                        and not (lo == -1 and (a8 == 0).any())):
                    return a8
    return _labels01(a, n).view(np.int8)  # the slow path raises the usual errors


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
    """Exact AUC over the last ``window`` (score, label) pairs.

    Each class keeps its window scores sorted, with a sorted buffer of recent insertions
    and deletions (see ``_auc_kernels``); a batch is counted by galloping searches and
    applied as set operations, so its cost grows with the batch and ~sqrt(window · batch),
    not with the window.

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
        # Per class (0 negative, 1 positive): sorted scores M (a row of _sorted; the third
        # row is spare), buffered sorted insertions I and deletions T, and per class
        # (len M, len I, len T, row of M); the class holds M − T + I.
        self._sorted = np.zeros((3, w))
        self._buf = np.zeros((2, 2, K.buffer_capacity(w)))
        self._fill = np.array([[0, 0, 0, 0], [0, 0, 0, 1]], np.int64)

    @property
    def nbytes(self) -> int:
        """Bytes of memory its arrays take."""
        return array_bytes(self)

    def update(self, scores: Any, labels: Any) -> None:
        """Push pairs in order; the oldest leave once the window is full."""
        s = np.asarray(scores, dtype=np.float64)
        if s.ndim == 0:
            s = s.reshape(1)
        s = _finite_scores(s)
        if not s.flags.c_contiguous:  # one compiled signature: the warm-up's
            s = np.ascontiguousarray(s)
        y = _labels_int8(labels, s.shape[0])
        if not K.rolling_update(s, y, self._ring_s, self._ring_y, self._ring, self._counts,
                                self._sorted, self._buf, self._fill):
            raise RuntimeError("RollingAUC: its sorted arrays lost a score (a bug).")

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
        """The window's pairs, oldest first (the sorted arrays are rebuilt from them)."""
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
