"""Ingestion from Redis Streams: a model fed by its owner through a consumer group.

Real Redis (a single server, and the 3-master cluster), real apps; entries are written
with redis-py as a producer would.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from tests.service.test_api import dense_events, metrics_of


def _until(check, timeout: float = 20.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.05)


def _producer(url: str):
    if url.startswith("redis+cluster://"):
        return redis.RedisCluster.from_url("redis://" + url.partition("://")[2])
    return redis.Redis.from_url(url)


@pytest.fixture(params=["redis", "redis-cluster"])
def backend(request):
    name = "redis_server" if request.param == "redis" else "redis_cluster"
    return request.getfixturevalue(name).url


def _spec(name: str, stream: str, **ingest) -> dict:
    return {"name": name, "learner": "cbr_fifo", "features": {"kind": "dense", "dim": 5},
            "ingest": {"redis_stream": stream, **ingest}}


def test_a_stream_fed_model_learns_every_entry_once_and_dead_letters_the_bad(
        backend, tmp_path):
    from fastapi.testclient import TestClient

    from aucstream.service.app import create_app
    from aucstream.service.settings import Settings
    from tests.service.conftest import wait_ready

    prefix = f"i{uuid.uuid4().hex[:8]}"
    stream = f"{prefix}-events"
    settings = Settings(redis_url=backend, redis_prefix=prefix, data_dir=tmp_path,
                        sync_interval=0.05, checkpoint_interval=3600.0)
    r = _producer(backend)
    good = [dense_events(20, seed=k, start=20 * k) for k in range(10)]
    # entries before the model exists: the group starts at the stream's first entry.
    # First two that are no arrays but whose texts join into one valid event (a string
    # holding the joining comma): both are dead letters. They are read together with two
    # good ones, all four short enough for the fast parser (the first read's size).
    split = (b'[{"x": [1, 2, 3, 4, 5], "label": 1, "id": "]', b'["}]')
    for raw in split:
        r.xadd(stream, {"events": raw})
    short = [[{"x": [k, 2, 3, 4, 5], "label": k % 2, "id": f"short{k}"}] for k in range(2)]
    for batch in short:
        r.xadd(stream, {"events": json.dumps(batch)})
    for batch in good[:3]:
        r.xadd(stream, {"events": json.dumps(batch)})
    with TestClient(create_app(settings)) as client:
        wait_ready(client)
        resp = client.post("/models", json=_spec("s", stream))
        assert resp.status_code == 201, resp.text
        assert client.post("/models", json={**_spec("other", f"{stream}-2")}).status_code == 201
        assert resp.json()["ingest"]["redis_stream"] == stream
        bad = {
            "no events field": {"payload": "x"},
            "not JSON": {"events": "[{"},
            "a bad event": {"events": json.dumps([{"x": [1.0, 2.0], "label": 1}])},
            "another model named": {"events": '[], "model": "other", "events": []'},
            "a poison event": {"events": json.dumps([{"x": [1e300, -1e300, 1e300, 0, 0],
                                                      "label": 1, "id": "p0"}])},
        }
        for k, batch in enumerate(good[3:]):
            r.xadd(stream, {"events": json.dumps(batch)})
            if k < len(bad):
                r.xadd(stream, list(bad.values())[k])
        # a producer's retry: the same events again, in a new entry
        r.xadd(stream, {"events": json.dumps(good[4])})
        n_dead = len(bad) + len(split)
        total = 20 * len(good) + len(short)
        _until(lambda: client.get("/models/s").json()["version"] == total, what="learned")
        dead = _until(lambda: (d := r.xrange(f"{stream}:dead")) and len(d) == n_dead and d,
                      what="dead letters")
        errors = [fields[b"error"].decode() for _, fields in dead]
        assert sum("no field 'events'" in e for e in errors) == 1
        assert all(fields[b"stream"].decode() == stream for _, fields in dead)
        # every entry acknowledged; the other model untouched
        _until(lambda: r.xpending(stream, "aucstream")["pending"] == 0, what="acknowledged")
        assert client.get("/models/other").json()["version"] == 0
        m = metrics_of(client)
        assert m[("aucstream_ingest_entries_total", (("model", "s"), ("outcome", "learned")))] \
            == len(good) + len(short) + 1
        assert m[("aucstream_ingest_entries_total",
                  (("model", "s"), ("outcome", "dead_letter")))] == n_dead
        assert m[("aucstream_ingest_events_total", (("model", "s"),))] == total
        assert client.get("/models/s").json()["version"] == total  # the retry: duplicates
    r.close()


def test_entries_a_dead_owner_read_are_learned_by_the_next(backend, tmp_path):
    from fastapi.testclient import TestClient

    from aucstream.service.app import create_app
    from aucstream.service.settings import Settings
    from tests.service.conftest import wait_ready

    prefix = f"i{uuid.uuid4().hex[:8]}"
    stream = f"{prefix}-events"
    r = _producer(backend)
    r.xgroup_create(stream, "g", id="0", mkstream=True)
    for k in range(4):
        r.xadd(stream, {"events": json.dumps(dense_events(10, seed=k, start=10 * k))})
    # a previous owner read every entry and died before acknowledging any
    assert len(r.xreadgroup("g", "dead-replica", {stream: ">"})[0][1]) == 4
    settings = Settings(redis_url=backend, redis_prefix=prefix, data_dir=tmp_path,
                        sync_interval=0.05, checkpoint_interval=3600.0)
    with TestClient(create_app(settings)) as client:
        wait_ready(client)
        assert client.post("/models", json=_spec("s", stream, group="g")).status_code == 201
        _until(lambda: client.get("/models/s").json()["version"] == 40, what="claimed")
        _until(lambda: r.xpending(stream, "g")["pending"] == 0, what="acknowledged")
    r.close()


def test_ingestion_needs_the_redis_store(client):
    resp = client.post("/models", json=_spec("s", "events"))
    if client.app.state.host.store.__class__.__name__ == "RedisStore":
        assert resp.status_code == 201
    else:
        assert resp.status_code == 422
        assert "Redis" in resp.json()["message"]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8)


@given(st.lists(_JSON, max_size=4), st.integers(0, 200))
def test_one_array_accepts_every_json_array_and_no_cut_or_joined_one(value, cut):
    from aucstream.service.ingest import is_one_array

    raw = json.dumps(value).encode()
    assert is_one_array(raw) and is_one_array(b" \n" + raw + b" ")
    if 0 < cut < len(raw):  # a cut array never passes (it could join a neighbour's text)
        assert not is_one_array(raw[:cut])
    assert not is_one_array(raw + b"," + raw)  # nor two arrays
    assert not is_one_array(raw + b', "model": "other"')
