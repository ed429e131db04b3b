"""Scale-out on a real 3-master Redis Cluster: three ``aucstream serve`` processes.

Ownership is agreed and spread; followers serve the owner's scores; ``kill -9`` of an
owner under concurrent learns loses no acknowledged event and learns none twice; a
stalled owner (SIGSTOP past its lease) is fenced off and steps down when it wakes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest

from aucstream import models
from aucstream.service.codec import decode_batch
from aucstream.service.store import open_store
from tests.redis_servers import free_port
from tests.service.test_api import dense_events

LEASE_TTL = 1.0
STALENESS = 0.5


class Replica:
    def __init__(self, name: str, redis_url: str, prefix: str, tmp: Path) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "AUCSTREAM_REDIS_URL": redis_url,
                    "AUCSTREAM_REDIS_PREFIX": prefix, "AUCSTREAM_REPLICA_ID": name,
                    "AUCSTREAM_LEASE_TTL": str(LEASE_TTL),
                    "AUCSTREAM_MAX_STALENESS": str(STALENESS),
                    "AUCSTREAM_SYNC_INTERVAL": "0.1", "AUCSTREAM_CHECKPOINT_EVERY": "500",
                    "AUCSTREAM_LOG_RETENTION": "100000000", "AUCSTREAM_LOG_LEVEL": "info"}
        self.log = tmp / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "aucstream.service.cli", "serve", "--port",
                 str(self.port)], env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.tail()
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not become ready:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text()[-3000:]

    def get(self, path: str) -> dict:
        return httpx.get(f"{self.url}{path}", timeout=10).json()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def replicas(redis_cluster, tmp_path):
    prefix = f"so{uuid.uuid4().hex[:8]}"
    group = [Replica(f"r{i}", redis_cluster.url, prefix, tmp_path) for i in range(3)]
    for r in group:
        r.start()
    try:
        for r in group:
            r.wait_ready()
        yield group, redis_cluster.url, prefix
    finally:
        for r in group:
            r.stop()


def _until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.05)


def _owners(group: list[Replica], name: str) -> set:
    return {r.get(f"/models/{name}")["owner"] for r in group}


def _agreed_owner(group: list[Replica], name: str) -> str:
    def agreed():
        owners = _owners(group, name)
        return owners.pop() if len(owners) == 1 and None not in owners else None
    return _until(agreed, 20, f"the replicas agree on the owner of {name}")


def _replay(url: str, prefix: str, name: str, dim: int) -> models.Learner:
    store = open_store(url, ".", prefix=prefix)
    ref = models.create("cbr_fifo", n_features=dim)
    for entry in store.read_log(name, 0):
        y, X = decode_batch(entry.payload)
        keep = np.ones(y.shape[0], bool)
        keep[list(entry.skip)] = False
        ref.learn(X[keep], y[keep])
    store.close()
    return ref


def _spec(name: str) -> dict:
    return {"name": name, "learner": "cbr_fifo", "features": {"kind": "dense", "dim": 5}}


def test_ownership_is_agreed_and_spread_and_followers_serve_the_owners_scores(replicas):
    group, _, _ = replicas
    names = [f"m{i}" for i in range(9)]
    for name in names:
        assert httpx.post(f"{group[0].url}/models", json=_spec(name)).status_code == 201
    owners = {name: _agreed_owner(group, name) for name in names}
    assert len(set(owners.values())) >= 2, owners  # spread (rendezvous over 3 replicas)
    owned = [sum(v for (n, _), v in _samples(r).items() if n == "aucstream_owned_models")
             for r in group]
    assert sum(owned) == len(names)
    # learn on every replica; each acknowledgement is visible on its replica at once, and
    # every replica serves the owner's scores once its publication arrives
    probe = {"model": "m0", "items": [{"x": [0.1 * j, 1.0, -0.5, 0.0, 0.2]} for j in range(8)]}
    for k, r in enumerate(group * 2):
        resp = httpx.post(f"{r.url}/learn", json={
            "model": "m0", "events": dense_events(40, seed=k, start=1000 * k)}, timeout=30)
        assert resp.status_code == 200, resp.text
        assert httpx.post(f"{r.url}/score", json=probe).json()["version"] >= \
            resp.json()["version"]
    total = 40 * 6

    def same_scores():
        answers = [httpx.post(f"{r.url}/score", json=probe).json() for r in group]
        return (all(a["version"] == total for a in answers)
                and all(a["scores"] == answers[0]["scores"] for a in answers))
    _until(same_scores, 10 * STALENESS, "followers serve the owner's scores")


def _samples(replica: Replica) -> dict:
    from prometheus_client.parser import text_string_to_metric_families
    text = httpx.get(f"{replica.url}/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_kill9_of_an_owner_under_concurrent_learns_loses_nothing(replicas):
    group, url, prefix = replicas
    name = "k"
    assert httpx.post(f"{group[0].url}/models", json=_spec(name)).status_code == 201
    owner_name = _agreed_owner(group, name)
    owner = next(r for r in group if r.name == owner_name)
    survivors = [r for r in group if r is not owner]
    n_clients, per_client, size = 4, 25, 20
    batches = [[dense_events(size, seed=100 * c + b, start=(1000 * c + b) * size)
                for b in range(per_client)] for c in range(n_clients)]
    acked = [0] * n_clients
    unacked: list[list] = [[] for _ in range(n_clients)]
    progress = threading.Event()

    def client(c: int) -> None:
        for b, batch in enumerate(batches[c]):
            target = group[(c + b) % 3]  # every replica, the owner included
            try:
                resp = httpx.post(f"{target.url}/learn", json={"model": name,
                                                                "events": batch}, timeout=30)
            except httpx.HTTPError:
                unacked[c].append(batch)
                continue
            if resp.status_code == 200:
                acked[c] += resp.json()["accepted"]
                if sum(acked) >= n_clients * per_client * size // 3:
                    progress.set()
            else:
                unacked[c].append(batch)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
    for t in threads:
        t.start()
    assert progress.wait(120), "no progress before the kill"
    killed_at = time.monotonic()
    owner.signal(signal.SIGKILL)
    owner.proc.wait(timeout=10)
    new_owner = _until(lambda: (o := _owners(survivors, name)) and len(o) == 1
                       and None not in o and owner_name not in o and o.pop(),
                       30, "a survivor takes the model over")
    print(f"owner {owner_name} killed; {new_owner} owns {name} after "
          f"{time.monotonic() - killed_at:.2f} s")
    for t in threads:
        t.join()
    # retries of every unacknowledged batch, with their ids, on the survivors
    for c in range(n_clients):
        for batch in unacked[c]:
            resp = httpx.post(f"{survivors[0].url}/learn", json={"model": name,
                                                                  "events": batch}, timeout=30)
            assert resp.status_code == 200, resp.text
            assert resp.json()["accepted"] + resp.json()["duplicates"] == size
    total = n_clients * per_client * size
    for r in survivors:
        _until(lambda r=r: r.get(f"/models/{name}")["version"] == total, 10,
               f"{r.name} at the log's end")
    ref = _replay(url, prefix, name, 5)
    assert ref.n_seen[0] + ref.n_seen[1] == total  # every event exactly once
    probe = np.random.default_rng(0).normal(size=(30, 5))
    for r in survivors:
        got = httpx.post(f"{r.url}/score", json={
            "model": name, "items": [{"x": row.tolist()} for row in probe]}).json()["scores"]
        assert np.array_equal(np.array(got), ref.score(probe))


def test_a_stalled_owner_is_fenced_off_and_steps_down(replicas):
    group, url, prefix = replicas
    name = "f"
    assert httpx.post(f"{group[0].url}/models", json=_spec(name)).status_code == 201
    owner_name = _agreed_owner(group, name)
    owner = next(r for r in group if r.name == owner_name)
    others = [r for r in group if r is not owner]
    resp = httpx.post(f"{owner.url}/learn", json={"model": name,
                                                   "events": dense_events(50, seed=1)})
    assert resp.status_code == 200
    owner.signal(signal.SIGSTOP)  # a long GC pause, a partition
    try:
        new = _until(lambda: (o := _owners(others, name)) and len(o) == 1 and None not in o
                     and owner_name not in o and o.pop(), 30, "another replica takes over")
        # the new owner learns on; the stalled one still believes it owns the model
        resp = httpx.post(f"{others[0].url}/learn", json={
            "model": name, "events": dense_events(50, seed=2, start=50)}, timeout=30)
        assert resp.status_code == 200 and resp.json()["version"] == 100
    finally:
        owner.signal(signal.SIGCONT)
    # woken, it finds its lease gone (renewal, or LeaseLost on a fenced write) and steps
    # down. Placement may then hand the model back to it, if it is the preferred replica
    # (under a new lease: a later token), so what must follow is agreement, not `new`
    assert new != owner_name
    _until(lambda: "its lease was lost" in owner.log.read_text(), 20,
           "the stale owner steps down")
    _agreed_owner(group, name)
    _until(lambda: owner.get(f"/models/{name}")["version"] == 100, 10, "and follows")
    ref = _replay(url, prefix, name, 5)
    probe = np.random.default_rng(1).normal(size=(20, 5))
    for r in group:
        got = httpx.post(f"{r.url}/score", json={
            "model": name, "items": [{"x": row.tolist()} for row in probe]}).json()["scores"]
        assert np.array_equal(np.array(got), ref.score(probe))
