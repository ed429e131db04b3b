"""A Python client for the aucstream HTTP API (httpx), blocking and async.

Errors come back as exceptions that carry the service's error body (``error``,
``message``, ``details``). Retries follow the API's contract:

- 503 (``unavailable``, ``quarantined``, ``over_capacity``) means nothing was learned:
  ``learn`` retries it, waiting as ``Retry-After`` says;
- 504 ``outcome_unknown`` and a connection lost mid-request may or may not have learned
  the events: ``learn`` retries them only when every event has an ``id`` (the service
  never learns an id twice), and raises otherwise;
- ``score`` changes nothing and retries all three.

>>> from aucstream import Client
>>> Client("http://127.0.0.1:8000").base_url
'http://127.0.0.1:8000'
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import httpx

__all__ = [
    "APIError",
    "AsyncClient",
    "Client",
    "Conflict",
    "NotFound",
    "OutcomeUnknown",
    "Unauthorized",
    "Unavailable",
    "ValidationFailed",
]


class APIError(Exception):
    """An error answer of the service: ``status``, and its body's ``error``, ``message``
    and ``details``."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.error = str(body.get("error", "http_error"))
        self.message = str(body.get("message", ""))
        self.details = list(body.get("details") or [])
        super().__init__(f"{status} {self.error}: {self.message}")


class ValidationFailed(APIError):
    """422: a bad request (its ``details`` name the fields); nothing was learned."""


class NotFound(APIError):
    """404: no such model (or endpoint)."""


class Conflict(APIError):
    """409: the name is taken, or the store holds as many models as it may."""


class Unauthorized(APIError):
    """401 or 403: a missing, unknown or read-only key."""


class Unavailable(APIError):
    """503: nothing was learned (store down, model quarantined, too many connections)."""


class OutcomeUnknown(APIError):
    """504: the store did not confirm the append; the events may or may not be learned."""


_EXPORT_TYPE = "application/x-aucstream-model"

_BY_STATUS: dict[int, type[APIError]] = {401: Unauthorized, 403: Unauthorized, 404: NotFound,
                                         409: Conflict, 422: ValidationFailed,
                                         503: Unavailable, 504: OutcomeUnknown}


def _error(response: httpx.Response) -> APIError:
    try:
        body = response.json()
    except ValueError:
        body = {"message": response.text[:500]}
    if not isinstance(body, dict):
        body = {"message": str(body)[:500]}
    return _BY_STATUS.get(response.status_code, APIError)(response.status_code, body)


class _Calls:
    """What both clients share: requests as (method, path, json), answers, retry rules."""

    def __init__(self, base_url: str, api_key: str | None, retries: int,
                 backoff: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.headers = {"authorization": f"Bearer {api_key}"} if api_key else {}

    def _headers(self, raw: bytes | None) -> dict[str, str]:
        if raw is None:
            return self.headers
        return {**self.headers, "content-type": _EXPORT_TYPE}

    @staticmethod
    def _answer(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise _error(response)
        if response.status_code == 204 or not response.content:
            return None
        if response.headers.get("content-type", "").startswith(_EXPORT_TYPE):
            return response.content
        return response.json()

    def _wait(self, attempt: int, exc: Exception | None, response: httpx.Response | None,
              safe: bool) -> float | None:
        """Seconds to wait before the next attempt, or None to give up (raise)."""
        if attempt >= self.retries:
            return None
        if response is not None:
            if response.status_code == 503:
                after = response.headers.get("retry-after", "")
                return float(after) if after.isdigit() else self.backoff * 2 ** attempt
            if response.status_code == 504 and safe:
                return self.backoff * 2 ** attempt
            return None
        if isinstance(exc, httpx.ConnectError):  # not sent: nothing can have been learned
            return self.backoff * 2 ** attempt
        if isinstance(exc, httpx.TransportError) and safe:
            return self.backoff * 2 ** attempt
        return None

    @staticmethod
    def create_body(name: str, learner: str | None, features: dict[str, Any],
                    params: dict[str, Any] | None, candidates: Sequence[dict] | None,
                    seed: int, standardize: bool, rolling_window: int | None) -> dict:
        body: dict[str, Any] = {"name": name, "features": features, "seed": seed,
                                "standardize": standardize}
        if learner is not None:
            body["learner"] = learner
        if params:
            body["params"] = params
        if candidates is not None:
            body["candidates"] = list(candidates)
        if rolling_window is not None:
            body["rolling_window"] = rolling_window
        return body

    @staticmethod
    def all_have_ids(events: Sequence[dict[str, Any]]) -> bool:
        return all(e.get("id") is not None for e in events)


class Client(_Calls):
    """Blocking client. ``Client(base_url, api_key=None)``; a context manager.

    ``retries`` bounds the attempts after the first (3), ``backoff`` is the first wait in
    seconds (doubling), ``timeout`` is httpx's (30 s); ``http`` lets you pass your own
    ``httpx.Client`` (its base URL is then the one used).
    """

    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 *, timeout: float = 30.0, retries: int = 3, backoff: float = 0.2,
                 http: httpx.Client | None = None) -> None:
        super().__init__(base_url, api_key, retries, backoff)
        self._own = http is None
        self.http = http if http is not None else httpx.Client(base_url=self.base_url,
                                                               timeout=timeout)

    def close(self) -> None:
        if self._own:
            self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any = None, *, safe: bool = True,
              raw: bytes | None = None) -> Any:
        attempt = 0
        while True:
            response, exc = None, None
            try:
                response = self.http.request(method, path, json=body, content=raw,
                                             headers=self._headers(raw))
            except httpx.TransportError as e:
                exc = e
            if response is not None and response.status_code < 500:
                return self._answer(response)
            pause = self._wait(attempt, exc, response, safe)
            if pause is None:
                if exc is not None:
                    raise exc
                assert response is not None
                return self._answer(response)
            time.sleep(pause)
            attempt += 1

    # ------------------------------------------------------------------ models
    def create_model(self, name: str, learner: str | None = None, *,
                     features: dict[str, Any], params: dict[str, Any] | None = None,
                     candidates: Sequence[dict[str, Any]] | None = None, seed: int = 0,
                     standardize: bool = False, rolling_window: int | None = None) -> dict:
        """Create a model; its description. ``learner=None`` with ``candidates`` (or
        ``learner="auto"``) makes an auto model."""
        return self._call("POST", "/models", self.create_body(
            name, learner, features, params, candidates, seed, standardize, rolling_window),
            safe=False)

    def get_model(self, name: str) -> dict:
        return self._call("GET", f"/models/{name}")

    def list_models(self) -> list[dict]:
        return self._call("GET", "/models")["models"]

    def delete_model(self, name: str) -> None:
        self._call("DELETE", f"/models/{name}")

    def learners(self) -> dict:
        return self._call("GET", "/learners")["learners"]

    def pin(self, name: str, candidate: int | None) -> dict:
        """Pin a candidate of an 'auto' model (None: unpin); the model's description."""
        if candidate is None:
            return self._call("DELETE", f"/models/{name}/pin", safe=False)
        return self._call("POST", f"/models/{name}/pin", {"candidate": candidate}, safe=False)

    def export_model(self, name: str) -> bytes:
        """The model as bytes (config, learned state, version), for ``import_model``."""
        return self._call("GET", f"/models/{name}/export")

    def import_model(self, data: bytes, name: str | None = None) -> dict:
        """Recreate an exported model (as ``name``, or its exported name)."""
        path = "/models/import" + ("" if name is None else f"?name={name}")
        return self._call("POST", path, raw=bytes(data), safe=False)

    # ------------------------------------------------------------------ events
    def learn(self, model: str, events: Sequence[dict[str, Any]]) -> dict:
        """Learn labelled events (``{"x": [...]}`` or ``{"features": {...}}``, ``"label"``,
        optional ``"id"``); ``{"accepted", "duplicates", "version"}``."""
        events = list(events)
        return self._call("POST", "/learn", {"model": model, "events": events},
                          safe=self.all_have_ids(events))

    def score(self, model: str, items: Sequence[dict[str, Any]],
              top_k: int | None = None) -> dict:
        """Scores of candidates, their probabilities and ranking;
        ``{"scores", "probabilities", "ranking", "version"}``."""
        body: dict[str, Any] = {"model": model, "items": list(items)}
        if top_k is not None:
            body["top_k"] = top_k
        return self._call("POST", "/score", body)


