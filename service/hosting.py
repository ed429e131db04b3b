"""Hosting learners: the applier, published scoring snapshots, checkpoints, recovery.

One :class:`HostedModel` per model. The durable log is the source of truth: a learn
request appends its encoded batch to the log, then the model's single applier (a lock)
applies log entries strictly in log order — scoring each event before learning it
(test-then-train, which feeds the rolling AUC) — and publishes an immutable scoring
snapshot. Replicas that share a store apply the same entries in the same order and so
hold identical models.

An entry is applied whole or not at all. If learning it would make the model's state
non-finite (the learner's, the scaler's), the learner and scaler roll it back and the
entry is *refused*: skipped, its positions consumed, the model unchanged. The rule is a
function of the model's state and the entry, so every replica and every recovery skips
the same entries. A model that cannot be recovered or applied for another reason (a
corrupt checkpoint, a log gap, a configuration this version refuses) is *quarantined*:
its requests answer 503 saying why, and every other model goes on serving.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import numpy as np

from aucstream import models
from aucstream.models.auto import Auto
from aucstream.models.calibration import PlattCalibrator, probabilities
from aucstream.models.preprocessing import StandardScaler

from .codec import (
    CodecError,
    apply_delta,
    decode_batch,
    decode_delta,
    decode_export,
    decode_state,
    encode_batch,
    encode_delta,
    encode_export,
    encode_state,
)
from .encoding import EncodedBatch, FeatureEncoder, select_rows
from .feature_index import INITIAL_SLOTS, FeatureIndex, FrozenIndex, next_size
from .feedback import SWEEP_LIMIT, Feedback, RequestAUC, sweep_timeouts
from .group_write import GroupWriter
from .metrics import Metrics
from .ownership import preferred_owner, replica_id
from .settings import Settings
from .store.base import LeaseLost, LogEntry, ModelNotFound, PackedItems, Store, StoreUnavailable

__all__ = [
    "ApplyFailed",
    "EntryRefused",
    "HostedModel",
    "ImportRefused",
    "KeepJob",
    "ModelConfigError",
    "ModelHost",
    "ModelQuarantined",
    "Quarantined",
    "Snapshot",
    "TooManyModels",
    "take_rows",
]

log = logging.getLogger("aucstream.hosting")

_LABELS = ("negative", "positive")
_REPLAY_PAGE = 500  # log entries read per store call while catching up
# Refusals kept for the requests that appended them: refusals are rare, and a request
# asks within moments of its append.
_KEPT_REFUSALS = 1024
_REFRESH_WAIT = 0.05  # seconds a stale snapshot waits for a lock holder that is not applying
_QUARANTINE_RETRY = 30.0  # seconds between attempts to load a quarantined model again
# Refusals a publication carries to the followers (their requests ask within moments).
_PUBLISHED_REFUSALS = 64
# An owner publishes what changed since its last publication (a delta) and, after this
# many deltas or once they add up to the size of the last whole publication, the whole
# state again (a checkpoint, which drops the deltas before it from the store): a follower
# that fell behind reads at most about two whole states' worth.
_DELTAS_PER_WHOLE = 64


def _refused(event: int) -> EntryRefused:
    return EntryRefused(event, "learning this event would overflow the model (its state "
                        "would become non-finite); nothing of this request was learned")


class ModelConfigError(ValueError):
    """A model configuration the learner or the encoder refuses; ``loc`` names the field."""

    def __init__(self, loc: tuple[Any, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg


class LogGap(RuntimeError):
    """The log no longer holds the entries this replica needs, and no checkpoint covers them."""


class EntryRefused(ValueError):
    """The entry a request appended was refused: learning event ``event`` (its index in the
    request) would make the model's state non-finite. Nothing of it was learned."""

    def __init__(self, event: int, message: str) -> None:
        super().__init__(message)
        self.event = event
        self.message = message


@dataclass(frozen=True)
class Quarantined:
    """A model this process could not recover or keep applying, and why."""

    name: str
    reason: str
    since: float  # unix seconds
    config: dict[str, Any] | None
    retry_at: float  # monotonic seconds of the next attempt to load it

    def info(self) -> dict[str, Any]:
        """What GET /models/{name} shows of a quarantined model: its config and why."""
        cfg = self.config or {}
        return {
            "name": self.name,
            "status": "quarantined",
            "quarantine": {"reason": self.reason, "since": self.since},
            "learner": str(cfg.get("learner", "")),
            "params": cfg.get("params") or {},
            "features": cfg.get("features") or {},
            "seed": int(cfg.get("seed", 0)),
            "standardize": bool(cfg.get("standardize", False)),
            "created_at": float(cfg.get("created_at", 0.0)),
            "version": None,
            "events": None,
            "rolling_auc": None,
            "rolling_window": int(cfg.get("rolling_window", 1)),
            "buffer_fill": None,
            "last_checkpoint": None,
            "memory_bytes": None,
        }


class ImportRefused(ValueError):
    """A model export that cannot be imported, and why."""


class ModelQuarantined(Exception):
    """A request for a quarantined model."""

    def __init__(self, q: Quarantined) -> None:
        super().__init__(f"Model {q.name!r} is quarantined: {q.reason}")
        self.quarantined = q


class TooManyModels(Exception):
    """Creating one more model would pass ``max_models``."""


class ApplyFailed(RuntimeError):
    """A request's entry is durable, but the model failed while applying the log up to it
    (not a refusal: a broken checkpoint, log or learner) and is now quarantined."""


# Errors that say the store is out of reach or the model is gone: never the model's fault.
_STORE_TROUBLE = (StoreUnavailable, ModelNotFound)


@dataclass(frozen=True)
class Snapshot:
    """What scoring reads: never mutated after publication."""

    version: int
    scorer: models.Learner
    scaler: StandardScaler | None
    dense_input: bool = False  # hashed rows densified for a dense-only learner
    calibration: tuple[float, float] = (0.0, 0.0)  # Platt's (a, b): p = σ(a·score + b)
    index: FrozenIndex | None = None  # compact models: hashed column -> learner column

    def score(self, batch: EncodedBatch) -> np.ndarray:
        X = batch.learner_input()
        if self.index is not None:
            X = self.index.lookup(X, self.scorer.n_features)
        if self.dense_input:
            X = densify(X, self.scorer.n_features)
        if self.scaler is not None:
            X = self.scaler.transform(X)
        return self.scorer.score(X)

    def probabilities(self, scores: np.ndarray) -> np.ndarray:
        """P(positive) of each score, by the model's calibration when published."""
        return probabilities(scores, *self.calibration)


def densify(X: Any, n_features: int) -> Any:
    """Hashed rows (a CSR triple, colliding features not yet summed) as a dense array, for
    a learner that takes dense rows only; dense input as it is."""
    if isinstance(X, np.ndarray):
        return X
    indptr, indices, values = X
    n = indptr.shape[0] - 1
    out = np.zeros((n, n_features))
    np.add.at(out, (np.repeat(np.arange(n), np.diff(indptr)), indices), values)
    return out


def _sparse_learners() -> list[str]:
    return [n for n in models.available() if models.base._lookup(n).accepts_sparse]


def _resizable(learner: str, params: dict[str, Any]) -> bool:
    """Can this learner grow its input dimension (``Learner.resize``)? Then a hashed
    model's learner is sized to the columns it has seen (a compact model)."""
    try:
        models.create(learner, n_features=8, **params).resize(16)
    except (TypeError, ValueError):
        return False
    return True


