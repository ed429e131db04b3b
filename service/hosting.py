"""Hosting learners: the applier, published scoring snapshots, checkpoints, recovery.

One :class:`HostedModel` per model. The durable log is the source of truth: a learn
request appends its encoded batch to the log, then the model's single applier (a lock)
applies log entries strictly in log order — scoring each event before learning it
(test-then-train, which feeds the rolling AUC) — and publishes an immutable scoring
snapshot. Replicas that share a store apply the same entries in the same order and so
hold identical models.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

import models
from models.preprocessing import StandardScaler

from .codec import decode_batch, decode_state, encode_batch, encode_state
from .encoding import EncodedBatch, FeatureEncoder
from .metrics import Metrics
from .settings import Settings
from .store.base import LogEntry, ModelNotFound, Store

__all__ = ["HostedModel", "ModelConfigError", "ModelHost", "Snapshot"]

log = logging.getLogger("aucstream.hosting")

_LABELS = ("negative", "positive")
_REPLAY_PAGE = 500  # log entries read per store call while catching up
_REFRESH_WAIT = 0.05  # seconds a stale snapshot waits for a lock holder that is not applying


class ModelConfigError(ValueError):
    """A model configuration the learner or the encoder refuses; ``loc`` names the field."""

    def __init__(self, loc: tuple[Any, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg


class LogGap(RuntimeError):
    """The log no longer holds the entries this replica needs, and no checkpoint covers them."""


@dataclass(frozen=True)
class Snapshot:
    """What scoring reads: never mutated after publication."""

    version: int
    scorer: models.Learner
    scaler: StandardScaler | None

    def score(self, batch: EncodedBatch) -> np.ndarray:
        X = batch.learner_input()
        if self.scaler is not None:
            X = self.scaler.transform(X)
        return self.scorer.score(X)


def _sparse_learners() -> list[str]:
    return [n for n in models.available() if models.base._lookup(n).accepts_sparse]


def build_config(name: str, learner: str, params: dict[str, Any], features: dict[str, Any],
                 seed: int, standardize: bool, rolling_window: int) -> dict[str, Any]:
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
    return {
        "name": name,
        "learner": learner,
        "params": dict(lrn.params),
        "features": dict(features),
        "seed": seed,
        "standardize": standardize,
        "rolling_window": rolling_window,
        "created_at": time.time(),
        "uid": uuid.uuid4().hex,
    }


class HostedModel:
    """A learner with its encoder, optional scaler, rolling AUC and applier."""

    def __init__(self, config: dict[str, Any], snapshot_interval: float = 0.0,
                 max_feature_value: float = math.inf) -> None:
        self.config = config
        self.snapshot_interval = snapshot_interval
        self.name: str = config["name"]
        self.uid: str = config["uid"]
        self.encoder = FeatureEncoder(config["features"], max_value=max_feature_value)
        self.learner = models.create(config["learner"], n_features=self.encoder.n_features,
                                     seed=config["seed"], **config["params"])
        n = self.encoder.n_features
        self.scaler = StandardScaler(n) if config["standardize"] else None
        self.rolling = models.RollingAUC(config["rolling_window"])
        self.version = 0
        self.checkpoint_version = 0
        self.checkpoint_time: float | None = None
        self.checkpoint_attempt = time.monotonic()
        self.lock = threading.Lock()
        self._applying = False  # a batch is being applied under the lock
        self.retired = False  # deleted: its metric series are gone and stay gone
        self._pending: dict[int, tuple[LogEntry, tuple[np.ndarray, Any]]] = {}
        self._snapshot = self._make_snapshot()

    # ------------------------------------------------------------------ scoring
    def _make_snapshot(self) -> Snapshot:
        scaler = self.scaler.copy() if self.scaler is not None else None
        self._published_at = time.monotonic()
        return Snapshot(self.version, self.learner.snapshot(), scaler)

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
    def remember(self, entry: LogEntry, batch: tuple[np.ndarray, Any]) -> None:
        """Keep an entry this process appended, so applying it needs no store read."""
        self._pending[entry.start] = (entry, batch)

    def catch_up(self, store: Store, upto: int | None, metrics: Metrics | None) -> None:
        """Apply log entries in order until ``version >= upto`` (None: the log's end)."""
        with self.lock:
            self._applying = bool(self._pending)  # this process's own entries wait
            try:
                self._catch_up(store, upto, metrics)
            finally:
                self._applying = False

    def _catch_up(self, store: Store, upto: int | None, metrics: Metrics | None) -> None:
        """The body of :meth:`catch_up` (the caller holds the lock)."""
        before = self.version
        while upto is None or self.version < upto:
            pending = self._pending.pop(self.version, None)
            if pending is not None:
                self._apply(pending[0], pending[1], metrics)
                continue
            entries = store.read_log(self.name, self.version, _REPLAY_PAGE)
            if not entries:
                # No entry after our version: the end of the log, or another replica
                # checkpointed past us and trimmed the log to its end.
                _, first, end = store.log_bounds(self.name)
                if end <= self.version:
                    break
                if first > self.version:
                    self._reload(store, first)
                elif not store.read_log(self.name, self.version, 1):
                    # entries appended meanwhile are read on the next round; none at all
                    # would be a store contradicting itself: fail rather than spin
                    raise LogGap(f"model {self.name!r}: the log ends at {end} but has no "
                                 f"entry after {self.version}")
                continue
            if entries[0].start > self.version:
                self._reload(store, entries[0].start)
                continue
            for entry in entries:
                if entry.end <= self.version:
                    continue
                mine = self._pending.pop(entry.start, None)
                self._apply(entry, mine[1] if mine else decode_batch(entry.payload), metrics)
        for start in [s for s in self._pending if s < self.version]:
            del self._pending[start]
        if self.version != before:
            self._publish()

    def _apply(self, entry: LogEntry, batch: tuple[np.ndarray, Any], metrics: Metrics | None):
        if entry.start != self.version:
            raise LogGap(f"model {self.name!r}: expected an entry starting at {self.version}, "
                         f"got {entry.start}")
        self._applying = True  # read by scoring, which never waits for a batch
        y, X = batch
        if entry.skip:
            keep = np.ones(y.shape[0], bool)
            keep[list(entry.skip)] = False
            y, X = y[keep], _take_rows(X, keep)
        if self.scaler is not None:
            X = self.scaler.learn_transform(X)
        prior = self.learner.score_then_learn(X, y)
        self.rolling.update(prior, y)
        self.version = entry.end
        if metrics is not None:
            n_pos = int((y > 0).sum())
            metrics.events_learned.labels(self.name, "positive").inc(n_pos)
            metrics.events_learned.labels(self.name, "negative").inc(y.shape[0] - n_pos)
            self.export(metrics)

    def _reload(self, store: Store, first_start: int) -> None:
        """The log was trimmed past our version: continue from the checkpoint."""
        cp = store.load_checkpoint(self.name)
        if cp is None or cp.version < first_start:
            raise LogGap(f"model {self.name!r}: log starts at {first_start}, this replica is at "
                         f"{self.version} and no checkpoint covers the gap")
        self.restore(decode_state(cp.blob), cp.version, cp.created_at)

    # ------------------------------------------------------------------ checkpoints
    def full_state(self) -> dict[str, Any]:
        """Everything to resume this model (caller holds the lock)."""
        return {
            "uid": self.uid,
            "version": self.version,
            "learner": self.learner.get_state(),
            "scaler": self.scaler.get_state() if self.scaler is not None else None,
            "rolling": self.rolling.get_state(),
        }

    def restore(self, state: dict[str, Any], version: int, created_at: float) -> None:
        if state.get("uid") != self.uid or state.get("version") != version:
            raise ValueError(f"checkpoint of {self.name!r} belongs to another model generation")
        learner = models.from_state(state["learner"])
        if learner.name != self.config["learner"] or learner.n_features != self.encoder.n_features:
            raise ValueError(f"checkpoint of {self.name!r} holds a different learner")
        self.learner = learner
        if self.scaler is not None:
            self.scaler = StandardScaler.from_state(state["scaler"])
        self.rolling = models.RollingAUC.from_state(state["rolling"])
        self.version = version
        self.checkpoint_version = version
        self.checkpoint_time = created_at
        self._pending = {s: p for s, p in self._pending.items() if s >= version}
        self._snapshot = self._make_snapshot()

    def checkpoint_due(self, settings: Settings, now: float) -> bool:
        if self.version <= self.checkpoint_version:
            return False
        if self.version - self.checkpoint_version >= settings.checkpoint_every:
            return True
        return now - self.checkpoint_attempt >= settings.checkpoint_interval

    def checkpoint(self, store: Store, settings: Settings) -> None:
        self.checkpoint_attempt = time.monotonic()
        with self.lock:
            state = self.full_state()
            version = self.version
        blob = encode_state(state)  # outside the lock: scoring and learning go on
        try:
            saved = store.save_checkpoint(self.name, version, blob)
        except (ModelNotFound, ValueError) as exc:
            # deleted, or deleted and re-created elsewhere meanwhile: the sync loop
            # notices the new generation and drops this one
            log.info("checkpoint of %s skipped: %s", self.name, exc)
            return
        if saved and version > settings.log_retention:
            store.trim(self.name, version - settings.log_retention, settings.dedup_window)
        self.checkpoint_version = version
        self.checkpoint_time = time.time()

    # ------------------------------------------------------------------ reporting
    def export(self, metrics: Metrics) -> None:
        """Set this model's gauges; nothing once the model is retired (deleted)."""
        if self.retired:
            return
        # NaN while a class is missing from the window: undefined, never 0 or ½.
        metrics.rolling_auc.labels(self.name).set(self.rolling.value)
        metrics.version.labels(self.name).set(self.version)
        fill = self.learner.buffer_fill
        if fill is not None:
            for label, value in zip(_LABELS, fill, strict=True):
                metrics.buffer_fill.labels(self.name, label).set(value)
        if self.checkpoint_time is not None:
            metrics.checkpoint_age.labels(self.name).set(time.time() - self.checkpoint_time)
            metrics.checkpoint_version.labels(self.name).set(self.checkpoint_version)

    def info(self) -> dict[str, Any]:
        neg, pos = self.learner.n_seen
        fill = self.learner.buffer_fill
        auc = self.rolling.value
        cfg = self.config
        return {
            "name": self.name,
            "learner": cfg["learner"],
            "params": cfg["params"],
            "features": cfg["features"],
            "seed": cfg["seed"],
            "standardize": cfg["standardize"],
            "created_at": cfg["created_at"],
            "version": self.version,
            "events": {"negative": neg, "positive": pos},
            "rolling_auc": None if np.isnan(auc) else auc,
            "rolling_window": self.rolling.window,
            "buffer_fill": None if fill is None else {"negative": fill[0], "positive": fill[1]},
            "last_checkpoint": None if self.checkpoint_time is None else {
                "version": self.checkpoint_version,
                "age_seconds": max(0.0, time.time() - self.checkpoint_time),
            },
        }


def _take_rows(X: Any, keep: np.ndarray) -> Any:
    if isinstance(X, np.ndarray):
        return X[keep]
    indptr, indices, values = X
    rows = np.flatnonzero(keep)
    lengths = np.diff(indptr)[rows]
    new_ptr = np.zeros(rows.size + 1, np.int64)
    np.cumsum(lengths, out=new_ptr[1:])
    take = np.concatenate([np.arange(indptr[r], indptr[r + 1]) for r in rows]) if rows.size \
        else np.zeros(0, np.int64)
    return new_ptr, indices[take], values[take]


class ModelHost:
    """All hosted models of this process, kept in step with the store."""

    def __init__(self, store: Store, settings: Settings, metrics: Metrics) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self._models: dict[str, HostedModel] = {}
        self._lock = threading.Lock()
        self.ready = False

    # ------------------------------------------------------------------ lookup
    def get(self, name: str) -> HostedModel:
        """The model, loading it if another replica created it; raises ModelNotFound."""
        model = self._models.get(name)
        if model is not None:
            return model
        with self._lock:
            model = self._models.get(name)
            if model is None:
                model = self._load(self.store.get_config(name))
            return model

    def loaded(self, name: str) -> HostedModel | None:
        """The model if it is loaded in this process (no store access), else None."""
        return self._models.get(name)

    def find(self, name: str) -> HostedModel | None:
        """The model, or None if there is no such model."""
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

    # ------------------------------------------------------------------ lifecycle
    def create(self, config: dict[str, Any]) -> HostedModel:
        with self._lock:
            self.store.create_model(config["name"], config)
            model = HostedModel(config, self.settings.snapshot_interval,
                            self.settings.max_feature_value)
            self._models[model.name] = model
            self.metrics.models.set(len(self._models))
            model.export(self.metrics)
            return model

    def delete(self, name: str) -> None:
        with self._lock:
            self.store.delete_model(name)
            self._retire(name)

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
        self.metrics.models.set(len(self._models))

    def _load(self, config: dict[str, Any]) -> HostedModel:
        """Build a model from its config, its checkpoint and the log tail (caller locks)."""
        model = HostedModel(config, self.settings.snapshot_interval,
                            self.settings.max_feature_value)
        cp = self.store.load_checkpoint(model.name)
        if cp is not None:
            try:
                model.restore(decode_state(cp.blob), cp.version, cp.created_at)
            except ValueError as exc:
                log.warning("ignoring checkpoint of %s: %s", model.name, exc)
        model.catch_up(self.store, None, self.metrics)
        model.publish_if_stale()  # serve the recovered version from the first score on
        self._models[model.name] = model
        self.metrics.models.set(len(self._models))
        model.export(self.metrics)
        return model

    def recover(self) -> None:
        """Load every model of the store (start-up); sets ``ready``."""
        started = time.monotonic()
        with self._lock:
            for name in self.store.list_models():
                if name in self._models:
                    continue
                try:
                    model = self._load(self.store.get_config(name))
                except ModelNotFound:
                    continue
                log.info("recovered model %s at version %d", name, model.version)
        self.ready = True
        log.info("recovered %d models in %.2fs", len(self._models), time.monotonic() - started)

    # ------------------------------------------------------------------ learning
    def append_and_apply(self, model: HostedModel, batch: EncodedBatch, y: np.ndarray,
                         ids: list[str | None]) -> tuple[int, int, int]:
        """Append a batch durably, apply the log up to it; (accepted, duplicates, version)."""
        X = batch.learner_input()
        payload = encode_batch(y, X=batch.X) if batch.X is not None else encode_batch(y, csr=X)
        result = self.store.append(model.name, payload, ids)
        dups = len(result.duplicates)
        if result.entry is not None:
            model.remember(result.entry, (y, X))
        model.catch_up(self.store, result.version, self.metrics)
        if dups:
            self.metrics.duplicates.labels(model.name).inc(dups)
        accepted = 0 if result.entry is None else result.entry.end - result.entry.start
        return accepted, dups, model.version

    # ------------------------------------------------------------------ background
    def sync_once(self) -> None:
        """Follow the store: new and deleted models, entries from other replicas, checkpoints."""
        names = set(self.store.list_models())
        for name in list(self._models):
            if name not in names:
                with self._lock:
                    self._retire(name)
        for name in names:
            model = self._models.get(name)
            if model is None:
                with contextlib.suppress(ModelNotFound):
                    self.get(name)
                continue
            config = self.store.get_config(name)
            if config.get("uid") != model.uid:  # deleted and re-created elsewhere
                with self._lock:
                    self._retire(name)  # the new generation is loaded on the next round
                continue
            _, _, end = self.store.log_bounds(name)
            if end > model.version:  # entries of other replicas: the lock only then
                model.catch_up(self.store, None, self.metrics)
        now = time.monotonic()
        for model in list(self._models.values()):
            model.publish_if_stale()
            if model.checkpoint_due(self.settings, now):
                model.checkpoint(self.store, self.settings)
            n_entries, _, _ = self.store.log_bounds(model.name)
            with model.lock:
                if not model.retired:
                    self.metrics.log_entries.labels(model.name).set(n_entries)
                    model.export(self.metrics)
        self.metrics.models.set(len(self._models))

    def checkpoint_all(self) -> None:
        """Checkpoint every model with unsaved events (clean shutdown)."""
        for model in list(self._models.values()):
            if model.version > model.checkpoint_version:
                model.checkpoint(self.store, self.settings)
