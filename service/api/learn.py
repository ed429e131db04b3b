"""/learn: append labelled events to the durable log and apply them."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from ..hosting import ModelHost
from ..schemas import ErrorBody, LearnRequest, LearnResponse
from ..settings import Settings
from .deps import HostDep, PayloadTooLarge, SettingsDep, WriteAuth, json_body, read_json

router = APIRouter(tags=["learn"])


def _learn(req: LearnRequest, host: ModelHost, settings: Settings) -> LearnResponse:
    if len(req.events) > settings.max_events_per_request:
        raise PayloadTooLarge(
            f"{len(req.events)} events exceed the limit of {settings.max_events_per_request} "
            "per request.")
    started = time.perf_counter()
    model = host.get(req.model)
    batch = model.encoder.encode(req.events)
    y = np.fromiter((e.label for e in req.events), np.int8, len(req.events))
    accepted, dups, version = host.append_and_apply(model, batch, y,
                                                    [e.id for e in req.events])
    host.metrics.learn_latency.labels(model.name).observe(time.perf_counter() - started)
    return LearnResponse(accepted=accepted, duplicates=dups, version=version)


@router.post(
    "/learn", response_model=LearnResponse, dependencies=[WriteAuth],
    openapi_extra=json_body(LearnRequest),
    responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody},
               413: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody}},
)
async def learn(request: Request, host: HostDep, settings: SettingsDep) -> Any:
    """Learn from labelled events, in order.

    The whole request is validated first; a bad event rejects it (422 naming the event's
    index and field) and nothing is learned. Events are acknowledged once appended to the
    durable log and applied. An event whose ``id`` was seen before for this model is not
    learned again, so retries are safe. Store unavailable → 503, nothing learned.
    """
    req = await read_json(request, LearnRequest, settings.max_body_bytes)
    out = await run_in_threadpool(_learn, req, host, settings)
    return Response(out.model_dump_json(), media_type="application/json")
