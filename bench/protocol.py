"""The papers' offline protocol and the service's prequential protocol, learner-agnostic.

Offline (dissertation ch. 4–5, SOLAM, FOAM/NOAM): ``runs`` random partitions of the data into
``folds`` stratified folds; for each (run, fold) the other folds are the training part, in a
random order; hyperparameters are chosen by ``cv_folds``-fold cross-validation *inside the
training part* (the held-out fold is never passed to it); the learner then makes one pass over
the whole training part with the chosen values and is scored on the held-out fold.

Scaling is fitted on the rows a model learns from and nothing else: on the training part
for the final model, and on each inner training part inside the cross-validation.

Prequential (what the service does, ``service/hosting.py``): every event is standardised with
the running statistics that include it (``models.preprocessing.StandardScaler``), scored by
the model as it stands, then learned (``score_then_learn``). Overall AUC is ``models.auc`` of
those scores; the rolling AUC is ``models.RollingAUC(window)`` sampled along the stream.

Every random choice comes from ``numpy.random.default_rng`` seeded with a tuple that names it
(``(seed, run)``, ``(seed, run, fold)``, ...), so results do not depend on the order in which
tasks are run or on how many processes run them.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from aucstream import models
from aucstream.models.preprocessing import StandardScaler

__all__ = [
    "SCALINGS",
    "Method",
    "Scaler",
    "Split",
    "cross_validate",
    "evaluate_split",
    "grid_points",
    "outer_splits",
    "prequential",
    "safe_auc",
    "stratified_folds",
    "tune_prequential",
]


# --------------------------------------------------------------------------------------------
# Scaling
# --------------------------------------------------------------------------------------------
SCALINGS = ("zscore", "minmax", "pm1", "l2", "zscore_l2", "pm1_l2", "none")


@dataclass
class Scaler:
    """Feature scaling fitted on training rows only.

    * ``zscore`` — per feature, subtract the training mean and divide by the training standard
      deviation (population; a constant feature is only centred);
    * ``minmax`` — per feature, map the training range to [0, 1] (a constant feature to 0);
    * ``pm1`` — per feature, map the training range to [−1, 1] (LIBSVM's ``svm-scale``
      default, which produced its ``*_scale`` files; a constant feature to −1);
    * ``l2`` — each row divided by its Euclidean norm (stateless; zero rows left alone);
    * ``zscore_l2``, ``pm1_l2`` — the per-feature map, then unit-L2 rows;
    * ``none`` — unchanged.
    """

    kind: str
    shift_: np.ndarray | None = None
    scale_: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.kind not in SCALINGS:
            raise ValueError(f"unknown scaling {self.kind!r}; use one of {SCALINGS}")

    @property
    def _feature(self) -> str:
        return self.kind.removesuffix("_l2") if self.kind != "l2" else "none"

    def fit(self, X: np.ndarray) -> Scaler:
        X = np.asarray(X, dtype=np.float64)
        if self._feature == "zscore":
            sd = X.std(axis=0)
            self.shift_, self.scale_ = X.mean(axis=0), np.where(sd > 0, sd, 1.0)
        elif self._feature in ("minmax", "pm1"):
            lo, hi = X.min(axis=0), X.max(axis=0)
            self.shift_, self.scale_ = lo, np.where(hi > lo, hi - lo, 1.0)
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if self._feature in ("zscore", "minmax", "pm1"):
            if self.shift_ is None:
                raise RuntimeError("Scaler.transform before fit")
            X = (X - self.shift_) / self.scale_
            if self._feature == "pm1":
                X = 2.0 * X - 1.0
        if self.kind.endswith("l2"):
            norm = np.linalg.norm(X, axis=1, keepdims=True)
            X = X / np.where(norm > 0, norm, 1.0)
        return np.ascontiguousarray(X)

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        return self.fit(X).transform(X)


# --------------------------------------------------------------------------------------------
# Learners under evaluation
# --------------------------------------------------------------------------------------------
class OnlineLearner(Protocol):
    def learn(self, X: np.ndarray, y: np.ndarray) -> Any: ...
    def score(self, X: np.ndarray) -> np.ndarray: ...
    def score_then_learn(self, X: np.ndarray, y: np.ndarray) -> np.ndarray: ...


Factory = Callable[..., OnlineLearner]  # (n_features=, seed=, **params) -> learner


def _models_factory(name: str) -> Factory:
    def make(n_features: int, seed: int, **params: Any) -> OnlineLearner:
        return models.create(name, n_features=n_features, seed=seed, **params)

    return make


@dataclass
class Method:
    """One column of a results table: a learner, its fixed parameters and its CV grid.

    ``learner`` is a name for ``models.create`` unless ``factory`` is given (the peers, or a
    test double). ``grid`` maps parameter names to the candidate values; the product of the
    lists is searched.
    """

    key: str
    learner: str
    fixed: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, Sequence[Any]] = field(default_factory=dict)
    factory: Factory | None = None

    def make(self, n_features: int, seed: int, params: dict[str, Any]) -> OnlineLearner:
        build = self.factory or _models_factory(self.learner)
        return build(n_features=n_features, seed=seed, **{**self.fixed, **params})


def grid_points(grid: dict[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """All combinations of a grid, in a fixed order (first key varies slowest)."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(grid[k] for k in keys))]


