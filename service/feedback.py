"""The ad-click flow: items scored now, labelled later by id, negatives by timeout.

A model created with ``"feedback": {"window_s": W, "negative_after_s": T}`` keeps every
``/score`` item that carries an ``id`` as an *impression*: its encoded row, the score it
was served and the model version, in the store, for W seconds. A later ``/learn`` event
``{"id", "label"}`` (no ``x`` or ``features``) is joined with it and learned in log
order. With T set, an impression that has no label T seconds after it was shown is
learned as a negative by the sync loop of whichever replica gets to it first.

Exactly once, across replicas and kill -9, rests on two things: the store's atomic
status claims (``pending`` → ``labelled`` by a label, ``pending`` → ``timing_out`` →
``timed_out`` by the sweep: one claim wins) and the log's event ids (a label and the
timeout negative of impression ``i`` are both learned under the event id ``i``, so a
retried label, a second label, or a sweep repeated after a crash is a duplicate).

A positive that arrives after its impression was learned as a timeout negative (and
within W) is learned as a positive too, under the event id ``i#late``: the negative
stays learned. That is the fake-negative scheme of Ktena et al. (2019) without its
importance weights; a second late positive is a duplicate of the first, a late
negative a duplicate of the timeout negative.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
from numba import njit

from .encoding import EncodedBatch, EncodingError
from .store.base import Impression, PackedItems, Store

__all__ = ["SWEEP_LIMIT", "Feedback", "Joined", "RequestAUC", "decode_impression",
           "encode_impression", "first_positions", "impressions_of", "join_labels",
           "sweep_timeouts"]

log = logging.getLogger("aucstream.feedback")

LATE_SUFFIX = "#late"
_IMPRESSION_FORMAT = 1
SWEEP_LIMIT = 5_000  # impressions one sweep of one model takes (the next sweep goes on)
# A sweep that claimed impressions and died before their negatives were in the log: its
# claims are taken over by another sweep after this many seconds.
STALE_CLAIM_S = 30.0


@dataclass(frozen=True)
class Feedback:
    """A model's feedback configuration (validated at creation)."""

    window_s: float
    negative_after_s: float | None
    max_pending: int

    @classmethod
    def of(cls, config: dict[str, Any]) -> Feedback | None:
        spec = config.get("feedback")
        if not spec:
            return None
        return cls(float(spec["window_s"]), None if spec.get("negative_after_s") is None
                   else float(spec["negative_after_s"]), int(spec["max_pending"]))


# --------------------------------------------------------------------------- impressions
# Format 1: {"f": 1, "s": score, "v": version, "x": float64 row} (dense), or "i" (int64
# indices) and "w" (float64 values) for a sparse row. Format 2 (sparse rows only, since
# 2026-11-25) keeps a quarter of the bytes of a hashed one-hot row: "j" (uint32 indices)
# instead of "i" when every index fits, and no "w" when every value is 1.0. Both decode.
_DENSE_FORMAT = 1
_SPARSE_FORMAT = 2
_U32 = 1 << 32


def encode_impression(batch: EncodedBatch, i: int, score: float, version: int) -> bytes:
    """One scored row, with the score it was served and the model version, as bytes."""
    doc: dict[str, Any] = {"f": _DENSE_FORMAT if batch.X is not None else _SPARSE_FORMAT,
                           "s": float(score), "v": int(version)}
    if batch.X is not None:
        doc["x"] = np.ascontiguousarray(batch.X[i], np.float64).tobytes()
    else:
        assert batch.indptr is not None and batch.indices is not None and batch.values is not None
        a, b = int(batch.indptr[i]), int(batch.indptr[i + 1])
        idx = np.asarray(batch.indices[a:b], np.int64)
        if idx.size == 0 or (idx.min() >= 0 and idx.max() < _U32):
            doc["j"] = idx.astype(np.uint32).tobytes()
        else:
            doc["i"] = idx.tobytes()
        values = np.asarray(batch.values[a:b], np.float64)
        if not (values == 1.0).all():
            doc["w"] = np.ascontiguousarray(values).tobytes()
    return msgpack.packb(doc, use_bin_type=True)


