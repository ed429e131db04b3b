"""Learning from Redis streams: a model created with ``"ingest": {"redis_stream": KEY}`` is
fed by its owner through a consumer group.

Each entry's field ``events`` holds a JSON array shaped like /learn's ``events``; it is
learned exactly as a /learn request with that body would be (the same parser, checks,
label joins and durable append), then acknowledged (XACK). So an entry is acknowledged only
once its events are in the model's durable log. An entry that cannot be learned (no
``events`` field, bad JSON, a bad event, a batch the model refuses) goes to the
dead-letter stream with its error, and is acknowledged: it never blocks the rest.

Redelivery: entries read but not acknowledged when an owner dies stay pending in the group;
the next owner claims them, and this replica re-reads its own after store trouble. An
entry learned but not acknowledged (a crash in between) is learned again on redelivery,
and its events' ids make that a no-op: give every event an id for exactly-once learning.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import numpy as np
from numba import njit

from .encoding import EncodingError
from .hosting import HostedModel, ModelHost, ModelQuarantined
from .learning import learn_body
from .metrics import Metrics
from .parsing import BodyValidationError, PayloadTooLarge
from .settings import Settings
from .store.base import AppendOutcomeUnknown, ModelNotFound, StoreUnavailable
from .store.redis_store import RedisStore
from .store.streams import StreamConsumer, StreamEntry

__all__ = ["IngestSupervisor", "StreamIngester"]

log = logging.getLogger("aucstream.ingest")

ENTRIES_PER_READ = 64
# Events learned in one append when entries are combined (a read's entries go to the log
# as one entry: one durable write, not one per stream entry).
COMBINED_MAX_EVENTS = 50_000
BLOCK_MS = 100  # a read waits this long for new entries (bounds the reaction to a stop)
HOUSEKEEPING_S = 1.0  # seconds between claims of stale entries and lag readings
_RETRY_S = 0.5  # pause after store trouble before reading this consumer's pending entries


class _BadEntry(ValueError):
    pass


class StreamIngester:
    """One model's stream reader, alive while this replica owns the model."""

    def __init__(self, host: ModelHost, model: HostedModel, settings: Settings,
                 metrics: Metrics) -> None:
        spec = model.config["ingest"]
        assert isinstance(host.store, RedisStore)
        self.host = host
        self.model = model
        self.settings = settings
        self.metrics = metrics
        self.spec = spec
        self.consumer = StreamConsumer(host.store, spec["redis_stream"], spec["group"],
                                       host.replica)
        self.dead_key = spec.get("dead_letter") or f"{spec['redis_stream']}:dead"
        self._suffix = b',"model":' + json.dumps(model.name).encode() + b"}"
        self._combined_settings = settings.model_copy(update={
            "max_events_per_request": max(settings.max_events_per_request,
                                          COMBINED_MAX_EVENTS)})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"aucstream-ingest-{model.name}")

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        self._stop.set()
        if wait and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _serving(self) -> bool:
        return not self._stop.is_set() and self.model.owned and not self.model.retired

    def _run(self) -> None:
        started = False
        housekeeping = 0.0
        pending = True  # first this consumer's own unacknowledged entries (a restart)
        while self._serving():
            try:
                if not started:
                    self.consumer.ensure_group(self.spec["start"])
                    started = True
                now = time.monotonic()
                if now - housekeeping >= HOUSEKEEPING_S:
                    housekeeping = now
                    # entries a previous owner read and never acknowledged: it is gone (its
                    # lease is ours), so no idle time is needed
                    while self._serving() and self.process(
                            self.consumer.claim_stale(ENTRIES_PER_READ, 0)):
                        pass
                    lag = self.consumer.lag()
                    if lag is not None and not self.model.retired:
                        self.metrics.ingest_lag.labels(self.model.name).set(lag)
                entries = self.consumer.read(ENTRIES_PER_READ, BLOCK_MS, pending=pending)
                if pending and not entries:
                    pending = False
                    continue
                self.process(entries)
            except (StoreUnavailable, AppendOutcomeUnknown) as exc:
                log.warning("model %s: ingestion paused: %s", self.model.name, exc)
                pending = True  # what was read and not acknowledged is read again
                self._stop.wait(_RETRY_S)
            except (ModelNotFound, ModelQuarantined):
                break
            except Exception:
                log.exception("model %s: ingestion failed; retrying", self.model.name)
                pending = True
                self._stop.wait(_RETRY_S)

    # ------------------------------------------------------------------ entries
    def process(self, entries: list[StreamEntry]) -> int:
        """Learn a read's entries, as one append when they are all good (the common case),
        else each on its own (dead-lettering the bad ones); acknowledge those done and
        return how many were handled. Store trouble propagates; what was not acknowledged
        stays pending."""
        if len(entries) > 1 and self._combined(entries):
            return len(entries)
        return self._one_by_one(entries)

    def _combined(self, entries: list[StreamEntry]) -> bool:
        """All entries' events in one /learn body, if each is one JSON array: learned and
        acknowledged (True), or nothing learned because some event is bad (False)."""
        parts = []
        for _, fields in entries:
            raw = fields.get(b"events")
            if raw is None or not is_one_array(raw):
                return False
            inner = raw.strip()[1:-1].strip()
            if inner:
                parts.append(inner)
        if not parts:
            return False
        body = b'{"events":[' + b",".join(parts) + b"]" + self._suffix
        try:
            out, _ = learn_body(body, self.host, self._combined_settings)
        except (BodyValidationError, EncodingError, PayloadTooLarge):
            return False  # one by one finds and dead-letters the bad entry
        name = self.model.name
        self.consumer.ack([entry_id for entry_id, _ in entries])
        self.metrics.ingest_entries.labels(name, "learned").inc(len(entries))
        self.metrics.ingest_events.labels(name).inc(out.accepted)
        return True

    def _one_by_one(self, entries: list[StreamEntry]) -> int:
        done: list[str] = []
        name = self.model.name
        try:
            for entry_id, fields in entries:
                raw = fields.get(b"events")
                try:
                    accepted = self._learn(raw)
                except (_BadEntry, BodyValidationError, EncodingError, PayloadTooLarge) as exc:
                    self.consumer.dead_letter(self.dead_key, entry_id, _describe(exc),
                                              raw if raw is not None else b"")
                    self.metrics.ingest_entries.labels(name, "dead_letter").inc()
                    log.info("model %s: stream entry %s dead-lettered: %s", name, entry_id,
                             _describe(exc))
                else:
                    self.metrics.ingest_entries.labels(name, "learned").inc()
                    self.metrics.ingest_events.labels(name).inc(accepted)
                done.append(entry_id)
        finally:
            self.consumer.ack(done)
        return len(done)

    def _learn(self, raw: bytes | None) -> int:
        if raw is None:
            raise _BadEntry("the entry has no field 'events'")
        if not is_one_array(raw):
            raise _BadEntry("'events' must be one JSON array of events")
        body = b'{"events":' + raw + self._suffix
        out, _ = learn_body(body, self.host, self.settings)
        return out.accepted


