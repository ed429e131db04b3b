"""Fixtures shared by the whole suite: throw-away redis-servers on free ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_servers import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the whole session (tests keep apart by key prefix)."""
    server = RedisServer(tmp_path_factory.mktemp("redis-shared"))
    server.start()
    yield server
    server.stop(kill=True)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, to stop, kill, pause and restart."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        server.resume()  # in case a test left it stopped
    server.stop(kill=True)


