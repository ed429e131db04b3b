"""Probes and Prometheus metrics (no auth: orchestrators and scrapers call them)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CONTENT_TYPE_LATEST

from ..metrics import exposition
from ..store.base import StoreUnavailable
from ..warmup import warmed
from .deps import HostDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "not ready"}})
async def readyz(host: HostDep, response: Response) -> dict[str, Any]:
    """Ready when every model is recovered (or quarantined: listed, while the others
    serve), the store answers, and every learner's kernels are compiled (on an empty
    numba cache that takes a while; the body says "kernels": "compiling" meanwhile)."""
    store_ok = True
    try:
        await run_in_threadpool(host.store.ping)
    except StoreUnavailable:
        store_ok = False
    kernels = warmed()
    ready = host.ready and store_ok and kernels
    response.status_code = 200 if ready else 503
    return {"status": "ready" if ready else "not ready", "models_recovered": host.ready,
            "store": "up" if store_ok else "down",
            "kernels": "ready" if kernels else "compiling", "models": len(host.names()),
            "quarantined": [q.name for q in host.quarantined()]}


@router.get("/metrics", response_class=Response, responses={200: {
    "description": "Prometheus text exposition format",
    "content": {"text/plain; version=0.0.4": {"schema": {"type": "string"}}}}})
async def metrics(host: HostDep) -> Response:
    """Prometheus text exposition of every aucstream metric."""
    return Response(exposition(host.metrics.registry), media_type=CONTENT_TYPE_LATEST)
