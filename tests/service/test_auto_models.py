"""'auto' models over HTTP: creation with candidates, what GET /models/{name} and
/metrics show of them, and replicas and restarts that agree bit for bit."""

from __future__ import annotations

import json

import numpy as np

from aucstream import models
from tests.helpers import stream
from tests.service.test_api import metrics_of
from tests.service.test_recovery import _wait
from tests.test_auto import CANDS, PARAMS

OWN = {k: v for k, v in PARAMS.items() if k != "candidates"}


def _events(X, y):
    return [{"x": x.tolist(), "label": int(t)} for x, t in zip(X, y, strict=True)]


def test_an_auto_model_serves_the_candidate_its_windows_choose(app_client):
    client = app_client()
    r = client.post("/models", json={"name": "a", "candidates": CANDS, "params": OWN,
                                     "features": {"kind": "dense", "dim": 8}})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["learner"] == "auto" and body["serving_candidate"] == 0
    assert [c["learner"] for c in body["candidates"]] == [c["learner"] for c in CANDS]
    assert all(c["quality"] is None for c in body["candidates"])
    X, y = stream(1234, 8, seed=0, pos_rate=0.2)
    for a in range(0, len(y), 100):
        r = client.post("/learn", json={"model": "a", "events": _events(X[a:a + 100],
                                                                       y[a:a + 100])})
        assert r.status_code == 200, r.text
    # the same events through the library: the same choice, the same scores
    ref = models.create("auto", n_features=8, seed=0, **PARAMS).learn(X, y)
    info = client.get("/models/a").json()
    assert info["serving_candidate"] == ref.served and info["promotions"] == ref.promotions
    assert ref.promotions >= 1
    assert [c["quality"] for c in info["candidates"]] == ref.quality.tolist()
    assert [c["serving"] for c in info["candidates"]] == [
        i == ref.served for i in range(len(CANDS))]
    scores = client.post("/score", json={"model": "a", "items": [
        {"x": x.tolist()} for x in X[:20]]}).json()["scores"]
    assert scores == ref.score(X[:20]).tolist()
    seen = metrics_of(client)
    assert seen[("aucstream_promotions_total", (("model", "a"),))] == ref.promotions
    assert seen[("aucstream_serving_candidate", (("model", "a"),))] == ref.served
    served = f"{ref.served}:{CANDS[ref.served]['learner']}"
    assert seen[("aucstream_candidate_quality", (("candidate", served), ("model", "a")))] \
        == ref.quality[ref.served]
    # a replica recovering from the store holds the same model
    replica = app_client()
    _wait(lambda: replica.get("/models/a").json()["version"] == len(y))
    theirs = replica.get("/models/a").json()
    for key in ("serving_candidate", "promotions", "candidates", "events"):
        assert theirs[key] == info[key], key
    assert client.delete("/models/a").status_code == 204
    assert "aucstream_candidate_quality{" not in client.get("/metrics").text


def test_auto_on_hashed_features_takes_the_built_in_set(app_client):
    client = app_client()
    r = client.post("/models", json={"name": "h", "learner": "auto",
                                     "features": {"kind": "hashed", "bits": 18}})
    assert r.status_code == 201, r.text
    learners = [c["learner"] for c in r.json()["candidates"]]
    assert learners == [c["learner"] for c in models.auto.default_candidates(1 << 18)]
    events = [{"features": {"site": f"s{k % 7}", "hour": k % 24, "price": 0.5 * (k % 5)},
               "label": int(k % 7 == 3)} for k in range(300)]
    assert client.post("/learn", json={"model": "h", "events": events}).status_code == 200
    saved = json.loads(client.get("/models/h").json()["params"]["candidates"])
    assert [c["learner"] for c in saved] == learners  # stored resolved


def test_a_dense_only_learner_takes_hashed_features_densified(app_client):
    """cbr_fifo (and 'auto' with its small-dimension set) on 2^6 hashed features: rows
    are densified, so the model learns instead of failing every entry."""
    client = app_client()
    for name, learner in (("f", "cbr_fifo"), ("g", "auto")):
        r = client.post("/models", json={"name": name, "learner": learner,
                                         "features": {"kind": "hashed", "bits": 6}})
        assert r.status_code == 201
        events = [{"features": {"a": 1.0, "b": "x" if k % 2 else "y"}, "label": k % 2}
                  for k in range(20)]
        r = client.post("/learn", json={"model": name, "events": events})
        assert r.status_code == 200, r.text
        s = client.post("/score", json={"model": name, "items": [
            {"features": {"b": "x"}}, {"features": {"b": "y"}}]}).json()["scores"]
        assert s[0] > s[1], name


