"""No input breaks a model: refused entries, quarantine, model caps, and what 503 means.

The feature-value bound (AUCSTREAM_MAX_FEATURE_VALUE) refuses huge values before they
reach the log; these tests raise it to 1e308 so that poison reaches the applier, whose
all-or-nothing rule is the last line of defence.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from aucstream import models
from aucstream.service.hosting import ModelHost
from aucstream.service.metrics import Metrics
from aucstream.service.settings import Settings
from aucstream.service.store import SqliteStore
from tests.service.test_api import DENSE, HASHED, dense_events, hashed_events, metrics_of
from tests.service.test_recovery import _wait

OPEN = {"max_feature_value": 1e308}  # let poison through the up-front bound


def _poisoned(events, at, where):
    bad = [dict(e) for e in events]
    if "x" in bad[at]:
        bad[at]["x"] = [1e300, *bad[at]["x"][1:]] if where == "x" else bad[at]["x"]
    else:
        bad[at]["features"] = {**bad[at]["features"], "price": 1e300, "tiny": 3.0}
    return bad


@pytest.mark.parametrize("spec", [DENSE, HASHED], ids=["dense", "hashed"])
def test_a_poison_event_is_refused_whole_and_the_model_keeps_learning(app_client, spec):
    client = app_client(checkpoint_every=30, **OPEN)
    name = spec["name"]
    client.post("/models", json=spec)

    def batch(n, seed, start):
        if spec is DENSE:
            return dense_events(n, seed=seed, start=start)
        return [{**e, "id": f"e{start + i}"} for i, e in enumerate(hashed_events(n, seed))]

    good = batch(40, 1, 0)
    assert client.post("/learn", json={"model": name, "events": good}).status_code == 200
    probe = [{k: v for k, v in e.items() if k in ("x", "features")} for e in batch(15, 7, 900)]
    before = client.post("/score", json={"model": name, "items": probe}).json()
    info = client.get(f"/models/{name}").json()

    clean = batch(10, 2, 100)
    r = client.post("/learn", json={"model": name, "events": _poisoned(clean, 4, "x")})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "validation_error" and "overflow" in body["message"]
    field = ["x", 0] if spec is DENSE else ["features", "price"]
    assert body["details"][0]["loc"] == ["body", "events", 4, *field]
    # nothing learned: same events, same scores; the refused positions are consumed
    after = client.get(f"/models/{name}").json()
    assert after["events"] == info["events"]
    assert after["version"] == info["version"] + 10
    same = client.post("/score", json={"model": name, "items": probe}).json()
    assert same["scores"] == before["scores"]
    assert metrics_of(client)[("aucstream_refused_events_total", (("model", name),))] == 10

    # the corrected batch, with the same ids, is learned (the refused ids were released)
    r = client.post("/learn", json={"model": name, "events": clean})
    assert r.status_code == 200 and r.json()["accepted"] == 10 and r.json()["duplicates"] == 0
    grown = client.get(f"/models/{name}").json()["events"]
    assert sum(grown.values()) == sum(info["events"].values()) + 10

    # a replica recovering from the store (checkpoint + log) skips the same entry
    _wait(lambda: (client.get(f"/models/{name}").json()["last_checkpoint"] or {})
          .get("version", 0) >= 30)
    replica = app_client(**OPEN)
    mine = client.post("/score", json={"model": name, "items": probe}).json()
    theirs = replica.post("/score", json={"model": name, "items": probe}).json()
    assert theirs == mine and all(np.isfinite(mine["scores"]))
    assert replica.get(f"/models/{name}").json()["events"] == grown


def test_a_refused_entry_replays_as_refused_from_an_old_checkpoint(app_client):
    """No checkpoint after the refusal: recovery replays the poisoned entry from the log
    and must refuse it again, ending in the identical model."""
    client = app_client(**OPEN)
    client.post("/models", json=DENSE)
    client.post("/learn", json={"model": "m", "events": dense_events(20)})
    r = client.post("/learn", json={"model": "m",
                                    "events": _poisoned(dense_events(5, 3, 50), 2, "x")})
    assert r.status_code == 422
    client.post("/learn", json={"model": "m", "events": dense_events(20, 4, 100)})
    replica = app_client(**OPEN)
    probe = [{"x": e["x"]} for e in dense_events(9, 8, 700)]
    assert (replica.post("/score", json={"model": "m", "items": probe}).json()
            == client.post("/score", json={"model": "m", "items": probe}).json())
    assert replica.get("/models/m").json()["version"] == 45


def test_poison_without_raising_the_bound_never_reaches_the_log(client):
    client.post("/models", json=HASHED)
    r = client.post("/learn", json={"model": "h", "events": [
        {"features": {"a": 1.7976931348623157e308}, "label": 1}]})
    assert r.status_code == 422
    assert r.json()["details"][0]["loc"] == ["body", "events", 0, "features", "a"]
    assert client.get("/models/h").json()["version"] == 0
    r = client.post("/score", json={"model": "h", "items": [{"features": {"a": 1e160}}]})
    assert r.status_code == 422


def _corrupt(store, name: str) -> None:
    """A checkpoint that cannot be read, with the log trimmed behind it: unrecoverable."""
    _, _, end = store.log_bounds(name)
    assert store.save_checkpoint(name, end, b"\xc1 not a checkpoint")
    store.trim(name, end, 0)


def test_an_unrecoverable_model_is_quarantined_and_the_others_serve(app_client):
    a = app_client()
    for name in ("good", "bad"):
        a.post("/models", json={**DENSE, "name": name})
        assert a.post("/learn", json={"model": name, "events": dense_events(30)}).status_code \
            == 200
    # a model created by an older version with a parameter this version refuses
    store = a.app.state.host.store
    old = {"name": "old", "learner": "noam", "params": {"sigma": 1e-300},
           "features": {"kind": "dense", "dim": 5}, "seed": 0, "standardize": False,
           "rolling_window": 100, "created_at": time.time(), "uid": uuid.uuid4().hex}
    store.create_model("old", old)
    _corrupt(store, "bad")

    b = app_client()  # a fresh process recovers from the store
    ready = b.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["quarantined"] == ["bad", "old"]
    info = b.get("/models/bad").json()
    assert info["status"] == "quarantined" and info["version"] is None
    assert "LogGap" in info["quarantine"]["reason"] or "checkpoint" in info["quarantine"]["reason"]
    assert "'sigma' parameter of noam" in b.get("/models/old").json()["quarantine"]["reason"]
    listed = {m["name"]: m["status"] for m in b.get("/models").json()["models"]}
    assert listed == {"bad": "quarantined", "good": "serving", "old": "quarantined"}
    for path, body in (("/learn", {"model": "bad", "events": dense_events(2)}),
                       ("/score", {"model": "bad", "items": [{"x": [0.0] * 5}]})):
        r = b.post(path, json=body)
        assert r.status_code == 503 and r.json()["error"] == "quarantined", r.text
        assert "is quarantined" in r.json()["message"]
    assert b.post("/learn", json={"model": "good",
                                  "events": dense_events(5, 1, 100)}).status_code == 200
    assert metrics_of(b)[("aucstream_quarantined_models", ())] == 2
    # deleting a quarantined model works, and the name can be used again
    assert b.delete("/models/bad").status_code == 204
    assert b.post("/models", json={**DENSE, "name": "bad"}).status_code == 201
    assert b.get("/readyz").json()["quarantined"] == ["old"]


class _DeletingStore(SqliteStore):
    """A real store where another replica deletes ``victim`` just after it was listed."""

    victim: str | None = None

    def get_config(self, name):
        if name == self.victim:
            self.victim = None
            self.delete_model(name)
        return super().get_config(name)


def test_the_sync_loop_survives_a_model_deleted_mid_round(tmp_path):
    store = _DeletingStore(tmp_path / "s.sqlite3")
    host = ModelHost(store, Settings(data_dir=tmp_path), Metrics())
    host.recover()
    for name in ("a", "b", "c"):
        host.create({"name": name, "learner": "cbr_fifo", "params": {},
                     "features": {"kind": "dense", "dim": 5}, "seed": 0,
                     "standardize": False, "rolling_window": 100, "created_at": 0.0,
                     "uid": name})
    # another replica appends to "c"; "b" disappears while the round runs
    other = SqliteStore(tmp_path / "s.sqlite3")
    X = np.ones((3, 5))
    from aucstream.service.codec import encode_batch
    other.append("c", encode_batch(np.array([1, -1, 1], np.int8), X=X), [None] * 3)
    store.victim = "b"
    host.sync_once()
    assert host.names() == ["a", "c"]
    assert host.get("c").version == 3  # the round went on after "b"
    other.close()
    store.close()


class _SyncedStore(SqliteStore):
    """A real store whose append is followed, before the request goes on, by a round of
    the sync loop: the entry is applied by the loop, not by the request that wrote it."""

    host: ModelHost | None = None

    def append(self, name, payload, event_ids):
        result = super().append(name, payload, event_ids)
        if self.host is not None:
            self.host.sync_once()
        return result


def test_a_refusal_reaches_the_appending_request_when_the_sync_loop_applied_it(tmp_path):
    """The fault benchmark's race: the sync loop applied (and refused) an entry before
    the request that appended it could remember it; the request must still answer 422."""
    from aucstream.service.encoding import EncodedBatch
    from aucstream.service.hosting import EntryRefused

    store = _SyncedStore(tmp_path / "s.sqlite3")
    host = ModelHost(store, Settings(data_dir=tmp_path), Metrics())
    host.recover()
    model = host.create({"name": "m", "learner": "cbr_fifo", "params": {},
                         "features": {"kind": "dense", "dim": 2}, "seed": 0,
                         "standardize": False, "rolling_window": 100, "created_at": 0.0,
                         "uid": "m"})
    store.host = host
    y = np.array([1, -1, 1], np.int8)
    good = EncodedBatch(n=3, X=np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]))
    assert host.append_and_apply(model, good, y, ["a", "b", "c"])[:3] == (3, 0, 3)
    poison = EncodedBatch(n=3, X=np.array([[1.0, 0.0], [1e300, -1e300], [0.5, 0.5]]))
    before = model.snapshot.score(good)
    with pytest.raises(EntryRefused) as refused:
        host.append_and_apply(model, poison, y, ["d", "e", "f"])
    assert refused.value.event == 1
    assert model.version == 6 and model.learner.n_seen == (1, 2)
    np.testing.assert_array_equal(model.snapshot.score(good), before)
    # its ids were released: the corrected events are learned
    fixed = EncodedBatch(n=3, X=np.array([[1.0, 0.0], [1.0, -1.0], [0.5, 0.5]]))
    assert host.append_and_apply(model, fixed, y, ["d", "e", "f"])[:2] == (3, 0)
    # every entry was applied by the "sync loop" first, yet the counters count each
    # event of this process's requests once (the CI race of test_workers)
    counted = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(
                   generate_latest(host.metrics.registry).decode())
               for s in family.samples}
    learned = {c: counted[("aucstream_events_learned_total",
                           (("label", c), ("model", "m")))] for c in ("positive", "negative")}
    assert learned == {"positive": 4.0, "negative": 2.0}
    assert counted[("aucstream_refused_events_total", (("model", "m"),))] == 3.0
    store.close()


class _ListingStore(SqliteStore):
    """A real store where a model is created (by this replica's API) just after the sync
    loop listed the models."""

    on_list = None

    def list_models(self):
        names = super().list_models()
        if self.on_list is not None:
            hook, self.on_list = self.on_list, None
            hook()
        return names


def test_a_model_created_while_the_sync_loop_lists_is_not_dropped(tmp_path):
    store = _ListingStore(tmp_path / "s.sqlite3")
    host = ModelHost(store, Settings(data_dir=tmp_path), Metrics())
    host.recover()
    config = {"name": "new", "learner": "cbr_fifo", "params": {},
              "features": {"kind": "dense", "dim": 2}, "seed": 0, "standardize": False,
              "rolling_window": 100, "created_at": 0.0, "uid": "new"}
    store.on_list = lambda: host.create(config)
    host.sync_once()
    assert host.names() == ["new"]
    store.delete_model("new")  # deleted by another replica: the next round drops it
    host.sync_once()
    assert host.names() == []
    store.close()


def test_the_number_of_models_is_capped(app_client):
    client = app_client(max_models=2)
    for name in ("a", "b"):
        assert client.post("/models", json={**DENSE, "name": name}).status_code == 201
    r = client.post("/models", json={**DENSE, "name": "c"})
    assert r.status_code == 409 and r.json()["error"] == "too_many_models"
    assert "AUCSTREAM_MAX_MODELS" in r.json()["message"]
    client.delete("/models/a")
    assert client.post("/models", json={**DENSE, "name": "c"}).status_code == 201


@pytest.mark.parametrize("settings_for", ["redis"], indirect=True)
def test_a_stalled_store_answers_504_outcome_unknown_not_503(app_client, settings_for,
                                                             own_redis):
    """The issue's case: Redis stalled (SIGSTOP) past the timeouts. The append was sent;
    503 would claim nothing was learned. The answer says the outcome is unknown."""
    client = app_client(redis_url=f"{own_redis.url}?socket_timeout=0.5",
                        append_resolve_timeout=1.0)
    client.post("/models", json=DENSE)
    assert client.post("/learn", json={"model": "m", "events": dense_events(10)}).status_code \
        == 200
    own_redis.pause()
    try:
        r = client.post("/learn", json={"model": "m",
                                        "events": dense_events(100, 1, 10, ids=False)})
    finally:
        own_redis.resume()
    assert r.status_code == 504, r.text
    assert r.json()["error"] == "outcome_unknown" and "may or may not" in r.json()["message"]
    # whatever happened, it happened at most once
    _wait(lambda: client.get("/models/m").json()["version"] in (10, 110))


@pytest.mark.parametrize("settings_for", ["redis"], indirect=True)
def test_a_short_stall_is_found_out_and_learned_once(app_client, settings_for, own_redis):
    client = app_client(redis_url=f"{own_redis.url}?socket_timeout=0.5",
                        append_resolve_timeout=10.0)
    client.post("/models", json=DENSE)
    own_redis.pause()
    threading.Timer(2.0, own_redis.resume).start()
    r = client.post("/learn", json={"model": "m", "events": dense_events(100, ids=False)})
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 100
    time.sleep(0.3)
    assert client.get("/models/m").json()["version"] == 100


# ----------------------------------------------------------------- every learner, fuzzed
EXTREME = st.sampled_from([1e100, -1e100, 1e160, -1e200, 1.7976931348623157e308,
                           -1.7976931348623157e308, 5e-324, -1e-310,
                           2.2250738585072014e-308, 1.3e154, 0.0, -0.0])
VALUES = st.one_of(EXTREME, st.floats(-1e6, 1e6, allow_nan=False),
                   st.floats(allow_nan=False, allow_infinity=False))


def _models_of_every_learner():
    out = []
    for learner in models.available():
        sparse = models.base._lookup(learner).accepts_sparse
        features = {"kind": "hashed", "bits": 10} if sparse else {"kind": "dense", "dim": 3}
        for path in ("fast", "regular"):
            out.append({"name": f"{learner}.{path}", "learner": learner, "features": features})
    return out


def _event(values, label, sparse, regular):
    if not sparse:
        return {"x": values, "label": label}
    # an escaped name (\\u0066 is "f") sends the body down the regular path
    name = "\\u0066" if regular else "f"
    return {"features": {f"{name}{k}": v for k, v in enumerate(values)}, "label": label}


def _post(client, path, model, key, items, regular):
    body = json.dumps({"model": model, key: items}).replace("\\\\u0066", "\\u0066")
    return client.post(path, content=body.encode(), headers={"content-type": "application/json"})


# On the embedded store only: what is tested here happens before the store (parsing,
# the value bound) and after it (learners, scores, recovery), and a log entry's bytes are
# the same on either store; the Redis store's side of poison (refused entries, replay) is
# tested above on both stores. Both stores took ~105 s of the suite, Redis's two ~60.
@pytest.mark.parametrize("settings_for", ["sqlite"], indirect=True)
@pytest.mark.parametrize("bound", ["default", "open"])
def test_extreme_floats_through_both_parse_paths_and_every_learner(app_client, settings_for,
                                                                   bound):
    """Extreme floats (±1e100…±1.8e308, subnormals, values whose products overflow) through
    both parse paths to every learner: each request is learned or refused with a 4xx,
    never a 5xx, both paths give the same answer, scores stay finite, and a replica
    recovering from the store (as after a kill -9) holds the same models.

    With the default value bound, out-of-bound values are refused up front, and every
    model learns normal events afterwards. With the bound opened, poison reaches the
    learners, whose all-or-nothing rule refuses what would overflow; a model pushed to
    the edge of its range by 1e300 inputs may refuse later events too (that is what the
    bound is for), but a refusal never changes it."""
    settings = {} if bound == "default" else OPEN
    client = app_client(**settings)
    specs = _models_of_every_learner()
    for spec in specs:
        assert client.post("/models", json=spec).status_code == 201, spec

    @hyp_settings(max_examples=20, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(rows=st.lists(st.lists(VALUES, min_size=3, max_size=3), min_size=1, max_size=4),
           labels=st.lists(st.booleans(), min_size=4, max_size=4))
    def run(rows, labels):
        for spec in specs[::2]:
            sparse = spec["features"]["kind"] == "hashed"
            twin = spec["name"].replace(".fast", ".regular")
            answers = []
            for model, regular in ((spec["name"], False), (twin, True)):
                events = [_event(r, int(lab), sparse, regular)
                          for r, lab in zip(rows, labels, strict=False)]
                r = _post(client, "/learn", model, "events", events, regular)
                assert r.status_code in (200, 422), (model, r.text)
                answers.append((r.status_code, r.json().get("details")))
                items = [{k: v for k, v in e.items() if k != "label"} for e in events]
                s = _post(client, "/score", model, "items", items, regular)
                assert s.status_code in (200, 422), (model, s.text)
                if s.status_code == 200:
                    assert all(math.isfinite(v) for v in s.json()["scores"]), model
            assert answers[0] == answers[1], (spec["name"], answers)

    run()
    normal = [{"x": [0.1 * k, -0.2, 0.3], "label": k % 2} for k in range(20)]
    probe = {"dense": [{"x": [0.5, 0.1, -0.3]}, {"x": [-1.0, 2.0, 0.0]}],
             "hashed": [{"features": {"f0": 0.5, "f1": 1.0}}, {"features": {"f2": -2.0}}]}
    replica = app_client(**settings)
    for spec in specs:
        kind = spec["features"]["kind"]
        events = normal if kind == "dense" else [
            {"features": {f"f{k % 3}": e["x"][0], "g": "a"}, "label": e["label"]}
            for k, e in enumerate(normal)]
        before = client.post("/score", json={"model": spec["name"], "items": probe[kind]})
        r = client.post("/learn", json={"model": spec["name"], "events": events})
        if bound == "default":
            assert r.status_code == 200, (spec["name"], r.text)
        else:
            assert r.status_code in (200, 422), (spec["name"], r.text)
        mine = client.post("/score", json={"model": spec["name"], "items": probe[kind]}).json()
        if r.status_code == 422:
            assert mine["scores"] == before.json()["scores"], spec["name"]
        assert all(math.isfinite(v) for v in mine["scores"]), spec["name"]
        # the replica's scoring snapshot catches up shortly after its version does
        _wait(lambda s=spec, v=mine["version"], k=kind: replica.post(
            "/score", json={"model": s["name"], "items": probe[k]}).json()["version"] == v)
        theirs = replica.post("/score", json={"model": spec["name"], "items": probe[kind]})
        assert theirs.json() == mine, spec["name"]
    for spec in specs[::2]:  # the twins learned the same events through the two paths
        twin = spec["name"].replace(".fast", ".regular")
        kind = spec["features"]["kind"]
        a = client.post("/score", json={"model": spec["name"], "items": probe[kind]}).json()
        b = client.post("/score", json={"model": twin, "items": probe[kind]}).json()
        assert a["scores"] == b["scores"], spec["name"]
