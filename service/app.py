"""The FastAPI application: wiring, error bodies, lifespan (recovery and the sync loop)."""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from aucstream import __version__

from .api import router
from .api.deps import BodyValidationError, PayloadTooLarge
from .api.score_lane import ScoreLane
from .encoding import EncodingError
from .hosting import (
    ApplyFailed,
    ImportRefused,
    LogGap,
    ModelConfigError,
    ModelHost,
    ModelQuarantined,
    TooManyModels,
)
from .ingest import IngestSupervisor
from .logs import AccessLog, configure_logging, new_request_id, request_id_var
from .metrics import Metrics, process_exited
from .schemas import LearnRequest, ScoreRequest
from .settings import Settings, get_settings
from .store import open_store
from .store.base import (
    AppendOutcomeUnknown,
    ModelExists,
    ModelNotFound,
    Store,
    StoreUnavailable,
)
from .warmup import warm_up_process

__all__ = ["create_app"]

log = logging.getLogger("aucstream")


def _error(status: int, code: str, message: str, details: list[dict[str, Any]] | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": code, "message": message, "details": details or []}
    return JSONResponse(body, status_code=status, headers=headers)


def _details(errors: list[dict[str, Any]], prefix: tuple = ("body",)) -> list[dict[str, Any]]:
    out = []
    for e in errors:
        loc = list(e.get("loc", ()))
        if prefix and (not loc or loc[0] != prefix[0]):
            loc = [*prefix, *loc]
        out.append({"loc": [x if isinstance(x, int | str) else str(x) for x in loc],
                    "msg": str(e.get("msg", "invalid")).removeprefix("Value error, ")})
    return out


def _install_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    def count(reason: str) -> None:
        metrics.errors.labels(reason).inc()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        count("validation")
        details = _details(list(exc.errors()), prefix=())
        first = details[0] if details else {"loc": [], "msg": "invalid"}
        where = ".".join(str(x) for x in first["loc"])
        return _error(422, "validation_error", f"{where}: {first['msg']}", details)

    @app.exception_handler(BodyValidationError)
    async def _body(_: Request, exc: BodyValidationError) -> JSONResponse:
        count("validation")
        details = _details(exc.errors)
        first = details[0]
        where = ".".join(str(x) for x in first["loc"])
        return _error(422, "validation_error", f"{where}: {first['msg']}", details)

    @app.exception_handler(EncodingError)
    async def _encoding(_: Request, exc: EncodingError) -> JSONResponse:
        count("validation")
        loc = ["body", *exc.loc]
        return _error(422, "validation_error", f"{'.'.join(map(str, loc))}: {exc.msg}",
                      [{"loc": loc, "msg": exc.msg}])

    @app.exception_handler(ModelConfigError)
    async def _config(_: Request, exc: ModelConfigError) -> JSONResponse:
        count("validation")
        loc = ["body", *exc.loc]
        return _error(422, "validation_error", exc.msg, [{"loc": loc, "msg": exc.msg}])

    @app.exception_handler(ImportRefused)
    async def _import(_: Request, exc: ImportRefused) -> JSONResponse:
        count("validation")
        msg = f"Cannot import this model: {exc}. Nothing was created."
        return _error(422, "validation_error", msg, [{"loc": ["body"], "msg": str(exc)}])

    @app.exception_handler(ModelNotFound)
    async def _not_found(_: Request, exc: ModelNotFound) -> JSONResponse:
        count("not_found")
        return _error(404, "not_found", str(exc))

    @app.exception_handler(ModelExists)
    async def _exists(_: Request, exc: ModelExists) -> JSONResponse:
        count("conflict")
        return _error(409, "conflict", str(exc))

    @app.exception_handler(PayloadTooLarge)
    async def _too_large(_: Request, exc: PayloadTooLarge) -> JSONResponse:
        count("too_large")
        return _error(413, "payload_too_large", exc.message)

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(_: Request, exc: StoreUnavailable) -> JSONResponse:
        count("store_unavailable")
        return _error(503, "unavailable",
                      f"The event store is unavailable ({exc}); nothing was learned. Retry "
                      "later: events with ids are never learned twice.",
                      headers={"Retry-After": "1"})

    @app.exception_handler(AppendOutcomeUnknown)
    async def _unknown(_: Request, exc: AppendOutcomeUnknown) -> JSONResponse:
        count("outcome_unknown")
        return _error(504, "outcome_unknown",
                      f"The event store did not confirm the append in time ({exc}). The "
                      "events may or may not be learned: retry with the same event ids "
                      "(never learned twice); events without ids could be learned twice.")

    @app.exception_handler(ModelQuarantined)
    async def _quarantined(_: Request, exc: ModelQuarantined) -> JSONResponse:
        count("quarantined")
        return _error(503, "quarantined",
                      f"{exc}. Nothing was learned. Other models are unaffected; "
                      "GET /models/{name} shows the reason. Delete the model, or fix the "
                      "cause (it is retried every 30 s and at start-up).",
                      headers={"Retry-After": "30"})

    @app.exception_handler(TooManyModels)
    async def _too_many(_: Request, exc: TooManyModels) -> JSONResponse:
        count("too_many_models")
        return _error(409, "too_many_models", str(exc))

    @app.exception_handler(LogGap)
    async def _gap(_: Request, exc: LogGap) -> JSONResponse:
        count("internal")
        log.error("log gap: %s", exc)
        return _error(500, "internal", str(exc))

    @app.exception_handler(ApplyFailed)
    async def _apply_failed(_: Request, exc: ApplyFailed) -> JSONResponse:
        count("internal")
        return _error(500, "internal", str(exc))

    # Starlette's HTTPException (FastAPI's is a subclass): routing's 404 and 405 too.
    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                405: "method_not_allowed"}.get(exc.status_code, "http_error")
        count(code)
        message = str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = "No such endpoint; the API is listed at /docs."
        return _error(exc.status_code, code, message, headers=exc.headers)

    # Anything unforeseen: the documented body, never a bare text page.
    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        count("internal")
        log.error("unhandled error on %s %s", request.method, request.url.path,
                  exc_info=exc)
        return _error(500, "internal", "Internal error; nothing was learned by this "
                      "request unless it said so. The service log has the details.")


