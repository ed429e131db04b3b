"""/score: rank candidates with a model's published snapshot."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from .. import fastjson
from ..encoding import EncodedBatch, EncodingError
from ..feedback import first_positions, impressions_of
from ..hosting import HostedModel, ModelHost
from ..schemas import MODEL_NAME, ErrorBody, ScoreRequest, ScoreResponse
from ..settings import Settings
from ..store import PackedItems
from .deps import (
    HostDep,
    ReadAuth,
    SettingsDep,
    check_count,
    json_body,
    read_body,
    validate_json,
)

router = APIRouter(tags=["score"])

_NAME = re.compile(MODEL_NAME)
_LARGEST = float(np.finfo(np.float64).max)


@dataclass
class Scored:
    """A response, and for a model with feedback whose items carry ids, the items to
    keep before answering (:meth:`ModelHost.keep_impressions_together`; it gives
    ``kept``)."""

    out: ScoreResponse
    model: HostedModel | None = None
    keep: _Keep | None = None


@dataclass
class _Keep:
    """One request's impressions to keep (a :class:`~aucstream.service.hosting.KeepJob`)."""

    host: ModelHost
    model: HostedModel
    batch: EncodedBatch
    ids: list[str | None]
    out: ScoreResponse

    def __post_init__(self) -> None:
        self._first = first_positions(self.ids)  # each id's first item

    def pack(self) -> tuple[PackedItems, float, float]:
        assert self.model.feedback is not None
        items = impressions_of(self.batch, self.ids, np.asarray(self.out.scores),
                               self.out.version, self._first)
        now = time.time()
        return items, now, now + self.model.feedback.window_s

    def kept(self, n: int) -> None:
        scores = self.out.scores
        self.model.request_auc.shown(list(self._first), [scores[k] for k in self._first.values()])
        if n:
            self.host.metrics.impressions_kept.labels(self.model.name).inc(n)


def score_loaded(body: bytes, host: ModelHost, settings: Settings) -> Scored | None:
    """Score a well-formed body for a model loaded in this process, or None: then the
    regular path decides (a model to load from the store, an error to word, a body the
    fast parser leaves to pydantic). Never touches the store itself, so it runs inline;
    items to keep come back as a job for the caller to run in a thread."""
    started = time.perf_counter()
    name = fastjson.model_name(body)
    if name is None or not _NAME.match(name):
        return None
    model = host.loaded(name)
    if model is None:
        return None
    fast = fastjson.parse_score(body, model.config["features"], settings.max_events_per_request,
                                settings.max_feature_value)
    if fast is None:
        return None
    out = _rank(model, fast.batch, fast.top_k, started, host)
    if model.feedback is None:
        return Scored(out)
    if not any(i is not None for i in fast.ids):
        out.kept = 0
        return Scored(out)
    return Scored(out, model, _Keep(host, model, fast.batch, fast.ids, out))


def _rank(model: HostedModel, batch: EncodedBatch, top_k: int | None, started: float,
          host: ModelHost) -> ScoreResponse:
    snap = model.snapshot  # immutable: never a half-applied batch
    scores = snap.score(batch)
    if not np.isfinite(scores).all():
        scores = _finite(scores)
    order = (-scores).argsort(kind="stable")
    if top_k is not None:
        order = order[:top_k]
    host.metrics.score_latency.labels(model.name).observe(time.perf_counter() - started)
    return ScoreResponse(scores=scores.tolist(), probabilities=snap.probabilities(scores).tolist(),
                         ranking=order.tolist(), version=snap.version)


def _finite(scores: np.ndarray) -> np.ndarray:
    """A model's state is always finite, but a score can still leave the float range
    (weights ~1e290 times a value ~1e12): ±inf is reported as the largest float of its
    sign, which ranks the same. inf − inf inside one dot product has no sign: 422."""
    undefined = np.flatnonzero(np.isnan(scores))
    if undefined.size:
        raise EncodingError(("items", int(undefined[0])),
                            "the model cannot score this item: its score leaves the float "
                            "range with no sign (the model's weights are too large for "
                            "these values)")
    return np.clip(scores, -_LARGEST, _LARGEST)


def _score(body: bytes, host: ModelHost, settings: Settings) -> ScoreResponse:
    """The regular path: full validation, every error worded; may load the model."""
    started = time.perf_counter()
    req = validate_json(body, ScoreRequest)
    check_count(len(req.items), "items", settings.max_events_per_request)
    model = host.get(req.model)
    batch = model.encoder.encode(req.items, field="items")
    out = _rank(model, batch, req.top_k, started, host)
    if model.feedback is not None:
        out.kept = _keep(host, model, batch, [item.id for item in req.items], out)
    return out


def _keep(host: ModelHost, model: HostedModel, batch: EncodedBatch,
          ids: list[str | None], out: ScoreResponse) -> int:
    """Keep the scored items that have an id, for their labels; how many were kept."""
    if all(i is None for i in ids):
        return 0
    return host.keep_impressions(model, [_Keep(host, model, batch, ids, out)])[0]


@router.post(
    "/score", response_model=ScoreResponse, dependencies=[ReadAuth],
    openapi_extra=json_body(ScoreRequest),
    responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody},
               413: {"model": ErrorBody}, 422: {"model": ErrorBody}},
)
async def score(request: Request, host: HostDep, settings: SettingsDep) -> Any:
    """Score candidates (higher = more likely positive) and rank them, best first.

    Scoring never changes the model and works from memory when the store is down.
    """
    body = await read_body(request, settings.max_body_bytes)
    # The common case (a well-formed body for a loaded model) is answered before the
    # router, by :class:`.score_lane.ScoreLane`; what arrives here is what the fast path
    # left: it may have to load a model from the store, so it runs in a worker thread.
    out = await run_in_threadpool(_score, body, host, settings)
    return Response(out.model_dump_json(exclude_none=True), media_type="application/json")
