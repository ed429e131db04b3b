"""Fuzz every operation from the app's own OpenAPI schema over real HTTP: no 5xx, ever."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings

from aucstream.service.app import create_app
from aucstream.service.settings import Settings
from tests.redis_servers import free_port

PORT = free_port()
BASE = f"http://127.0.0.1:{PORT}"


@pytest.fixture(scope="module", autouse=True)
def live_server(tmp_path_factory):
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("fuzz"),
                              max_events_per_request=200, log_level="warning"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=PORT, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 240  # a cold numba cache: compiling
    while True:
        try:
            if httpx.get(f"{BASE}/readyz").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    # Models the fuzzer can reach by name (it also invents names, which must 404).
    httpx.post(f"{BASE}/models", json={"name": "m", "learner": "cbr_fifo",
                                       "features": {"kind": "dense", "dim": 3}})
    httpx.post(f"{BASE}/models", json={"name": "h", "learner": "solam",
                                       "features": {"kind": "hashed", "bits": 12}})
    yield
    server.should_exit = True
    thread.join(timeout=30)


schema = schemathesis.openapi.from_dict(create_app(Settings()).openapi())


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_causes_a_server_error(case):
    response = case.call(base_url=BASE)
    assert response.status_code < 500, (case.method, case.path, case.body, response.text)