def safe_auc(y: np.ndarray, scores: np.ndarray) -> float:
    """``models.auc``, or NaN when the model produced non-finite scores (it diverged)."""
    scores = np.asarray(scores, dtype=np.float64)
    if not np.isfinite(scores).all():
        return float("nan")
    return models.auc(y, scores)


def _seed(*parts: int) -> int:
    """A 32-bit learner seed derived from a tuple of integers."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------
def stratified_folds(y: np.ndarray, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``k`` disjoint folds covering ``range(len(y))``, each class spread evenly.

    Each class's indices are shuffled and dealt round-robin, starting where the previous
    class stopped, so fold sizes differ by at most one. Indices within a fold are sorted.
    """
    y = np.asarray(y)
    if k < 2:
        raise ValueError("need at least 2 folds")
    fold_of = np.empty(y.shape[0], dtype=np.int64)
    start = 0
    for cls in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == cls))
        fold_of[idx] = (start + np.arange(idx.shape[0])) % k
        start = (start + idx.shape[0]) % k
    return [np.flatnonzero(fold_of == f) for f in range(k)]


@dataclass(frozen=True)
class Split:
    run: int
    fold: int
    train: np.ndarray  # training rows in the order they are learned (random)
    test: np.ndarray  # held-out rows (sorted)


def outer_splits(y: np.ndarray, folds: int, runs: int, seed: int) -> Iterator[Split]:
    """``runs`` × ``folds`` train/test splits; each training part in its own random order."""
    for run in range(runs):
        parts = stratified_folds(y, folds, np.random.default_rng([seed, run]))
        for f in range(folds):
            train = np.concatenate([parts[g] for g in range(folds) if g != f])
            order = np.random.default_rng([seed, run, f, 1]).permutation(train.shape[0])
            yield Split(run, f, train[order], parts[f])


# --------------------------------------------------------------------------------------------
# Cross-validation and one split
# --------------------------------------------------------------------------------------------
def cross_validate(method: Method, X: np.ndarray, y: np.ndarray, *, scaling: str, k: int,
                   seed: int, points: list[dict[str, Any]] | None = None,
                   ) -> tuple[dict[str, Any], list[float]]:
    """Pick hyperparameters by ``k``-fold CV on ``(X, y)`` — the training part only.

    Each inner model learns its inner training rows in their order in ``X`` (already random)
    with a scaler fitted on them, and is scored on the inner validation fold. The grid point
    with the highest mean AUC wins; ties go to the earlier point. A point whose model
    diverges (non-finite scores) on any fold scores NaN and cannot win. Returns the winning
    parameters and the mean CV AUC of every point.
    """
    points = grid_points(method.grid) if points is None else points
    if len(points) <= 1:
        return (points[0] if points else {}), [float("nan")] * len(points)
    inner = stratified_folds(y, k, np.random.default_rng([seed, 2]))
    sums = np.zeros(len(points))
    d = X.shape[1]
    for j, val in enumerate(inner):
        tr = np.sort(np.concatenate([inner[g] for g in range(k) if g != j]))
        scaler = Scaler(scaling).fit(X[tr])
        Xtr, Xval = scaler.transform(X[tr]), scaler.transform(X[val])
        for p, params in enumerate(points):
            if math.isnan(sums[p]):
                continue
            model = method.make(d, _seed(seed, 3, j), params)
            try:
                with np.errstate(all="ignore"):
                    model.learn(Xtr, y[tr])
            except models.NonFiniteError:  # diverged: the model refused to go non-finite
                sums[p] = math.nan
                continue
            sums[p] += safe_auc(y[val], model.score(Xval))
    means = (sums / k).tolist()
    finite = [m if not math.isnan(m) else -math.inf for m in means]
    best = int(np.argmax(finite))
    return points[best], means


