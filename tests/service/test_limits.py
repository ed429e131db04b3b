"""Limits exactly at their boundary, on both parse paths: events and items per request,
body bytes, the feature-value bound; and bodies the fast path must not take (invalid
UTF-8). At the limit a request is served; one past it, refused, and nothing learned."""

from __future__ import annotations

import json

import pytest

from aucstream.service import fastjson

LIMIT = 5  # events or items per request
BODY = 2048  # body bytes
BOUND = 100.0  # feature-value bound
DENSE = {"name": "d", "learner": "cbr_fifo", "features": {"kind": "dense", "dim": 2}}
HASHED = {"name": "h", "learner": "cbr_diag_fifo", "features": {"kind": "hashed", "bits": 8}}
# A number with more than 18 significant digits: the fast path leaves the body to the
# regular one, which reads it as 0.5.
SLOW_HALF = "0.5000000000000000000001"


@pytest.fixture
def limited(app_client):
    client = app_client(max_events_per_request=LIMIT, max_body_bytes=BODY,
                        max_feature_value=BOUND)
    for spec in (DENSE, HASHED):
        assert client.post("/models", json=spec).status_code == 201
    return client


def _item(spec, value, label=None):
    item = {"x": [value, 0.5]} if spec is DENSE else {"features": {"price": value, "half": 0.5}}
    if label is not None:
        item["label"] = label
    return item


def _body(spec, key, items, regular, pad=0):
    """The JSON body, on the requested parse path, padded with spaces to ``pad`` bytes."""
    text = json.dumps({"model": spec["name"], key: items})
    if regular:
        text = text.replace("0.5", SLOW_HALF)
    text = text + " " * max(0, pad - len(text))
    body = text.encode()
    parse = fastjson.parse_learn if key == "events" else fastjson.parse_score
    taken = parse(body, spec["features"], 10 ** 6, BOUND) is not None
    assert taken == (not regular) or len(items) > LIMIT or not _in_bound(items), \
        "the test's premise: the body takes the intended path"
    return body


def _in_bound(items):
    return all(abs(v) <= BOUND for it in items
               for v in (it.get("x") or list(it["features"].values())))


def _post(client, path, body):
    return client.post(path, content=body, headers={"content-type": "application/json"})


def _version(client, spec):
    return client.get(f"/models/{spec['name']}").json()["version"]


@pytest.mark.parametrize("regular", [False, True], ids=["fast", "regular"])
@pytest.mark.parametrize("spec", [DENSE, HASHED], ids=["dense", "hashed"])
def test_events_and_items_at_the_limit_are_served_and_one_more_is_413(limited, spec, regular):
    events = [_item(spec, 1.0, k % 2) for k in range(LIMIT + 1)]
    r = _post(limited, "/learn", _body(spec, "events", events[:LIMIT], regular))
    assert r.status_code == 200, r.text
    assert _version(limited, spec) == LIMIT
    r = _post(limited, "/learn", _body(spec, "events", events, regular))
    assert r.status_code == 413 and f"{LIMIT + 1} events exceed" in r.json()["message"]
    assert _version(limited, spec) == LIMIT
    items = [_item(spec, 1.0) for _ in range(LIMIT + 1)]
    r = _post(limited, "/score", _body(spec, "items", items[:LIMIT], regular))
    assert r.status_code == 200 and len(r.json()["scores"]) == LIMIT
    r = _post(limited, "/score", _body(spec, "items", items, regular))
    assert r.status_code == 413 and f"{LIMIT + 1} items exceed" in r.json()["message"]


@pytest.mark.parametrize("regular", [False, True], ids=["fast", "regular"])
@pytest.mark.parametrize("path", ["/learn", "/score"])
def test_a_body_of_exactly_the_limit_is_read_and_one_byte_more_is_413(limited, path,
                                                                       regular):
    key = "events" if path == "/learn" else "items"
    items = [_item(DENSE, 1.0, 1 if path == "/learn" else None)]
    at = _body(DENSE, key, items, regular, pad=BODY)
    assert len(at) == BODY
    assert _post(limited, path, at).status_code == 200
    over = at + b" "
    r = _post(limited, path, over)
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"

    def chunks(body):  # no content-length: the limit is enforced while reading
        yield body[:1000]
        yield body[1000:]

    assert limited.post(path, content=chunks(at)).status_code == 200
    r = limited.post(path, content=chunks(over))
    assert r.status_code == 413
    assert _version(limited, DENSE) == (2 if path == "/learn" else 0)