def test_bad_candidate_requests_are_422_naming_the_field(client):
    dense = {"kind": "dense", "dim": 4}
    cases = [
        ({"learner": "cbr_fifo", "candidates": CANDS}, ["body", "candidates"]),
        ({"candidates": [{"learner": "nope"}]}, ["body", "params"]),
        ({"candidates": []}, ["body", "candidates"]),
        ({"candidates": [{"learner": "solam", "bogus": 1}]},
         ["body", "candidates", 0, "bogus"]),
        ({}, ["body", "learner"]),
        ({"learner": "auto", "candidates": CANDS,
          "params": {"candidates": json.dumps(CANDS)}}, ["body", "params", "candidates"]),
    ]
    for extra, loc in cases:
        r = client.post("/models", json={"name": "bad", "features": dense, **extra})
        assert r.status_code == 422, (extra, r.text)
        assert r.json()["details"][0]["loc"] == loc, (extra, r.json())
    assert client.get("/models").json()["models"] == []
    r = client.post("/models", json={"name": "bad", "features": dense,
                                     "candidates": [{"learner": "nope"}]})
    assert "unknown learner 'nope'" in r.json()["message"]


def test_an_auto_model_restarts_bit_identical(app_client):
    client = app_client(checkpoint_every=300)
    spec = {"name": "r", "candidates": CANDS, "params": OWN,
            "features": {"kind": "dense", "dim": 8}}
    assert client.post("/models", json=spec).status_code == 201
    X, y = stream(1000, 8, seed=5, pos_rate=0.2)
    for a in range(0, 1000, 125):
        client.post("/learn", json={"model": "r", "events": _events(X[a:a + 125],
                                                                   y[a:a + 125])})
    probe = {"model": "r", "items": [{"x": x.tolist()} for x in X[:25]]}
    before = client.post("/score", json=probe).json()
    info = client.get("/models/r").json()
    restarted = app_client(checkpoint_every=300)  # recovers checkpoint + log tail
    _wait(lambda: restarted.get("/models/r").json()["version"] == 1000)
    assert restarted.post("/score", json=probe).json() == before
    again = restarted.get("/models/r").json()
    assert again["candidates"] == info["candidates"]
    assert again["serving_candidate"] == info["serving_candidate"]
    np.testing.assert_equal(again["events"], info["events"])


def test_a_pin_takes_effect_at_the_same_position_on_every_replica(app_client):
    a = app_client(checkpoint_every=200)
    spec = {"name": "p", "candidates": CANDS, "params": OWN,
            "features": {"kind": "dense", "dim": 8}}
    assert a.post("/models", json=spec).status_code == 201
    b = app_client(checkpoint_every=200)  # a replica
    X, y = stream(1200, 8, seed=6, pos_rate=0.2)
    a.post("/learn", json={"model": "p", "events": _events(X[:400], y[:400])})
    r = a.post("/models/p/pin", json={"candidate": 2})
    assert r.status_code == 200 and r.json()["pinned_candidate"] == 2
    assert r.json()["serving_candidate"] == 2
    probe = {"model": "p", "items": [{"x": x.tolist()} for x in X[:10]]}
    # the replica serves the pinned candidate too, before any further entry
    _wait(lambda: b.get("/models/p").json()["pinned_candidate"] == 2)
    _wait(lambda: b.post("/score", json=probe).json() == a.post("/score", json=probe).json())
    for k in range(400, 1200, 200):  # learning through both replicas
        c = a if k % 400 else b
        body = {"model": "p", "events": _events(X[k:k + 200], y[k:k + 200])}
        assert c.post("/learn", json=body).status_code == 200
    _wait(lambda: b.get("/models/p").json()["version"] == 1200)
    _wait(lambda: a.get("/models/p").json()["version"] == 1200)
    ia, ib = a.get("/models/p").json(), b.get("/models/p").json()
    for key in ("candidates", "serving_candidate", "pinned_candidate", "rolling_auc"):
        assert ia[key] == ib[key], key
    # the library, pinned at event 400, gives the same model
    ref = models.create("auto", n_features=8, seed=0, **PARAMS)
    ref.learn(X[:400], y[:400])
    ref.pin(2)
    ref.learn(X[400:], y[400:])
    assert a.post("/score", json=probe).json()["scores"] == ref.score(X[:10]).tolist()
    restarted = app_client(checkpoint_every=200)
    _wait(lambda: restarted.get("/models/p").json()["version"] == 1200)
    assert restarted.get("/models/p").json()["pinned_candidate"] == 2
    r = a.delete("/models/p/pin")
    assert r.status_code == 200 and r.json()["pinned_candidate"] is None
    assert r.json()["serving_candidate"] == ref.chosen
    _wait(lambda: b.get("/models/p").json()["pinned_candidate"] is None)


def test_pinning_is_for_auto_models_and_existing_candidates(client):
    client.post("/models", json={"name": "plain", "learner": "cbr_fifo",
                                 "features": {"kind": "dense", "dim": 3}})
    r = client.post("/models/plain/pin", json={"candidate": 0})
    assert r.status_code == 422 and "only 'auto' models" in r.json()["message"]
    client.post("/models", json={"name": "au", "candidates": CANDS,
                                 "features": {"kind": "dense", "dim": 8}})
    r = client.post("/models/au/pin", json={"candidate": 3})
    assert r.status_code == 422 and "has 3 candidates (0 to 2)" in r.json()["message"]
    assert client.post("/models/au/pin", json={"candidate": -1}).status_code == 422
    assert client.post("/models/nope/pin", json={"candidate": 0}).status_code == 404
