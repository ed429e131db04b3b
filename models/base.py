"""The learner contract shared by every family, and the registry behind ``models.create``.

A learner is a deterministic state machine: ``learn(X, y)`` applies a batch of events in
row order, ``score(X)`` reads the model without changing it, and ``get_state()`` returns
everything (parameters, learned arrays, random-generator state) as a flat dict that
``models.from_state`` turns back into an identical learner.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from . import _sparse
from ._atomic import Journal, Plan, all_finite, touched_columns
from ._buffers import check_buffer_state
from ._kernels import NO_SCORES
from ._memory import array_bytes
from ._validation import Batch, Interval, Options, Param, check_labels, check_matrix
from ._validation import validate_params as _validate_params

__all__ = ["Learner", "NonFiniteError", "available", "create", "from_state", "register"]

STATE_VERSION = 1

# Keys of a state dict that are not parameters or learned arrays.
_META = ("learner", "state_version", "n_features", "seed")

_REGISTRY: dict[str, type[Learner]] = {}

# Empty sparse buffers, for layouts without them.
_NO_BIDX = np.zeros((2, 0, 0), np.int64)
_NO_BNNZ = np.zeros((2, 0), np.int64)


class NonFiniteError(ValueError):
    """Learning a batch would make a model's state (or a prequential score) non-finite.

    Raised by ``learn`` and ``score_then_learn`` (and ``StandardScaler.learn_transform``)
    after the state has been restored bit for bit: nothing of the batch was learned.
    ``row`` is the first row of the batch whose learning makes the model fail: the
    smallest k such that learning rows[:k + 1] alone would fail.
    """

    def __init__(self, learner: str, row: int) -> None:
        self.learner = learner
        self.row = int(row)
        super().__init__(
            f"{learner}: learning row {self.row} of this batch would make the model's "
            f"state non-finite; nothing was learned."
        )


def register(cls: type[Learner]) -> type[Learner]:
    """Class decorator: make a learner available to ``models.create`` by its name."""
    if cls.name in _REGISTRY:
        raise RuntimeError(f"learner name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def available() -> list[str]:
    """Names of every learner ``create`` accepts, sorted."""
    return sorted(_REGISTRY)


def _lookup(name: Any) -> type[Learner]:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"Unknown learner {name!r}; available learners are: {', '.join(available())}."
        ) from None


def create(name: str, n_features: int, seed: int = 0, **params: Any) -> Learner:
    """Create a learner by name, with its parameters validated."""
    return _lookup(name)(n_features=n_features, seed=seed, **params)


def from_state(state: dict[str, Any]) -> Learner:
    """Rebuild a learner from ``get_state()`` output; raises ``ValueError`` if malformed."""
    if not isinstance(state, dict) or "learner" not in state:
        raise ValueError("A learner state must be a dict with a 'learner' key.")
    return _lookup(state["learner"])._from_state(state)


_FEATURE_AXES: dict[tuple, dict[str, int]] = {}  # see Learner._feature_axes
# Instance scratch a learner re-creates lazily (getattr(self, name, None) is None): the
# journal's column marks, the journal plan, a kernel workspace, the journal log.
_SCRATCH = ("_seen", "_plan", "_work", "_log")


class Learner:
    """Base class: parameter validation, input checks, state round trip.

    Subclasses set ``name``, ``param_table``, ``max_features`` and ``scoring_keys`` and
    implement ``_allocate`` (fresh learned state), ``_learn`` and ``_score``. Learned state
    is a dict of numpy arrays whose keys end with ``_``; kernels update those arrays in
    place. ``_learn(batch, y, prior)`` writes each event's score before learning it into
    ``prior`` when ``prior`` is non-empty.

    Learning is all or nothing (``models._atomic``): before a batch the state is copied,
    or, for a sparse layout's O(d) vectors (``_journaled``), journaled at the columns the
    batch can touch; if the batch raises, or leaves the state or a prequential score
    non-finite, the state is restored bit for bit.
    """

    name: ClassVar[str]
    param_table: ClassVar[dict[str, Param]] = {}
    accepts_sparse: ClassVar[bool] = False
    max_features: ClassVar[int]
    # State arrays whose shape may legitimately differ from a fresh learner's.
    variable_shape: ClassVar[frozenset[str]] = frozenset()
    # State arrays that ``_score`` reads: all that a snapshot copies.
    scoring_keys: ClassVar[tuple[str, ...]]
    # State arrays that ``_learn`` never writes (e.g. random Fourier frequencies drawn at
    # construction): a batch neither copies nor checks them.
    fixed_keys: ClassVar[frozenset[str]] = frozenset()
    # State arrays that only ever hold copies of input rows, which are checked finite
    # on the way in: a batch copies them but does not check them.
    input_keys: ClassVar[frozenset[str]] = frozenset()
    # True if ``_learn`` logs the ``_journaled`` vectors itself as it goes, per position
    # of the batch's CSR values (``models._atomic.Journal``), instead of their values
    # being gathered before the batch.
    logs_journal: ClassVar[bool] = False

    def __init__(self, *, n_features: int, seed: int = 0, **params: Any) -> None:
        self.n_features, self.seed = _check_meta(self.name, n_features, seed, self.max_features)
        self.params = _validate_params(self.name, self.param_table, params)
        self._resolve_params()
        self._state: dict[str, np.ndarray] = self._allocate()
        self._frozen = False
        self._journal: Journal | None = None  # set while a batch is being learned
        self._plan: Plan | None = None  # what a journal copies and checks, made once

    # ----------------------------------------------------------------- subclass hooks
    def _resolve_params(self) -> None:
        """Replace 'auto' choices by concrete values (they are saved concrete)."""

    def _allocate(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        raise NotImplementedError

    def _score(self, batch: Batch) -> np.ndarray:
        raise NotImplementedError

    def _journaled(self) -> tuple[str, ...]:
        """Sparse layouts: the O(d) state vectors that a batch changes only at the
        columns of its rows and of the rows buffered when it starts. They are journaled
        at those columns (``_journal_columns``) instead of copied whole."""
        return ()

    def _journal_columns(self, batch: Batch) -> np.ndarray:
        """The columns a (CSR) batch can change the ``_journaled`` vectors at: its own,
        and those of the rows in the sparse buffers (``bidx_``) when it starts, each
        once. (A learner that logs its journal itself gets the batch's indices.)"""
        s = self._state
        if self.logs_journal:
            return batch.indices
        seen = getattr(self, "_seen", None)
        if seen is None:  # scratch, all zero between calls (allocated once)
            seen = self._seen = np.zeros((self.n_features + 63) // 64, np.uint64)
        bidx, bnnz = (s["bidx_"], s["bnnz_"]) if "bidx_" in s else (_NO_BIDX, _NO_BNNZ)
        return touched_columns(batch.indices, bidx, bnnz, seen)

    def _log_scratch(self, vectors: tuple[str, ...], n: int) -> dict[str, np.ndarray]:
        """Arrays of at least ``n`` floats per journaled vector for a kernel that logs its
        journal (``logs_journal``); kept from batch to batch, as fresh ones would cost a
        page fault every 4 kB."""
        log = getattr(self, "_log", None)
        if log is None or log[vectors[0]].shape[0] < n:
            log = self._log = {k: np.empty(max(n, 1024)) for k in vectors}
        return log

    def _keep_whole(self, *keys: str) -> None:
        """Called by ``_learn`` before it rewrites journaled vectors whole (an O(d) step
        such as SOLAM's fold): the running journal, if any, copies them first."""
        journal = getattr(self, "_journal", None)
        if journal is not None:
            journal.keep_whole(self._state, keys)

    # ----------------------------------------------------------------- resizing
    def resize(self, n_features: int) -> None:
        """Grow the input dimension to ``n_features`` in place (compact feature indices:
        a hashed model's learner is sized to the features it has seen). The existing
        features keep their state; the new ones start as a fresh learner's features do,
        i.e. exactly as unseen columns of a learner sized ``n_features`` from the start.
        Sparse-capable learners with sparse storage only (their per-feature state is
        vectors along the feature axis; nothing else depends on the dimension)."""
        if not self.accepts_sparse or self.params.get("storage", "sparse") != "sparse":
            raise TypeError(f"{self.name} with {self.params.get('storage')} storage cannot "
                            "be resized")
        if n_features < self.n_features:
            raise ValueError(f"{self.name} can only grow: {n_features} < {self.n_features}")
        if n_features == self.n_features:
            return
        self._check_not_frozen()
        fresh = type(self)(n_features=n_features, seed=self.seed, **self.params)
        for key, axis in self._feature_axes().items():
            grown = fresh._state[key]
            old = self._state[key]
            where = [slice(None)] * old.ndim
            where[axis] = slice(0, old.shape[axis])
            grown[tuple(where)] = old
            self._state[key] = grown
        self.n_features = n_features
        # scratch sized by the dimension, and plans naming the old arrays: every learner
        # keeps such scratch under these names and re-creates it when it is None
        for scratch in _SCRATCH:
            if getattr(self, scratch, None) is not None:
                setattr(self, scratch, None)

    def _feature_axes(self) -> dict[str, int]:
        """State arrays with a feature axis, and which: the arrays whose shape follows
        the dimension (found by comparing fresh learners one feature apart, once per
        class and parameters)."""
        key = (type(self), tuple(sorted((k, repr(v)) for k, v in self.params.items())))
        axes = _FEATURE_AXES.get(key)
        if axes is None:
            d = 8
            a = type(self)(n_features=d, seed=0, **self.params)._state
            b = type(self)(n_features=d + 1, seed=0, **self.params)._state
            axes = {}
            for k, v in a.items():
                if isinstance(v, np.ndarray) and v.shape != b[k].shape:
                    diff = [i for i, (x, z) in enumerate(zip(v.shape, b[k].shape,
                                                              strict=True)) if x != z]
                    if len(diff) != 1 or v.shape[diff[0]] != d:
                        raise TypeError(f"{self.name} cannot be resized: state {k!r} has "
                                        f"shape {v.shape} at {d} features")
                    axes[k] = diff[0]
            _FEATURE_AXES[key] = axes
        return axes

    # ----------------------------------------------------------------- public verbs
    def learn(self, X: Any, y: Any) -> Learner:
        """Learn from a batch of events, applied in row order.

        ``X`` is an (n, d) float array (or CSR input for sparse-capable learners);
        ``y`` holds labels in {0, 1} or {-1, +1} (or booleans). The whole batch is
        checked first: a bad batch raises ``ValueError`` and changes nothing. Learning
        is all or nothing: if the batch would leave the state non-finite, the state is
        restored and :class:`NonFiniteError` names the first row that breaks it.
        """
        self._check_not_frozen()
        batch = check_matrix(self.name, X, self.n_features, self.accepts_sparse)
        labels = check_labels(self.name, y, batch.n)
        if batch.n:
            self._learn_whole(batch, labels, NO_SCORES)
        return self

    def score_then_learn(self, X: Any, y: Any) -> np.ndarray:
        """Test-then-train: score each event with the model as it stands just before it,
        then learn it. Returns those prequential scores; the learned state is exactly
        that of ``learn(X, y)``, and each score equals what ``score`` would have given.
        All or nothing as ``learn``; a non-finite prequential score fails the batch too.
        """
        self._check_not_frozen()
        batch = check_matrix(self.name, X, self.n_features, self.accepts_sparse)
        labels = check_labels(self.name, y, batch.n)
        prior = np.zeros(batch.n)
        if batch.n:
            self._learn_whole(batch, labels, prior)
        return prior

    def _learn_whole(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        """Learn the batch, or restore the state and raise :class:`NonFiniteError`."""
        if self._journaled() and batch.dense is not None:
            batch = Batch(batch.n, None, *_sparse.dense_to_csr(batch.dense))
        if self._attempt(batch, y, prior, keep=True):
            return
        # Rare path: bisect for the first failing prefix, each trial rolled back. A
        # prefix of the full batch fails (it is the batch); the empty one does not.
        good, bad = 0, batch.n
        while bad - good > 1:
            mid = (good + bad) // 2
            trial = np.zeros(mid) if prior.shape[0] else NO_SCORES
            if self._attempt(batch.head(mid), y[:mid], trial, keep=False):
                good = mid
            else:
                bad = mid
        raise NonFiniteError(self.name, bad - 1)

    def _open_journal(self, batch: Batch) -> Journal:
        """Journal the state before learning the (CSR, for a sparse layout) ``batch``; the
        journal is the running one (``_keep_whole``) until the caller clears it."""
        plan = self._plan
        if plan is None:
            plan = self._plan = Plan.of(self._state, self.fixed_keys, self.input_keys,
                                        self._journaled())
        cols = log = None
        if plan.vectors:
            cols = self._journal_columns(batch)
            if self.logs_journal:
                log = self._log_scratch(plan.vectors, cols.shape[0])
        journal = self._journal = Journal(self._state, plan, cols, log)
        return journal

    def _attempt(self, batch: Batch, y: np.ndarray, prior: np.ndarray, keep: bool) -> bool:
        """Learn the batch; return whether the state and scores stay finite. A failed
        batch (or any batch, unless ``keep``) is rolled back; an exception other than an
        ``ArithmeticError`` is re-raised after the rollback."""
        s = self._state
        journal = self._open_journal(batch)
        try:
            self._learn(batch, y, prior)
            ok = journal.finite(s) and (not prior.shape[0] or all_finite(prior))
        except ArithmeticError:  # ZeroDivisionError, OverflowError, FloatingPointError
            ok = False
        except BaseException:
            journal.restore(s)
            raise
        finally:
            self._journal = None
        if not (ok and keep):
            journal.restore(s)
        return ok

    def score(self, X: Any) -> np.ndarray:
        """Scores of the rows of ``X`` (float64; higher ranks first). Never mutates."""
        batch = check_matrix(self.name, X, self.n_features, self.accepts_sparse)
        if not batch.n:
            return np.zeros(0)
        return self._score(batch)

    def learn_one(self, x: Any, y: Any) -> Learner:
        """Learn from one event: ``x`` a 1-D array of d floats, ``y`` one label."""
        return self.learn(_one_row(self.name, x), np.asarray([y]))

    def score_one(self, x: Any) -> float:
        """Score of one 1-D row."""
        return float(self.score(_one_row(self.name, x))[0])

    def snapshot(self) -> Learner:
        """A frozen copy that scores exactly as this learner does now, and cannot learn.

        Only the arrays scoring needs are copied, so publishing a snapshot after every
        batch is cheap next to learning it.
        """
        twin = object.__new__(type(self))
        twin.n_features = self.n_features
        twin.seed = self.seed
        twin.params = dict(self.params)
        twin._state = self._scoring_state()
        twin._frozen = True
        return twin

    def _scoring_state(self) -> dict[str, np.ndarray]:
        """The state a snapshot keeps: copies of ``scoring_keys`` and ``n_seen_``. A
        learner may keep a derived form instead, if its ``_score`` reads it."""
        return {k: self._state[k].copy() for k in (*self.scoring_keys, "n_seen_")}

    def _check_not_frozen(self) -> None:
        if self._frozen:
            raise RuntimeError(f"This {self.name} is a scoring snapshot; it cannot learn.")

    @property
    def n_seen(self) -> tuple[int, int]:
        """Events learned so far, as (negatives, positives)."""
        n = self._state["n_seen_"]
        return int(n[0]), int(n[1])

    @property
    def nbytes(self) -> int:
        """Bytes of memory the learner's arrays take: its state and its scratch space."""
        return array_bytes(self)

    @property
    def buffer_fill(self) -> tuple[int, int] | None:
        """Rows held in the (negative, positive) buffers; ``None`` for unbuffered learners."""
        cap = self.params.get("capacity")
        if cap is None:
            return None
        neg, pos = self.n_seen
        return min(neg, cap), min(pos, cap)

    # ----------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        """Everything needed to rebuild this learner bit for bit, as a flat dict.

        Values are python scalars and strings (the configuration) and numpy arrays (the
        learned state, keys ending in ``_``, random-generator state included).
        """
        self._check_not_frozen()
        state: dict[str, Any] = {
            "learner": self.name,
            "state_version": STATE_VERSION,
            "n_features": self.n_features,
            "seed": self.seed,
        }
        state.update(self.params)
        for key, arr in self._state.items():
            state[key] = arr.copy()
        return state

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> Learner:
        state = cls._upgrade(state)
        if state.get("state_version") != STATE_VERSION:
            raise ValueError(
                f"Unsupported state_version {state.get('state_version')!r} for {cls.name} "
                f"(this build reads version {STATE_VERSION})."
            )
        for key in ("n_features", "seed"):
            if key not in state:
                raise ValueError(f"The {cls.name} state has no {key!r} entry.")
        params = {k: state[k] for k in cls.param_table if k in state}
        missing = sorted(set(cls.param_table) - set(params))
        if missing:
            raise ValueError(f"The {cls.name} state has no {missing[0]!r} parameter.")
        learner = cls(n_features=state["n_features"], seed=state["seed"], **params)
        expected = set(_META) | set(cls.param_table) | set(learner._state)
        extra = sorted(set(state) - expected)
        if extra:
            raise ValueError(f"The {cls.name} state has an unexpected entry {extra[0]!r}.")
        for key, fresh in learner._state.items():
            if key not in state:
                raise ValueError(f"The {cls.name} state has no {key!r} array.")
            arr = np.asarray(state[key])
            if arr.dtype != fresh.dtype or arr.ndim != fresh.ndim:
                raise ValueError(
                    f"The {cls.name} state array {key!r} must be {fresh.dtype} with "
                    f"{fresh.ndim} dimensions; got {arr.dtype} with {arr.ndim}."
                )
            if arr.shape != fresh.shape and key not in learner._variable_keys():
                raise ValueError(
                    f"The {cls.name} state array {key!r} must have shape {fresh.shape}; "
                    f"got {arr.shape}."
                )
            learner._state[key] = np.array(arr, copy=True, order="C")
        if "order_" in learner._state:
            check_buffer_state(cls.name, learner._state, learner.n_features)
        learner._after_restore()
        return learner

    def _after_restore(self) -> None:
        """Hook for learners that keep derived, unsaved caches."""

    @classmethod
    def _upgrade(cls, state: dict[str, Any]) -> dict[str, Any]:
        """Hook: a state saved by an earlier build, brought to this one's layout."""
        return state

    def _variable_keys(self) -> frozenset[str]:
        """State arrays whose shape may differ from a fresh learner's."""
        return self.variable_shape

    # ----------------------------------------------------------------- helpers
    def _dense_rows(self, batch: Batch) -> np.ndarray:
        if batch.dense is not None:
            return batch.dense
        return _sparse.csr_to_dense(batch.indptr, batch.indices, batch.values, self.n_features)

    @staticmethod
    def _csr_rows(batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if batch.dense is None:
            return batch.indptr, batch.indices, batch.values
        return _sparse.dense_to_csr(batch.dense)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.name}(n_features={self.n_features}, seed={self.seed}, {args})"


def _check_meta(name: str, n_features: Any, seed: Any, max_features: int) -> tuple[int, int]:
    d = Interval(int, 1, max_features, "both")
    try:
        n_features = d.accepts(n_features)
    except ValueError:
        raise ValueError(
            f"The 'n_features' parameter of {name} must be {d.describe()}; got {n_features!r}."
        ) from None
    s = Interval(int, 0, 2**63 - 1, "both")
    try:
        seed = s.accepts(seed)
    except ValueError:
        raise ValueError(
            f"The 'seed' parameter of {name} must be {s.describe()}; got {seed!r}."
        ) from None
    return n_features, seed


def _one_row(name: str, x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name}: a single event must be a 1-D array; got shape {a.shape}.")
    return a[None, :]


# Parameters shared by several families, declared once.
def capacity_param(default: int) -> Param:
    return Param(Interval(int, 1, 100_000, "both"), default, "buffer capacity per class")


def scale_param(default: float, doc: str, low: float | None = None,
                high: float | None = None) -> Param:
    """A positive scale parameter (penalty, step, kernel width) in the closed range
    [low, high], by default [SCALE_PARAM_MIN, SCALE_PARAM_MAX] (see ``models._config``)."""
    from ._config import SCALE_PARAM_MAX, SCALE_PARAM_MIN

    low = SCALE_PARAM_MIN if low is None else low
    high = SCALE_PARAM_MAX if high is None else high
    return Param(Interval(float, low, high, "both"), default, doc)


def storage_param() -> Param:
    return Param(
        Options(("auto", "dense", "sparse")),
        "auto",
        "buffer/weight storage; 'auto' is sparse above "
        "models._config.SPARSE_STORAGE_THRESHOLD features",
    )


def resolve_storage(params: dict[str, Any], n_features: int) -> None:
    """Turn ``storage='auto'`` into 'dense' or 'sparse' by the input dimension."""
    from ._config import SPARSE_STORAGE_THRESHOLD

    if params.get("storage") == "auto":
        params["storage"] = "sparse" if n_features > SPARSE_STORAGE_THRESHOLD else "dense"
