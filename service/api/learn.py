"""/learn: append labelled events to the durable log and apply them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from ..learning import learn_body
from ..schemas import ErrorBody, LearnRequest, LearnResponse
from .deps import HostDep, SettingsDep, WriteAuth, json_body, read_body

router = APIRouter(tags=["learn"])


@router.post(
    "/learn", response_model=LearnResponse, dependencies=[WriteAuth],
    openapi_extra=json_body(LearnRequest),
    responses={202: {"model": LearnResponse,
                     "description": "durable, not yet applied (by the model's owner, and "
                                    "published to this replica if it follows the model)"},
               401: {"model": ErrorBody}, 404: {"model": ErrorBody},
               413: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody},
               504: {"model": ErrorBody}},
)
async def learn(request: Request, host: HostDep, settings: SettingsDep) -> Any:
    """Learn from labelled events, in order.

    The whole request is validated first; a bad event rejects it (422 naming the event's
    index and field) and nothing is learned. Events are acknowledged once appended to the
    durable log and applied (200). An event whose ``id`` was seen before for this model is
    not learned again, so retries are safe. A batch that would make the model's state
    non-finite is refused whole (422 naming the event; nothing learned, its ids free for a
    corrected retry). Store unavailable → 503, nothing learned. The store did not confirm
    the append in time → 504 ``outcome_unknown``: the events may or may not be learned;
    retry only with ids. Durable but not yet applied by this replica → 202.
    """
    body = await read_body(request, settings.max_body_bytes)
    out, applied = await run_in_threadpool(learn_body, body, host, settings)
    return Response(out.model_dump_json(exclude_none=True), status_code=200 if applied else 202,
                    media_type="application/json")
