"""Peers run on the same splits and streams as our learners: River and Vowpal Wabbit.

Both are plain online logistic regressions, one pass over the rows in the order given, fed
the same (already scaled) features as our learners:

* ``RiverLR`` — ``river.linear_model.LogisticRegression`` with ``optim.SGD(lr)`` (River's
  default optimiser; default lr 0.01), intercept on with the same learning rate, no
  regularisation. Scores are the raw margin ``w·x + b`` (River's private ``_raw_dot_one``),
  not the sigmoid, so that large margins do not tie at probability 1.0.
* ``VWLogistic`` — Vowpal Wabbit through its Python package (``vowpalwabbit.Workspace``),
  ``--loss_function logistic`` with VW's default update (adaptive, normalised, invariant),
  learning rate ``-l``, 18 hash bits, one pass, constant feature on. Scores are VW's raw
  prediction (the margin; no ``--link logistic``).

A batch reference, not a peer: ``BatchLR`` is scikit-learn's ``LogisticRegression`` (L2,
lbfgs) fitted on the whole training part at once. It is the best a linear scorer trained
offline reaches on the same split, a ceiling to read the online learners' numbers against
(AUC is what a linear ranking can reach; the papers' online learners are all linear except
FCBR, FOAM and NOAM).

``vowpalwabbit``, ``river`` and ``sklearn`` are imported lazily, so the protocol code and its
tests do not need them.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = ["BatchLR", "RiverLR", "VWLogistic"]


class RiverLR:
    """River's online logistic regression behind the protocol's learner interface."""

    def __init__(self, n_features: int, seed: int = 0, lr: float = 0.01) -> None:
        from river import linear_model, optim

        self.n_features = n_features
        self.lr = float(lr)
        self.model = linear_model.LogisticRegression(
            optimizer=optim.SGD(self.lr), intercept_lr=self.lr, l2=0.0
        )
        self._keys = list(range(n_features))

    def _rows(self, X: np.ndarray):
        keys = self._keys
        for row in np.asarray(X, dtype=np.float64).tolist():
            yield dict(zip(keys, row, strict=True))

    def learn(self, X: np.ndarray, y: np.ndarray) -> RiverLR:
        model = self.model
        for x, t in zip(self._rows(X), np.asarray(y).tolist(), strict=True):
            model.learn_one(x, t == 1)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        w = self.model._weights
        coef = np.array([w.get(k, 0.0) for k in self._keys])
        return np.asarray(X, dtype=np.float64) @ coef + float(self.model.intercept)

    def score_then_learn(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        model = self.model
        out = np.empty(len(y))
        for i, (x, t) in enumerate(zip(self._rows(X), np.asarray(y).tolist(), strict=True)):
            out[i] = model._raw_dot_one(x)
            model.learn_one(x, t == 1)
        return out


_LINE_CACHE: OrderedDict[bytes, list[str]] = OrderedDict()


def _vw_lines(X: np.ndarray) -> list[str]:
    """Each row as a VW feature string ``|f 0:v0 3:v3 ...`` (zeros left out, values exact).

    Formatting is the slow part of feeding VW from Python, and the CV feeds the same matrix
    once per grid point, so the last few matrices' lines are cached by content digest.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    key = hashlib.sha1(X.tobytes()).digest() + repr(X.shape).encode()
    hit = _LINE_CACHE.get(key)
    if hit is not None:
        _LINE_CACHE.move_to_end(key)
        return hit
    names = [f" {j}:" for j in range(X.shape[1])]
    lines = [
        "|f" + "".join([p + repr(v) for p, v in zip(names, row, strict=True) if v != 0.0])
        for row in X.tolist()
    ]
    _LINE_CACHE[key] = lines
    while len(_LINE_CACHE) > 4:
        _LINE_CACHE.popitem(last=False)
    return lines


class VWLogistic:
    """Vowpal Wabbit with logistic loss behind the protocol's learner interface."""

    def __init__(self, n_features: int, seed: int = 0, lr: float = 0.5, bits: int = 18) -> None:
        import vowpalwabbit

        self.n_features = n_features
        self.lr = float(lr)
        args = (f"--loss_function logistic --quiet -b {int(bits)} -l {self.lr!r} "
                f"--random_seed {int(seed)}")
        self.ws = vowpalwabbit.Workspace(args)

    def __del__(self) -> None:  # VW workspaces hold C++ state; free it promptly
        ws: Any = getattr(self, "ws", None)
        if ws is not None:
            ws.finish()
            self.ws = None

    def _learn_lines(self, lines: list[str], y: np.ndarray, prequential: bool) -> np.ndarray:
        ws = self.ws
        out = np.empty(len(lines)) if prequential else np.empty(0)
        for i, (line, t) in enumerate(zip(lines, np.asarray(y).tolist(), strict=True)):
            ex = ws.parse(("1 " if t == 1 else "-1 ") + line)
            if prequential:
                out[i] = ws.predict(ex)
            ws.learn(ex)
            ws.finish_example(ex)
        return out

    def learn(self, X: np.ndarray, y: np.ndarray) -> VWLogistic:
        self._learn_lines(_vw_lines(X), y, prequential=False)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        ws = self.ws
        out = np.empty(len(X))
        for i, line in enumerate(_vw_lines(X)):
            ex = ws.parse(line)
            out[i] = ws.predict(ex)
            ws.finish_example(ex)
        return out

    def score_then_learn(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self._learn_lines(_vw_lines(X), y, prequential=True)


class BatchLR:
    """scikit-learn's L2 logistic regression, trained in one batch (no online counterpart)."""

    def __init__(self, n_features: int, seed: int = 0, C: float = 1.0) -> None:
        from sklearn.linear_model import LogisticRegression

        self.n_features = n_features
        self.model = LogisticRegression(C=float(C), max_iter=5000)

    def learn(self, X: np.ndarray, y: np.ndarray) -> BatchLR:
        self.model.fit(np.asarray(X, dtype=np.float64), np.asarray(y) == 1)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        return self.model.decision_function(np.asarray(X, dtype=np.float64))

    def score_then_learn(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError("BatchLR is a batch reference; it has no prequential mode")
