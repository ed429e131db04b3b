"""Learning from Redis streams: a model created with ``"ingest": {"redis_stream": KEY}`` is
fed by its owner through a consumer group.

Each entry's field ``events`` holds a JSON array shaped like /learn's ``events``; it is
learned exactly as a /learn request with that body would be (the same parser, checks,
label joins and durable append), then acknowledged (XACK). So an entry is acknowledged only
once its events are in the model's durable log. An entry that cannot be learned (no
``events`` field, bad JSON, a bad event, a batch the model refuses) goes to the
dead-letter stream with its error, and is acknowledged: it never blocks the rest.

A read's entries are learned as one /learn body (one durable append) when they are all
good, the common case. Reading is pipelined: while one read's events are appended, applied
and acknowledged on a helper thread, the ingester reads and parses the next read's (Redis
I/O and the numba parser and learners release the GIL). One read is in flight at a time:
the next is appended only once the previous is acknowledged, so entries are learned in
stream order; anything else (an entry to dead-letter, claiming a previous owner's
entries, re-reading after store trouble) first waits for the one in flight.

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
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from numba import njit

from .encoding import EncodingError
from .hosting import HostedModel, ModelHost, ModelQuarantined
from .learning import ParsedLearn, learn_body, learn_parsed, parse_fast
from .metrics import Metrics
from .parsing import BodyValidationError, PayloadTooLarge
from .settings import Settings
from .store.base import AppendOutcomeUnknown, ModelNotFound, StoreUnavailable
from .store.redis_store import RedisStore
from .store.streams import StreamConsumer, StreamEntry

__all__ = ["IngestSupervisor", "StreamIngester", "is_one_array"]

log = logging.getLogger("aucstream.ingest")

ENTRIES_PER_READ = 32
# The first reads are smaller (doubling up to ENTRIES_PER_READ): the first is learned
# alone, with nothing to overlap, so a backlog starts being learned sooner.
ENTRIES_FIRST_READ = 4
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
        name = json.dumps(model.name).encode()
        self._suffix = b',"model":' + name + b"}"
        # the model's name first: the parser finds it without scanning the events
        self._prefix = b'{"model":' + name + b',"events":['
        self._combined_settings = settings.model_copy(update={
            "max_events_per_request": max(settings.max_events_per_request,
                                          COMBINED_MAX_EVENTS)})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"aucstream-ingest-{model.name}")
        # appends, applies and acknowledges one read while the next is read and parsed
        self._learner = ThreadPoolExecutor(1, f"aucstream-ingest-{model.name}-learn")
        self._inflight: Future[list[StreamEntry] | None] | None = None

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
        try:
            self._loop()
        finally:
            self._drain()
            self._learner.shutdown(wait=True)

    def _loop(self) -> None:
        started = False
        housekeeping = 0.0
        pending = True  # first this consumer's own unacknowledged entries (a restart)
        count = ENTRIES_FIRST_READ
        while self._serving():
            try:
                if not started:
                    self.consumer.ensure_group(self.spec["start"])
                    started = True
                now = time.monotonic()
                if now - housekeeping >= HOUSEKEEPING_S:
                    housekeeping = now
                    self._claim_stale()
                    lag = self.consumer.lag()
                    if lag is not None and not self.model.retired:
                        self.metrics.ingest_lag.labels(self.model.name).set(lag)
                if pending:  # what is re-read must not be in flight (learned twice)
                    self._settle()
                entries = self.consumer.read(count, BLOCK_MS, pending=pending)
                if pending and not entries:
                    pending = False
                    continue
                if entries:
                    self.process(entries)
                    count = min(2 * count, ENTRIES_PER_READ)
                else:
                    self._settle()  # the stream is drained: acknowledge now
            except (StoreUnavailable, AppendOutcomeUnknown) as exc:
                log.warning("model %s: ingestion paused: %s", self.model.name, exc)
                self._drain()
                pending = True  # what was read and not acknowledged is read again
                self._stop.wait(_RETRY_S)
            except (ModelNotFound, ModelQuarantined):
                break
            except Exception:
                log.exception("model %s: ingestion failed; retrying", self.model.name)
                self._drain()
                pending = True
                self._stop.wait(_RETRY_S)

    def _claim_stale(self) -> None:
        """Learn the entries a previous owner read and never acknowledged: it is gone (its
        lease is ours), so no idle time is needed. XAUTOCLAIM hands back this consumer's
        own unacknowledged entries too, so it waits for the read in flight, and for each
        claim to be learned before the next."""
        if not self.consumer.others_pending():
            return
        self._settle()
        while self._serving():
            entries = self.consumer.claim_stale(ENTRIES_PER_READ, 0)
            if not entries:
                return
            self.process(entries)
            self._settle()

    # ------------------------------------------------------------------ entries
    def process(self, entries: list[StreamEntry]) -> int:
        """Learn a read's entries: as one append when they are all good (the common case),
        else each on its own (dead-lettering the bad ones); return how many were handled.

        A good read is parsed here and learned on the helper thread once the read before
        it is acknowledged (:meth:`_settle` waits for it and raises what went wrong there);
        other reads are learned here, after it. Store trouble propagates; what was not
        acknowledged stays pending."""
        if not entries:
            return 0
        prepared = self._prepare(entries)
        self._settle()  # the read before: stream order
        if prepared is not None:
            body, parsed = prepared
            self._inflight = self._learner.submit(self._learn_read, entries, body, parsed)
            return len(entries)
        if len(entries) > 1 and self._combined(entries):
            return len(entries)
        return self._one_by_one(entries)

    def _prepare(self, entries: list[StreamEntry]) -> tuple[bytes, ParsedLearn] | None:
        """All entries' events as one /learn body, read by the fast parser, if each entry
        is one JSON array and the fast parser takes them all (else None).

        An entry counts as one array when it is '[' ... ']' and an event of the parsed
        body begins where its text does: the body's events are whole objects separated by
        commas in one array (its key is the body's only list, a second "model" or any
        other key fails the parse), so each entry's text is then a run of whole events.
        (Scanning each entry's brackets first cost ~1 µs per 724-byte event.)"""
        pieces = [self._prefix]
        at = len(self._prefix)
        firsts = []
        for _, fields in entries:
            raw = fields.get(b"events")
            if raw is None:
                return None
            inner = _inner(raw)
            if inner is None:
                return None
            if inner:
                if len(pieces) > 1:
                    pieces.append(b",")
                    at += 1
                firsts.append(at)
                pieces.append(inner)
                at += len(inner)
        pieces.append(b"]}")
        body = b"".join(pieces)
        settings = self._combined_settings if len(entries) > 1 else self.settings
        parsed = parse_fast(body, self.host, settings)
        if parsed is None or parsed.model is not self.model or parsed.starts is None:
            return None
        if firsts and not _all_in(np.array(firsts, np.int64), parsed.starts):
            return None
        return body, parsed

    def _learn_read(self, entries: list[StreamEntry], body: bytes, parsed: ParsedLearn
                    ) -> list[StreamEntry] | None:
        """On the helper thread: append, apply and acknowledge a prepared read; the
        entries again if the model refused the batch (nothing learned: each on its own
        then finds the culprit)."""
        try:
            out, _ = learn_parsed(parsed, body, self.host)
        except EncodingError:
            return entries
        # counted before the acknowledgement: what waits for it sees the counts
        name = self.model.name
        self.metrics.ingest_entries.labels(name, "learned").inc(len(entries))
        self.metrics.ingest_events.labels(name).inc(out.accepted)
        self.consumer.ack([entry_id for entry_id, _ in entries])
        return None

    def _settle(self) -> None:
        """Wait for the read in flight; raise what went wrong learning it."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            refused = inflight.result()
            if refused is not None:
                self._one_by_one(refused)

    def _drain(self) -> None:
        """:meth:`_settle`, logging what went wrong (its entries stay pending)."""
        try:
            self._settle()
        except Exception as exc:
            log.warning("model %s: ingestion: a read in flight was not learned: %s",
                        self.model.name, exc)

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
        self.metrics.ingest_entries.labels(name, "learned").inc(len(entries))
        self.metrics.ingest_events.labels(name).inc(out.accepted)
        self.consumer.ack([entry_id for entry_id, _ in entries])
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


def _all_in(wanted: np.ndarray, ascending: np.ndarray) -> bool:
    """Whether every value of ``wanted`` is in the ascending array (a binary search each:
    np.isin sorted both, ~2 % of a stream read's time)."""
    if ascending.size == 0:
        return wanted.size == 0
    at = np.minimum(np.searchsorted(ascending, wanted), ascending.size - 1)
    return bool((ascending[at] == wanted).all())


def _inner(raw: bytes) -> bytes | None:
    """What is between an entry's outer brackets, whitespace trimmed, if it starts with
    '[' and ends with ']' (else None); whether they match is left to the parse."""
    text = raw.strip(_WS)
    if len(text) < 2 or text[0] != 91 or text[-1] != 93:  # '[' ... ']'
        return None
    return text[1:-1].strip(_WS)


_WS = b" \t\n\r"


def is_one_array(raw: bytes) -> bool:
    """Is ``raw`` one bracketed JSON array: '[' first, its matching ']' last (strings and
    escapes respected)? Then no entry can close its array early to add keys to the body
    (e.g. name another model), nor join a neighbour's text when entries are combined;
    what is inside is left to the parser."""
    return bool(_array_bounds(np.frombuffer(raw, np.uint8))[0] >= 0)


# Indexing with an unsigned integer spares numba the negative-index wrap-around test on
# every byte read (as in service/fastjson.py): the scan ran ~1.6x faster.
_u = np.uint64


@njit(cache=True, inline="always")
def _is_ws(c):
    return c == 32 or c == 9 or c == 10 or c == 13


# Not nogil: a read's entries are scanned one call each (~0.2 ms), and a call that let
# the GIL go would wait to take it back, up to the 5 ms switch interval while another
# thread runs Python.
@njit(cache=True)
def _array_bounds(b):
    """If ``b`` is one bracketed JSON array (see :func:`is_one_array`): where what is
    between its brackets starts and ends, whitespace trimmed (equal: nothing inside);
    else (-1, -1)."""
    n = b.shape[0]
    i = 0
    while i < n and _is_ws(b[_u(i)]):
        i += 1
    if i == n or b[_u(i)] != 91:  # '['
        return -1, -1
    first = i
    depth = 0
    while i < n:
        c = b[_u(i)]
        if c == 34:  # a string: to its closing quote, a backslash skipping the next byte
            i += 1
            while i < n:
                c = b[_u(i)]
                if c == 34:
                    break
                i += 2 if c == 92 else 1
        elif c == 91 or c == 123:
            depth += 1
        elif c == 93 or c == 125:
            depth -= 1
            if depth == 0:
                break
        i += 1
    if depth != 0 or i >= n or b[_u(i)] != 93:
        return -1, -1
    last = i
    i += 1
    while i < n and _is_ws(b[_u(i)]):
        i += 1
    if i != n:
        return -1, -1
    start = first + 1
    while start < last and _is_ws(b[_u(start)]):
        start += 1
    end = last
    while end > start and _is_ws(b[_u(end - 1)]):
        end -= 1
    return start, end


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