def decode_impression(blob: bytes) -> tuple[Any, float, int]:
    """(row, served score, version): row a 1-D float array (dense) or (indices, values)."""
    doc = msgpack.unpackb(blob, raw=False)
    if not isinstance(doc, dict) or doc.get("f") not in (1, 2):
        raise ValueError("unknown impression format")
    if "x" in doc:
        row: Any = np.frombuffer(doc["x"], np.float64)
    else:
        idx = (np.frombuffer(doc["j"], np.uint32).astype(np.int64) if "j" in doc
               else np.frombuffer(doc["i"], np.int64))
        values = np.frombuffer(doc["w"], np.float64) if "w" in doc else np.ones(idx.size)
        row = (idx, values)
    return row, float(doc["s"]), int(doc["v"])


def first_positions(ids: Sequence[str | None]) -> dict[str, int]:
    """Each id's first position among ``ids`` (None: an item without an id), in order."""
    first: dict[str, int] = {}
    for i, item_id in enumerate(ids):
        if item_id is not None and item_id not in first:
            first[item_id] = i
    return first


def impressions_of(batch: EncodedBatch, ids: Sequence[str | None], scores: np.ndarray,
                   version: int, first: dict[str, int] | None = None) -> PackedItems:
    """The payload of every scored item that has an id (the first of a repeated id),
    packed (``first``: :func:`first_positions` of ``ids``, if known already).

    The payloads are :func:`encode_impression`'s bytes exactly, assembled from one
    conversion of the whole batch (a /score request keeps up to thousands of items, and
    packing them one msgpack document at a time was a third of its cost), and handed
    to the store as the one buffer they are written in."""
    if first is None:
        first = first_positions(ids)
    if not first:
        return PackedItems([], b"", np.zeros(0, np.int64))
    # msgpack of a map {"f": F, "s": <float64>, "v": <int>, ...}: the keys' order and
    # encodings are the ones msgpack.packb gives encode_impression's
    served = np.asarray(scores, np.float64).astype(">f8").tobytes()
    middle = b"\xa1v" + msgpack.packb(int(version))
    if batch.X is not None:
        head = b"\x84\xa1f" + msgpack.packb(_DENSE_FORMAT) + b"\xa1s\xcb"
        rows = np.ascontiguousarray(batch.X, np.float64)
        size = rows.shape[1] * 8
        data = rows.tobytes()
        tag = middle + b"\xa1x" + _bin_header(size)
        parts = [b"".join((head, served[8 * i: 8 * i + 8], tag, data[size * i: size * (i + 1)]))
                 for i in first.values()]
        return PackedItems(list(first), b"".join(parts),
                           np.cumsum([len(p) for p in parts], dtype=np.int64))
    assert batch.indptr is not None and batch.indices is not None and batch.values is not None
    indices = np.ascontiguousarray(batch.indices, np.int64)
    values = np.ascontiguousarray(batch.values, np.float64)
    buf, ends = _pack_sparse(np.asarray(batch.indptr, np.int64), indices,
                             indices.astype(np.uint32).view(np.uint8), indices.view(np.uint8),
                             values, values.view(np.uint8),
                             np.fromiter(first.values(), np.int64, len(first)),
                             np.frombuffer(served, np.uint8),
                             np.frombuffer(middle, np.uint8))
    return PackedItems(list(first), buf.tobytes(), ends)


# The sparse payload's fixed parts: b"\xa1f" + msgpack(2), then b"\xa1s\xcb" (a float64)
_SPARSE_HEAD = np.frombuffer(b"\xa1f" + msgpack.packb(_SPARSE_FORMAT) + b"\xa1s\xcb", np.uint8)


@njit(cache=True, nogil=True)
def _bin_size(size: int) -> int:
    """Bytes of msgpack's bin header for ``size`` bytes."""
    return 2 if size < 1 << 8 else 3 if size < 1 << 16 else 5


@njit(cache=True, nogil=True)
def _put_bin_header(buf: np.ndarray, p: int, size: int) -> int:
    if size < 1 << 8:
        buf[p] = 0xC4
        buf[p + 1] = size
        return p + 2
    if size < 1 << 16:
        buf[p] = 0xC5
        buf[p + 1] = size >> 8
        buf[p + 2] = size & 0xFF
        return p + 3
    buf[p] = 0xC6
    for k in range(4):
        buf[p + 1 + k] = (size >> (24 - 8 * k)) & 0xFF
    return p + 5