def build_config(name: str, learner: str, params: dict[str, Any], features: dict[str, Any],
                 seed: int, standardize: bool, rolling_window: int,
                 feedback: dict[str, Any] | None = None,
                 ingest: dict[str, Any] | None = None) -> dict[str, Any]:
    """A validated, complete model config; raises :class:`ModelConfigError`."""
    if learner not in models.available():
        raise ModelConfigError(
            ("learner",), f"Unknown learner {learner!r}; available learners are: "
            f"{', '.join(models.available())}.")
    encoder = FeatureEncoder(features)
    cls = models.base._lookup(learner)
    if encoder.n_features > cls.max_features:
        raise ModelConfigError(
            ("features",), f"{learner} takes at most {cls.max_features} features; this "
            f"feature spec has {encoder.n_features}. Use fewer hash bits or a sparse-capable "
            f"learner ({', '.join(_sparse_learners())}).")
    if standardize and features["kind"] != "dense":
        raise ModelConfigError(("standardize",), "standardisation applies to dense features only")
    try:
        lrn = models.create(learner, n_features=encoder.n_features, seed=seed, **params)
    except ValueError as exc:
        raise ModelConfigError(("params",), str(exc)) from None
    # Store the resolved parameters ('auto' choices made concrete) so that every replica
    # builds the same learner whatever its version's defaults.
    compact = features["kind"] == "hashed" and encoder.n_features > INITIAL_SLOTS \
        and _resizable(learner, lrn.params)
    return {
        "name": name,
        "learner": learner,
        "params": dict(lrn.params),
        "features": dict(features),
        "seed": seed,
        "standardize": standardize,
        "rolling_window": rolling_window,
        "feedback": None if feedback is None else dict(feedback),
        "ingest": None if ingest is None else dict(ingest),
        "compact": compact,
        "created_at": time.time(),
        "uid": uuid.uuid4().hex,
    }


class KeepJob(Protocol):
    """A /score request's impressions to keep: ``pack()`` gives the store's group
    ``(items, shown_at, expires_at)``; ``kept(n)`` hears how many the store kept. Both run
    in the worker thread that writes the group."""

    def pack(self) -> tuple[PackedItems, float, float]: ...

    def kept(self, n: int) -> None: ...