def _warm_up_quietly() -> None:
    try:
        warm_up_process()
    except Exception:  # a warm-up failure must not stop the service
        log.exception("warm-up failed")
    _freeze_long_lived()


_frozen = threading.Event()


def _freeze_long_lived() -> None:
    """Move the objects that exist after start-up out of the collector's sight, once per
    process. They (modules, numba's compiled kernels and type caches, the app) live as
    long as the process; full collections that walked them took 80-90 ms, holding the
    GIL and stalling every request in flight."""
    if _frozen.is_set():
        return
    _frozen.set()
    gc.collect()
    gc.freeze()
    log.info("froze %d long-lived objects out of garbage collection", gc.get_freeze_count())


class RequestIdMiddleware:
    """Give every request an id (``x-request-id``, echoed or new), and log it with its
    status and duration (through ``access_log``). Plain ASGI: Starlette's
    ``BaseHTTPMiddleware`` cost more than a whole scoring request."""

    def __init__(self, app: Any, access_log: AccessLog) -> None:
        self.app = app
        self.access_log = access_log

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = None
        for key, value in scope["headers"]:
            if key == b"x-request-id":
                rid = value.decode("latin-1")
                break
        rid = rid or new_request_id()
        token = request_id_var.set(rid)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", rid.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)
            self.access_log.add(scope["method"], scope["path"], status,
                                1000 * (time.perf_counter() - started), rid)


class _SyncLoop:
    """Background thread: recover models, then follow the store and checkpoint."""

    def __init__(self, host: ModelHost, interval: float) -> None:
        self.host = host
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aucstream-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set() and not self.host.ready:
            try:
                self.host.recover()
                self.host.metrics.store_up.set(1)
            except StoreUnavailable as exc:
                self.host.metrics.store_up.set(0)
                log.warning("store unavailable during recovery, retrying: %s", exc)
                self._stop.wait(min(self.interval, 1.0))
            except Exception:  # models are quarantined one by one; this is anything else
                log.exception("recovery failed, retrying")
                self._stop.wait(1.0)
        while not self._stop.wait(self.interval):
            try:
                self.host.sync_once()
                self.host.metrics.store_up.set(1)
            except StoreUnavailable as exc:
                self.host.metrics.store_up.set(0)
                log.warning("store unavailable: %s", exc)
            except Exception:  # keep following the store whatever one model does
                log.exception("sync loop error")