@njit(cache=True, nogil=True)
def _pack_sparse(indptr: np.ndarray, indices: np.ndarray, narrow_bytes: np.ndarray,
                 index_bytes: np.ndarray, values: np.ndarray, value_bytes: np.ndarray,
                 rows: np.ndarray, served: np.ndarray, middle: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Format-2 payloads of ``rows``, one after another, and each one's end offset: the
    bytes :func:`encode_impression` gives, written in one buffer (a Python loop joining
    a dozen pieces per item cost ~3.5 µs an item). ``served``: every item's score as
    big-endian float64 bytes; ``middle``: b"\xa1v" + msgpack(version); the indices'
    bytes as int64 (``index_bytes``) and as uint32 (``narrow_bytes``, used for rows whose
    indices all fit)."""
    k = rows.size
    narrow = np.ones(k, np.bool_)  # every index fits uint32: "j", 4 bytes each
    ones = np.ones(k, np.bool_)  # every value is 1.0: no "w"
    ends = np.empty(k, np.int64)
    total = 0
    head = 1 + _SPARSE_HEAD.size + 8 + middle.size + 2
    for r in range(k):
        a, b = indptr[rows[r]], indptr[rows[r] + 1]
        for j in range(a, b):
            if indices[j] < 0 or indices[j] >= 1 << 32:
                narrow[r] = False
            if values[j] != 1.0:
                ones[r] = False
        width = 4 if narrow[r] else 8
        total += head + _bin_size(width * (b - a)) + width * (b - a)
        if not ones[r]:
            total += 2 + _bin_size(8 * (b - a)) + 8 * (b - a)
        ends[r] = total
    buf = np.empty(total, np.uint8)
    p = 0
    for r in range(k):
        i = rows[r]
        a, b = indptr[i], indptr[i + 1]
        buf[p] = 0x84 if ones[r] else 0x85  # a map of 4 entries (f, s, v, i|j), or 5 with w
        p += 1
        buf[p:p + _SPARSE_HEAD.size] = _SPARSE_HEAD
        p += _SPARSE_HEAD.size
        buf[p:p + 8] = served[8 * i:8 * i + 8]
        p += 8
        buf[p:p + middle.size] = middle
        p += middle.size
        buf[p] = 0xA1
        if narrow[r]:
            buf[p + 1] = 0x6A  # "j"
            p = _put_bin_header(buf, p + 2, 4 * (b - a))
            buf[p:p + 4 * (b - a)] = narrow_bytes[4 * a:4 * b]
            p += 4 * (b - a)
        else:
            buf[p + 1] = 0x69  # "i"
            p = _put_bin_header(buf, p + 2, 8 * (b - a))
            buf[p:p + 8 * (b - a)] = index_bytes[8 * a:8 * b]
            p += 8 * (b - a)
        if not ones[r]:
            buf[p] = 0xA1
            buf[p + 1] = 0x77  # "w"
            p = _put_bin_header(buf, p + 2, 8 * (b - a))
            buf[p:p + 8 * (b - a)] = value_bytes[8 * a:8 * b]
            p += 8 * (b - a)
    return buf, ends


def _bin_header(size: int) -> bytes:
    """msgpack's header of a bin object of ``size`` bytes (bin 8, 16 or 32)."""
    if size < 1 << 8:
        return b"\xc4" + size.to_bytes(1, "big")
    if size < 1 << 16:
        return b"\xc5" + size.to_bytes(2, "big")
    return b"\xc6" + size.to_bytes(4, "big")


def batch_of_rows(rows: Sequence[Any], n_features: int) -> EncodedBatch:
    """An encoded batch of rows, each a dense 1-D array or an (indices, values) pair."""
    if not rows or isinstance(rows[0], np.ndarray):
        X = np.vstack(rows) if rows else np.zeros((0, n_features))
        return EncodedBatch(n=len(rows), X=X)
    lengths = [len(r[0]) for r in rows]
    indptr = np.zeros(len(rows) + 1, np.int64)
    indptr[1:] = np.cumsum(lengths)
    return EncodedBatch(n=len(rows), indptr=indptr,
                        indices=np.concatenate([r[0] for r in rows]).astype(np.int64),
                        values=np.concatenate([r[1] for r in rows]).astype(np.float64))


def rows_of(batch: EncodedBatch) -> list[Any]:
    """The rows of an encoded batch, in the form :func:`batch_of_rows` takes."""
    if batch.X is not None:
        return list(batch.X)
    assert batch.indptr is not None and batch.indices is not None and batch.values is not None
    return [(batch.indices[batch.indptr[i]:batch.indptr[i + 1]],
             batch.values[batch.indptr[i]:batch.indptr[i + 1]]) for i in range(batch.n)]


# --------------------------------------------------------------------------- labels by id
@dataclass
class Joined:
    """Rows to learn for a request's label-only events, and what could not be joined."""

    rows: dict[int, Any]  # event index -> row
    event_ids: dict[int, str]  # event index -> the id it is learned under
    unmatched: list[str]  # ids with no kept impression (unknown or expired)
    late_duplicates: int  # labels for impressions already learned as timeout negatives
    delays: list[float]  # seconds from showing to label, of the joined events
    served: list[tuple[float, int]]  # (score served, label ±1) of the joined events
    labels: list[tuple[str, int]]  # (item id, label ±1) of the joins that are not late


def join_labels(store: Store, name: str, events: Sequence[tuple[int, str, int]],
                now: float | None = None) -> Joined:
    """Join label-only events ``(index, id, label ±1)`` with their impressions.

    A pending impression is claimed as labelled; one labelled already (a retry, or a
    second label) is learned again under the same event id, which the log dedups; one
    learned as a timeout negative takes a positive as a late positive (event id
    ``id#late``) and a negative as a duplicate. Unknown and expired ids are unmatched.
    """
    now = time.time() if now is None else now
    ids = list(dict.fromkeys(i for _, i, _ in events))
    # read and claim at once: a pending impression is ours, the others keep their status
    kept, moved = store.take_impressions(name, ids, ("pending",), "labelled", now)
    claimed = set(moved)
    out = Joined({}, {}, [], 0, [], [], [])
    for index, item_id, label in events:
        imp: Impression | None = kept.get(item_id)
        if imp is None:
            out.unmatched.append(item_id)
            continue
        status = "labelled" if item_id in claimed else imp.status
        if status in ("timing_out", "timed_out"):
            if label < 0:
                out.late_duplicates += 1
                continue
            event_id = item_id + LATE_SUFFIX
        else:
            event_id = item_id
        row, served, _ = decode_impression(imp.payload)
        out.rows[index] = row
        out.event_ids[index] = event_id
        out.delays.append(max(0.0, now - imp.shown_at))
        out.served.append((served, label))
        if event_id == item_id:
            out.labels.append((item_id, label))
    return out


def merge_events(encoded: EncodedBatch | None, encoded_at: list[int], joined: Joined,
                 n_events: int, n_features: int) -> tuple[EncodedBatch, list[int]]:
    """One batch of the request's events in request order: the encoded ones and the joined
    ones (label-only events that did not join are left out); and the event index of each
    row."""
    rows: dict[int, Any] = dict(joined.rows)
    if encoded is not None:
        for index, row in zip(encoded_at, rows_of(encoded), strict=True):
            rows[index] = row
    order = [i for i in range(n_events) if i in rows]
    return batch_of_rows([rows[i] for i in order], n_features), order


def check_label_only(events: Sequence[Any], has_feedback: bool) -> list[int]:
    """Indices of events with neither ``x`` nor ``features``: labels by id. Raise the 422
    for a model without feedback, or for such an event without an id."""
    label_only = [i for i, e in enumerate(events) if e.x is None and e.features is None]
    for i in label_only:
        if not has_feedback:
            return []  # the encoder words it: this model needs x or features
        if events[i].id is None:
            raise EncodingError(("events", i), "an event without 'x' or 'features' is a label "
                                "for a scored item: give the item's 'id'")
    return label_only


# --------------------------------------------------------------------------- timeouts
def sweep_timeouts(store: Store, name: str, feedback: Feedback, n_features: int,
                   learn: Any, now: float | None = None) -> int:
    """Learn the impressions unlabelled for ``negative_after_s`` as negatives, once.

    Claims due pending impressions (pending → timing_out), learns them through
    ``learn(batch, y, event_ids, served_scores)`` (append and apply; the event id is the
    impression's id, so a label that got in first makes the negative a duplicate), then
    marks them timed_out. Claims left by a sweep that died are taken over after
    :data:`STALE_CLAIM_S`. Returns the negatives appended.
    """
    if feedback.negative_after_s is None:
        return 0
    now = time.time() if now is None else now
    due_at = now - feedback.negative_after_s
    due = store.due_impressions(name, ("pending",), due_at, now, SWEEP_LIMIT)
    claimed = set(store.claim_impressions(name, [i for i, _ in due], ("pending",),
                                          "timing_out", now))
    stale = store.due_impressions(name, ("timing_out",), due_at - STALE_CLAIM_S, now,
                                  SWEEP_LIMIT)
    take = [(i, imp) for i, imp in due if i in claimed] + stale
    if not take:
        return 0
    decoded = [decode_impression(imp.payload) for _, imp in take]
    ids = [i for i, _ in take]
    learn(batch_of_rows([d[0] for d in decoded], n_features), np.full(len(ids), -1, np.int8),
          ids, np.array([d[1] for d in decoded]))
    store.claim_impressions(name, ids, ("timing_out",), "timed_out", now)
    return len(ids)


# --------------------------------------------------------------------------- request AUC
class RequestAUC:
    """The mean AUC within recent /score requests (group AUC), once all their items have
    labels: how well the model ranked each slate it was asked to rank, which a pooled AUC
    over many model versions understates.

    Per process and best effort, like the counters: a request counts when this process
    kept its items and saw every one of their labels (joined here, or timed out by this
    process's sweep); requests with one class only have no AUC and are skipped. The mean
    is over the last ``window`` completed requests.

    It follows a sample of the requests: a request is taken while fewer than
    ``max_items`` items wait for labels, and left alone otherwise; one whose impressions
    expired (``expire_s`` after it was shown) can get no more labels and is dropped.
    (Dropping the oldest request to take each new one instead meant that nothing ever
    completed once more requests arrive within the timeout than it can hold: at 800
    requests/s and a 15-minute timeout, every request was dropped before its timeout
    negatives came. And following every item of 10,000 requests of 100 items held ~1M
    ids, ~150 MB, and cost ~100 µs per request in lookups.)
    """

    def __init__(self, max_items: int = 100_000, window: int = 1_000,
                 expire_s: float = math.inf) -> None:
        # request -> (the time it was shown, score per item, label per item labelled)
        self._open: OrderedDict[int, tuple[float, dict[str, float], dict[str, int]]] = (
            OrderedDict())
        self._of_item: dict[str, int] = {}
        self._done: deque[float] = deque(maxlen=window)
        self._next = 0
        self._max_items = max_items
        self._expire_s = expire_s
        self._lock = threading.Lock()

    def shown(self, ids: Sequence[str], scores: Sequence[float],
              now: float | None = None) -> None:
        """A request's kept items and the scores they were served (``now``: when, in
        ``time.monotonic()`` seconds)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._open:  # (in the order shown: the expired ones come first)
                key, (at, old, _) = next(iter(self._open.items()))
                if at + self._expire_s > now:
                    break
                del self._open[key]
                for i in old:
                    self._of_item.pop(i, None)
            if len(self._of_item) + len(ids) > self._max_items:
                return
            fresh = {i: float(sc) for i, sc in zip(ids, scores, strict=True)
                     if i not in self._of_item}
            if len(fresh) < 2:
                return
            key = self._next
            self._next += 1
            self._open[key] = (now, fresh, {})
            for i in fresh:
                self._of_item[i] = key

    def labelled(self, ids: Sequence[str], labels: Sequence[int]) -> None:
        """Labels (±1) learned for kept items; completes the requests they finish."""
        with self._lock:
            for i, label in zip(ids, labels, strict=True):
                key = self._of_item.pop(i, None)
                if key is None:
                    continue
                _, scores, got = self._open[key]
                got[i] = 1 if label > 0 else 0
                if len(got) == len(scores):
                    del self._open[key]
                    auc = _auc([scores[j] for j in got], list(got.values()))
                    if not math.isnan(auc):
                        self._done.append(auc)

    @property
    def value(self) -> float:
        """Mean AUC of the last completed requests with both classes (NaN if none)."""
        with self._lock:
            return float(np.mean(self._done)) if self._done else math.nan

    @property
    def completed(self) -> int:
        with self._lock:
            return len(self._done)


def _auc(scores: list[float], labels: list[int]) -> float:
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return math.nan
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))