class HostedModel:
    """A learner with its encoder, optional scaler, rolling AUC and applier."""

    def __init__(self, config: dict[str, Any], snapshot_interval: float = 0.0,
                 max_feature_value: float = math.inf) -> None:
        self.config = config
        self.snapshot_interval = snapshot_interval
        self.name: str = config["name"]
        self.uid: str = config["uid"]
        self.encoder = FeatureEncoder(config["features"], max_value=max_feature_value)
        self.feedback = Feedback.of(config)
        # /score requests' impressions, written together when they come together
        self.keeper: GroupWriter[KeepJob, int] | None = None
        self.impressions: dict[str, int] = {}  # pending impressions by status, last counted
        # AUC of the scores served to kept items against the labels they got (joined by
        # this process): a per-process view, like the counters, not part of the state
        self.served_auc = models.RollingAUC(config["rolling_window"])
        self._served_lock = threading.Lock()
        # per-request (group) AUC, per process too; a request's items can get labels
        # until their impressions expire
        self.request_auc = RequestAUC(
            expire_s=math.inf if self.feedback is None else self.feedback.window_s)
        # compact: the learner is sized to the hashed columns seen (feature_index.py)
        self.index = FeatureIndex() if config.get("compact") else None
        self.learner = models.create(
            config["learner"], seed=config["seed"], **config["params"],
            n_features=INITIAL_SLOTS if self.index is not None else self.encoder.n_features)
        # a dense-only learner on hashed features (few bits) gets its rows densified
        self._dense_input = self.encoder.kind == "hashed" and not self.learner.accepts_sparse
        n = self.encoder.n_features
        self.scaler = StandardScaler(n) if config["standardize"] else None
        self.rolling = models.RollingAUC(config["rolling_window"])
        # probabilities for /score, fitted on the same test-then-train pairs
        self.calibration = PlattCalibrator()
        self.version = 0
        self.checkpoint_version = 0
        self.trim_version = 0  # the version of the last checkpoint that trimmed the log
        self.checkpoint_time: float | None = None
        self.checkpoint_attempt = time.monotonic()
        self.lock = threading.Lock()
        self._applying = False  # a batch is being applied under the lock
        self.retired = False  # deleted: its metric series are gone and stay gone
        self._pending: dict[int, tuple[LogEntry, tuple[np.ndarray, Any]]] = {}
        # recent refusals by entry start, for the request that appended the entry (which
        # may have been applied by another thread before the request could remember it)
        self._refusals: dict[int, EntryRefused] = {}
        # what recent entries applied as another's brought (start -> (positives, negatives,
        # promotions, refused)): the request that appended one may remember it only after
        # another thread of this process applied it, and its counters must still count it
        self._foreign: dict[int, tuple[int, int, int, int]] = {}
        self._pins: list[tuple[int, int | None]] = []  # 'auto' models: the pin history
        # Ownership (see ModelHost): the lease token while this replica owns the model
        # (None: a follower, serving what the owner publishes), the owner last seen.
        self.token: int | None = None
        self.owner: str | None = None
        self.published_version = 0  # the version of this owner's last publication
        # Deltas (scale-out). The owner: the state it last published (version, state, lease
        # token), what it diffs the next publication against; and the deltas and their
        # bytes since its last whole publication, and that one's size. A follower: the
        # state it last loaded (version, state), which the next deltas apply to.
        self.published_state: tuple[int, dict[str, Any], int] | None = None
        self._deltas = 0
        self._delta_bytes = 0
        self._whole_bytes = 0
        self.followed: tuple[int, dict[str, Any]] | None = None
        # one publication or checkpoint at a time (the follow and sync loops both publish:
        # two deltas against one base would leave followers a gap in the chain)
        self._publishing = threading.Lock()
        self.published_at = 0.0  # monotonic time of the last publication or reload
        self.waiters = 0  # follower requests waiting for a publication
        self.look_again = False  # woken while a request thread was applying it
        self.awaited = 0  # the log's end when a follower last woke this owner
        self.changed = threading.Condition(threading.Lock())  # notified on new versions
        self._snapshot = self._make_snapshot()

    @property
    def owned(self) -> bool:
        return self.token is not None

    def notify(self) -> None:
        """Wake requests waiting for a version (after applying or reloading)."""
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, version: int, timeout: float) -> bool:
        """Wait until this model is at ``version`` or owned here (True), or ``timeout``."""
        deadline = time.monotonic() + timeout
        with self.changed:
            self.waiters += 1
            try:
                while self.version < version and not self.owned:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.changed.wait(min(left, 0.05))
            finally:
                self.waiters -= 1
        return True

    # ------------------------------------------------------------------ scoring
    def _make_snapshot(self) -> Snapshot:
        scaler = self.scaler.copy() if self.scaler is not None else None
        self._published_at = time.monotonic()
        return Snapshot(self.version, self.learner.snapshot(), scaler, self._dense_input,
                        self.calibration.coef,
                        None if self.index is None else self.index.frozen())

    @property
    def snapshot(self) -> Snapshot:
        """The latest published snapshot, refreshed first if it is behind and no batch is
        being applied; scoring never waits for a batch being applied.

        Other holders of the lock (a checkpoint copying the state, the sync loop reading
        the log) hold it briefly, so a stale snapshot waits up to ``_REFRESH_WAIT`` for
        them: a score that follows an acknowledged learn on an idle model sees it.
        """
        snap = self._snapshot
        wait = 0.0 if self._applying else _REFRESH_WAIT
        if snap.version != self.version and self.lock.acquire(timeout=wait):
            try:
                if self._snapshot.version != self.version:
                    self._snapshot = self._make_snapshot()
                snap = self._snapshot
            finally:
                self.lock.release()
        return snap

    def _publish(self, force: bool = False) -> None:
        """Publish a snapshot after applying (caller holds the lock). Copies are throttled
        to one per ``snapshot_interval``: copying a 2^20-dimension model after every
        500-event batch would cost as much as learning it."""
        if self._snapshot.version == self.version:
            return
        if force or time.monotonic() - self._published_at >= self.snapshot_interval:
            self._snapshot = self._make_snapshot()

    def publish_if_stale(self) -> None:
        """Called by the sync loop so that a burst's last batch is published promptly."""
        if self._snapshot.version != self.version:
            with self.lock:
                self._publish(force=True)

    # ------------------------------------------------------------------ applying
    def remember(self, entry: LogEntry, batch: tuple[np.ndarray, Any],
                 metrics: Metrics | None) -> None:
        """Keep an entry this process appended, so applying it needs no store read. If
        another thread (the sync loop, or a request appending after it) applied it from
        the store already, count now what it brought: counters count each event once,
        in the process whose request brought it."""
        with self.lock:
            if entry.start >= self.version:
                self._pending[entry.start] = (entry, batch)
                return
            counts = self._foreign.pop(entry.start, None)
            if counts is not None and metrics is not None:
                self._count(metrics, *counts)

    def catch_up(self, store: Store, upto: int | None, metrics: Metrics | None) -> None:
        """Apply log entries in order until ``version >= upto`` (None: the log's end)."""
        with self.lock:
            self._applying = bool(self._pending)  # this process's own entries wait
            try:
                self._read_pins(store)  # after this process's own appends
                self._catch_up(store, upto, metrics)
                self._pin_at(self.version)
            finally:
                self._applying = False

    # ------------------------------------------------------------------ pins ('auto')
    def _read_pins(self, store: Store) -> None:
        """The pin history of an 'auto' model (others have none to read). Read after the
        entries it must cover: a pin's position is the log's end when it was set, so any
        entry read before this call that starts at or after it was appended after it."""
        if isinstance(self.learner, Auto):
            self._pins = store.read_pins(self.name)

    def _pin_at(self, position: int) -> None:
        """Serve what the pins say from ``position`` on (the last pin set at or before
        it); the same at the same position on every replica."""
        if not self._pins or not isinstance(self.learner, Auto):
            return
        wanted = None
        for at, candidate in self._pins:
            if at <= position:
                wanted = candidate
        if wanted != self.learner.pinned:
            self.learner.pin(wanted)
            self._snapshot = self._make_snapshot()

    def sync_pins(self, store: Store) -> None:
        """Apply a pin set (here or by another replica) while no entry follows it."""
        if isinstance(self.learner, Auto):
            with self.lock:
                self._read_pins(store)
                self._pin_at(self.version)

    def _catch_up(self, store: Store, upto: int | None, metrics: Metrics | None) -> None:
        """The body of :meth:`catch_up` (the caller holds the lock)."""
        before = self.version
        while upto is None or self.version < upto:
            pending = self._pending.pop(self.version, None)
            if pending is not None:
                self._pin_at(self.version)
                self._apply(pending[0], pending[1], metrics, own=True)
                continue
            entries = store.read_log(self.name, self.version, _REPLAY_PAGE)
            self._read_pins(store)
            if not entries:
                # No entry after our version: the end of the log, or another replica
                # checkpointed past us and trimmed the log to its end.
                _, first, end = store.log_bounds(self.name)
                if end <= self.version:
                    break
                if first > self.version:
                    self._reload(store, first, metrics)
                elif not store.read_log(self.name, self.version, 1):
                    # entries appended meanwhile are read on the next round; none at all
                    # would be a store contradicting itself: fail rather than spin
                    raise LogGap(f"model {self.name!r}: the log ends at {end} but has no "
                                 f"entry after {self.version}")
                continue
            if entries[0].start > self.version:
                self._reload(store, entries[0].start, metrics)
                continue
            for entry in entries:
                if entry.end <= self.version:
                    continue
                mine = self._pending.pop(entry.start, None)
                self._pin_at(entry.start)
                self._apply(entry, mine[1] if mine else decode_batch(entry.payload), metrics,
                            own=mine is not None)
        for start in [s for s in self._pending if s < self.version]:
            del self._pending[start]
        if self.version != before:
            self._publish()
            self.notify()

    def _apply(self, entry: LogEntry, batch: tuple[np.ndarray, Any],
               metrics: Metrics | None, own: bool = False) -> None:
        """Apply one log entry (or refuse it). Counters count what this process's own
        requests brought (``own``), so that they add up across workers and replicas,
        each of which applies every entry."""
        if entry.start != self.version:
            raise LogGap(f"model {self.name!r}: expected an entry starting at {self.version}, "
                         f"got {entry.start}")
        self._applying = True  # read by scoring, which never waits for a batch
        y, X = batch
        rows = None  # the entry's event index of each row learned, when some are skipped
        if entry.skip:
            keep = np.ones(y.shape[0], bool)
            keep[list(entry.skip)] = False
            rows = np.flatnonzero(keep)
            y, X = y[keep], take_rows(X, keep)
        promoted = getattr(self.learner, "promotions", 0)
        try:
            prior = self._learn(X, y)
        except models.NonFiniteError as exc:
            event = exc.row if rows is None else int(rows[exc.row])
            self._refuse(entry, event)
            self.version = entry.end
            self._brought(entry, (0, 0, 0, y.shape[0]), metrics, own)
            return
        self.rolling.update(prior, y)
        self.calibration.update(prior, y)
        self.version = entry.end
        n_pos = int((y > 0).sum())
        promoted = getattr(self.learner, "promotions", 0) - promoted
        self._brought(entry, (n_pos, y.shape[0] - n_pos, promoted, 0), metrics, own)
        if metrics is not None:
            self.export(metrics)

    def _brought(self, entry: LogEntry, counts: tuple[int, int, int, int],
                 metrics: Metrics | None, own: bool) -> None:
        """Count what an applied entry brought, or keep it for :meth:`remember`."""
        if own:
            if metrics is not None:
                self._count(metrics, *counts)
            return
        self._foreign[entry.start] = counts
        if len(self._foreign) > _KEPT_REFUSALS:  # other replicas' entries: nobody asks
            del self._foreign[next(iter(self._foreign))]

    def _count(self, metrics: Metrics, positives: int, negatives: int, promoted: int,
               refused: int) -> None:
        if self.retired:
            return
        if positives or negatives:
            metrics.events_learned.labels(self.name, "positive").inc(positives)
            metrics.events_learned.labels(self.name, "negative").inc(negatives)
        if promoted:
            metrics.promotions.labels(self.name).inc(promoted)
        if refused:
            metrics.refused.labels(self.name).inc(refused)

    def _learn(self, X: Any, y: np.ndarray) -> np.ndarray:
        """Scaler, then learner, test-then-train; all or nothing (NonFiniteError). A
        compact model first gives unseen columns their slots (kept even if the entry is
        refused: every replica assigns the same, and a slot alone changes no score)."""
        if self.index is not None:
            X = self.index.assign(X)
            if self.index.count + 1 > self.learner.n_features:  # column 0 never assigned
                self.learner.resize(next_size(self.index.count + 1, self.learner.n_features))
        if self._dense_input:
            X = densify(X, self.learner.n_features)
        if self.scaler is None:
            return self.learner.score_then_learn(X, y)
        before = self.scaler.copy()
        X = self.scaler.learn_transform(X)  # restores itself if it raises
        try:
            return self.learner.score_then_learn(X, y)
        except BaseException:
            self.scaler = before
            raise

    def _refuse(self, entry: LogEntry, event: int) -> None:
        log.warning("model %s refused log entry %d..%d: learning its event %d would make "
                    "the model's state non-finite; the model is unchanged",
                    self.name, entry.start, entry.end, event)
        self._refusals[entry.start] = _refused(event)
        if len(self._refusals) > _KEPT_REFUSALS:  # other replicas' entries: nobody asks
            del self._refusals[next(iter(self._refusals))]

    def refusal(self, start: int) -> EntryRefused | None:
        """The refusal of the entry starting at ``start``, if it was refused (once: the
        request that appended it takes it)."""
        return self._refusals.pop(start, None)

    def _reload(self, store: Store, first_start: int, metrics: Metrics | None) -> None:
        """The log was trimmed past our version: continue from the checkpoint."""
        cp = store.load_checkpoint(self.name)
        if cp is None or cp.version < first_start:
            raise LogGap(f"model {self.name!r}: log starts at {first_start}, this replica is at "
                         f"{self.version} and no checkpoint covers the gap")
        self.restore(decode_state(cp.blob), cp.version, cp.created_at, metrics)

    # ------------------------------------------------------------------ checkpoints
    def full_state(self) -> dict[str, Any]:
        """Everything to resume this model (caller holds the lock)."""
        return {
            "uid": self.uid,
            "version": self.version,
            "learner": self.learner.get_state(),
            "scaler": self.scaler.get_state() if self.scaler is not None else None,
            "rolling": self.rolling.get_state(),
            "calibration": self.calibration.get_state(),
            **({} if self.index is None else {"feature_index": self.index.columns()}),
            # recent refusals, for the followers' requests that appended those entries
            "refusals": np.array([[start, r.event] for start, r in
                                  list(self._refusals.items())[-_PUBLISHED_REFUSALS:]],
                                 np.int64).reshape(-1, 2),
        }

    def restore(self, state: dict[str, Any], version: int, created_at: float,
                metrics: Metrics | None = None) -> None:
        """Continue from a checkpoint or publication at ``version``. This process's own
        entries that it covers were learned elsewhere (the owner): they are counted here,
        as this process's requests brought them."""
        if state.get("uid") != self.uid or state.get("version") != version:
            raise ValueError(f"checkpoint of {self.name!r} belongs to another model generation")
        learner = models.from_state(state["learner"])
        columns = None
        if self.index is not None:
            if "feature_index" not in state:
                raise ValueError(f"checkpoint of {self.name!r} has no feature index")
            columns = np.asarray(state["feature_index"])
            if columns.ndim != 1:
                raise ValueError(f"checkpoint of {self.name!r} has a malformed feature index")
        width = self.encoder.n_features if columns is None else learner.n_features
        if (learner.name != self.config["learner"] or learner.n_features != width
                or (columns is not None and not len(columns) + 1 <= width
                    <= max(INITIAL_SLOTS, self.encoder.n_features))):
            raise ValueError(f"checkpoint of {self.name!r} holds a different learner")
        if columns is not None:
            # a follower's next load: the same index with new columns after its own
            assert self.index is not None
            if not self.index.extend_to(columns):
                self.index = FeatureIndex(columns)
        self.learner = learner
        if self.scaler is not None:
            self.scaler = StandardScaler.from_state(state["scaler"])
        self.rolling = models.RollingAUC.from_state(state["rolling"])
        # checkpoints written before calibration existed start a fresh one (every
        # replica restoring the same checkpoint starts the same way)
        cal = state.get("calibration")
        self.calibration = PlattCalibrator() if cal is None else PlattCalibrator.from_state(cal)
        self.version = version
        self.checkpoint_version = version
        self.trim_version = version
        self.checkpoint_time = created_at
        for start, event in state.get("refusals", np.zeros((0, 2), np.int64)).tolist():
            self._refusals.setdefault(start, _refused(event))
        for start in [s for s in self._pending if s < version]:
            entry, (y, _) = self._pending.pop(start)
            if metrics is None or entry.end > version:
                continue
            if entry.skip:
                y = np.delete(y, list(entry.skip))
            n_pos = int((y > 0).sum())
            refused = start in self._refusals
            self._count(metrics, 0 if refused else n_pos, 0 if refused else len(y) - n_pos, 0,
                        len(y) if refused else 0)
        self._snapshot = self._make_snapshot()
        self.published_at = time.monotonic()

    def checkpoint_due(self, settings: Settings, now: float) -> bool:
        if self.version <= self.trim_version:
            return False
        if self.version - self.trim_version >= settings.checkpoint_every:
            return True
        return now - self.checkpoint_attempt >= settings.checkpoint_interval

    def checkpoint(self, store: Store, settings: Settings, trim: bool = True,
                   publishes: bool = False) -> None:
        """Save the state as the checkpoint (fenced with the lease token when owned; a
        lost lease raises LeaseLost), then trim the log behind it unless ``trim`` is
        False (a publication to the followers). ``publishes``: followers read it, and
        this owner's next publication may be a delta against it."""
        with self._publishing:
            self._checkpoint(store, settings, trim, publishes)

    def _checkpoint(self, store: Store, settings: Settings, trim: bool, publishes: bool) -> None:
        token = self.token
        if trim:
            self.checkpoint_attempt = time.monotonic()
        with self.lock:
            state = self.full_state()
            version = self.version
        blob = encode_state(state)  # outside the lock: scoring and learning go on
        try:
            saved = store.save_checkpoint(self.name, version, blob, token=token)
        except (ModelNotFound, ValueError) as exc:
            # deleted, or deleted and re-created elsewhere meanwhile: the sync loop
            # notices the new generation and drops this one
            log.info("checkpoint of %s skipped: %s", self.name, exc)
            return
        # (not saved: one at this version or later is; equal versions are equal states)
        self.published_state = None if token is None or not publishes else (version, state, token)
        self._deltas, self._delta_bytes, self._whole_bytes = 0, 0, len(blob)
        self.published_version = max(self.published_version, version)
        self.published_at = time.monotonic()
        if saved:
            self.checkpoint_version = max(self.checkpoint_version, version)
            self.checkpoint_time = time.time()
        if trim:
            # the store lowers the trim to its checkpoint: safe after a publication too
            if version > settings.log_retention:
                store.trim(self.name, version - settings.log_retention,
                           settings.dedup_window, token=token)
            self.trim_version = version

    def publish(self, store: Store, settings: Settings) -> None:
        """Publish the state to the replicas that follow this model (the owner's work,
        fenced with its token): what changed since this owner's last publication, or the
        whole state (see ``_DELTAS_PER_WHOLE``)."""
        with self._publishing:
            self._publish_locked(store, settings)

    def _publish_locked(self, store: Store, settings: Settings) -> None:
        token = self.token
        last = self.published_state
        if (last is None or last[2] != token or self._deltas >= _DELTAS_PER_WHOLE
                or self._delta_bytes >= self._whole_bytes):
            self._checkpoint(store, settings, trim=False, publishes=True)
            return
        with self.lock:
            state = self.full_state()
            version = self.version
        if version <= last[0]:
            return
        blob = encode_delta(last[0], version, last[1], state)  # outside the lock
        try:
            store.publish_delta(self.name, last[0], version, blob, token=token)
        except (ModelNotFound, ValueError) as exc:
            log.info("publication of %s skipped: %s", self.name, exc)
            return
        self.published_state = (version, state, last[2])
        self._deltas += 1
        self._delta_bytes += len(blob)
        self.published_version = max(self.published_version, version)
        self.published_at = time.monotonic()

    def follow(self, store: Store, metrics: Metrics | None) -> bool:
        """A follower: load what the owner published beyond this replica's version —
        the deltas from the state it holds (the one it loaded last, or its own, as a
        former owner's: states at equal versions are equal), else the checkpoint and the
        deltas after that, even a checkpoint older than this replica's version: one that
        loaded the model at the log's end may sit between two publications, and the
        owner's chain then passes it by. Whether it moved on."""
        if store.publication_version(self.name) <= self.version:
            return False
        held = self.followed
        deltas = store.read_deltas(self.name, self.version)
        start: tuple[int, dict[str, Any]] | None = None
        created_at = time.time()  # a delta's state: published moments ago
        if deltas and deltas[0].base == self.version:
            if held is not None and held[0] == self.version:
                start = held
            else:  # its own state (a former owner's): equal to anyone's at that version
                with self.lock:
                    if self.version == deltas[0].base:
                        start = (self.version, self.full_state())
        if start is None:
            cp = store.load_checkpoint(self.name)
            if cp is None:
                return False
            if cp.version <= self.version:  # the chain from it, with the deltas up to here
                deltas = store.read_deltas(self.name, cp.version)
                if not any(d.version > self.version for d in deltas):
                    return False
            start = (cp.version, decode_state(cp.blob))
            created_at = cp.created_at
        version, state = start
        for d in deltas:
            if d.base == version:  # the chain from `start` (others: before it)
                _, version, changes = decode_delta(d.blob)
                state = apply_delta(state, changes)
        with self.lock:
            if self.owned or version <= self.version:
                return False
            self.restore(state, version, created_at, metrics)
            self.followed = (version, state)
        return True

    # ------------------------------------------------------------------ reporting
    def export(self, metrics: Metrics) -> None:
        """Set this model's gauges; nothing once the model is retired (deleted)."""
        if self.retired:
            return
        # NaN while a class is missing from the window: undefined, never 0 or ½.
        metrics.rolling_auc.labels(self.name).set(self.rolling.value)
        metrics.log_loss.labels(self.name).set(self.calibration.log_loss)
        metrics.version.labels(self.name).set(self.version)
        fill = self.learner.buffer_fill
        if fill is not None:
            for label, value in zip(_LABELS, fill, strict=True):
                metrics.buffer_fill.labels(self.name, label).set(value)
        if self.checkpoint_time is not None:
            metrics.checkpoint_age.labels(self.name).set(time.time() - self.checkpoint_time)
            metrics.checkpoint_version.labels(self.name).set(self.checkpoint_version)
        lrn = self.learner
        if isinstance(lrn, Auto):
            metrics.promotions.labels(self.name)  # the series exists from 0
            metrics.serving_candidate.labels(self.name).set(lrn.served)
            for i, (cand, q) in enumerate(zip(lrn.candidates, lrn.quality, strict=True)):
                metrics.set_candidate_quality(self.name, f"{i}:{cand['learner']}", float(q))

    def info(self) -> dict[str, Any]:
        neg, pos = self.learner.n_seen
        fill = self.learner.buffer_fill
        auc = self.rolling.value
        cfg = self.config
        return {
            "name": self.name,
            "status": "serving",
            "quarantine": None,
            "learner": cfg["learner"],
            "params": cfg["params"],
            "features": cfg["features"],
            "seed": cfg["seed"],
            "standardize": cfg["standardize"],
            "created_at": cfg["created_at"],
            "version": self.version,
            "owner": self.owner,
            "events": {"negative": neg, "positive": pos},
            "rolling_auc": None if np.isnan(auc) else auc,
            "rolling_window": self.rolling.window,
            "ingest": cfg.get("ingest"),
            "feedback": None if self.feedback is None else {
                **cfg["feedback"], "impressions": dict(self.impressions),
                "served_auc": _defined(self.served_auc.value),
                "request_auc": _defined(self.request_auc.value),
                "requests_with_auc": self.request_auc.completed},
            "calibration": self._calibration_info(),
            "buffer_fill": None if fill is None else {"negative": fill[0], "positive": fill[1]},
            "last_checkpoint": None if self.checkpoint_time is None else {
                "version": self.checkpoint_version,
                "age_seconds": max(0.0, time.time() - self.checkpoint_time),
            },
            "memory_bytes": self.memory_bytes(),
            **self._candidates_info(),
        }

    def record_served(self, scores: Any, labels: Any) -> None:
        """Pairs (score served, label ±1) of kept items whose labels were learned."""
        with self._served_lock:
            self.served_auc.update(scores, labels)

    def _calibration_info(self) -> dict[str, Any]:
        cal = self.calibration
        a, b = cal.coef
        loss, rate = cal.log_loss, cal.click_rate
        return {"a": a, "b": b, "pairs": cal.filled, "fitted_on": cal.fitted_on,
                "log_loss": None if math.isnan(loss) else loss,
                "positive_rate": None if math.isnan(rate) else rate}

    def _candidates_info(self) -> dict[str, Any]:
        """An 'auto' model's candidates (read under no lock: a consistent enough view for
        a report; the values are a few numbers each)."""
        lrn = self.learner
        if not isinstance(lrn, Auto):
            return {}
        return {"serving_candidate": lrn.served, "pinned_candidate": lrn.pinned,
                "promotions": lrn.promotions, "candidates": lrn.candidates}

    def memory_bytes(self) -> int:
        """Bytes this model holds in memory: learner, published snapshot, scaler, rolling
        AUC and feature cache (the cache estimated), and with several replicas the state
        its deltas are taken against (an owner's last publication, or what a follower
        loaded last)."""
        snap = self._snapshot
        total = self.learner.nbytes + snap.scorer.nbytes + self.rolling.nbytes
        for held in (self.published_state, self.followed):
            total += 0 if held is None else _state_nbytes(held[1])
        total += self.calibration.nbytes
        total += self.encoder.cache_bytes
        if self.index is not None:
            total += self.index.nbytes() + (0 if snap.index is None else snap.index.nbytes())
        for scaler in (self.scaler, snap.scaler):
            total += 0 if scaler is None else scaler.nbytes
        return total


