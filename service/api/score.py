"""/score: rank candidates with a model's published snapshot."""

from __future__ import annotations

import re
import time
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from .. import fastjson
from ..hosting import ModelHost
from ..schemas import MODEL_NAME, ErrorBody, ScoreRequest, ScoreResponse
from ..settings import Settings
from .deps import (
    HostDep,
    PayloadTooLarge,
    ReadAuth,
    SettingsDep,
    json_body,
    read_body,
    validate_json,
)

router = APIRouter(tags=["score"])

_NAME = re.compile(MODEL_NAME)


def _score(body: bytes, host: ModelHost, settings: Settings) -> ScoreResponse:
    started = time.perf_counter()
    name = fastjson.model_name(body)
    fast = None
    if name is not None and _NAME.match(name):
        model = host.find(name)  # unknown: the regular path validates first, then 404s
        fast = model and fastjson.parse_score(body, model.config["features"],
                                    settings.max_events_per_request)
    if fast is not None:
        batch, top_k = fast.batch, fast.top_k
    else:  # the regular path: full validation, every error worded
        req = validate_json(body, ScoreRequest)
        if len(req.items) > settings.max_events_per_request:
            raise PayloadTooLarge(
                f"{len(req.items)} items exceed the limit of "
                f"{settings.max_events_per_request} per request.")
        model = host.get(req.model)
        batch = model.encoder.encode(req.items, field="items")
        top_k = req.top_k
    snap = model.snapshot  # immutable: never a half-applied batch
    scores = snap.score(batch)
    order = np.argsort(-scores, kind="stable")
    if top_k is not None:
        order = order[:top_k]
    host.metrics.score_latency.labels(model.name).observe(time.perf_counter() - started)
    return ScoreResponse(scores=scores.tolist(), ranking=order.tolist(), version=snap.version)


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
    if host.has(fastjson.model_name(body)):
        # A loaded model scores in about a millisecond from memory: handing that to a
        # worker thread cost more than the work (thread wake-ups dominated profiles).
        out = _score(body, host, settings)
    else:  # may have to load a model from the store first
        out = await run_in_threadpool(_score, body, host, settings)
    return Response(out.model_dump_json(), media_type="application/json")
