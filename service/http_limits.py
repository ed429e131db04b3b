"""HTTP limits uvicorn lacks: read timeouts for headers and bodies, and a connection cap
answered with the service's JSON error body (as are requests HTTP cannot parse: 400).

uvicorn closes idle keep-alive connections but lets a client take forever to send a
request: a slowloris client holding thousands of half-sent requests would keep them
open. :class:`LimitedHttpToolsProtocol` (uvicorn's httptools protocol, passed as
``http=``) times each request's headers (from the connection's start or the request's
first byte) and body (from the end of the headers). On expiry it answers 408 unless a
response has started, tells the application the client is gone, and closes the
connection. Over ``max_connections`` open connections, a request is answered 503
before it reaches the application: nothing is learned.

The limits come from :class:`service.settings.Settings` (``AUCSTREAM_HEADER_TIMEOUT``,
``AUCSTREAM_BODY_TIMEOUT``, ``AUCSTREAM_MAX_CONNECTIONS``), read once per worker.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .settings import Settings

__all__ = ["LimitedHttpToolsProtocol"]


@functools.cache
def _limits() -> tuple[float, float, int]:
    s = Settings()
    return s.header_timeout, s.body_timeout, s.max_connections


def _error_body(error: str, message: str) -> bytes:
    return json.dumps({"error": error, "message": message}).encode()


_BUSY = _error_body("over_capacity", "Too many open connections; retry shortly.")


async def _over_capacity(scope: Any, receive: Any, send: Any) -> None:
    """The ASGI app that answers a request over the connection cap."""
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(_BUSY)).encode()),
                            (b"retry-after", b"1"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": _BUSY})


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body timeouts and a connection cap."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timeout, self._body_timeout, self._max_connections = _limits()
        self._read_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ timers
    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(seconds, self._expired, what)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _expired(self, what: str) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        # the request in flight, if any (between requests: the last one, complete)
        cycle = self.cycle if self.cycle is not None and not self.cycle.response_complete \
            else None
        if cycle is None or not cycle.response_started:
            msg = _error_body("request_timeout", f"The request's {what} did not arrive "
                              "in time; the connection is closed.")
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                b"content-length: " + str(len(msg)).encode() + b"\r\n"
                b"connection: close\r\n\r\n" + msg)
        if cycle is not None:
            # the application sees the client gone (http.disconnect) and writes nothing
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    # ------------------------------------------------------------------ protocol
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self._header_timeout, "headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm(self._header_timeout, "headers")

    def on_headers_complete(self) -> None:
        self._arm(self._body_timeout, "body")
        if len(self.connections) > self._max_connections:
            app, self.app = self.app, _over_capacity
            try:
                super().on_headers_complete()
            finally:
                self.app = app
        else:
            super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        """A request HTTP itself cannot parse: the service's error body, not plain text."""
        body = _error_body("bad_request", f"{msg} (not a valid HTTP/1.1 request)")
        self.transport.write(
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + body)
        self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Between requests only uvicorn's keep-alive timeout runs; a pipelined request
        # already read its headers and is timed from on_message_begin.