def _state_nbytes(state: dict[str, Any]) -> int:
    """The bytes of a state dict's arrays."""
    return sum(_state_nbytes(v) if isinstance(v, dict) else v.nbytes
               if isinstance(v, np.ndarray) else 0 for v in state.values())


def _defined(value: float) -> float | None:
    return None if math.isnan(value) else value


def take_rows(X: Any, keep: np.ndarray) -> Any:
    """The rows of a dense or CSR batch where ``keep`` is True."""
    return select_rows(X, np.flatnonzero(keep))


class ModelHost:
    """All hosted models of this process, kept in step with the store."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self._models: dict[str, HostedModel] = {}
        self._quarantine: dict[str, Quarantined] = {}
        self._lock = threading.Lock()
        self.ready = False
        self.replica = replica_id(settings)
        self.live: list[str] = [self.replica]  # live replicas, as last announced
        self._free_since: dict[str, float] = {}  # models seen without an owner, since

    @property
    def scaled_out(self) -> bool:
        """Do other replicas share the store (so owners publish and followers follow)?"""
        return len(self.live) > 1

    # ------------------------------------------------------------------ lookup
    def get(self, name: str) -> HostedModel:
        """The model, loading it if another replica created it; raises ModelNotFound or
        ModelQuarantined."""
        model = self._models.get(name)
        if model is not None:
            return model
        with self._lock:
            model = self._models.get(name)
            if model is not None:
                return model
            q = self._quarantine.get(name)
            if q is not None:
                raise ModelQuarantined(q)
            return self._load(self.store.get_config(name))

    def loaded(self, name: str) -> HostedModel | None:
        """The model if it is loaded in this process (no store access), else None."""
        return self._models.get(name)

    def find(self, name: str) -> HostedModel | None:
        """The model, or None if there is no such model (ModelQuarantined if quarantined)."""
        try:
            return self.get(name)
        except ModelNotFound:
            return None

    def names(self) -> list[str]:
        return sorted(self._models)

    def all(self) -> list[HostedModel]:
        """The hosted models, by name."""
        hosted = dict(self._models)
        return [hosted[n] for n in sorted(hosted)]

    def quarantined(self) -> list[Quarantined]:
        """The quarantined models, by name."""
        held = dict(self._quarantine)
        return [held[n] for n in sorted(held)]

    def quarantine_of(self, name: str) -> Quarantined | None:
        return self._quarantine.get(name)

    # ------------------------------------------------------------------ lifecycle
    def create(self, config: dict[str, Any]) -> HostedModel:
        with self._lock:
            self._check_room()
            self.store.create_model(config["name"], config)
            self._quarantine.pop(config["name"], None)
            model = self._new_model(config)
            self._models[model.name] = model
            self._count()
            model.export(self.metrics)
        self._place(model, time.monotonic())
        return model

    def export_model(self, name: str) -> bytes:
        """The model as a self-describing binary (config, learned state, version)."""
        from aucstream import __version__

        model = self.get(name)
        with model.lock:
            state = model.full_state()
            version = model.version
        return encode_export(name, model.config, version, encode_state(state),
                             f"aucstream {__version__}")

    def import_model(self, blob: bytes, name: str | None = None) -> HostedModel:
        """Create a model from an export (as ``name``, or the name it was exported under):
        the same learned state and version, its log starting there. Raises ImportRefused
        (what is wrong with the export), ModelExists, TooManyModels."""
        try:
            doc = decode_export(blob)
            state = decode_state(doc["state"])
        except CodecError as exc:
            raise ImportRefused(str(exc)) from None
        name = name or doc["name"]
        if not isinstance(name, str):
            raise ImportRefused("the export names no model: give ?name=")
        c = doc["config"]
        try:
            config = build_config(name, c["learner"], c["params"], c["features"], c["seed"],
                                  c["standardize"], c["rolling_window"], c.get("feedback"))
        except (ModelConfigError, TypeError, KeyError) as exc:
            raise ImportRefused(f"the export's config is refused: {exc}") from None
        # the state's layout is the export's: full-sized if it was made before compact
        # models, or of a learner that cannot grow
        config["compact"] = bool(c.get("compact")) and config["compact"]
        version = doc["version"]
        state["uid"] = config["uid"]  # the checkpoint of this new model generation
        try:  # it must restore here before it is stored
            probe = self._new_model(config)
            probe.restore(state, version, time.time())
        except Exception as exc:  # whatever a foreign or damaged state raises
            raise ImportRefused(f"the export's state does not restore: {exc}") from None
        with self._lock:
            self._check_room()
            self.store.create_model(name, config, start=(version, encode_state(state)))
            self._quarantine.pop(name, None)
            return self._load(config)

    def pin(self, name: str, candidate: int | None) -> HostedModel:
        """Pin (or, with None, unpin) a candidate of an 'auto' model: recorded in the
        store at the log's end, so every replica applies it at the same position."""
        model = self.get(name)
        if not isinstance(model.learner, Auto):
            raise ModelConfigError(("name",), f"model {name!r} is a {model.config['learner']}"
                                   " model; only 'auto' models have candidates to pin")
        n = len(model.learner.candidates)
        if candidate is not None and not 0 <= candidate < n:
            raise ModelConfigError(("candidate",), f"model {name!r} has {n} candidates "
                                   f"(0 to {n - 1}); got {candidate}")
        self.store.set_pin(name, candidate)
        model.catch_up(self.store, None, self.metrics)  # up to the pin, then the pin
        with model.lock:
            model._publish(force=True)
        return model

    def _check_room(self) -> None:
        """Refuse one model more than AUCSTREAM_MAX_MODELS (caller holds the host lock).
        Checked here, not in the store's create: replicas creating at the same moment can
        each pass it by one, which bounds the overshoot by the replicas."""
        if len(self.store.list_models()) >= self.settings.max_models:
            raise TooManyModels(
                f"The store holds {self.settings.max_models} models, the limit "
                "(AUCSTREAM_MAX_MODELS); delete one first.")

    def delete(self, name: str) -> None:
        with self._lock:
            self.store.delete_model(name)
            self._retire(name)
            self._quarantine.pop(name, None)
            self._count()

    def _new_model(self, config: dict[str, Any]) -> HostedModel:
        return HostedModel(config, self.settings.snapshot_interval,
                           self.settings.max_feature_value)

    def _count(self) -> None:
        self.metrics.models.set(len(self._models))
        self.metrics.owned_models.set(sum(m.owned for m in list(self._models.values())))
        self.metrics.quarantined.set(len(self._quarantine))

    def _retire(self, name: str) -> None:
        """Stop hosting a deleted model and drop its metric series (caller holds the host
        lock). Under the model's lock, so that an export running meanwhile (the applier,
        the sync loop) cannot bring a series back after it was dropped."""
        model = self._models.pop(name, None)
        if model is not None:
            with model.lock:
                model.retired = True
                self.metrics.forget(name)
        else:
            self.metrics.forget(name)
        self._count()

    def _quarantine_model(self, name: str, config: dict[str, Any] | None,
                          exc: BaseException) -> Quarantined:
        """Stop hosting a model that cannot be recovered or applied (caller holds the
        host lock); its requests answer 503 with the reason until it loads again."""
        reason = f"{type(exc).__name__}: {exc}"
        old = self._quarantine.get(name)
        if old is None or old.reason != reason:
            log.error("model %s quarantined: %s", name, reason,
                      exc_info=not isinstance(exc, LogGap | ValueError))
        q = Quarantined(name, reason, old.since if old else time.time(), config,
                        time.monotonic() + _QUARANTINE_RETRY)
        self._retire(name)
        self._quarantine[name] = q
        self._count()
        return q

    def _load(self, config: dict[str, Any]) -> HostedModel:
        """Build a model from its config, its checkpoint and the log tail (caller locks).

        Store trouble propagates (the caller retries); anything else quarantines the
        model and raises ModelQuarantined.
        """
        name = config.get("name", "?")
        try:
            model = self._new_model(config)
            cp = self.store.load_checkpoint(model.name)
            if cp is not None:
                try:
                    model.restore(decode_state(cp.blob), cp.version, cp.created_at)
                except ValueError as exc:
                    log.warning("ignoring checkpoint of %s: %s", model.name, exc)
            model.catch_up(self.store, None, self.metrics)
        except _STORE_TROUBLE:
            raise
        except Exception as exc:
            raise ModelQuarantined(self._quarantine_model(name, config, exc)) from exc
        model.publish_if_stale()  # serve the recovered version from the first score on
        self._quarantine.pop(name, None)
        self._models[model.name] = model
        self._count()
        model.export(self.metrics)
        self._place(model, time.monotonic())
        return model

    def recover(self) -> None:
        """Load every model of the store (start-up); sets ``ready``. A model that cannot
        be recovered is quarantined; the others serve."""
        started = time.monotonic()
        self.announce()
        with self._lock:
            for name in self.store.list_models():
                if name in self._models or name in self._quarantine:
                    continue
                try:
                    model = self._load(self.store.get_config(name))
                except (ModelNotFound, ModelQuarantined):
                    continue
                log.info("recovered model %s at version %d", name, model.version)
        self.ready = True
        log.info("recovered %d models in %.2fs (%d quarantined)", len(self._models),
                 time.monotonic() - started, len(self._quarantine))

    # ------------------------------------------------------------------ learning
    def append_and_apply(self, model: HostedModel, batch: EncodedBatch, y: np.ndarray,
                         ids: list[str | None]) -> tuple[int, int, int, bool]:
        """Append a batch durably, apply the log up to it.

        Returns (accepted, duplicates, version, applied). ``applied`` is False when the
        batch is durable but this replica could not apply the log up to it in time (the
        store failed while reading entries of other replicas before it); it will be.
        Raises EntryRefused if the model refused the batch (nothing learned; its ids are
        released so that a corrected retry is learned), StoreUnavailable if nothing was
        appended, AppendOutcomeUnknown if that cannot be known, ApplyFailed if the model
        broke while applying (it is then quarantined).
        """
        X = batch.learner_input()
        payload = encode_batch(y, X=batch.X) if batch.X is not None else encode_batch(y, csr=X)
        result = self.store.append(model.name, payload, ids)
        dups = len(result.duplicates)
        if dups:
            self.metrics.duplicates.labels(model.name).inc(dups)
        entry = result.entry
        if entry is not None:
            model.remember(entry, (y, X), self.metrics)
        try:
            applied = self._apply_after_append(model, result.version)
        finally:
            refused = model.refusal(entry.start) if entry is not None else None
        if refused is not None:
            assert entry is not None
            try:
                self.store.release_ids(model.name, entry.start, entry.end)
            except (StoreUnavailable, ModelNotFound) as exc:
                log.warning("ids of the refused entry %d..%d of %s stay taken: %s",
                            entry.start, entry.end, model.name, exc)
            raise refused
        accepted = 0 if entry is None else entry.end - entry.start
        return accepted, dups, model.version, applied

    def _apply_after_append(self, model: HostedModel, upto: int) -> bool:
        """Apply the log up to ``upto``; the entry is durable, so store trouble is retried
        (up to the append's resolve time) rather than reported as "nothing learned".

        A follower does not apply: it waits (as long) until the owner's publication
        covers ``upto`` and serves it, so a score here right after sees this batch. It
        takes the model itself if the model has no owner and this replica is the
        preferred one (the first learn after creation or a restart)."""
        if not model.owned and model.owner is None:
            self._place(model, time.monotonic())
        if not model.owned:
            self._wake_owner(model)
            if not model.wait_for(upto, self.settings.append_resolve_timeout):
                log.warning("model %s: durable up to %d, not published by its owner %s yet "
                            "(this replica %s serves version %d; live replicas: %s)",
                            model.name, upto, model.owner, self.replica, model.version,
                            ", ".join(self.live))
                return False
            if not model.owned:
                return True
        deadline = time.monotonic() + self.settings.append_resolve_timeout
        pause = 0.05
        while True:
            try:
                model.catch_up(self.store, upto, self.metrics)
                return True
            except StoreUnavailable as exc:
                if time.monotonic() + pause >= deadline:
                    log.warning("model %s: durable up to %d, not applied yet: %s",
                                model.name, upto, exc)
                    return False
                time.sleep(pause)
                pause = min(2 * pause, 0.5)
            except ModelNotFound:
                raise
            except Exception as exc:
                with self._lock:
                    q = self._quarantine_model(model.name, model.config, exc)
                raise ApplyFailed(
                    f"The events are in the durable log, but model {model.name!r} failed "
                    f"while applying it and is quarantined: {q.reason}") from exc

    def _wake_owner(self, model: HostedModel) -> None:
        """Tell the owner that the log grew, so that it applies the entry now rather than
        at the sync loop's next look (which finds it if the wake-up is lost)."""
        owner = model.owner
        if owner is None or owner == self.replica:
            return
        try:
            self.store.wake(owner, [model.name])
        except StoreUnavailable as exc:
            log.debug("model %s: could not wake its owner %s: %s", model.name, owner, exc)

    def keep_impressions(self, model: HostedModel, jobs: list[KeepJob]) -> list[int]:
        """Keep /score requests' impressions in one store call; how many each kept
        (blocking: from a worker thread)."""
        assert model.feedback is not None
        kept = self.store.keep_impression_groups(
            model.name, [job.pack() for job in jobs], max_pending=model.feedback.max_pending)
        for job, n in zip(jobs, kept, strict=True):
            job.kept(n)
        return list(kept)

    async def keep_impressions_together(self, model: HostedModel, job: KeepJob) -> int:
        """Keep one /score request's impressions from the event loop; how many were kept.
        Requests for the same model that arrive while one group is being written are
        packed and written together next, in one worker thread call."""
        assert model.feedback is not None
        keeper = model.keeper
        if keeper is None:
            keeper = model.keeper = GroupWriter(partial(self.keep_impressions, model))
        return await keeper.submit(job)

    # ------------------------------------------------------------------ ownership
    def announce(self) -> None:
        """Tell the store this replica is alive; learn which others are."""
        self.live = self.store.announce_replica(self.replica, self.settings.lease_ttl)
        self.metrics.replicas.set(len(self.live))

    def keep_leases(self) -> None:
        """Announce this replica and renew the leases it holds (every lease_ttl / 3, on
        its own thread: a long apply or checkpoint must not let a lease lapse)."""
        self.announce()
        for model in list(self._models.values()):
            token = model.token
            if token is None:
                continue
            if not self.store.renew_lease(model.name, self.replica, token,
                                          self.settings.lease_ttl):
                with model.lock:
                    if model.token != token:
                        continue  # handed over or re-taken meanwhile, not lost
                self._demote(model, "its lease was lost")

    def _place(self, model: HostedModel, now: float) -> None:
        """Take or hand over one model's lease: the preferred live replica (rendezvous
        hashing) owns it; a model without an owner for two lease times is taken by
        whoever sees it, whatever the preference. (Renewals are :meth:`keep_leases`'s.)"""
        name = model.name
        preferred = preferred_owner(name, self.live)
        token = model.token
        if token is not None:
            if preferred != self.replica:
                # hand over: publish the latest, so the next owner starts from it
                with contextlib.suppress(LeaseLost):
                    model.checkpoint(self.store, self.settings, trim=False)
                self._demote(model, f"handed over to {preferred}")
                self.store.release_lease(name, self.replica, token)
            return
        lease = self.store.get_lease(name)
        if lease is not None and lease.holder != self.replica:
            model.owner = lease.holder
            self._free_since.pop(name, None)
            return
        # free, or held under this replica's name (its own, from before a restart)
        since = self._free_since.setdefault(name, now)
        if (lease is not None or preferred == self.replica
                or now - since >= 2 * self.settings.lease_ttl):
            self._take(model)
        else:
            model.owner = None

    def _take(self, model: HostedModel) -> None:
        lease = self.store.acquire_lease(model.name, self.replica, self.settings.lease_ttl)
        if lease is None:
            return
        self._free_since.pop(model.name, None)
        with model.lock:
            model.token = lease.token
            model.owner = self.replica
            model.followed = None
        log.info("model %s: owned by this replica (%s, lease %d)", model.name, self.replica,
                 lease.token)
        model.catch_up(self.store, None, self.metrics)  # what the last owner left
        model.notify()

    def _demote(self, model: HostedModel, why: str) -> None:
        with model.lock:
            if model.token is None:
                return
            model.token = None
            model.owner = None
            model.published_state = None
            model._pending.clear()  # applied by the next owner; counted when published
        log.info("model %s: no longer owned by this replica: %s", model.name, why)

    def follow_once(self) -> None:
        """The fast loop while several replicas share the store: owners apply what other
        replicas appended, woken by them, and publish it (at most every
        publish_interval); followers reload a newer publication (at once while a request
        waits for it, else every max_staleness / 2)."""
        if not self.scaled_out:
            return
        woken = set(self.store.woken(self.replica))
        now = time.monotonic()
        for model in list(self._models.values()):
            try:
                if model.owned:
                    self._look(model, model.name in woken)
                    # a follower's request waits for what it appended: publish it now
                    awaited = model.published_version < model.awaited <= model.version
                    if model.version > model.published_version and (
                            awaited or now - model.published_at >= self.settings.publish_interval):
                        model.publish(self.store, self.settings)
                elif model.waiters or now - model.published_at >= self.settings.max_staleness / 2:
                    self._refresh(model)
            except LeaseLost:
                self._demote(model, "its lease was lost")
            except ModelNotFound:
                continue  # deleted: the sync loop retires it
            except StoreUnavailable:
                raise
            except Exception:
                log.exception("model %s: following failed", model.name)

    def _look(self, model: HostedModel, woken: bool) -> None:
        """An owner: apply what other replicas appended. They wake the owner after each
        append, so only woken models are looked at here: idle ones cost no store call
        (a wake-up that was lost is covered by the sync loop, which looks at every owned
        model's log each sync_interval). A model a request thread is applying is left to
        that thread, and looked at again on the next round (the woken entry may come
        after the thread's own)."""
        if not (woken or model.look_again):
            return
        if model.lock.locked():
            model.look_again = True
            return
        model.look_again = False
        _, _, end = self.store.log_bounds(model.name)
        model.awaited = max(model.awaited, end)
        if end > model.version:
            model.catch_up(self.store, None, self.metrics)

    def _refresh(self, model: HostedModel) -> None:
        """A follower: load the owner's publications if they are newer than what it
        serves."""
        model.published_at = time.monotonic()
        try:
            if not model.follow(self.store, self.metrics):
                return
        except ValueError as exc:  # another generation: the sync loop swaps models
            log.info("publication of %s skipped: %s", model.name, exc)
            return
        model.sync_pins(self.store)
        model.notify()

    def release_all(self) -> None:
        """Clean shutdown: give every lease up, so that survivors take over at once."""
        for model in list(self._models.values()):
            token = model.token
            if token is not None:
                self._demote(model, "shutting down")
                self.store.release_lease(model.name, self.replica, token)
        self.store.withdraw_replica(self.replica)

    # ------------------------------------------------------------------ background
    def sync_once(self) -> None:
        """Follow the store: new and deleted models, entries from other replicas,
        checkpoints, quarantined models to retry. One model's trouble (deleted meanwhile,
        broken) never stops the round for the others; the store's does."""
        names = set(self.store.list_models())
        with self._lock:
            # A model created after the listing is not in it: ask the store again before
            # dropping anything (rare, and under the lock that creation takes).
            for name in [n for n in (*self._models, *self._quarantine) if n not in names]:
                if self._gone(name):
                    self._retire(name)
                    self._quarantine.pop(name, None)
            self._count()
        now = time.monotonic()
        for name in sorted(names):
            try:
                self._sync_model(name, now)
            except ModelNotFound:  # deleted meanwhile
                with self._lock:
                    self._retire(name)
            except ModelQuarantined:
                pass  # logged when quarantined
        # models with more timeouts due than one sweep takes go on sweeping within this
        # (one sweep, 5,000 impressions, each round capped a model at 5,000 negatives/s)
        sweep_until = time.monotonic() + self.settings.sync_interval / 2
        for model in list(self._models.values()):
            try:
                self._maintain(model, now, sweep_until)
            except ModelNotFound:
                with self._lock:
                    self._retire(model.name)
            except StoreUnavailable:
                raise
            except Exception:  # a checkpoint that cannot be made: the model still serves
                log.exception("model %s: checkpoint or export failed", model.name)
        self._count()

    def _gone(self, name: str) -> bool:
        """Is the model deleted from the store (caller holds the host lock)?"""
        try:
            self.store.get_config(name)
        except ModelNotFound:
            return True
        return False

    def _sync_model(self, name: str, now: float) -> None:
        model = self._models.get(name)
        if model is None:
            q = self._quarantine.get(name)
            if q is not None and now < q.retry_at:
                return
            with self._lock:
                if name not in self._models:
                    self._load(self.store.get_config(name))  # lifts the quarantine if it loads
            return
        config = self.store.get_config(name)
        if config.get("uid") != model.uid:  # deleted and re-created elsewhere
            with self._lock:
                self._retire(name)  # the new generation is loaded on the next round
            return
        try:
            self._place(model, now)
            if not model.owned:
                self._refresh(model)
                return
            _, _, end = self.store.log_bounds(name)
            if end > model.version:  # entries of other replicas: the lock only then
                model.catch_up(self.store, None, self.metrics)
            else:
                model.sync_pins(self.store)  # a pin set by another replica, no entry since
        except _STORE_TROUBLE:
            raise
        except LeaseLost:
            self._demote(model, "its lease was lost")
        except Exception as exc:
            with self._lock:
                raise ModelQuarantined(self._quarantine_model(name, config, exc)) from exc

    def _maintain(self, model: HostedModel, now: float, sweep_until: float = 0.0) -> None:
        """Publish, checkpoint and export one model; learn its timed-out impressions
        (the owner's work: one sweep, and more until ``sweep_until`` while sweeps come
        back full)."""
        if model.owned:
            if model.feedback is not None:
                self._sweep(model, sweep_until)
            model.publish_if_stale()
            try:
                if model.checkpoint_due(self.settings, now):
                    model.checkpoint(self.store, self.settings, publishes=self.scaled_out)
                elif self.scaled_out and model.version > model.published_version:
                    model.publish(self.store, self.settings)
            except LeaseLost:
                self._demote(model, "its lease was lost")
        n_entries, _, _ = self.store.log_bounds(model.name)
        with model.lock:
            if not model.retired:
                self.metrics.log_entries.labels(model.name).set(n_entries)
                model.export(self.metrics)

    def _sweep(self, model: HostedModel, until: float = 0.0) -> None:
        """Timeout negatives of a model with feedback (sweeps until ``time.monotonic()``
        passes ``until`` or one takes less than a full sweep), and its impression
        counts."""
        assert model.feedback is not None

        def learn(batch: EncodedBatch, y: np.ndarray, ids: list[str], served: np.ndarray) -> None:
            try:
                accepted, _, _, _ = self.append_and_apply(model, batch, y, list(ids))
            except EntryRefused as exc:  # nothing learned; never retried
                log.warning("model %s: timeout negatives refused: %s", model.name, exc.message)
                return
            if accepted:
                self.metrics.timeout_negatives.labels(model.name).inc(accepted)
                model.record_served(served, y)
            model.request_auc.labelled(ids, y.tolist())

        while (sweep_timeouts(self.store, model.name, model.feedback, model.encoder.n_features,
                              learn) >= SWEEP_LIMIT and time.monotonic() < until
               and not model.retired):
            pass
        model.impressions = self.store.count_impressions(model.name, time.time())
        if not model.retired:
            for status, n in model.impressions.items():
                self.metrics.impressions.labels(model.name, status).set(n)
            self.metrics.served_auc.labels(model.name).set(model.served_auc.value)
            self.metrics.request_auc.labels(model.name).set(model.request_auc.value)

    def checkpoint_all(self) -> None:
        """Checkpoint every owned model with unsaved events (clean shutdown)."""
        for model in list(self._models.values()):
            if model.owned and model.version > model.checkpoint_version:
                with contextlib.suppress(LeaseLost):
                    model.checkpoint(self.store, self.settings)
