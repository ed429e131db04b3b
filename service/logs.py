"""Logging: plain or JSON lines, each carrying the request id when there is one."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import itertools
import json
import logging
import os
import sys
import time
from typing import Any

__all__ = ["AccessLog", "configure_logging", "new_request_id", "request_id_var"]

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "request_id", default=None)


class _RequestIds:
    """New request ids: 32 hex digits, a random per-process prefix and a counter (unique
    without a uuid4's read of the system's random source on every request)."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._count = itertools.count()

    def new(self) -> str:
        return f"{self._prefix}{next(self._count):016x}"


_request_ids = _RequestIds()
new_request_id = _request_ids.new


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = request_id_var.get()
        return True


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in ("request_id", "status"):
            value = getattr(record, key, None)
            if value is not None:
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


class _StderrHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is at each record, not as it was when configured:
    a test runner swaps it, and background threads (warm-up, sync) may log after."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure_logging(json_lines: bool, level: str) -> None:
    """Configure the 'aucstream' logger once (idempotent)."""
    logger = logging.getLogger("aucstream")
    logger.setLevel(level.upper())
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = _StderrHandler()
    handler.addFilter(_RequestIdFilter())
    if json_lines:
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False


class AccessLog:
    """The one-line-per-request log, handed to :mod:`logging` in batches.

    Under load a log call per request cost ~50 µs of the event loop's time (an eighth of
    a /score request): the logging machinery run once per request, out of the CPU's
    caches. Requests append a tuple instead, and a timer on the event loop logs what
    accumulated ``delay`` seconds later, as nginx's buffered access log does. Each record
    keeps the time of its request; a line appears at most ``delay`` late, and a killed
    process loses at most that much of the access log (:meth:`flush` runs at shutdown).
    """

    def __init__(self, logger: logging.Logger, delay: float = 0.02) -> None:
        self.logger = logger
        self.delay = delay
        self._pending: collections.deque[tuple] = collections.deque()  # thread-safe ends
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def add(self, method: str, path: str, status: int, ms: float, request_id: str) -> None:
        """Record a finished request (call from the event loop)."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        self._pending.append((time.time(), method, path, status, ms, request_id))
        loop = asyncio.get_running_loop()
        armed = self._timer_loop
        if armed is loop:
            return
        if armed is not None and not armed.is_closed():
            return  # another loop's timer (several apps in one process) will flush
        self._timer_loop = loop  # none yet, or its loop closed before the timer fired
        loop.call_later(self.delay, self.flush)

    def flush(self) -> None:
        """Log every pending request now."""
        self._timer_loop = None
        logger = self.logger
        while True:
            try:
                created, method, path, status, ms, rid = self._pending.popleft()
            except IndexError:
                return
            record = logger.makeRecord(logger.name, logging.INFO, __file__, 0,
                                       "%s %s %d %.1fms", (method, path, status, ms), None,
                                       extra={"request_id": rid, "status": status})
            record.created = created
            record.msecs = int((created - int(created)) * 1000) + 0.0
            logger.handle(record)
