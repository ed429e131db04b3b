"""/score: rank candidates with a model's published snapshot."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from ..hosting import ModelHost
from ..schemas import ErrorBody, ScoreRequest, ScoreResponse
from ..settings import Settings
from .deps import HostDep, PayloadTooLarge, ReadAuth, SettingsDep, json_body, read_json

router = APIRouter(tags=["score"])


def _score(req: ScoreRequest, host: ModelHost, settings: Settings) -> ScoreResponse:
    if len(req.items) > settings.max_events_per_request:
        raise PayloadTooLarge(
            f"{len(req.items)} items exceed the limit of {settings.max_events_per_request} "
            "per request.")
    started = time.perf_counter()
    model = host.get(req.model)
    batch = model.encoder.encode(req.items, field="items")
    snap = model.snapshot  # immutable: never a half-applied batch
    scores = snap.score(batch)
    order = np.argsort(-scores, kind="stable")
    if req.top_k is not None:
        order = order[: req.top_k]
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
    req = await read_json(request, ScoreRequest, settings.max_body_bytes)
    out = await run_in_threadpool(_score, req, host, settings)
    return Response(out.model_dump_json(), media_type="application/json")
