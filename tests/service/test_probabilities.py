"""/score's probabilities: the online Platt calibration of the served scores."""

from __future__ import annotations

import numpy as np

from aucstream.models.calibration import PlattCalibrator
from tests.service.test_api import HASHED, hashed_events


def test_probabilities_follow_the_scores_and_the_click_rate(app_client):
    c = app_client()
    assert c.post("/models", json=HASHED).status_code == 201
    events = hashed_events(3000, seed=1)
    items = [{"features": e["features"]} for e in hashed_events(200, seed=2)]
    fresh = c.post("/score", json={"model": "h", "items": items[:3]}).json()
    assert fresh["probabilities"] == [0.5, 0.5, 0.5]  # nothing learned: no information
    for i in range(0, 3000, 250):
        assert c.post("/learn", json={"model": "h", "events": events[i:i + 250]}).status_code \
            == 200
    out = c.post("/score", json={"model": "h", "items": items}).json()
    s, p = np.array(out["scores"]), np.array(out["probabilities"])
    assert p.shape == s.shape and ((p > 0) & (p < 1)).all()
    order = np.argsort(s, kind="stable")
    assert np.all(np.diff(p[order]) >= 0)  # same ranking as the scores
    # calibrated: the mean probability of fresh items is near their click rate
    labels = np.array([e["label"] for e in hashed_events(200, seed=2)])
    assert abs(p.mean() - labels.mean()) < 0.1
    info = c.get("/models/h").json()["calibration"]
    assert info["pairs"] == 3000 and 1000 <= info["fitted_on"] <= 3000
    assert info["a"] > 0 and 0 < info["log_loss"] < np.log(2)
    rate = np.mean([e["label"] for e in events])
    assert info["positive_rate"] == rate


def test_the_calibration_is_the_same_as_one_fed_the_prequential_pairs(app_client):
    """The service's map is PlattCalibrator's, on the learner's test-then-train scores."""
    c = app_client()
    c.post("/models", json={**HASHED, "learner": "solam"})
    events = hashed_events(1500, seed=3)
    for i in range(0, 1500, 300):
        c.post("/learn", json={"model": "h", "events": events[i:i + 300]})
    model = c.app.state.host.get("h")
    from tests.service.reference import Straight

    lrn = Straight(model.config)
    cal = PlattCalibrator()
    enc = model.encoder
    for i in range(0, 1500, 300):
        batch = enc.encode(events[i:i + 300])
        y = np.array([e["label"] for e in events[i:i + 300]])
        cal.update(lrn.score_then_learn(batch.learner_input(), y), y)
    info = c.get("/models/h").json()["calibration"]
    assert (info["a"], info["b"]) == cal.coef
    items = [{"features": e["features"]} for e in hashed_events(20, seed=4)]
    out = c.post("/score", json={"model": "h", "items": items}).json()
    assert np.array_equal(np.array(out["probabilities"]), cal.predict(np.array(out["scores"])))


def test_metrics_carry_the_log_loss(app_client):
    c = app_client()
    c.post("/models", json=HASHED)
    c.post("/learn", json={"model": "h", "events": hashed_events(400, seed=5)})
    text = c.get("/metrics").text
    line = next(x for x in text.splitlines() if x.startswith('aucstream_log_loss{model="h"}'))
    assert 0 < float(line.split()[-1]) < 1
    c.delete("/models/h")
    assert 'aucstream_log_loss{model="h"}' not in c.get("/metrics").text
