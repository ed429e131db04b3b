"""/learn: append labelled events to the durable log and apply them."""

from __future__ import annotations

import re
import time
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from .. import fastjson
from ..hosting import ModelHost
from ..schemas import MODEL_NAME, ErrorBody, LearnRequest, LearnResponse
from ..settings import Settings
from .deps import (
    HostDep,
    SettingsDep,
    WriteAuth,
    check_count,
    json_body,
    read_body,
    validate_json,
)

router = APIRouter(tags=["learn"])

_NAME = re.compile(MODEL_NAME)


def _learn(body: bytes, host: ModelHost, settings: Settings) -> LearnResponse:
    started = time.perf_counter()
    name = fastjson.model_name(body)
    fast = None
    if name is not None and _NAME.match(name):
        model = host.find(name)  # unknown: the regular path validates first, then 404s
        fast = model and fastjson.parse_learn(body, model.config["features"],
                                              settings.max_events_per_request,
                                              settings.max_feature_value)
    if fast is not None:
        batch, y, ids = fast.batch, fast.labels, fast.ids
    else:  # the regular path: full validation, every error worded
        req = validate_json(body, LearnRequest)
        check_count(len(req.events), "events", settings.max_events_per_request)
        model = host.get(req.model)
        batch = model.encoder.encode(req.events)
        y = np.fromiter((e.label for e in req.events), np.int8, len(req.events))
        ids = [e.id for e in req.events]
    accepted, dups, version = host.append_and_apply(model, batch, y, ids)
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
    body = await read_body(request, settings.max_body_bytes)
    out = await run_in_threadpool(_learn, body, host, settings)
    return Response(out.model_dump_json(), media_type="application/json")
