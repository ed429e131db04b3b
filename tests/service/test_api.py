"""The HTTP API over both stores: models, learn, score, errors, metrics, auth."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aucstream import models
from tests.helpers import stream

DENSE = {"name": "m", "learner": "cbr_fifo", "features": {"kind": "dense", "dim": 5}}
HASHED = {"name": "h", "learner": "cbr_diag_fifo", "features": {"kind": "hashed", "bits": 18}}


def dense_events(n: int, seed: int = 0, start: int = 0, ids: bool = True):
    X, y = stream(n, 5, seed=seed)
    return [{"x": X[i].tolist(), "label": int(y[i]), **({"id": f"e{start + i}"} if ids else {})}
            for i in range(n)]


def hashed_events(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        site = f"s{rng.integers(20)}"
        out.append({"features": {"site": site, "hour": int(rng.integers(24)),
                                 "user": {"country": ["fr", "de", "us"][i % 3]}},
                    "label": int(site in ("s1", "s2", "s3") or rng.random() < 0.05)})
    return out


def metrics_of(client) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# ---------------------------------------------------------------------------- models
def test_create_list_get_delete(client):
    r = client.post("/models", json=DENSE)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["name"] == "m" and body["version"] == 0 and body["learner"] == "cbr_fifo"
    assert body["params"]["C"] == models.create("cbr_fifo", n_features=5).params["C"]
    assert body["events"] == {"negative": 0, "positive": 0}
    assert body["rolling_auc"] is None and body["buffer_fill"] == {"negative": 0, "positive": 0}
    assert client.post("/models", json=DENSE).status_code == 409
    assert [m["name"] for m in client.get("/models").json()["models"]] == ["m"]
    assert client.get("/models/m").json()["name"] == "m"
    assert client.delete("/models/m").status_code == 204
    assert client.get("/models/m").status_code == 404
    assert client.delete("/models/m").status_code == 404
    assert client.post("/models", json=DENSE).status_code == 201  # the name is free again
    assert client.get("/models/m").json()["version"] == 0


def test_learners_are_listed_with_their_parameters(client):
    body = client.get("/learners").json()["learners"]
    assert set(body) == set(models.available())
    assert body["cbr_fifo"]["params"]["C"]["rule"] == "a float in [1e-06, 1e+06]"
    assert body["solam"]["sparse_input"] is True


@pytest.mark.parametrize(
    ("patch", "field", "needle"),
    [
        ({"learner": "nope"}, "learner", "Unknown learner 'nope'"),
        ({"params": {"C": -1}}, "params", "The 'C' parameter of cbr_fifo must be"),
        ({"params": {"bogus": 1}}, "params", "unexpected parameter 'bogus'"),
        ({"features": {"kind": "dense", "dim": 0}}, "features", ""),
        ({"features": {"kind": "hashed", "bits": 30}}, "features", ""),
        ({"features": {"kind": "pixels"}}, "features", ""),
        ({"features": {"kind": "hashed", "bits": 20}}, "features", "at most 4096 features"),
        ({"name": "bad name!"}, "name", ""),
        ({"standardize": True, "features": {"kind": "hashed", "bits": 8}}, "standardize",
         "dense features only"),
        ({"extra": 1}, "extra", ""),
    ],
)
def test_bad_model_configs_are_422_naming_the_field(client, patch, field, needle):
    r = client.post("/models", json={**DENSE, **patch})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "validation_error"
    assert any(field in d["loc"] for d in body["details"]), body
    assert needle in body["message"] + json.dumps(body["details"])
    assert client.get("/models").json()["models"] == []


# ---------------------------------------------------------------------------- learn
def test_learn_applies_events_in_order_like_the_library(client):
    client.post("/models", json=DENSE)
    events = dense_events(300)
    for i in range(0, 300, 100):
        r = client.post("/learn", json={"model": "m", "events": events[i:i + 100]})
        assert r.status_code == 200, r.text
        assert r.json() == {"accepted": 100, "duplicates": 0, "version": i + 100}
    ref = models.create("cbr_fifo", n_features=5)
    X = np.array([e["x"] for e in events])
    y = np.array([e["label"] for e in events])
    prior = ref.score_then_learn(X, y)
    probe = X[:20]
    r = client.post("/score", json={"model": "m", "items": [{"x": row.tolist()} for row in probe]})
    assert r.status_code == 200
    assert np.array_equal(np.array(r.json()["scores"]), ref.score(probe))
    info = client.get("/models/m").json()
    assert info["version"] == 300
    assert info["events"] == {"negative": int((y == 0).sum()), "positive": int((y == 1).sum())}
    assert info["rolling_auc"] == pytest.approx(models.auc(y, prior), abs=1e-12)
    assert info["buffer_fill"] == {"negative": 50, "positive": 50}


def test_hashed_features_and_label_encodings(client):
    client.post("/models", json=HASHED)
    events = hashed_events(200)
    events[0]["label"] = True
    events[1]["label"] = -1
    events[2]["label"] = False
    r = client.post("/learn", json={"model": "h", "events": events})
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] == 200
    r = client.post("/score", json={"model": "h", "items": [
        {"features": {"site": "s1", "hour": 3}}, {"features": {"site": "s9", "hour": 3}}]})
    s1, s9 = r.json()["scores"]
    assert s1 > s9


@pytest.mark.parametrize(
    ("mutate", "loc"),
    [
        (lambda e: e[3].update(x=[1.0] * 4), ["body", "events", 3, "x"]),
        (lambda e: e[7].update(label=2), ["body", "events", 7, "label"]),
        (lambda e: e[5].update(label="yes"), ["body", "events", 5, "label"]),
        (lambda e: e[2].pop("x"), ["body", "events", 2, "x"]),
        (lambda e: e[4].update(x=["a"] * 5), ["body", "events", 4, "x", 0]),
        (lambda e: e[6].update(surprise=1), ["body", "events", 6, "surprise"]),
        (lambda e: e[1].update(id=""), ["body", "events", 1, "id"]),
    ],
)
def test_a_bad_event_rejects_the_whole_request(client, mutate, loc):
    client.post("/models", json=DENSE)
    client.post("/learn", json={"model": "m", "events": dense_events(10, ids=False)})
    events = dense_events(10, seed=1, ids=False)
    mutate(events)
    r = client.post("/learn", json={"model": "m", "events": events})
    assert r.status_code == 422, r.text
    assert r.json()["details"][0]["loc"][: len(loc)] == loc
    assert client.get("/models/m").json()["version"] == 10


def test_non_finite_values_are_rejected(client):
    client.post("/models", json=DENSE)
    client.post("/models", json=HASHED)
    for model, item in (("m", '{"x": [1, 2, NaN, 4, 5], "label": 1}'),
                        ("m", '{"x": [1, 2, 3, Infinity, 5], "label": 0}'),
                        ("h", '{"features": {"price": NaN}, "label": 1}')):
        body = f'{{"model": "{model}", "events": [{item}]}}'
        r = client.post("/learn", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
    assert client.get("/models/m").json()["version"] == 0


def test_unknown_model_and_malformed_bodies(client):
    r = client.post("/learn", json={"model": "ghost", "events": dense_events(2)})
    assert r.status_code == 404 and r.json()["message"] == "Model 'ghost' not found"
    r = client.post("/score", json={"model": "ghost", "items": [{"x": [1.0]}]})
    assert r.status_code == 404
    r = client.post("/learn", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert client.post("/learn", json={"model": "m", "events": []}).status_code == 422


def test_retried_events_are_not_learned_twice(client):
    client.post("/models", json=DENSE)
    events = dense_events(50)
    assert client.post("/learn", json={"model": "m", "events": events}).json()["version"] == 50
    r = client.post("/learn", json={"model": "m", "events": events[40:] + dense_events(5, 9, 50)})
    assert r.json() == {"accepted": 5, "duplicates": 10, "version": 55}
    same = dense_events(3, 4, 100)
    r = client.post("/learn", json={"model": "m", "events": same + same})
    assert r.json() == {"accepted": 3, "duplicates": 3, "version": 58}
    info = client.get("/models/m").json()
    assert info["version"] == 58
    # the learner itself saw each event once: its class counts, and its scores, are those
    # of a learner fed the distinct events in order
    once = events + dense_events(5, 9, 50) + same
    pos = sum(e["label"] for e in once)
    assert info["events"] == {"negative": len(once) - pos, "positive": pos}
    twin = models.create("cbr_fifo", n_features=5).learn(
        np.array([e["x"] for e in once]), np.array([e["label"] for e in once]))
    probe = dense_events(7, 11, 500, ids=False)
    scores = client.post("/score", json={"model": "m", "items": [{"x": e["x"]} for e in probe]})
    assert scores.json()["scores"] == twin.score(np.array([e["x"] for e in probe])).tolist()


def test_limits_give_413(app_client):
    client = app_client(max_events_per_request=20, max_body_bytes=2000)
    client.post("/models", json=DENSE)
    tiny = [{"x": [0, 0, 0, 0, 0], "label": i % 2} for i in range(21)]  # ~630 bytes
    r = client.post("/learn", json={"model": "m", "events": tiny})
    assert r.status_code == 413 and "21 events exceed the limit of 20" in r.json()["message"]
    r = client.post("/learn", json={"model": "m", "events": dense_events(19)})
    assert r.status_code == 413 and "2000" in r.json()["message"]  # ~2.9 kB of JSON
    r = client.post("/score", json={"model": "m", "items": [{"x": [0.0] * 5}] * 21})
    assert r.status_code == 413
    assert client.get("/models/m").json()["version"] == 0


# ---------------------------------------------------------------------------- score
def test_score_ranks_best_first_and_never_mutates(client):
    client.post("/models", json=DENSE)
    client.post("/learn", json={"model": "m", "events": dense_events(200)})
    before = client.get("/models/m").json()
    items = [{"x": e["x"]} for e in dense_events(30, seed=3)]
    r = client.post("/score", json={"model": "m", "items": items})
    body = r.json()
    scores = np.array(body["scores"])
    assert body["ranking"] == np.argsort(-scores, kind="stable").tolist()
    assert body["version"] == 200
    r2 = client.post("/score", json={"model": "m", "items": items, "top_k": 5})
    assert r2.json()["ranking"] == body["ranking"][:5]
    assert r2.json()["scores"] == body["scores"]
    after = client.get("/models/m").json()
    assert {k: v for k, v in after.items() if k != "last_checkpoint"} == {
        k: v for k, v in before.items() if k != "last_checkpoint"}
    bad = client.post("/score", json={"model": "m", "items": [{"x": [1.0, 2.0]}]})
    assert bad.status_code == 422 and bad.json()["details"][0]["loc"] == ["body", "items", 0, "x"]
    assert client.post("/score", json={"model": "m", "items": items, "top_k": 0}).status_code == 422


# ---------------------------------------------------------------------------- observability
def test_metrics_are_real_prometheus_text_and_match_the_model(client):
    client.post("/models", json=DENSE)
    events = dense_events(400)
    client.post("/learn", json={"model": "m", "events": events})
    client.post("/learn", json={"model": "m", "events": [{"x": [1.0], "label": 1}]})  # 422
    client.post("/score", json={"model": "m", "items": [{"x": [0.0] * 5}]})
    info = client.get("/models/m").json()
    m = metrics_of(client)
    model = (("model", "m"),)
    assert m[("aucstream_rolling_auc", model)] == pytest.approx(info["rolling_auc"])
    assert m[("aucstream_model_version", model)] == 400
    assert m[("aucstream_events_learned_total", (("label", "positive"), ("model", "m")))] == \
        info["events"]["positive"]
    assert m[("aucstream_buffer_fill", (("label", "negative"), ("model", "m")))] == 50
    assert m[("aucstream_learn_latency_seconds_count", model)] == 1
    assert m[("aucstream_score_latency_seconds_count", model)] == 1
    assert m[("aucstream_request_errors_total", (("reason", "validation"),))] == 1
    assert m[("aucstream_models", ())] == 1
    client.delete("/models/m")
    assert not [k for k in metrics_of(client) if ("model", "m") in k[1]]


def test_a_deleted_model_exports_no_metrics_even_from_a_late_thread(client):
    # The applier and the sync loop hold a reference to a model while they export its
    # gauges; one that exports after the delete must not bring the series back.
    client.post("/models", json=DENSE)
    client.post("/learn", json={"model": "m", "events": dense_events(100)})
    host = client.app.state.host
    model = host.get("m")
    client.delete("/models/m")
    model.export(host.metrics)
    assert not [k for k in metrics_of(client) if ("model", "m") in k[1]]
    client.post("/models", json=DENSE)  # a new model of that name has its series again
    assert ("aucstream_model_version", (("model", "m"),)) in metrics_of(client)


def test_rolling_auc_is_nan_until_both_classes_are_in_the_window(client):
    client.post("/models", json=DENSE)
    positives = [{"x": [float(i)] * 5, "label": 1} for i in range(3)]
    client.post("/learn", json={"model": "m", "events": positives})
    assert client.get("/models/m").json()["rolling_auc"] is None
    assert math.isnan(metrics_of(client)[("aucstream_rolling_auc", (("model", "m"),))])


def test_probes_and_openapi(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["store"] == "up"
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/learn"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"] == "#/components/schemas/LearnRequest"
    assert "Event" in schema["components"]["schemas"]
    assert "LearnResponse" in schema["components"]["schemas"]
    assert client.get("/docs").status_code == 200


def test_request_ids_are_echoed(client):
    r = client.get("/healthz", headers={"x-request-id": "abc123"})
    assert r.headers["x-request-id"] == "abc123"
    assert len(client.get("/healthz").headers["x-request-id"]) == 32


def test_standardize_is_learned_and_persisted(app_client):
    client = app_client()
    client.post("/models", json={**DENSE, "standardize": True})
    events = dense_events(120)
    for e in events:
        e["x"] = [v * 100 + 7 for v in e["x"]]
    client.post("/learn", json={"model": "m", "events": events})
    X = np.array([e["x"] for e in events])
    y = np.array([e["label"] for e in events])
    scaler = models.preprocessing.StandardScaler(5)
    ref = models.create("cbr_fifo", n_features=5).learn(scaler.learn_transform(X), y)
    probe = X[:7]
    got = client.post("/score", json={"model": "m", "items": [{"x": r.tolist()} for r in probe]})
    assert np.allclose(got.json()["scores"], ref.score(scaler.transform(probe)), rtol=0,
                       atol=1e-12)


# ---------------------------------------------------------------------------- auth
def test_api_keys(app_client):
    client = app_client(api_keys="w1,w2", read_keys="r1")
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics").status_code == 200
    assert client.post("/models", json=DENSE).status_code == 401
    r = client.post("/models", json=DENSE, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    w = {"Authorization": "Bearer w2"}
    rk = {"Authorization": "Bearer r1"}
    assert client.post("/models", json=DENSE, headers=w).status_code == 201
    assert client.post("/models", json={**DENSE, "name": "x"}, headers=rk).status_code == 403
    assert client.post("/learn", json={"model": "m", "events": dense_events(5)},
                       headers=rk).status_code == 403
    assert client.post("/learn", json={"model": "m", "events": dense_events(5)},
                       headers=w).status_code == 200
    r = client.post("/score", json={"model": "m", "items": [{"x": [0.0] * 5}]}, headers=rk)
    assert r.status_code == 200
    assert client.get("/models", headers=rk).status_code == 200
    assert client.get("/models").status_code == 401


def test_hot_routes_resolve_dependencies_on_the_event_loop():
    """FastAPI runs a plain ``def`` dependency in its thread pool: three such hops per
    /score request once cost more than scoring 100 candidates. Every dependency of the
    hot routes must be ``async def`` (they do no blocking work)."""
    import inspect

    from fastapi.routing import APIRoute

    from aucstream.service.api import learn, score

    def walk(dependant):
        for dep in dependant.dependencies:
            yield dep
            yield from walk(dep)

    routes = [r for m in (learn, score) for r in m.router.routes if isinstance(r, APIRoute)]
    assert sorted(r.path for r in routes) == ["/learn", "/score"]
    for route in routes:
        deps = list(walk(route.dependant))
        assert deps, route.path
        def on_loop(call) -> bool:  # as FastAPI decides: a function, or a callable object
            if inspect.isroutine(call):
                return inspect.iscoroutinefunction(call)
            return inspect.iscoroutinefunction(type(call).__call__)

        sync = [getattr(d.call, "__name__", repr(d.call)) for d in deps if not on_loop(d.call)]
        assert not sync, f"{route.path} has sync dependencies {sync}"


def test_long_lived_objects_leave_the_garbage_collector_after_start_up(client):
    """Full collections that walked the start-up heap (numba's kernels, modules, the app)
    took 80-90 ms with the GIL held and stalled every request in flight; after the
    warm-up the service freezes them (once per process)."""
    import gc
    import time

    deadline = time.monotonic() + 120
    while gc.get_freeze_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gc.get_freeze_count() > 10_000


def _hold_lock(model, seconds: float, applying: bool):
    """Hold the model's applier lock from another thread, as the sync loop, a checkpoint
    (applying=False) or a batch being applied (applying=True) would.

    The published snapshot is rolled back to version 0 under that same lock, as when
    publishing is throttled: rolled back before it, the sync loop could republish in
    between and the test would not see a stale snapshot at all.
    """
    import threading
    import time

    held = threading.Event()

    def run():
        with model.lock:
            snap = model._snapshot
            model._snapshot = type(snap)(0, snap.scorer, snap.scaler)
            model._applying = applying
            held.set()
            time.sleep(seconds)
            model._applying = False

    t = threading.Thread(target=run)
    t.start()
    held.wait()
    return t


ITEMS = [{"x": [0.1, 0.2, 0.3, 0.4, 0.5]}, {"x": [0.5, 0.4, 0.3, 0.2, 0.1]}]


def test_a_score_after_an_acknowledged_learn_sees_it_on_an_idle_model(client):
    """The sync loop or a checkpoint may hold the lock for a moment; a stale snapshot
    waits for them (never for a batch being applied), so learn-then-score reads its
    own write."""
    client.post("/models", json=DENSE)
    model = client.app.state.host.find("m")
    r = client.post("/learn", json={"model": "m", "events": dense_events(50, ids=False)})
    assert r.json()["version"] == 50
    holder = _hold_lock(model, 0.02, applying=False)
    r = client.post("/score", json={"model": "m", "items": ITEMS})
    holder.join()
    assert r.json()["version"] == 50


def test_scoring_never_waits_for_a_batch_being_applied(client):
    client.post("/models", json=DENSE)
    model = client.app.state.host.find("m")
    r = client.post("/learn", json={"model": "m", "events": dense_events(50, ids=False)})
    holder = _hold_lock(model, 3.0, applying=True)
    r = client.post("/score", json={"model": "m", "items": ITEMS})
    still_applying = holder.is_alive()
    holder.join()
    assert r.status_code == 200 and r.json()["version"] == 0  # the stale snapshot, at once
    assert still_applying


def test_each_model_reports_its_memory(client):
    spec = {"name": "big", "learner": "cbr_diag_fifo", "features": {"kind": "dense",
                                                                      "dim": 2**16}}
    assert client.post("/models", json=spec).status_code == 201
    small = {**spec, "name": "small", "features": {"kind": "dense", "dim": 16}}
    assert client.post("/models", json=small).status_code == 201
    big = client.get("/models/big").json()["memory_bytes"]
    # μ and g (512 kB each at 2^16) and the snapshot's copy of μ: at least 1.5 MB
    assert 3 * 2**19 <= big < 16 * 2**20
    assert client.get("/models/small").json()["memory_bytes"] < big / 5
    listed = {m["name"]: m["memory_bytes"] for m in client.get("/models").json()["models"]}
    assert listed["big"] == big
    # a hashed model is sized to the columns it has learned: 2^20 of them cost nothing yet
    hashed = {**spec, "name": "hashed", "features": {"kind": "hashed", "bits": 20}}
    assert client.post("/models", json=hashed).status_code == 201
    assert client.get("/models/hashed").json()["memory_bytes"] < 2**20


def test_every_status_has_the_documented_error_body(client):
    r = client.get("/no-such-endpoint")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    assert set(r.json()) == {"error", "message", "details"}
    r = client.put("/learn")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"
    assert r.headers["allow"] == "POST"


def test_an_unforeseen_error_is_a_500_with_the_error_body(client):
    from starlette.testclient import TestClient

    quiet = TestClient(client.app, raise_server_exceptions=False)
    store = client.app.state.host.store

    def broken(*_a, **_k):
        raise RuntimeError("disk on fire")

    real = store.list_models
    store.list_models = broken  # a fault in a component: the handler must word it
    try:
        r = quiet.post("/models", json=DENSE)
    finally:
        store.list_models = real
    assert r.status_code == 500
    assert r.json()["error"] == "internal" and "disk on fire" not in r.text


def test_the_openapi_document_declares_the_bearer_scheme_and_the_version(client):
    from aucstream import __version__

    doc = client.get("/openapi.json").json()
    assert doc["info"]["version"] == __version__
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": doc["components"][
            "securitySchemes"]["bearer"]["description"]}
    assert {"bearer": []} in doc["paths"]["/learn"]["post"]["security"]


def test_docs_can_be_turned_off(app_client):
    client = app_client(docs=False)
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(path).status_code == 404, path
    assert client.get("/healthz").status_code == 200


def test_an_event_with_both_x_and_features_is_refused(client):
    client.post("/models", json=DENSE)
    both = {"x": [0.1] * 5, "features": {"a": 1.0}}
    for path, key, item in (("/learn", "events", {**both, "label": 1}), ("/score", "items", both)):
        r = client.post(path, json={"model": "m", key: [item]})
        assert r.status_code == 422, r.text
        detail = r.json()["details"][0]
        assert detail["loc"] == ["body", key, 0]
        assert detail["msg"].startswith("give either 'x' (dense models) or 'features'")
    assert client.get("/models/m").json()["version"] == 0


def test_the_openapi_document_has_examples_and_says_what_metrics_is(client):
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for name in ("LearnRequest", "ScoreRequest", "Event", "Item"):
        assert schemas[name]["examples"], name
    assert len(schemas["Event"]["oneOf"]) == 3  # x, features, or (feedback) only an id
    assert len(schemas["Item"]["oneOf"]) == 2
    assert list(doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == [
        "text/plain; version=0.0.4"]
