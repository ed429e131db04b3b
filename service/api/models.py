"""/models: create, list, inspect and delete hosted models; /learners: what can be hosted."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool

from aucstream import models as learners

from ..hosting import ModelConfigError, ModelHost, ModelQuarantined, build_config
from ..schemas import (
    MODEL_NAME,
    CreateModelRequest,
    ErrorBody,
    ModelInfo,
    ModelList,
    PinRequest,
)
from .deps import HostDep, ReadAuth, SettingsDep, WriteAuth, read_body

router = APIRouter(tags=["models"])

ModelName = Annotated[str, Path(pattern=MODEL_NAME, description="the model's name")]

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody},
    503: {"model": ErrorBody},
}


@router.post("/models", status_code=status.HTTP_201_CREATED, response_model=ModelInfo,
             dependencies=[WriteAuth], responses={**_ERRORS, 409: {"model": ErrorBody}})
async def create_model(req: CreateModelRequest, host: HostDep, settings: SettingsDep) -> Any:
    """Create a model: a learner, its parameters and its feature encoding.

    Unknown learner, bad parameters or a bad feature spec → 422 naming the field;
    an existing name, or as many models as AUCSTREAM_MAX_MODELS → 409.
    """
    learner, params = req.learner, dict(req.params)
    if req.candidates is not None:
        if learner not in (None, "auto"):
            raise ModelConfigError(("candidates",), "candidates are for the learner 'auto' "
                                   f"(or no learner), not {learner!r}")
        if "candidates" in params:
            raise ModelConfigError(("params", "candidates"), "give the candidates once, as "
                                   "the top-level 'candidates' list")
        learner = "auto"
        params["candidates"] = json.dumps([c.model_dump() for c in req.candidates])
    elif learner is None:
        raise ModelConfigError(("learner",), "give a learner (GET /learners lists them), or "
                               "candidates for an 'auto' model")
    config = build_config(
        req.name, learner, params, req.features.model_dump(exclude_none=True), req.seed,
        req.standardize, req.rolling_window or settings.rolling_auc_window,
        None if req.feedback is None else req.feedback.model_dump(),
        None if req.ingest is None else req.ingest.model_dump(),
    )
    if req.ingest is not None and settings.redis_url is None:
        raise ModelConfigError(("ingest",), "stream ingestion reads a Redis stream: it needs "
                               "the Redis store (AUCSTREAM_REDIS_URL)")
    model = await run_in_threadpool(host.create, config)
    return model.info()


@router.get("/models", response_model=ModelList, dependencies=[ReadAuth], responses=_ERRORS)
async def list_models(host: HostDep) -> Any:
    """Every model with its state: version, events by class, rolling AUC, ...; quarantined
    models with the reason."""
    infos = [model.info() for model in host.all()] + [q.info() for q in host.quarantined()]
    return {"models": sorted(infos, key=lambda i: i["name"])}


def _info(host: ModelHost, name: str) -> dict[str, Any]:
    try:
        return host.get(name).info()
    except ModelQuarantined as exc:
        return exc.quarantined.info()


@router.get("/models/{name}", response_model=ModelInfo, dependencies=[ReadAuth],
            responses=_ERRORS)
async def get_model(name: ModelName, host: HostDep) -> Any:
    """One model: configuration, version (events applied), events seen by class, rolling
    AUC, buffer fill, last checkpoint, memory; for a quarantined model, why."""
    return await run_in_threadpool(_info, host, name)


@router.delete("/models/{name}", status_code=status.HTTP_204_NO_CONTENT,
               dependencies=[WriteAuth], responses=_ERRORS)
async def delete_model(name: ModelName, host: HostDep) -> Response:
    """Delete a model with its log and checkpoints."""
    await run_in_threadpool(host.delete, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/learners", dependencies=[ReadAuth])
async def list_learners() -> dict[str, Any]:
    """Learners that can be hosted, with their parameters (rule, default, meaning)."""
    out = {}
    for name in learners.available():
        cls = learners.base._lookup(name)
        out[name] = {
            "summary": (cls.__doc__ or "").strip().splitlines()[0],
            "sparse_input": cls.accepts_sparse,
            "max_features": cls.max_features,
            "params": {
                p: {"rule": spec.rule.describe(), "default": spec.default, "doc": spec.doc}
                for p, spec in cls.param_table.items()
            },
        }
    return {"learners": out}


_EXPORT_TYPE = "application/x-aucstream-model"


@router.get("/models/{name}/export", dependencies=[ReadAuth], response_class=Response,
            responses={**_ERRORS, 200: {"description": "the model as a binary export "
                                        "(msgpack; see POST /models/import)",
                                        "content": {_EXPORT_TYPE: {}}}})
async def export_model(name: ModelName, host: HostDep) -> Response:
    """The model as a versioned, self-describing binary: its config, learned state,
    scaler, rolling AUC and version. ``POST /models/import`` recreates it, on any store."""
    blob = await run_in_threadpool(host.export_model, name)
    return Response(blob, media_type=_EXPORT_TYPE, headers={
        "content-disposition": f'attachment; filename="{name}.aucstream"'})


@router.post("/models/import", status_code=status.HTTP_201_CREATED, response_model=ModelInfo,
             dependencies=[WriteAuth], responses={**_ERRORS, 409: {"model": ErrorBody}},
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/octet-stream": {"schema": {"type": "string",
                                                         "format": "binary"}}}}})
async def import_model(request: Request, host: HostDep, settings: SettingsDep,
                       name: Annotated[str | None, Query(pattern=MODEL_NAME)] = None) -> Any:
    """Create a model from ``GET /models/{name}/export``'s bytes (as ``?name=``, or the
    name it was exported under): the same scores and version. A corrupt, truncated or
    foreign export is a 422 saying what is wrong; nothing is created."""
    blob = await read_body(request, settings.max_body_bytes)
    model = await run_in_threadpool(host.import_model, blob, name)
    return model.info()


@router.post("/models/{name}/pin", response_model=ModelInfo, dependencies=[WriteAuth],
             responses={**_ERRORS})
async def pin_candidate(name: ModelName, req: PinRequest, host: HostDep) -> Any:
    """Pin a candidate of an 'auto' model: it serves (and ranks the prequential scores)
    whatever the windows say, from the log's current position on, on every replica; the
    choice goes on underneath. ``DELETE`` on the same path unpins."""
    model = await run_in_threadpool(host.pin, name, req.candidate)
    return model.info()


@router.delete("/models/{name}/pin", response_model=ModelInfo, dependencies=[WriteAuth],
               responses={**_ERRORS})
async def unpin_candidate(name: ModelName, host: HostDep) -> Any:
    """Let the windows choose the serving candidate again."""
    model = await run_in_threadpool(host.pin, name, None)
    return model.info()