@pytest.mark.parametrize("regular", [False, True], ids=["fast", "regular"])
@pytest.mark.parametrize("spec", [DENSE, HASHED], ids=["dense", "hashed"])
def test_values_at_the_bound_are_learned_and_past_it_are_refused_by_name(limited, spec,
                                                                         regular):
    for sign in (1, -1):
        at = [_item(spec, sign * BOUND, 1)]
        r = _post(limited, "/learn", _body(spec, "events", at, regular))
        assert r.status_code == 200, r.text
    before = _version(limited, spec)
    past = [_item(spec, 1.0, 0), _item(spec, -BOUND * (1 + 1e-15), 1)]
    r = _post(limited, "/learn", _body(spec, "events", past, regular))
    assert r.status_code == 422, r.text
    where = ["events", 1, "x", 0] if spec is DENSE else ["events", 1, "features", "price"]
    detail = r.json()["details"][0]
    assert detail["loc"] == ["body", *where] and "within ±100" in detail["msg"], detail
    assert _version(limited, spec) == before
    r = _post(limited, "/score", _body(spec, "items", [_item(spec, 1e6)], regular))
    assert r.status_code == 422


def test_a_namespaced_value_past_the_bound_is_named(limited):
    event = {"features": {"user": {"age": 30.0, "spend": 1e9}}, "label": 1}
    r = limited.post("/learn", json={"model": "h", "events": [event]})
    assert r.status_code == 422
    assert r.json()["details"][0]["loc"] == ["body", "events", 0, "features", "user", "spend"]


@pytest.mark.parametrize("where", ["name", "value"])
def test_invalid_utf8_in_a_feature_is_refused_on_both_paths(limited, where):
    bad = b"caf\xe9"  # Latin-1, not UTF-8
    name, value = (bad, b'"x"') if where == "name" else (b"city", b'"' + bad + b'"')
    fast = (b'{"model": "h", "events": [{"features": {"' + name + b'": ' + value
            + b'}, "label": 1}]}')
    regular = fast.replace(b"}, \"label\"", b', "w": ' + SLOW_HALF.encode() + b'}, "label"')
    assert regular != fast
    fine = regular.replace(bad, b"cafe")  # the same body, valid: the regular path takes it
    assert fastjson.parse_learn(fine, HASHED["features"], 100, BOUND) is None
    assert _post(limited, "/learn", fine).status_code == 200
    assert _version(limited, HASHED) == 1
    assert fastjson.parse_learn(fast, HASHED["features"], 100, BOUND) is None
    answers = [_post(limited, "/learn", body) for body in (fast, regular)]
    assert [r.status_code for r in answers] == [422, 422], [r.text for r in answers]
    assert _version(limited, HASHED) == 1
    r = _post(limited, "/score", fast.replace(b'"events"', b'"items"'))
    assert r.status_code == 422


def test_a_model_with_interactions_learns_the_same_on_both_parse_paths(app_client):
    """The fast path leaves crossed features to the regular one: a body it would take
    gives the model exactly what the encoder makes."""
    from aucstream import models
    from aucstream.service.encoding import FeatureEncoder

    client = app_client()
    features = {"kind": "hashed", "bits": 12, "interactions": [["dev", "pos"]]}
    assert client.post("/models", json={"name": "x", "learner": "cbr_diag_fifo",
                                        "features": features}).status_code == 201
    assert client.get("/models/x").json()["features"] == features
    events = [{"features": {"dev": f"d{k % 3}", "pos": f"p{k % 2}"}, "label": k % 2}
              for k in range(30)]
    body = json.dumps({"model": "x", "events": events}).encode()
    assert fastjson.parse_learn(body, features, 1000, 1e12) is None
    assert fastjson.parse_learn(body, {"kind": "hashed", "bits": 12}, 1000, 1e12) is not None
    assert _post(client, "/learn", body).status_code == 200
    ref = models.create("cbr_diag_fifo", n_features=1 << 12)
    ref.score_then_learn(FeatureEncoder(features).encode(events).learner_input(),
                         [e["label"] for e in events])
    items = [{"features": e["features"]} for e in events[:6]]
    got = client.post("/score", json={"model": "x", "items": items}).json()["scores"]
    assert got == ref.score(FeatureEncoder(features).encode(items).learner_input()).tolist()
    r = client.post("/models", json={"name": "y", "learner": "cbr_diag_fifo", "features": {
        **features, "interactions": [["dev"]]}})
    assert r.status_code == 422 and r.json()["details"][0]["loc"][:3] == [
        "body", "features", "hashed"]
