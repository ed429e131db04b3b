"""Fixtures of the store suite: redis-servers on free ports, and every store to test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aucstream.service.store import SqliteStore, Store
from tests.redis_servers import fast_redis_store


@pytest.fixture(params=["sqlite", "redis", "redis-cluster"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens stores on one fresh backend: the same SQLite file, or the same key prefix."""
    opened: list[Store] = []
    prefix = f"t{uuid.uuid4().hex[:12]}"
    url = ""
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url
    elif request.param == "redis-cluster":
        url = request.getfixturevalue("redis_cluster").url

    def make() -> Store:
        s: Store
        if request.param == "sqlite":
            s = SqliteStore.in_dir(tmp_path / "data")
        else:
            s = fast_redis_store(url, prefix)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(make_store: Callable[[], Store]) -> Store:
    return make_store()
