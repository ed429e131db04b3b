"""Learning from a /learn-shaped body: parse (the numba fast path, else pydantic with
every error worded), join labels by id, append durably, apply. Used by POST /learn and
by the stream ingester, which reads the next body (:func:`parse_fast`) while the previous
one is appended and applied (:func:`learn_parsed`)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import fastjson
from .encoding import EncodedBatch, EncodingError
from .feedback import check_label_only, join_labels, merge_events
from .hosting import EntryRefused, HostedModel, ModelHost
from .parsing import check_count, validate_json
from .schemas import MODEL_NAME, Event, LearnRequest, LearnResponse
from .settings import Settings

__all__ = ["ParsedLearn", "learn_body", "learn_parsed", "parse_fast"]

_NAME = re.compile(MODEL_NAME)


@dataclass(frozen=True)
class ParsedLearn:
    """A /learn body read by the fast path: its model and encoded events, not learned yet."""

    model: HostedModel
    batch: EncodedBatch
    labels: np.ndarray  # int8 ±1 per event
    ids: list[str | None]
    started: float  # perf_counter() when reading the body began (the learn latency's start)
    starts: np.ndarray | None = None  # where each event's object begins in the body
    label_only: list[int] = field(default_factory=list)  # labels by id (empty rows)


def parse_fast(body: bytes, host: ModelHost, settings: Settings) -> ParsedLearn | None:
    """The body read by the fast path, or None when :func:`learn_body` must decide (an
    unknown model, anything unusual or invalid: the regular path words the error)."""
    return _parse_fast(body, host, settings, time.perf_counter())


def _parse_fast(body: bytes, host: ModelHost, settings: Settings,
                started: float) -> ParsedLearn | None:
    name = fastjson.model_name(body)
    if name is None or not _NAME.match(name):
        return None
    model = host.find(name)  # unknown: the regular path validates first, then 404s
    if model is None:
        return None
    fast = fastjson.parse_learn(body, model.config["features"], settings.max_events_per_request,
                                settings.max_feature_value, by_id=model.feedback is not None)
    if fast is None:
        return None
    assert fast.labels is not None
    return ParsedLearn(model, fast.batch, fast.labels, fast.ids, started, fast.starts,
                       fast.label_only)


def learn_body(body: bytes, host: ModelHost, settings: Settings) -> tuple[LearnResponse, bool]:
    """The response, and whether the events were applied (else durable only: 202)."""
    started = time.perf_counter()
    parsed = _parse_fast(body, host, settings, started)
    if parsed is not None:
        return learn_parsed(parsed, body, host)
    # the regular path: full validation, every error worded
    req = validate_json(body, LearnRequest)
    check_count(len(req.events), "events", settings.max_events_per_request)
    model = host.get(req.model)
    order: list[int] | None = None  # the event index of each row, when not the identity
    unmatched: list[str] | None = [] if model.feedback is not None else None
    served: list[tuple[float, int]] = []  # (score served, label) of labels joined by id
    joined_labels: list[tuple[str, int]] = []  # (item id, label) of those, not late
    late = 0
    label_only = check_label_only(req.events, model.feedback is not None)
    if label_only:
        events = req.events
        skip = set(label_only)
        full = [i for i in range(len(events)) if i not in skip]
        encoded = None
        if full:
            try:
                encoded = model.encoder.encode([events[i] for i in full])
            except EncodingError as exc:  # name the event by its index in the request
                loc = exc.loc
                if len(loc) > 1 and isinstance(loc[1], int):
                    loc = (loc[0], full[loc[1]], *loc[2:])
                raise EncodingError(loc, exc.msg) from None
        labels = np.fromiter((e.label for e in events), np.int8, len(events))
        batch, y, ids, order, unmatched, late, served, joined_labels = _join(
            host, model, encoded, full, labels, [e.id for e in events], label_only)
    else:
        batch = model.encoder.encode(req.events)
        y = np.fromiter((e.label for e in req.events), np.int8, len(req.events))
        ids = [e.id for e in req.events]
    return _learn(body, host, model, batch, y, ids, started, order, unmatched, late, served,
                  joined_labels)


def learn_parsed(parsed: ParsedLearn, body: bytes, host: ModelHost
                 ) -> tuple[LearnResponse, bool]:
    """Learn what :func:`parse_fast` read from ``body``: as :func:`learn_body` would."""
    model = parsed.model
    if parsed.label_only:
        skip = set(parsed.label_only)
        full = [i for i in range(parsed.batch.n) if i not in skip]
        encoded = parsed.batch.take(full) if full else None
        batch, y, ids, order, unmatched, late, served, joined_labels = _join(
            host, model, encoded, full, parsed.labels, parsed.ids, parsed.label_only)
        return _learn(body, host, model, batch, y, ids, parsed.started, order, unmatched, late,
                      served, joined_labels)
    return _learn(body, host, model, parsed.batch, parsed.labels, parsed.ids, parsed.started,
                  None, [] if model.feedback is not None else None, 0, [], [])


def _learn(body: bytes, host: ModelHost, model: HostedModel, batch: EncodedBatch,
           y: np.ndarray, ids: list[str | None], started: float, order: list[int] | None,
           unmatched: list[str] | None, late: int, served: list[tuple[float, int]],
           joined_labels: list[tuple[str, int]]) -> tuple[LearnResponse, bool]:
    """Append and apply a read body's batch; the response, and whether it was applied."""
    if batch.n == 0:  # every event was a label that joined nothing, or a late duplicate
        return LearnResponse(accepted=0, duplicates=late, version=model.version,
                             unmatched=unmatched), True
    try:
        accepted, dups, version, applied = host.append_and_apply(model, batch, y, ids)
    except EntryRefused as exc:
        index = exc.event if order is None else order[exc.event]
        event = validate_json(body, LearnRequest).events[index]
        raise EncodingError(("events", index, *_largest_value(event)), exc.message) from None
    if served:
        model.record_served(*zip(*served, strict=True))
    if joined_labels:
        model.request_auc.labelled(*zip(*joined_labels, strict=True))
    host.metrics.learn_latency.labels(model.name).observe(time.perf_counter() - started)
    return LearnResponse(accepted=accepted, duplicates=dups + late, version=version,
                         unmatched=unmatched), applied