def evaluate_split(method: Method, X: np.ndarray, y: np.ndarray, split: Split, *,
                   scaling: str, cv_folds: int, seed: int,
                   points: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """CV on the training part, one pass over it with the winner, AUC on the held-out fold.

    Times: ``train_s`` is the final pass over the training part (the number comparable to the
    papers' training times), ``test_s`` scoring the held-out fold, ``cv_s`` the search.
    """
    Xtr_raw, ytr = X[split.train], y[split.train]
    split_seed = _seed(seed, split.run, split.fold)
    t0 = time.perf_counter()
    params, cv_means = cross_validate(method, Xtr_raw, ytr, scaling=scaling, k=cv_folds,
                                      seed=split_seed, points=points)
    t1 = time.perf_counter()
    scaler = Scaler(scaling).fit(Xtr_raw)
    Xtr, Xte = scaler.transform(Xtr_raw), scaler.transform(X[split.test])
    model = method.make(X.shape[1], _seed(split_seed, 4), params)
    t2 = time.perf_counter()
    try:
        with np.errstate(all="ignore"):
            model.learn(Xtr, ytr)
        t3 = time.perf_counter()
        scores = model.score(Xte)
    except models.NonFiniteError:  # the winner diverged on the full training part
        t3 = time.perf_counter()
        scores = np.full(Xte.shape[0], np.nan)
    t4 = time.perf_counter()
    return {
        "run": split.run,
        "fold": split.fold,
        "auc": safe_auc(y[split.test], scores),
        "params": params,
        "cv_auc": max((m for m in cv_means if not math.isnan(m)), default=float("nan")),
        "train_s": t3 - t2,
        "test_s": t4 - t3,
        "cv_s": t1 - t0,
        "n_train": int(split.train.shape[0]),
        "n_test": int(split.test.shape[0]),
    }


# --------------------------------------------------------------------------------------------
# Prequential
# --------------------------------------------------------------------------------------------
def prequential(method: Method, X: np.ndarray, y: np.ndarray, params: dict[str, Any], *,
                seed: int, window: int, n_points: int = 200, standardize: bool = True,
                chunk: int = 4096) -> dict[str, Any]:
    """Test-then-train over the stream ``(X, y)`` in row order, as the service does it.

    Returns the prequential scores, their overall AUC, and the rolling AUC (window
    ``window``) at about ``n_points`` evenly spaced positions (``curve_t``/``curve_auc``,
    NaN while the window lacks a class). ``seconds`` covers scaling, scoring and learning.
    """
    n, d = X.shape
    model = method.make(d, _seed(seed, 5), params)
    scaler = StandardScaler(d) if standardize else None
    rolling = models.RollingAUC(window)
    marks = sorted({min(n, max(1, round(n * (i + 1) / n_points))) for i in range(n_points)})
    bounds = sorted(set(range(0, n, chunk)) | set(marks) | {n})
    prior = np.empty(n)
    curve_t: list[int] = []
    curve_auc: list[float] = []
    mark_set = set(marks)
    t0 = time.perf_counter()
    for a, b in itertools.pairwise(bounds):
        Xb = X[a:b]
        if scaler is not None:
            Xb = scaler.learn_transform(Xb)
        try:
            with np.errstate(all="ignore"):
                prior[a:b] = model.score_then_learn(Xb, y[a:b])
        except models.NonFiniteError:  # diverged (refused to go non-finite): no scores
            prior[a:b] = np.nan
        good = np.isfinite(prior[a:b])
        rolling.update(np.where(good, prior[a:b], 0.0), y[a:b])
        if b in mark_set:
            curve_t.append(b)
            curve_auc.append(rolling.value)
    seconds = time.perf_counter() - t0
    return {
        "scores": prior,
        "auc": safe_auc(y, prior),
        "curve_t": curve_t,
        "curve_auc": curve_auc,
        "seconds": seconds,
        "params": params,
        "window": window,
    }


def tune_prequential(method: Method, X: np.ndarray, y: np.ndarray, *, prefix: int, seed: int,
                     standardize: bool = True) -> tuple[dict[str, Any], list[float]]:
    """Choose hyperparameters by prequential AUC on the first ``prefix`` events only."""
    points = grid_points(method.grid)
    if len(points) <= 1:
        return (points[0] if points else {}), []
    aucs = []
    for params in points:
        r = prequential(method, X[:prefix], y[:prefix], params, seed=seed, window=prefix,
                        n_points=1, standardize=standardize)
        aucs.append(r["auc"])
    finite = [a if not math.isnan(a) else -math.inf for a in aucs]
    return points[int(np.argmax(finite))], aucs
