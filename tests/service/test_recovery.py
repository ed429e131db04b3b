"""Durability in process: restart from checkpoint + log tail, replicas, store outages."""

from __future__ import annotations

import time

import numpy as np
import pytest

from aucstream import models
from aucstream.service.codec import decode_batch
from aucstream.service.store import open_store
from tests.service.reference import Straight
from tests.service.test_api import DENSE, HASHED, dense_events, hashed_events


def _log_order_reference(settings, name: str) -> Straight:
    """The model's learner, fresh, fed exactly the store's log, in log order (duplicates
    skipped). Only for logs that were never trimmed (no checkpoint yet).
    """
    store = open_store(settings.redis_url, settings.data_dir, prefix=settings.redis_prefix)
    ref = Straight(store.get_config(name))
    for entry in store.read_log(name, 0):
        y, X = decode_batch(entry.payload)
        keep = np.ones(y.shape[0], bool)
        keep[list(entry.skip)] = False
        if isinstance(X, np.ndarray):
            ref.learn(X[keep], y[keep])
        else:
            indptr, indices, values = X
            rows = [np.arange(indptr[r], indptr[r + 1]) for r in np.flatnonzero(keep)]
            lengths = [len(r) for r in rows]
            ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            take = np.concatenate(rows) if rows else np.zeros(0, np.int64)
            ref.learn((ptr, indices[take], values[take]), y[keep])
    store.close()
    return ref


def _wait(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_restart_recovers_the_identical_model(app_client, settings_for):
    a = app_client(checkpoint_every=250)
    a.post("/models", json=DENSE)
    events = dense_events(900)
    for i in range(0, 900, 100):
        r = a.post("/learn", json={"model": "m", "events": events[i:i + 100]})
        assert r.status_code == 200
    _wait(lambda: (a.get("/models/m").json()["last_checkpoint"] or {}).get("version", 0) >= 250)
    probe = [{"x": e["x"]} for e in dense_events(40, seed=5)]
    before = a.post("/score", json={"model": "m", "items": probe}).json()
    info = a.get("/models/m").json()
    # A second process on the same store: checkpoint + log tail, nothing else.
    b = app_client()
    after = b.post("/score", json={"model": "m", "items": probe}).json()
    assert after == before
    info_b = b.get("/models/m").json()
    for key in ("version", "events", "rolling_auc", "calibration", "buffer_fill", "params"):
        assert info_b[key] == info[key], key
    # One client posted sequentially, so the log order is the order of `events`.
    X = np.array([e["x"] for e in events])
    ref = models.create("cbr_fifo", n_features=5).learn(X, [e["label"] for e in events])
    learner = b.app.state.host.get("m").learner
    for k, v in ref.get_state().items():
        got = learner.get_state()[k]
        assert (np.array_equal(got, v) if isinstance(v, np.ndarray) else got == v), k


def test_recovery_replays_a_sparse_model_with_duplicates(app_client, settings_for):
    a = app_client()
    a.post("/models", json={**HASHED, "learner": "solam"})
    events = hashed_events(400, seed=2)
    for i, e in enumerate(events):
        e["id"] = f"id{i % 330}"  # the tail repeats ids from the start: duplicates
    for i in range(0, 400, 80):
        a.post("/learn", json={"model": "h", "events": events[i:i + 80]})
    assert a.get("/models/h").json()["version"] == 330
    b = app_client()
    items = [{"features": e["features"]} for e in hashed_events(25, seed=7)]
    sa = a.post("/score", json={"model": "h", "items": items}).json()["scores"]
    sb = b.post("/score", json={"model": "h", "items": items}).json()["scores"]
    assert sa == sb
    ref = _log_order_reference(settings_for(), "h")
    enc = b.app.state.host.get("h").encoder.encode(items)
    assert np.array_equal(ref.score(enc.learner_input()), np.array(sb))


def test_a_replica_follows_the_log_of_another(app_client):
    a = app_client()
    b = app_client()
    a.post("/models", json=DENSE)
    _wait(lambda: b.get("/models/m").status_code == 200)
    for i in range(3):
        a.post("/learn", json={"model": "m", "events": dense_events(100, seed=i, start=100 * i)})
    # b learns too: both append to one log, each applies it in log order.
    b.post("/learn", json={"model": "m", "events": dense_events(50, seed=9, start=1000)})
    _wait(lambda: a.get("/models/m").json()["version"] == 350)
    _wait(lambda: b.get("/models/m").json()["version"] == 350)
    probe = [{"x": e["x"]} for e in dense_events(20, seed=11)]
    assert (a.post("/score", json={"model": "m", "items": probe}).json()
            == b.post("/score", json={"model": "m", "items": probe}).json())
    a.delete("/models/m")
    _wait(lambda: b.get("/models/m").status_code == 404)


def test_a_replica_catches_up_past_a_log_trimmed_to_its_end(app_client):
    # b is behind; a checkpoints and trims the whole log (retention 0). An empty log
    # tail is then no proof that b is at the end: b must continue from the checkpoint.
    a = app_client(checkpoint_every=100)
    a.post("/models", json=DENSE)
    b = app_client(sync_interval=3600.0)  # follows the store only when told to
    assert b.get("/models/m").json()["version"] == 0
    for i in range(3):
        a.post("/learn", json={"model": "m", "events": dense_events(100, seed=i, start=100 * i)})
    _wait(lambda: (a.get("/models/m").json()["last_checkpoint"] or {}).get("version") == 300)
    store = b.app.state.host.store
    # The trim follows the checkpoint's save, in the checkpointer's own time.
    _wait(lambda: store.log_bounds("m") == (0, 300, 300))  # trimmed to the end
    b.app.state.host.sync_once()
    assert b.get("/models/m").json()["version"] == 300
    probe = [{"x": e["x"]} for e in dense_events(20, seed=11)]
    assert (a.post("/score", json={"model": "m", "items": probe}).json()
            == b.post("/score", json={"model": "m", "items": probe}).json())


@pytest.mark.parametrize("settings_for", ["redis"], indirect=True)
def test_redis_outage_gives_503_on_learn_and_scores_go_on(app_client, settings_for, own_redis):
    client = app_client(redis_url=own_redis.url)
    client.post("/models", json=DENSE)
    r = client.post("/learn", json={"model": "m", "events": dense_events(100)})
    assert r.status_code == 200
    probe = [{"x": e["x"]} for e in dense_events(10, seed=3)]
    scores = client.post("/score", json={"model": "m", "items": probe}).json()
    own_redis.stop()
    r = client.post("/learn", json={"model": "m", "events": dense_events(10, seed=1, start=100)})
    assert r.status_code == 503
    assert r.json()["error"] == "unavailable" and "nothing was learned" in r.json()["message"]
    assert r.headers["retry-after"] == "1"
    assert client.post("/score", json={"model": "m", "items": probe}).json() == scores
    assert client.get("/readyz").status_code == 503
    own_redis.start()
    _wait(lambda: client.get("/readyz").status_code == 200)
    r = client.post("/learn", json={"model": "m", "events": dense_events(10, seed=1, start=100)})
    assert r.status_code == 200 and r.json()["version"] == 110
