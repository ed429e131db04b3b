"""Service fixtures: the app on the embedded SQLite store and on a throw-away Redis."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from aucstream.service.app import create_app
from aucstream.service.settings import Settings


def wait_ready(client: TestClient, timeout: float = 240.0) -> None:
    # The first app of a run on a fresh numba cache compiles every learner's kernels
    # (about a minute on two cores, longer under a loaded test run) before it is ready.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get("/readyz").status_code == 200:
            return
        time.sleep(0.02)
    raise AssertionError("service not ready in time")


@pytest.fixture(params=["sqlite", "redis"])
def settings_for(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Settings]:
    """Settings factory on one fresh backend (the same one for every call in a test)."""
    redis_url = None
    prefix = f"t{uuid.uuid4().hex[:10]}"
    if request.param == "redis":
        redis_url = request.getfixturevalue("redis_server").url

    def make(**overrides: Any) -> Settings:
        base = {"data_dir": tmp_path / "data", "redis_url": redis_url, "redis_prefix": prefix,
                "sync_interval": 0.05, "checkpoint_interval": 3600.0}
        return Settings(**{**base, **overrides})

    make.backend = request.param  # type: ignore[attr-defined]
    return make


@pytest.fixture
def app_client(settings_for: Callable[..., Settings]) -> Callable[..., TestClient]:
    """Start apps (context-managed TestClients) on the test's backend; all closed at the end."""
    opened: list[TestClient] = []

    def start(**overrides: Any) -> TestClient:
        client = TestClient(create_app(settings_for(**overrides)))
        client.__enter__()
        opened.append(client)
        wait_ready(client)
        return client

    yield start
    for client in reversed(opened):
        client.__exit__(None, None, None)


@pytest.fixture
def client(app_client: Callable[..., TestClient]) -> Iterator[TestClient]:
    yield app_client()
