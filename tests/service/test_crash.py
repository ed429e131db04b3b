"""The crash test: ``aucstream serve`` on Redis, concurrent clients, ``kill -9``, restart.

Every acknowledged event must be in the recovered model, retries with the same ids must
complete the stream exactly once, and the recovered model must score exactly like a
reference learner fed the durable log in log order.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from aucstream import models
from aucstream.service.codec import decode_batch
from aucstream.service.store import open_store
from tests.redis_servers import free_port
from tests.service.test_api import dense_events

N_CLIENTS = 6
BATCHES_PER_CLIENT = 30
BATCH = 40


class Server:
    def __init__(self, redis_url: str, tmp: Path, prefix: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "AUCSTREAM_REDIS_URL": redis_url,
                    "AUCSTREAM_REDIS_PREFIX": prefix,
                    "AUCSTREAM_CHECKPOINT_EVERY": "400", "AUCSTREAM_SYNC_INTERVAL": "0.05",
                    "AUCSTREAM_LOG_RETENTION": "100000000", "AUCSTREAM_LOG_LEVEL": "warning"}
        self.log = tmp / "server.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "aucstream.service.cli", "serve", "--port", str(self.port)],
                env=self.env, stdout=out, stderr=subprocess.STDOUT)
        # as tests/service/conftest.py's wait_ready: a server that finds kernels missing
        # from the numba cache compiles them before it is ready, longer in a loaded run
        deadline = time.monotonic() + 240
        last = "no answer"
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                r = httpx.get(f"{self.url}/readyz", timeout=1)
                if r.status_code == 200:
                    return
                last = r.text
            except httpx.HTTPError as exc:
                last = repr(exc)
            time.sleep(0.1)
        self.proc.kill()  # not left running after the test (a run once found one 40 min on)
        self.proc.wait(timeout=10)
        raise AssertionError(f"server did not become ready (last /readyz: {last}):\n"
                             + self.log.read_text()[-3000:])

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def test_kill9_mid_stream_loses_no_acknowledged_event(own_redis, tmp_path):
    prefix = "crash"
    server = Server(own_redis.url, tmp_path, prefix)
    server.start()
    try:
        r = httpx.post(f"{server.url}/models", json={
            "name": "m", "learner": "cbr_fifo", "features": {"kind": "dense", "dim": 5}})
        assert r.status_code == 201, r.text
        batches = [[dense_events(BATCH, seed=1000 * c + b, start=(c * 1000 + b) * BATCH)
                    for b in range(BATCHES_PER_CLIENT)] for c in range(N_CLIENTS)]
        acked = [0] * N_CLIENTS
        failed: list[list] = [[] for _ in range(N_CLIENTS)]
        started = threading.Barrier(N_CLIENTS + 1)

        def client(c: int) -> None:
            started.wait()
            with httpx.Client(base_url=server.url, timeout=10) as http:
                for batch in batches[c]:
                    try:
                        resp = http.post("/learn", json={"model": "m", "events": batch})
                    except httpx.HTTPError:
                        failed[c].append(batch)
                        continue
                    if resp.status_code == 200:
                        acked[c] += resp.json()["accepted"]
                    else:
                        failed[c].append(batch)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(N_CLIENTS)]
        for t in threads:
            t.start()
        started.wait()
        # kill once a checkpoint exists and a fair part of the stream is acknowledged,
        # while the clients still send
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=server.url, timeout=5) as http:
            while (sum(acked) < N_CLIENTS * BATCHES_PER_CLIENT * BATCH // 3
                   or http.get("/models/m").json()["last_checkpoint"] is None):
                assert time.monotonic() < deadline, "no checkpoint before the stream ended"
                time.sleep(0.01)
        server.kill9()
        for t in threads:
            t.join()
        acknowledged = sum(acked)
        assert 0 < acknowledged < N_CLIENTS * BATCHES_PER_CLIENT * BATCH

        server.start()
        info = httpx.get(f"{server.url}/models/m").json()
        # Every acknowledged event is in the model; batches in flight at the kill may be
        # in it too (durable before their reply was lost).
        in_flight = sum(len(f) for f in failed) * BATCH
        print(f"acknowledged {acknowledged}, recovered version {info['version']}, "
              f"unacknowledged batches {in_flight // BATCH}, checkpoint {info['last_checkpoint']}")
        assert acknowledged <= info["version"] <= acknowledged + in_flight
        assert info["last_checkpoint"] is not None  # recovery went through a checkpoint

        # Retrying every unacknowledged batch with its ids completes the stream exactly once.
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for c in range(N_CLIENTS):
                for batch in failed[c]:
                    resp = http.post("/learn", json={"model": "m", "events": batch})
                    assert resp.status_code == 200, resp.text
                    assert resp.json()["accepted"] + resp.json()["duplicates"] == BATCH
        total = N_CLIENTS * BATCHES_PER_CLIENT * BATCH
        assert httpx.get(f"{server.url}/models/m").json()["version"] == total

        # The model equals a reference fed the durable log in log order.
        store = open_store(own_redis.url, tmp_path, prefix=prefix)
        ref = models.create("cbr_fifo", n_features=5)
        for entry in store.read_log("m", 0):
            y, X = decode_batch(entry.payload)
            keep = np.ones(y.shape[0], bool)
            keep[list(entry.skip)] = False
            ref.learn(X[keep], y[keep])
        store.close()
        assert ref.n_seen[0] + ref.n_seen[1] == total
        probe = np.random.default_rng(0).normal(size=(50, 5))
        resp = httpx.post(f"{server.url}/score", json={
            "model": "m", "items": [{"x": row.tolist()} for row in probe]}).json()
        assert np.array_equal(np.array(resp["scores"]), ref.score(probe))
    finally:
        server.stop()


def test_redis_restart_under_load_loses_nothing(own_redis, tmp_path):
    """Clients retry 503s with the same ids; Redis is killed and restarted mid-stream."""
    server = Server(own_redis.url, tmp_path, "restart")
    server.start()
    try:
        r = httpx.post(f"{server.url}/models", json={
            "name": "m", "learner": "solam", "features": {"kind": "dense", "dim": 5}})
        assert r.status_code == 201, r.text
        n_clients, n_batches = 4, 25
        statuses: list[int] = []
        progress = [0] * n_clients

        def client(c: int) -> None:
            with httpx.Client(base_url=server.url, timeout=10) as http:
                for b in range(n_batches):
                    batch = dense_events(BATCH, seed=50 * c + b, start=(c * 100 + b) * BATCH)
                    while True:  # retry until acknowledged: same ids, so never twice
                        try:
                            resp = http.post("/learn", json={"model": "m", "events": batch})
                            statuses.append(resp.status_code)
                            if resp.status_code == 200:
                                break
                            assert resp.status_code == 503, resp.text
                        except httpx.HTTPError:
                            statuses.append(0)
                        time.sleep(0.02)
                    progress[c] = b + 1

        threads = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(progress) < n_clients * n_batches // 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        own_redis.stop(kill=True)  # a Redis crash; AOF with appendfsync always
        time.sleep(0.5)
        own_redis.start()
        for t in threads:
            t.join(timeout=120)
        assert statuses.count(503) > 0, "the outage was not seen"
        total = n_clients * n_batches * BATCH
        deadline = time.monotonic() + 30
        while httpx.get(f"{server.url}/models/m").json()["version"] != total:
            assert time.monotonic() < deadline, httpx.get(f"{server.url}/models/m").json()
            time.sleep(0.05)
    finally:
        server.stop()
