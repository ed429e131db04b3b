"""Shadow candidates: several learners learn the same stream; the one that has ranked best
recently serves.

A stream has no held-out set to tune C, σ or η on, as the papers' cross-validation does.
:class:`Auto` runs a set of candidate learners side by side on every event, scores each
event with every candidate before learning it (test-then-train), and serves the candidate
whose recent ranking quality is best.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, ClassVar

import numpy as np

from . import _sparse
from ._atomic import Plan, all_finite
from ._config import MAX_FEATURES_SPARSE, SPARSE_STORAGE_THRESHOLD
from ._memory import array_bytes
from ._validation import Batch, Interval, Options, Param, Text
from .auc import u_statistic
from .base import Learner, _lookup, available, register

__all__ = ["Auto", "default_candidates"]

MAX_CANDIDATES = 16

# Learned state of Auto itself (the candidates' arrays are saved under "c<i>." prefixes).
_OWN = ("n_seen_", "served_", "pinned_", "promotions_", "block_s_", "block_y_",
        "block_fill_", "ring_u_", "ring_p_", "ring_pos_")


def default_candidates(n_features: int) -> list[dict[str, Any]]:
    """The built-in candidate set for an input dimension, the first one serving first.

    Chosen on served quality (``python -m bench.auto``, bench/RESULTS.md): CBR-diag was
    the best or within 0.003 of the best single learner on every stream but shuttle
    (SOLAM's), and its best C fell with the stream's length and sparsity — 1e-4 on the
    hashed ad-click feed (1M events), 1e-3 on a9a, adult, protein and spambase, 1e-1 on
    segment and svmguide1. So: a C grid a decade apart around those, and SOLAM, which
    costs little. CBR (full covariance) was never the best and cost 3-20x a CBR-diag;
    OAM_gra was the worst on the ad-click feed. Bounded-step learners only: a candidate
    that would go non-finite refuses the event for the whole model. And logistic
    regression by NAG (``logistic_nag``, VW's default learner, O(nnz) per event), which
    serves until the windows show another candidate ranking better by ``margin``: before
    any evidence a model ranks as VW's default would, and on a9a, where no learner of
    the papers reaches VW, it keeps serving. Measured against serving CBR-diag at
    C = 1e-4 first (bench/RESULTS.md, 2026-11-29): a9a 0.8926 → 0.8944, spambase
    0.9193 → 0.9184, the other nine streams within 0.0002.
    """
    grid = (1e-4, 1e-3, 1e-2) if n_features > SPARSE_STORAGE_THRESHOLD \
        else (1e-4, 1e-3, 1e-2, 1e-1)
    return [{"learner": "logistic_nag", "params": {}},
            *({"learner": "cbr_diag_fifo", "params": {"C": c}} for c in grid),
            {"learner": "solam", "params": {}}]


# Batches from this many events are learned by the candidates in parallel threads.
_PARALLEL_MIN_BATCH = 64
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor | None:
    """Threads for candidates to learn in (one per core; none on a single core)."""
    global _POOL
    cores = os.cpu_count() or 1
    if cores < 2:
        return None
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(cores, thread_name_prefix="auto-candidate")
    return _POOL


def _registry() -> list[str]:
    return available()


def _child_seed(seed: int, i: int) -> int:
    """A distinct, reproducible seed per candidate."""
    return (seed + 0x9E3779B97F4A7C15 * (i + 1)) % (1 << 63)


@register
class Auto(Learner):
    """Shadow candidates with online selection: every candidate learns every event, the
    best recent ranker serves.

    Every candidate learns the whole stream in order, exactly as it would alone (each
    from its own seed), so the candidates' states, and with them the choice, depend on
    the stream only: replicas and recoveries agree bit for bit.

    **Quality.** The stream is cut into windows of ``block`` consecutive events (by
    position, so how events are batched does not matter). In each window, each
    candidate's test-then-train scores are ranked against that window's labels: its
    Mann–Whitney U over the window's (positive, negative) pairs. A candidate's quality
    is its U summed over the last ``windows`` windows, divided by their pairs: an AUC
    within windows, so a candidate whose score scale drifts is not penalised for
    comparing scores made far apart. Windows with one class only carry no pairs and are
    not counted.

    **Selection.** After each window, once ``min_events`` events have been seen, the
    candidate of best quality (the first, on ties) replaces the served one if it leads
    it by more than ``margin`` (hysteresis against flapping). Scores come from the
    served candidate only: the prequential scores of ``score_then_learn`` are those of
    the candidate serving when each event arrived.

    Learning is all or nothing across candidates: if any would go non-finite, the batch
    is refused whole (:class:`models.NonFiniteError`), as for a single learner. The
    built-in candidates are bounded-step learners for that reason.

    Parameters
    ----------
    n_features : int
        Input dimension; each candidate checks it against its own limit.
    seed : int
        Candidate i learns from seed ``(seed + 0x9E3779B97F4A7C15·(i + 1)) mod 2⁶³``.
    candidates : str, default ''
        The candidates, a JSON list of ``{"learner": name, "params": {...}}`` objects
        (at most 16; ``"auto"`` cannot be one). Empty: the built-in set for the input
        dimension (:func:`default_candidates`). Saved resolved, every parameter
        explicit, so a restored model never depends on later defaults.
    storage : {'auto', 'dense', 'sparse'}, default 'auto'
        Passed to every candidate that has a ``storage`` parameter.
    block : int in [10, 100000], default 500
        Events per quality window.
    windows : int in [1, 10000], default 20
        Windows the quality sums over.
    min_events : int ≥ 0, default 500
        Events before the first switch: one window at the default ``block``. Measured
        against 1000 and 2000 (bench/RESULTS.md, issue 11 notes): served quality rose on
        every short stream (segment, 2,310 rows: 0.8163 → 0.8282) and was unchanged or
        higher on the long ones, with the same number of promotions everywhere; the
        ``margin`` keeps a young lead from flapping.
    margin : float in [0, 1], default 0.005
        Quality lead a candidate needs over the served one to replace it.

    State
    -----
    ``c<i>.<key>``: candidate i's state arrays; ``served_`` (1,) the chosen candidate,
    ``pinned_`` (1,) the pinned one (-1: none; it serves when set, see :meth:`pin`);
    ``promotions_`` (1,) switches so far; ``block_s_`` (k, block) the open window's
    scores, ``block_y_`` (block,) its labels, ``block_fill_`` (1,) its length;
    ``ring_u_`` (windows, k) U per window and candidate, ``ring_p_`` (windows,) pairs per
    window, ``ring_pos_`` (2,) next slot and filled slots; ``n_seen_`` (negatives,
    positives).

    Notes
    -----
    The built-in set (:func:`default_candidates`): logistic regression by NAG (VW's
    default learner, serving first), CBR-diag over C ∈ {1e-4, 1e-3, 1e-2, 1e-1} (without
    1e-1 for hashed input) and SOLAM, chosen on served quality over the project's
    datasets and the ad-click feed (bench/RESULTS.md). Learning costs the sum of the
    candidates' costs; scoring costs the served candidate's only.

    Examples
    --------
    >>> import numpy as np
    >>> from aucstream import models
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(3000, 5))
    >>> y = (X[:, 0] - X[:, 1] + 0.5 * rng.normal(size=3000) > 1).astype(int)
    >>> lrn = models.create("auto", n_features=5, seed=0, block=250, min_events=500)
    >>> [c["params"].get("C", c["learner"]) for c in lrn.candidates]
    ['logistic_nag', 0.0001, 0.001, 0.01, 0.1, 'solam']
    >>> _ = lrn.learn(X[:2000], y[:2000])
    >>> round(float(models.auc(y[2000:], lrn.score(X[2000:]))), 2) > 0.9
    True
    """

    name = "auto"
    max_features = MAX_FEATURES_SPARSE
    accepts_sparse = True  # if every candidate does (set per instance)
    scoring_keys = ()
    param_table: ClassVar[dict[str, Param]] = {
        "candidates": Param(Text("a JSON list of {\"learner\", \"params\"} objects, or ''"),
                            "", "candidate learners ('' = the built-in set)"),
        "storage": Param(Options(("auto", "dense", "sparse")), "auto",
                         "storage of every candidate that has the parameter"),
        "block": Param(Interval(int, 10, 100_000, "both"), 500, "events per quality window"),
        "windows": Param(Interval(int, 1, 10_000, "both"), 20, "windows the quality covers"),
        "min_events": Param(Interval(int, 0, None, "left"), 500,
                            "events before the first switch"),
        "margin": Param(Interval(float, 0.0, 1.0, "both"), 0.005,
                        "quality lead needed to replace the served candidate"),
    }

    def __init__(self, *, n_features: int, seed: int = 0, **params: Any) -> None:
        super().__init__(n_features=n_features, seed=seed, **params)
        # What Auto itself copies and checks around a batch (see _attempt); the
        # candidates' journals cover their own arrays.
        self._plan = Plan(_OWN, ("block_s_", "ring_u_", "ring_p_"), ())

    # ----------------------------------------------------------------- construction
    def _resolve_params(self) -> None:
        specs = self._parse_candidates(self.params["candidates"])
        children = []
        for i, spec in enumerate(specs):
            cls = _lookup(spec["learner"])
            params = dict(spec["params"])
            if "storage" in cls.param_table and "storage" not in params:
                params["storage"] = self.params["storage"]
            try:
                child = cls(n_features=self.n_features, seed=_child_seed(self.seed, i),
                            **params)
            except ValueError as exc:
                raise ValueError(f"The 'candidates' parameter of auto: candidate {i} "
                                 f"({spec['learner']}): {exc}") from None
            children.append(child)
        self._children: list[Learner] = children
        self.accepts_sparse = all(c.accepts_sparse for c in children)
        self.params["candidates"] = json.dumps(
            [{"learner": c.name, "params": c.params} for c in children],
            sort_keys=True, separators=(",", ":"))

    def _parse_candidates(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return default_candidates(self.n_features)

        def refuse(why: str) -> ValueError:
            shown = text if len(text) <= 200 else text[:200] + "..."
            return ValueError(
                f"The 'candidates' parameter of auto must be a JSON list of 1 to "
                f"{MAX_CANDIDATES} {{\"learner\": name, \"params\": {{...}}}} objects "
                f"({why}); got {shown!r}.")

        try:
            specs = json.loads(text)
        except ValueError:
            raise refuse("not valid JSON") from None
        if not isinstance(specs, list) or not 1 <= len(specs) <= MAX_CANDIDATES:
            raise refuse(f"not a list of 1 to {MAX_CANDIDATES}")
        out = []
        for i, spec in enumerate(specs):
            if not isinstance(spec, dict) or set(spec) - {"learner", "params"} \
                    or not isinstance(spec.get("learner"), str) \
                    or not isinstance(spec.get("params", {}), dict):
                raise refuse(f"candidate {i} is not such an object")
            if spec["learner"] == self.name:
                raise refuse(f"candidate {i} is 'auto' itself")
            if spec["learner"] not in _registry():
                raise refuse(f"candidate {i} names an unknown learner {spec['learner']!r}; "
                             f"available: {', '.join(n for n in _registry() if n != 'auto')}")
            out.append({"learner": spec["learner"], "params": spec.get("params", {})})
        return out

    def _allocate(self) -> dict[str, np.ndarray]:
        k, block, windows = len(self._children), self.params["block"], self.params["windows"]
        state = self._child_arrays()
        state.update({
            "n_seen_": np.zeros(2, np.int64),
            "served_": np.zeros(1, np.int64),
            "pinned_": np.full(1, -1, np.int64),
            "promotions_": np.zeros(1, np.int64),
            "block_s_": np.zeros((k, block)),
            "block_y_": np.zeros(block, np.int8),
            "block_fill_": np.zeros(1, np.int64),
            "ring_u_": np.zeros((windows, k)),
            "ring_p_": np.zeros(windows),
            "ring_pos_": np.zeros(2, np.int64),
        })
        return state

    def _child_arrays(self) -> dict[str, np.ndarray]:
        return {f"c{i}.{key}": arr for i, child in enumerate(self._children)
                for key, arr in child._state.items()}

    def _sync_child_arrays(self) -> None:
        """A candidate may replace an array of its state (sparse buffers grow); the
        prefixed entries follow it."""
        self._state.update(self._child_arrays())

    def resize(self, n_features: int) -> None:
        """Grow every candidate's input dimension (see ``Learner.resize``)."""
        if n_features < self.n_features:
            raise ValueError(f"{self.name} can only grow: {n_features} < {self.n_features}")
        self._check_not_frozen()
        for child in self._children:
            child.resize(n_features)
        self.n_features = n_features
        self._sync_child_arrays()

    # ----------------------------------------------------------------- learning
    def _child_batch(self, child: Learner, batch: Batch) -> Batch:
        if child._journaled() and batch.dense is not None:  # as Learner._learn_whole
            return Batch(batch.n, None, *_sparse.dense_to_csr(batch.dense))
        return batch

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        """Every candidate learns the batch (its scores kept), then the windows advance.

        Candidates share nothing and their kernels release the GIL, so a batch of some
        size is learned by them in parallel threads; each one's result is the same as
        alone, whatever the interleaving."""
        priors = np.zeros((len(self._children), batch.n))

        def one(i: int) -> None:
            child = self._children[i]
            child._learn(self._child_batch(child, batch), y, priors[i])

        pool = _pool() if batch.n >= _PARALLEL_MIN_BATCH and len(self._children) > 1 \
            else None
        if pool is None:
            for i in range(len(self._children)):
                one(i)
        else:
            futures = [pool.submit(one, i) for i in range(len(self._children))]
            wait(futures)  # all done before any rollback touches their states
            for future in futures:
                future.result()  # re-raises a candidate's exception
        self._sync_child_arrays()
        self._advance(y, priors, prior)

    def _attempt(self, batch: Batch, y: np.ndarray, prior: np.ndarray, keep: bool) -> bool:
        """All or nothing across candidates: each keeps its own journal (sparse layouts
        journal their touched columns only), Auto copies its small arrays."""
        own = {k: self._state[k].copy() for k in _OWN}
        journals = []
        ok = False
        try:
            for child in self._children:
                journals.append(child._open_journal(self._child_batch(child, batch)))
            try:
                self._learn(batch, y, prior)
                ok = (all(j.finite(c._state) for c, j in zip(self._children, journals,
                                                            strict=True))
                      and all(all_finite(self._state[k].reshape(-1))
                              for k in ("block_s_", "ring_u_", "ring_p_"))
                      and (not prior.shape[0] or all_finite(prior)))
            except ArithmeticError:
                ok = False
        except BaseException:
            self._rollback(journals, own)
            raise
        finally:
            for child in self._children:
                child._journal = None
        if not (ok and keep):
            self._rollback(journals, own)
        return ok

    def _rollback(self, journals: list, own: dict[str, np.ndarray]) -> None:
        for child, journal in zip(self._children, journals, strict=False):
            journal.restore(child._state)
        for key, arr in own.items():
            np.copyto(self._state[key], arr)
        self._sync_child_arrays()

    def _advance(self, y: np.ndarray, priors: np.ndarray, prior: np.ndarray) -> None:
        """Fill the open window with the candidates' scores; close it when full."""
        s = self._state
        block = self.params["block"]
        n, pos = y.shape[0], 0
        while pos < n:
            fill = int(s["block_fill_"][0])
            take = min(block - fill, n - pos)
            seg = slice(pos, pos + take)
            if prior.shape[0]:
                prior[seg] = priors[self.served, seg]
            s["block_s_"][:, fill:fill + take] = priors[:, seg]
            s["block_y_"][fill:fill + take] = y[seg] > 0
            n_pos = int((y[seg] > 0).sum())
            s["n_seen_"][1] += n_pos
            s["n_seen_"][0] += take - n_pos
            fill += take
            pos += take
            if fill == block:
                self._close_window()
                fill = 0
            s["block_fill_"][0] = fill

    def _close_window(self) -> None:
        s = self._state
        labels = s["block_y_"].astype(bool)
        n_pos = int(labels.sum())
        pairs = float(n_pos * (labels.shape[0] - n_pos))
        if pairs > 0:
            head, filled = int(s["ring_pos_"][0]), int(s["ring_pos_"][1])
            for i in range(len(self._children)):
                s["ring_u_"][head, i] = u_statistic(s["block_s_"][i], labels)
            s["ring_p_"][head] = pairs
            s["ring_pos_"][0] = (head + 1) % self.params["windows"]
            s["ring_pos_"][1] = min(filled + 1, self.params["windows"])
        if int(s["n_seen_"].sum()) < self.params["min_events"] or s["ring_pos_"][1] == 0:
            return
        quality = self.quality
        best = int(np.argmax(quality))
        served = self.chosen
        if best != served and quality[best] > quality[served] + self.params["margin"]:
            s["served_"][0] = best
            s["promotions_"][0] += 1

    # ----------------------------------------------------------------- serving
    def _score(self, batch: Batch) -> np.ndarray:
        if self._frozen:
            return self._served_snapshot._score(batch)
        return self._children[self.served]._score(batch)

    def snapshot(self) -> Learner:
        """A frozen copy that scores as the served candidate does now."""
        twin = object.__new__(type(self))
        twin.n_features, twin.seed, twin.params = self.n_features, self.seed, dict(self.params)
        twin.accepts_sparse = self.accepts_sparse
        twin._children = []
        twin._served_snapshot = self._children[self.served].snapshot()
        twin._state = {k: self._state[k].copy() for k in ("n_seen_", "served_", "pinned_")}
        twin._frozen = True
        return twin

    @property
    def served(self) -> int:
        """Index of the candidate that scores: the pinned one, else the chosen one."""
        pinned = int(self._state["pinned_"][0])
        return pinned if pinned >= 0 else int(self._state["served_"][0])

    @property
    def chosen(self) -> int:
        """The candidate the windows choose (the one serving unless one is pinned)."""
        return int(self._state["served_"][0])

    @property
    def pinned(self) -> int | None:
        """The pinned candidate, if any."""
        pinned = int(self._state["pinned_"][0])
        return None if pinned < 0 else pinned

    def pin(self, candidate: int | None) -> Auto:
        """Serve ``candidate`` whatever the windows say (None: follow them again). The
        choice goes on underneath; every candidate keeps learning. A state change like
        learning: a service applies it at a log position, the same on every replica."""
        self._check_not_frozen()
        if candidate is not None and (isinstance(candidate, bool) or
                                      not 0 <= int(candidate) < len(self._children)):
            raise ValueError(f"auto: no candidate {candidate!r}; there are "
                             f"{len(self._children)} (0 to {len(self._children) - 1}).")
        self._state["pinned_"][0] = -1 if candidate is None else int(candidate)
        return self

    @property
    def promotions(self) -> int:
        """How many times the served candidate has changed."""
        return int(self._state["promotions_"][0])

    @property
    def quality(self) -> np.ndarray:
        """Each candidate's AUC within the recent windows (NaN before the first one)."""
        pairs = float(self._state["ring_p_"].sum())
        if pairs == 0:
            return np.full(len(self._children), np.nan)
        return self._state["ring_u_"].sum(axis=0) / pairs

    @property
    def candidates(self) -> list[dict[str, Any]]:
        """Each candidate: learner, resolved parameters, quality, whether it serves."""
        quality = self.quality
        served = self.served
        return [{"learner": c.name, "params": dict(c.params),
                 "quality": None if np.isnan(q) else float(q), "serving": i == served}
                for i, (c, q) in enumerate(zip(self._children, quality, strict=True))]

    @property
    def buffer_fill(self) -> tuple[int, int] | None:
        if self._frozen:
            return self._served_snapshot.buffer_fill
        return self._children[self.served].buffer_fill

    @property
    def nbytes(self) -> int:
        if self._frozen:
            return self._served_snapshot.nbytes + array_bytes(self)
        own = sum(self._state[k].nbytes for k in _OWN)
        return own + sum(c.nbytes for c in self._children)

    # ----------------------------------------------------------------- state
    @classmethod
    def _upgrade(cls, state: dict[str, Any]) -> dict[str, Any]:
        if "pinned_" not in state:  # saved before pins existed: none
            state = {**state, "pinned_": np.full(1, -1, np.int64)}
        return state

    def _variable_keys(self) -> frozenset[str]:
        return frozenset(f"c{i}.{k}" for i, c in enumerate(self._children)
                         for k in c.variable_shape)

    def _after_restore(self) -> None:
        """Hand the restored arrays to the candidates, and check what Auto indexes."""
        from ._buffers import check_buffer_state

        s = self._state
        for i, child in enumerate(self._children):
            prefix = f"c{i}."
            for key in child._state:
                child._state[key] = s[prefix + key]
            if "order_" in child._state:
                check_buffer_state(child.name, child._state, child.n_features)
            child._after_restore()
        k, block, windows = len(self._children), self.params["block"], self.params["windows"]
        if not (0 <= s["served_"][0] < k and -1 <= s["pinned_"][0] < k
                and 0 <= s["block_fill_"][0] < block
                and 0 <= s["ring_pos_"][0] < windows and 0 <= s["ring_pos_"][1] <= windows):
            raise ValueError(f"The {self.name} state has an out-of-range index "
                             "(served_, pinned_, block_fill_ or ring_pos_).")
