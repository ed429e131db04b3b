"""The access log: one line per request, with its id, handed to logging in batches."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from fastapi.testclient import TestClient

from aucstream.service.app import create_app
from aucstream.service.logs import AccessLog, _JsonFormatter


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logger():
    log = logging.getLogger("aucstream.test-access")
    log.setLevel(logging.INFO)
    log.propagate = False
    handler = _Records()
    log.addHandler(handler)
    yield log, handler.records
    log.removeHandler(handler)


def test_lines_are_logged_after_the_delay_with_the_time_of_their_request(logger):
    log, records = logger
    access = AccessLog(log, delay=0.05)

    async def main():
        before = time.time()
        access.add("POST", "/score", 200, 1.25, "rid-1")
        access.add("GET", "/healthz", 503, 0.5, "rid-2")
        added = time.time()
        assert records == []  # not yet: batched
        await asyncio.sleep(0.2)
        return before, added

    before, added = asyncio.run(main())
    assert [r.getMessage() for r in records] == ["POST /score 200 1.2ms", "GET /healthz 503 0.5ms"]
    assert [(r.request_id, r.status) for r in records] == [("rid-1", 200), ("rid-2", 503)]
    for r in records:
        assert before <= r.created <= added  # when the request ended, not the flush
        assert r.msecs == int((r.created - int(r.created)) * 1000)
    json.loads(_JsonFormatter().format(records[0]))  # formats like any other record


def test_flush_logs_at_once_and_nothing_is_kept_below_info(logger):
    log, records = logger
    access = AccessLog(log, delay=60.0)

    async def main():
        access.add("POST", "/learn", 200, 3.0, "a")
        access.flush()
        assert [r.request_id for r in records] == ["a"]
        log.setLevel(logging.WARNING)
        access.add("POST", "/learn", 200, 3.0, "b")
        access.flush()

    asyncio.run(main())
    assert [r.request_id for r in records] == ["a"]


def test_lines_waiting_on_a_closed_loop_go_out_with_the_next_loop(logger):
    log, records = logger
    access = AccessLog(log, delay=0.05)

    async def one(rid: str, wait: float) -> None:
        access.add("GET", "/models", 200, 1.0, rid)
        await asyncio.sleep(wait)

    asyncio.run(one("first", 0))  # its loop closes before the timer fires
    assert records == []
    asyncio.run(one("second", 0.2))
    assert [r.request_id for r in records] == ["first", "second"]


def test_the_app_logs_each_request_with_its_id(settings_for):
    app = create_app(settings_for())
    handler = _Records()
    with TestClient(app) as client:
        logging.getLogger("aucstream").addHandler(handler)
        try:
            client.get("/healthz", headers={"x-request-id": "abc123"})
            generated = client.get("/models").headers["x-request-id"]
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                lines = {getattr(r, "request_id", None): r.getMessage()
                         for r in handler.records}
                if {"abc123", generated} <= lines.keys():
                    break
                time.sleep(0.01)
        finally:
            logging.getLogger("aucstream").removeHandler(handler)
    assert lines["abc123"].startswith("GET /healthz 200 ")
    assert lines[generated].startswith("GET /models 200 ")
    assert len(generated) == 32 and int(generated, 16) >= 0


def test_fastapi_telemetry_is_off_unless_asked_for():
    import inspect

    from fastapi import FastAPI

    from aucstream.service.app import _telemetry_option

    assert _telemetry_option(True) == {}
    off = _telemetry_option(False)
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters:
        assert off["telemetry"]["tracing"] is False
        assert off["telemetry"]["metrics"] is False and off["telemetry"]["logs"] is False
        FastAPI(**off)  # an argument this FastAPI accepts
    else:
        assert off == {}


def test_request_ids_are_unique_and_a_forked_child_gets_its_own_prefix():
    import os

    from aucstream.service.logs import new_request_id

    a, b = new_request_id(), new_request_id()
    assert a != b and len(a) == len(b) == 32 and a[:16] == b[:16]
    int(a, 16)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one id and leave at once
        os.write(w, new_request_id().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(r, 64).decode()
    os.close(r)
    os.close(w)
    assert len(child) == 32 and child[:16] != a[:16]