def _join(host: ModelHost, model: HostedModel, encoded: EncodedBatch | None, full: list[int],
          labels: np.ndarray, event_ids: list[str | None], label_only: list[int],
          ) -> tuple[EncodedBatch, np.ndarray, list[str | None], list[int], list[str], int,
                     list[tuple[float, int]], list[tuple[str, int]]]:
    """A request with labels by id: the batch of its events in request order (``encoded``
    holds the full events, at indices ``full``; the labels at ``label_only`` are joined with
    their kept items), labels, event ids, the event index of each row, the unmatched ids,
    the late duplicates, the (served score, label) pairs and the (item id, label) pairs of
    the joins in time. ``labels`` and ``event_ids`` are the request's, one per event."""
    lab = labels.tolist()
    joined = join_labels(host.store, model.name,
                         [(i, str(event_ids[i]), lab[i]) for i in label_only])
    batch, order = merge_events(encoded, full, joined, len(lab), model.encoder.n_features)
    y = labels[order] if order else np.zeros(0, np.int8)
    ids = [joined.event_ids.get(i, event_ids[i]) for i in order]
    m = host.metrics
    if joined.rows:
        m.labels_joined.labels(model.name).inc(len(joined.rows))
        delays = m.label_delay.labels(model.name)  # (a labels() lookup costs an observe)
        for delay in joined.delays:
            delays.observe(delay)
    if joined.unmatched:
        m.labels_unmatched.labels(model.name).inc(len(joined.unmatched))
    return (batch, y, ids, order, joined.unmatched, joined.late_duplicates, joined.served,
            joined.labels)


def _largest_value(event: Event) -> tuple[Any, ...]:
    """Where an event's largest |value| is (``("x", j)``, ``("features", name)`` or
    ``("features", namespace, name)``): the likeliest culprit of an overflow."""
    if event.x is not None:
        j = int(np.argmax(np.abs(np.asarray(event.x, dtype=float)))) if event.x else 0
        return ("x", j)
    best: tuple[float, tuple[Any, ...]] = (-1.0, ("features",))
    for key, value in (event.features or {}).items():
        inner = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, v in inner:
            if type(v) in (int, float) and abs(v) > best[0]:
                best = (abs(v), ("features", key) if sub is None else ("features", key, sub))
    return best[1]
