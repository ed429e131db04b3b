"""The ad-click flow: items kept at /score by id, labels joined at /learn, negatives by
timeout exactly once; both stores."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from tests.service.reference import Straight
from tests.service.test_api import HASHED, hashed_events

FEEDBACK = {**HASHED, "feedback": {"window_s": 600}}


def _items(n: int, seed: int = 0, prefix: str = "imp"):
    events = hashed_events(n, seed=seed)
    items = [{"features": e["features"], "id": f"{prefix}{i}"} for i, e in enumerate(events)]
    return items, [e["label"] for e in events]


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_the_feedback_config_is_validated_and_shown(app_client):
    c = app_client()
    r = c.post("/models", json={**HASHED, "feedback": {"window_s": 60, "negative_after_s": 90}})
    assert r.status_code == 422 and "negative_after_s" in r.text
    assert c.post("/models", json={**HASHED, "feedback": {"window_s": 0}}).status_code == 422
    r = c.post("/models", json={**HASHED, "feedback": {"window_s": 60, "negative_after_s": 30}})
    assert r.status_code == 201
    fb = c.get("/models/h").json()["feedback"]
    assert fb["window_s"] == 60 and fb["negative_after_s"] == 30
    assert fb["max_pending"] == 1_000_000


def test_labels_by_id_learn_the_scored_rows_once(app_client):
    c = app_client()
    c.post("/models", json=FEEDBACK)
    items, labels = _items(60)
    r = c.post("/score", json={"model": "h", "items": items}).json()
    assert r["kept"] == 60
    again = c.post("/score", json={"model": "h", "items": items[:5]}).json()
    assert again["kept"] == 0  # the first showing counts
    events = [{"id": it["id"], "label": y} for it, y in zip(items, labels, strict=True)]
    r = c.post("/learn", json={"model": "h", "events": events[:40]})
    assert r.status_code == 200, r.text
    assert r.json() == {"accepted": 40, "duplicates": 0, "version": 40, "unmatched": []}
    # a second label for the same id is a duplicate; unknown ids are reported
    r = c.post("/learn", json={"model": "h", "events": [
        *events[:3], {"id": "nope", "label": 1}, *events[40:]]}).json()
    assert r == {"accepted": 20, "duplicates": 3, "version": 60, "unmatched": ["nope"]}
    # what was learned is the scored rows with their labels, in log order
    host = c.app.state.host
    ref = Straight(host.get("h").config)
    enc = host.get("h").encoder
    ref.learn(enc.encode([{"features": it["features"]} for it in items]).learner_input(),
              labels)
    got = host.get("h").learner.get_state()
    for k, v in ref.get_state().items():
        assert (np.array_equal(got[k], v) if isinstance(v, np.ndarray) else got[k] == v), k


def test_a_request_mixes_full_events_and_labels_in_order(app_client):
    c = app_client()
    c.post("/models", json=FEEDBACK)
    items, labels = _items(10, seed=1)
    c.post("/score", json={"model": "h", "items": items})
    full = hashed_events(4, seed=2)
    events = [full[0], {"id": "imp3", "label": labels[3]}, full[1], full[2],
              {"id": "imp0", "label": labels[0]}, full[3]]
    r = c.post("/learn", json={"model": "h", "events": events}).json()
    assert r["accepted"] == 6 and r["unmatched"] == []
    ref = Straight(c.app.state.host.get("h").config)
    enc = c.app.state.host.get("h").encoder
    rows = [full[0]["features"], items[3]["features"], full[1]["features"],
            full[2]["features"], items[0]["features"], full[3]["features"]]
    ys = [full[0]["label"], labels[3], full[1]["label"], full[2]["label"], labels[0],
          full[3]["label"]]
    ref.learn(enc.encode([{"features": f} for f in rows]).learner_input(), ys)
    got = c.app.state.host.get("h").learner.get_state()
    assert np.array_equal(got["mu_"], ref.get_state()["mu_"])


def test_labels_by_id_learn_alike_on_the_fast_and_the_regular_parse_path(app_client):
    """The same mixed requests, once as plain UTF-8 (the numba fast path) and once with
    a name written as a JSON escape (the fast path gives up: pydantic's path): the same
    answers, and the same state learned."""
    from aucstream.service import fastjson

    c = app_client()
    items, labels = _items(12, seed=6)
    full = hashed_events(3, seed=7)
    full[0]["features"]["né"] = 1
    events = [{"id": "imp5", "label": labels[5]}, full[0], {"id": "nope", "label": 1},
              {"id": "imp2", "label": labels[2]}, full[1], {"id": "imp5", "label": 1},
              full[2], {"id": "imp11", "label": labels[11]}]
    answers = {}
    for name, ascii_only in (("fast", False), ("slow", True)):
        c.post("/models", json={**FEEDBACK, "name": name})
        c.post("/score", json={"model": name, "items": items})
        body = json.dumps({"model": name, "events": events}, ensure_ascii=ascii_only).encode()
        fast = fastjson.parse_learn(body, HASHED["features"], 1000, by_id=True)
        assert (fast is None) == ascii_only  # each request takes the path it is meant to
        r = c.post("/learn", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        answers[name] = r.json()
        again = c.post("/learn", content=body, headers={"content-type": "application/json"})
        answers[name + " again"] = again.json()
    assert answers["fast"] == {**answers["slow"], "version": answers["fast"]["version"]}
    assert answers["fast"]["unmatched"] == ["nope"] and answers["fast"]["accepted"] == 6
    # a retry: the full events (no ids) are learned again, the labels are duplicates
    assert answers["fast again"] == {**answers["slow again"],
                                     "version": answers["fast again"]["version"]}
    assert answers["fast again"]["accepted"] == 3
    host = c.app.state.host
    a, b = host.get("fast").learner.get_state(), host.get("slow").learner.get_state()
    for k, v in a.items():
        assert (np.array_equal(b[k], v) if isinstance(v, np.ndarray) else b[k] == v), k


def test_label_only_events_need_an_id_and_a_model_with_feedback(app_client):
    c = app_client()
    c.post("/models", json=HASHED)
    r = c.post("/learn", json={"model": "h", "events": [{"id": "a", "label": 1}]})
    assert r.status_code == 422 and "features" in r.text
    c.post("/models", json={**FEEDBACK, "name": "f"})
    r = c.post("/learn", json={"model": "f", "events": [{"label": 1}]})
    assert r.status_code == 422 and "'id'" in r.json()["details"][0]["msg"]


def test_a_click_after_a_restart_still_joins(app_client):
    a = app_client()
    a.post("/models", json=FEEDBACK)
    items, _ = _items(20, seed=3)
    a.post("/score", json={"model": "h", "items": items})
    a.__exit__(None, None, None)  # the process that scored is gone
    b = app_client()
    r = b.post("/learn", json={"model": "h", "events": [{"id": "imp7", "label": 1}]}).json()
    assert r["accepted"] == 1 and r["unmatched"] == []


def test_expired_impressions_do_not_join(app_client):
    c = app_client()
    c.post("/models", json={**HASHED, "feedback": {"window_s": 0.3}})
    items, _ = _items(5, seed=4)
    c.post("/score", json={"model": "h", "items": items})
    time.sleep(0.4)
    r = c.post("/learn", json={"model": "h", "events": [{"id": "imp1", "label": 1}]}).json()
    assert r == {"accepted": 0, "duplicates": 0, "version": 0, "unmatched": ["imp1"]}


def test_the_cap_keeps_no_more_than_max_pending(app_client):
    c = app_client()
    c.post("/models", json={**HASHED, "feedback": {"window_s": 600, "max_pending": 7}})
    items, _ = _items(10, seed=5)
    assert c.post("/score", json={"model": "h", "items": items}).json()["kept"] == 7
    r = c.post("/learn", json={"model": "h", "events": [{"id": "imp9", "label": 1}]}).json()
    assert r["unmatched"] == ["imp9"]


@pytest.mark.parametrize("replicas", [1, 2])
def test_timeout_negatives_are_learned_exactly_once(app_client, replicas):
    spec = {**HASHED, "feedback": {"window_s": 600, "negative_after_s": 1.0}}
    apps = [app_client() for _ in range(replicas)]
    a = apps[0]
    assert a.post("/models", json=spec).status_code == 201
    items, _ = _items(30, seed=6)
    a.post("/score", json={"model": "h", "items": items})
    # three labels in time: learned with their labels, never again as negatives
    a.post("/learn", json={"model": "h", "events": [{"id": f"imp{i}", "label": 1}
                                                    for i in range(3)]})
    for app in apps:  # every replica sweeps; each impression becomes one negative
        _wait(lambda app=app: app.get("/models/h").json()["version"] == 30)
    time.sleep(0.5)  # more sweeps: nothing more is learned
    for app in apps:
        info = app.get("/models/h").json()
        assert info["version"] == 30
        assert info["events"] == {"negative": 27, "positive": 3}
    fb = a.get("/models/h").json()["feedback"]
    counts = fb["impressions"]
    assert counts["timed_out"] == 27 and counts["labelled"] == 3 and counts["pending"] == 0
    if replicas == 1:  # served AUC is per process: here it saw both the labels and timeouts
        assert fb["served_auc"] is not None and 0.0 <= fb["served_auc"] <= 1.0
        # the one /score request: every item labelled (3 clicks, 27 timeouts)
        assert fb["requests_with_auc"] == 1 and 0.0 <= fb["request_auc"] <= 1.0
    # a click after its timeout negative: learned as a positive too (once)
    r = a.post("/learn", json={"model": "h", "events": [{"id": "imp10", "label": 1}]}).json()
    assert r["accepted"] == 1 and r["version"] == 31
    r = a.post("/learn", json={"model": "h", "events": [{"id": "imp10", "label": 1},
                                                        {"id": "imp11", "label": 0}]}).json()
    assert r == {"accepted": 0, "duplicates": 2, "version": 31, "unmatched": []}
    metrics = a.get("/metrics").text
    assert 'aucstream_impressions{model="h",status="timed_out"} 27.0' in metrics
    # every join observed its label's delay once (3 in time, then imp10's two late joins)
    assert 'aucstream_labels_joined_total{model="h"} 5.0' in metrics
    assert 'aucstream_label_delay_seconds_count{model="h"} 5.0' in metrics


def test_a_sync_round_sweeps_on_while_sweeps_come_back_full(app_client, monkeypatch):
    """One sweep takes SWEEP_LIMIT impressions; a round goes on while they come back
    full (each round capped a model at SWEEP_LIMIT negatives per sync interval)."""
    import aucstream.service.feedback as feedback
    import aucstream.service.hosting as hosting

    monkeypatch.setattr(feedback, "SWEEP_LIMIT", 4)
    monkeypatch.setattr(hosting, "SWEEP_LIMIT", 4)
    c = app_client(sync_interval=3600.0)  # (no round of its own meanwhile)
    spec = {**HASHED, "feedback": {"window_s": 600, "negative_after_s": 0.2}}
    assert c.post("/models", json=spec).status_code == 201
    items, _ = _items(30, seed=6)
    assert c.post("/score", json={"model": "h", "items": items}).json()["kept"] == 30
    time.sleep(0.3)
    host = c.app.state.host
    model = host.get("h")
    host._sweep(model, time.monotonic() + 60)
    assert model.version == 30
    host._sweep(model)  # (no time left: one sweep, and nothing is due)
    assert model.version == 30


def test_scoring_without_ids_keeps_nothing(app_client):
    c = app_client()
    c.post("/models", json=FEEDBACK)
    items, _ = _items(5, seed=7)
    plain = [{"features": it["features"]} for it in items]
    r = c.post("/score", json={"model": "h", "items": plain}).json()
    assert r["kept"] == 0  # answered by the express lane: nothing to keep
    assert c.get("/models/h").json()["feedback"]["impressions"].get("pending", 0) == 0


def test_request_auc_averages_the_requests_whose_items_all_got_labels():
    from aucstream.service.feedback import RequestAUC

    r = RequestAUC(max_items=5, expire_s=100)
    r.shown(["a1", "a2", "a3"], [0.9, 0.5, 0.1], now=0)
    r.shown(["b1", "b2"], [0.2, 0.8], now=1)
    r.labelled(["a1", "a2"], [1, -1])
    assert r.completed == 0  # a3 still waits
    r.labelled(["a3", "b1", "b2"], [1, 1, -1])  # a: 1 of 2 pairs right; b: 0 of 1
    assert r.completed == 2 and r.value == pytest.approx(0.25)
    r.shown(["c1", "c2"], [1.0, 0.0], now=2)
    r.shown(["d1", "d2"], [1.0, 0.0], now=3)
    r.shown(["e1", "e2"], [1.0, 0.0], now=4)  # not followed: 5 items at most wait
    r.labelled(["e1", "e2"], [1, -1])
    assert r.completed == 2
    r.labelled(["d1", "d2"], [1, 1])  # one class: no AUC
    r.labelled(["c1", "c2"], [1, -1])  # the oldest still completes: it was not pushed out
    assert r.completed == 3 and r.value == pytest.approx(0.5)


def test_request_auc_completes_requests_when_more_arrive_than_it_follows():
    """Many more requests than it can follow arrive before any label (negatives come by
    timeout): a sample of them still completes, and expired ones make room."""
    from aucstream.service.feedback import RequestAUC

    r = RequestAUC(max_items=100, expire_s=60)
    for t in range(1000):  # 1,000 requests of 10 items in 10 s, labels after all of them
        r.shown([f"{t}-{k}" for k in range(10)], [float(k) for k in range(10)], now=t / 100)
    for t in range(1000):
        r.labelled([f"{t}-{k}" for k in range(10)], [1 if k >= 5 else -1 for k in range(10)])
    assert r.completed == 10 and r.value == 1.0
    r.shown(["x1", "x2"], [1.0, 0.0], now=30)  # (nothing open: room)
    r.shown(["y1", "y2"], [1.0, 0.0], now=100)  # x expired: its labels can't come
    r.labelled(["x1", "x2", "y1", "y2"], [1, -1, -1, 1])
    assert r.completed == 11 and r.value == pytest.approx(10 / 11)


def test_both_parse_paths_keep_items(app_client):
    """The express lane keeps items off the event loop; a body it leaves to the regular
    path (an escaped name) keeps them there: the same impressions either way."""
    c = app_client()
    c.post("/models", json=FEEDBACK)
    fast = '{"model": "h", "items": [{"features": {"f": "a"}, "id": "x1"}]}'
    regular = '{"model": "h", "items": [{"features": {"\\u0066": "a"}, "id": "x2"}]}'
    headers = {"content-type": "application/json"}
    for body in (fast, regular):
        assert c.post("/score", content=body, headers=headers).json()["kept"] == 1
    r = c.post("/learn", json={"model": "h", "events": [{"id": "x1", "label": 1},
                                                        {"id": "x2", "label": 0}]}).json()
    assert r["accepted"] == 2 and r["unmatched"] == []
    lrn = c.app.state.host.get("h").learner
    ref = Straight(c.app.state.host.get("h").config)
    enc = c.app.state.host.get("h").encoder
    ref.learn(enc.encode([{"features": {"f": "a"}}] * 2).learner_input(), [1, 0])
    assert np.array_equal(lrn.get_state()["mu_"], ref.get_state()["mu_"])
