"""Slow and half-sent requests are cut off (408), and connections over the cap get 503:
``aucstream serve`` as a user runs it, spoken to over raw sockets."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.redis_servers import free_port

TIMEOUT = 1.0  # the header and body timeouts the server runs with
CAP = 4  # its connection cap


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp: Path = tmp_path_factory.mktemp("http_limits")
    port = free_port()
    env = {**os.environ, "AUCSTREAM_DATA_DIR": str(tmp / "data"),
           "AUCSTREAM_HEADER_TIMEOUT": str(TIMEOUT), "AUCSTREAM_BODY_TIMEOUT": str(TIMEOUT),
           "AUCSTREAM_MAX_CONNECTIONS": str(CAP), "AUCSTREAM_LOG_LEVEL": "warning"}
    env.pop("AUCSTREAM_REDIS_URL", None)
    log = tmp / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "aucstream.service.cli", "serve", "--port",
                                 str(port)], env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240  # a cold numba cache: compiling
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)
    yield port
    proc.terminate()
    proc.wait(timeout=30)


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def _read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while True:
        data = s.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def _status_and_body(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_headers_not_sent_in_time_get_408_and_the_connection_closed(server):
    s = _connect(server)
    s.sendall(b"POST /learn HTTP/1.1\r\nhost: x\r\ncontent-type: appl")  # and then nothing
    started = time.monotonic()
    raw = _read_all(s)
    waited = time.monotonic() - started
    status, body = _status_and_body(raw)
    assert status == 408 and body["error"] == "request_timeout", raw
    assert "headers" in body["message"]
    assert TIMEOUT * 0.8 <= waited < TIMEOUT + 5


def test_a_silent_connection_is_closed_with_408(server):
    s = _connect(server)
    status, body = _status_and_body(_read_all(s))
    assert status == 408 and body["error"] == "request_timeout"


def test_a_half_sent_body_gets_408_and_nothing_is_learned(server):
    url = f"http://127.0.0.1:{server}"
    spec = {"name": "slow", "learner": "cbr_fifo", "features": {"kind": "dense", "dim": 2}}
    assert httpx.post(f"{url}/models", json=spec).status_code == 201
    body = json.dumps({"model": "slow", "events": [{"x": [1, 2], "label": 1}]}).encode()
    s = _connect(server)
    s.sendall(b"POST /learn HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:-5])
    status, reply = _status_and_body(_read_all(s))
    assert status == 408 and "body" in reply["message"], reply
    assert httpx.get(f"{url}/models/slow").json()["version"] == 0


def test_a_request_sent_slowly_but_in_time_is_served(server):
    s = _connect(server)
    for part in (b"GET /healthz HTTP/1.1\r\n", b"host: x\r\n", b"connection: close\r\n\r\n"):
        s.sendall(part)
        time.sleep(TIMEOUT / 4)
    raw = _read_all(s)
    assert raw.startswith(b"HTTP/1.1 200"), raw


def test_keep_alive_requests_each_get_their_own_time(server):
    """The header time is per request: a keep-alive connection serving requests spread
    over more than the timeout is not cut off."""
    s = _connect(server)
    for _ in range(3):
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        raw = b""
        while not raw.endswith(b"}"):  # the head and the JSON body may come apart
            data = s.recv(65536)
            assert data, raw  # closed early
            raw += data
        assert raw.startswith(b"HTTP/1.1 200"), raw
        time.sleep(TIMEOUT * 0.6)


def test_connections_over_the_cap_get_503_in_the_error_body(server):
    url = f"http://127.0.0.1:{server}"
    held = []
    try:
        # fill the cap with connections that have sent a request's headers, not its body
        for _ in range(CAP):
            s = _connect(server)
            s.sendall(b"POST /learn HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n")
            held.append(s)
        time.sleep(0.2)
        r = httpx.get(f"{url}/healthz", timeout=5)
        assert r.status_code == 503, r.text
        assert r.json()["error"] == "over_capacity"
        assert r.headers["retry-after"] == "1"
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200


def test_readyz_waits_for_the_kernels_on_an_empty_numba_cache(tmp_path):
    """A cold start: the HTTP server answers at once, /readyz says 503 "compiling" until
    every kernel is compiled (it would pass 200 from a warm cache in about a second)."""
    port = free_port()
    env = {**os.environ, "AUCSTREAM_DATA_DIR": str(tmp_path / "data"),
           "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "AUCSTREAM_LOG_LEVEL": "warning"}
    env.pop("AUCSTREAM_REDIS_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "aucstream.service.cli", "serve", "--port",
                             str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        assert r.status_code == 503 and r.json()["kernels"] == "compiling", r.text
        assert r.json()["models_recovered"] is True
        # and on an empty cache a helper process compiles beside it (test_warmup.py:
        # not on a filled one)
        while not any("aucstream.service.warmup" in cmd for cmd in _children(proc.pid)):
            assert time.monotonic() < deadline + 60, "no helper compiler started"
            time.sleep(0.1)
    finally:
        proc.kill()  # the helper compiler notices its parent is gone and stops
        proc.wait(timeout=30)


def _children(pid: int) -> list[str]:
    """Command lines of the processes whose parent is ``pid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                out.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return out


def test_a_request_http_cannot_parse_gets_400_in_the_error_body(server):
    s = _connect(server)
    s.sendall(b"GARBAGE /\x00 HTTP/9\r\n\r\n")
    status, body = _status_and_body(_read_all(s))
    assert status == 400 and body["error"] == "bad_request", body