class _Periodic:
    """Background thread: once the host is ready, ``step()`` every ``interval`` seconds
    (the lease keeper, the followers' fast loop); store trouble is logged, not fatal."""

    def __init__(self, host: ModelHost, name: str, interval: float, step: Any) -> None:
        self.host = host
        self.interval = interval
        self.step = step
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"aucstream-{name}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self.host.ready and not self._stop.wait(0.05):
            pass
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except StoreUnavailable as exc:
                log.debug("%s: store unavailable: %s", self._thread.name, exc)
            except Exception:
                log.exception("%s error", self._thread.name)


def _telemetry_option(enabled: bool) -> dict[str, Any]:
    """FastAPI's ``telemetry`` argument (versions that trace natively): with it on, every
    request first asks OpenTelemetry whether a provider is configured, which reads
    environment variables (~10 µs a request). Off unless asked for."""
    if enabled or "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False,
                          "operation_spans": False}}


def create_app(settings: Settings | None = None, store: Store | None = None) -> FastAPI:
    """Build the app; ``settings`` default to the environment.

    Each lifespan (server start to stop) opens the store the settings name and closes it
    at shutdown; a ``store`` passed in is used instead and left open (its owner closes it).
    """
    settings = settings or get_settings()
    configure_logging(settings.log_json, settings.log_level)
    metrics = Metrics()
    access_log = AccessLog(log)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_store = store is None
        opened = store or open_store(settings.redis_url, settings.data_dir,
                                     prefix=settings.redis_prefix,
                                     resolve_timeout=settings.append_resolve_timeout,
                                     dedup_window=settings.dedup_window)
        host = app.state.host = ModelHost(opened, settings, metrics)
        loop = _SyncLoop(host, settings.sync_interval)
        loop.start()
        keeper = _Periodic(host, "leases", settings.lease_ttl / 3, host.keep_leases)
        follower = _Periodic(host, "follow", settings.follow_interval, host.follow_once)
        keeper.start()
        follower.start()
        ingest = IngestSupervisor(host, settings, metrics)
        ingesting = _Periodic(host, "ingest", 0.25, ingest.step)
        ingesting.start()
        # Compiling (or loading from numba's cache) every learner's kernels: /readyz waits
        # for it, so that no request after ready pays for a compile. Once per process.
        threading.Thread(target=_warm_up_quietly, name="aucstream-warmup", daemon=True).start()
        log.info("aucstream started (store: %s)", "redis" if settings.redis_url else
                 f"sqlite in {settings.data_dir}")
        try:
            yield
        finally:
            access_log.flush()
            ingesting.stop()
            ingest.stop()
            follower.stop()
            loop.stop()
            try:
                host.checkpoint_all()
            except StoreUnavailable as exc:
                log.warning("final checkpoint skipped, store unavailable: %s", exc)
            keeper.stop()
            try:
                host.release_all()  # survivors take the models over at once
            except StoreUnavailable as exc:
                log.warning("leases not released, store unavailable: %s", exc)
            if own_store:
                opened.close()
            process_exited()

    docs = {} if settings.docs else {"docs_url": None, "redoc_url": None,
                                        "openapi_url": None}
    app = FastAPI(
        title="aucstream",
        version=__version__,
        **docs,
        summary="Online AUC maximisation: learn from labelled events, rank candidates.",
        lifespan=lifespan,
        **_telemetry_option(settings.otel),
    )
    app.state.settings = settings
    app.include_router(router)
    _install_error_handlers(app, metrics)

    app.add_middleware(ScoreLane)  # inside the request ids: the lane's requests get one
    app.add_middleware(RequestIdMiddleware, access_log=access_log)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary,
                                 routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (LearnRequest, ScoreRequest):
                body = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(body.pop("$defs", {}))
                components[model.__name__] = body
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