class AsyncClient(_Calls):
    """The same API for asyncio: ``async with AsyncClient(url) as c: await c.learn(...)``."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 *, timeout: float = 30.0, retries: int = 3, backoff: float = 0.2,
                 http: httpx.AsyncClient | None = None) -> None:
        super().__init__(base_url, api_key, retries, backoff)
        self._own = http is None
        self.http = http if http is not None else httpx.AsyncClient(base_url=self.base_url,
                                                                    timeout=timeout)

    async def aclose(self) -> None:
        if self._own:
            await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, body: Any = None, *,
                    safe: bool = True, raw: bytes | None = None) -> Any:
        attempt = 0
        while True:
            response, exc = None, None
            try:
                response = await self.http.request(method, path, json=body, content=raw,
                                                   headers=self._headers(raw))
            except httpx.TransportError as e:
                exc = e
            if response is not None and response.status_code < 500:
                return self._answer(response)
            pause = self._wait(attempt, exc, response, safe)
            if pause is None:
                if exc is not None:
                    raise exc
                assert response is not None
                return self._answer(response)
            await asyncio.sleep(pause)
            attempt += 1

    async def create_model(self, name: str, learner: str | None = None, *,
                           features: dict[str, Any], params: dict[str, Any] | None = None,
                           candidates: Sequence[dict[str, Any]] | None = None,
                           seed: int = 0, standardize: bool = False,
                           rolling_window: int | None = None) -> dict:
        return await self._call("POST", "/models", self.create_body(
            name, learner, features, params, candidates, seed, standardize, rolling_window),
            safe=False)

    async def get_model(self, name: str) -> dict:
        return await self._call("GET", f"/models/{name}")

    async def list_models(self) -> list[dict]:
        return (await self._call("GET", "/models"))["models"]

    async def delete_model(self, name: str) -> None:
        await self._call("DELETE", f"/models/{name}")

    async def learners(self) -> dict:
        return (await self._call("GET", "/learners"))["learners"]

    async def pin(self, name: str, candidate: int | None) -> dict:
        if candidate is None:
            return await self._call("DELETE", f"/models/{name}/pin", safe=False)
        return await self._call("POST", f"/models/{name}/pin", {"candidate": candidate},
                                safe=False)

    async def export_model(self, name: str) -> bytes:
        return await self._call("GET", f"/models/{name}/export")

    async def import_model(self, data: bytes, name: str | None = None) -> dict:
        path = "/models/import" + ("" if name is None else f"?name={name}")
        return await self._call("POST", path, raw=bytes(data), safe=False)

    async def learn(self, model: str, events: Sequence[dict[str, Any]]) -> dict:
        events = list(events)
        return await self._call("POST", "/learn", {"model": model, "events": events},
                                safe=self.all_have_ids(events))

    async def score(self, model: str, items: Sequence[dict[str, Any]],
                    top_k: int | None = None) -> dict:
        body: dict[str, Any] = {"model": model, "items": list(items)}
        if top_k is not None:
            body["top_k"] = top_k
        return await self._call("POST", "/score", body)