def is_one_array(raw: bytes) -> bool:
    """Is ``raw`` one bracketed JSON array: '[' first, its matching ']' last (strings and
    escapes respected)? Then no entry can close its array early to add keys to the body
    (e.g. name another model), nor join a neighbour's text when entries are combined;
    what is inside is left to the parser."""
    return _one_array(np.frombuffer(raw, np.uint8))


@njit(cache=True, nogil=True)
def _one_array(b):
    n = b.shape[0]
    i = 0
    while i < n and (b[i] == 32 or b[i] == 9 or b[i] == 10 or b[i] == 13):
        i += 1
    if i == n or b[i] != 91:  # '['
        return False
    depth = 0
    in_string = False
    while i < n:
        c = b[i]
        if in_string:
            if c == 92:  # backslash: skip the escaped byte
                i += 1
            elif c == 34:
                in_string = False
        elif c == 34:
            in_string = True
        elif c == 91 or c == 123:
            depth += 1
        elif c == 93 or c == 125:
            depth -= 1
            if depth == 0:
                break
        i += 1
    if depth != 0 or i >= n or b[i] != 93:
        return False
    i += 1
    while i < n and (b[i] == 32 or b[i] == 9 or b[i] == 10 or b[i] == 13):
        i += 1
    return i == n


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BodyValidationError):
        first = exc.errors[0] if exc.errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"invalid events: {where}: {first.get('msg', exc)}"
    if isinstance(exc, EncodingError):
        return f"invalid event at {'.'.join(str(p) for p in exc.loc)}: {exc.msg}"
    if isinstance(exc, PayloadTooLarge):
        return exc.message
    return str(exc)


class IngestSupervisor:
    """Starts an ingester for every model with ``ingest`` that this replica owns, and
    forgets those whose model moved or went (they stop themselves)."""

    def __init__(self, host: ModelHost, settings: Settings, metrics: Metrics) -> None:
        self.host = host
        self.settings = settings
        self.metrics = metrics
        self._running: dict[str, StreamIngester] = {}

    def step(self) -> None:
        for name, ing in list(self._running.items()):
            if not ing.alive:
                del self._running[name]
        if not isinstance(self.host.store, RedisStore):
            return
        for model in self.host.all():
            if model.config.get("ingest") and model.owned and model.name not in self._running:
                ing = StreamIngester(self.host, model, self.settings, self.metrics)
                self._running[model.name] = ing
                ing.start()
                log.info("model %s: ingesting stream %s", model.name,
                         model.config["ingest"]["redis_stream"])

    def stop(self) -> None:
        for ing in self._running.values():
            ing.stop(wait=False)
        for ing in self._running.values():
            ing.stop()
        self._running.clear()
