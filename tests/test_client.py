"""aucstream.Client and AsyncClient against ``aucstream serve``: every call, the typed
errors with the service's body, and retries that follow the contract (a 503 is retried;
an append whose outcome is unknown only when every event has an id)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from aucstream import AsyncClient, Client
from aucstream.client import Conflict, NotFound, Unavailable, ValidationFailed
from tests.redis_servers import free_port

ROOT = Path(__file__).resolve().parents[1]
DENSE = {"kind": "dense", "dim": 3}


def _serve(tmp: Path, **env: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    full = {**os.environ, "AUCSTREAM_DATA_DIR": str(tmp / "data"),
            "AUCSTREAM_LOG_LEVEL": "warning", **env}
    if "AUCSTREAM_REDIS_URL" not in env:
        full.pop("AUCSTREAM_REDIS_URL", None)
    log = (tmp / "server.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "aucstream.service.cli", "serve", "--port",
                             str(port)], env=full, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240  # a cold numba cache: compiling
    while True:
        assert proc.poll() is None, (tmp / "server.log").read_text()[-2000:]
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, url = _serve(tmp_path_factory.mktemp("client"))
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def _events(n: int, start: int = 0, ids: bool = True) -> list[dict]:
    out = []
    for k in range(start, start + n):
        e = {"x": [0.1 * (k % 7), -0.2 * (k % 3), 1.0], "label": int(k % 3 == 0)}
        if ids:
            e["id"] = f"e{k}"
        out.append(e)
    return out


def test_every_call_of_the_blocking_client(server):
    with Client(server) as c:
        info = c.create_model("a", "cbr_fifo", features=DENSE, params={"C": 0.05})
        assert info["name"] == "a" and info["params"]["C"] == 0.05
        assert [m["name"] for m in c.list_models()] == ["a"]
        assert "cbr_fifo" in c.learners()
        r = c.learn("a", _events(30))
        assert r == {"accepted": 30, "duplicates": 0, "version": 30}
        assert c.learn("a", _events(30))["duplicates"] == 30  # ids: never twice
        s = c.score("a", [{"x": [0.6, 0.0, 1.0]}, {"x": [0.0, -0.4, 1.0]}], top_k=1)
        assert len(s["scores"]) == 2 and len(s["ranking"]) == 1
        assert c.get_model("a")["version"] == 30
        auto = c.create_model("b", candidates=[{"learner": "cbr_diag_fifo",
                                                "params": {"C": 0.01}}], features=DENSE)
        assert auto["learner"] == "auto" and auto["serving_candidate"] == 0
        assert c.pin("b", 0)["pinned_candidate"] == 0
        assert c.pin("b", None)["pinned_candidate"] is None
        blob = c.export_model("a")
        assert isinstance(blob, bytes)
        copy = c.import_model(blob, name="a2")
        assert copy["version"] == 30 and copy["params"] == c.get_model("a")["params"]
        probe = [{"x": [0.6, 0.0, 1.0]}]
        assert c.score("a2", probe)["scores"] == c.score("a", probe)["scores"]
        with pytest.raises(ValidationFailed):
            c.import_model(blob[:50], name="a3")
        c.delete_model("a2")
        c.delete_model("a")
        c.delete_model("b")
        with pytest.raises(NotFound) as err:
            c.get_model("a")
        assert err.value.status == 404 and err.value.error == "not_found"


def test_errors_carry_the_error_body(server):
    with Client(server) as c:
        c.create_model("e", "cbr_fifo", features=DENSE)
        with pytest.raises(Conflict):
            c.create_model("e", "cbr_fifo", features=DENSE)
        with pytest.raises(ValidationFailed) as err:
            c.learn("e", [{"x": [1.0, 2.0], "label": 1}])
        assert err.value.details[0]["loc"][:3] == ["body", "events", 0]
        assert "expected 3 values" in err.value.message
        with pytest.raises(ValidationFailed) as err:
            c.create_model("f", "cbr_fifo", features=DENSE, params={"C": -1})
        assert err.value.error == "validation_error"
        c.delete_model("e")


def test_the_async_client_does_the_same(server):
    async def run() -> None:
        async with AsyncClient(server) as c:
            await c.create_model("as", "cbr_diag_fifo", features=DENSE)
            assert (await c.learn("as", _events(20)))["accepted"] == 20
            s = await c.score("as", [{"x": [0.1, 0.2, 1.0]}])
            assert len(s["scores"]) == 1
            assert (await c.get_model("as"))["version"] == 20
            assert [m["name"] for m in await c.list_models()] == ["as"]
            with pytest.raises(NotFound):
                await c.get_model("nope")
            await c.delete_model("as")

    asyncio.run(run())


def test_api_keys_are_sent(tmp_path):
    proc, url = _serve(tmp_path, AUCSTREAM_API_KEYS="s3cret")
    try:
        from aucstream.client import Unauthorized

        with pytest.raises(Unauthorized) as err:
            Client(url).list_models()
        assert err.value.status == 401
        assert Client(url, api_key="s3cret").list_models() == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_store_outage_is_retried_until_it_ends_and_nothing_is_learned_twice(
        own_redis, tmp_path):
    """Redis stopped: the service answers 503 (nothing learned); the client waits and
    retries; Redis back: the events are learned, once."""
    proc, url = _serve(tmp_path, AUCSTREAM_REDIS_URL=own_redis.url,
                       AUCSTREAM_REDIS_PREFIX="cl")
    try:
        with Client(url, retries=40, backoff=0.1) as c:
            c.create_model("r", "cbr_fifo", features=DENSE)
            c.learn("r", _events(10, ids=False))
            own_redis.stop(kill=True)
            restart = threading.Timer(2.0, own_redis.start)
            restart.start()
            started = time.monotonic()
            r = c.learn("r", _events(10, start=10, ids=False))  # 503s, then learned
            restart.join()
            assert time.monotonic() - started >= 1.5
            assert r["accepted"] == 10 and r["version"] == 20
            assert c.get_model("r")["version"] == 20
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_exhausted_retry_raises_unavailable(own_redis, tmp_path):
    proc, url = _serve(tmp_path, AUCSTREAM_REDIS_URL=own_redis.url,
                       AUCSTREAM_REDIS_PREFIX="cx")
    try:
        with Client(url, retries=2, backoff=0.05) as c:
            c.create_model("r", "cbr_fifo", features=DENSE)
            own_redis.stop(kill=True)
            with pytest.raises(Unavailable) as err:
                c.learn("r", _events(3))
            assert err.value.status == 503 and "nothing was learned" in err.value.message
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_readme_client_example_runs(server):
    """The README's client example, run as written against a live server."""
    text = (ROOT / "README.md").read_text()
    (block,) = re.findall(r"```python\n(from aucstream import Client\n.*?)```", text, re.S)
    code = block.replace("http://127.0.0.1:8000", server)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
