"""GET /models/{name}/export and POST /models/import: a model moves between stores with
its scores and version, then learns on exactly as the original; damaged exports are 422s
that create nothing."""

from __future__ import annotations

import uuid

import msgpack
import pytest
from fastapi.testclient import TestClient

from aucstream.service.app import create_app
from aucstream.service.settings import Settings
from tests.service.conftest import wait_ready

SPECS = [
    {"name": "h", "learner": "cbr_diag_fifo", "features": {"kind": "hashed", "bits": 12}},
    {"name": "d", "learner": "cbr_fifo", "features": {"kind": "dense", "dim": 3},
     "standardize": True},
    {"name": "a", "learner": "auto", "features": {"kind": "hashed", "bits": 10},
     "params": {"block": 20, "min_events": 20}},
]


def _events(spec, start, n):
    out = []
    for k in range(start, start + n):
        if spec["features"]["kind"] == "dense":
            out.append({"x": [0.3 * (k % 5), -0.1 * (k % 3), 1.0 + k % 2],
                        "label": int(k % 3 == 0), "id": f"e{k}"})
        else:
            out.append({"features": {"site": f"s{k % 7}", "dev": f"d{k % 3}", "n": k % 4},
                        "label": int(k % 3 == 0), "id": f"e{k}"})
    return out


def _probe(spec):
    return [{k: v for k, v in e.items() if k in ("x", "features")}
            for e in _events(spec, 1000, 8)]


@pytest.fixture
def two_stores(tmp_path, redis_server):
    clients = []

    def start(settings: Settings) -> TestClient:
        c = TestClient(create_app(settings))
        c.__enter__()
        clients.append(c)
        wait_ready(c)
        return c

    sqlite = start(Settings(data_dir=tmp_path / "data", sync_interval=0.05))
    redis = start(Settings(data_dir=tmp_path / "unused", redis_url=redis_server.url,
                           redis_prefix=f"x{uuid.uuid4().hex[:8]}", sync_interval=0.05))
    yield sqlite, redis
    for c in reversed(clients):
        c.__exit__(None, None, None)


@pytest.mark.parametrize("spec", SPECS, ids=[s["learner"] for s in SPECS])
def test_a_model_moves_from_sqlite_to_redis_and_learns_on_identically(two_stores, spec):
    src, dst = two_stores
    assert src.post("/models", json=spec).status_code == 201
    for a in range(0, 120, 40):
        assert src.post("/learn", json={"model": spec["name"],
                                        "events": _events(spec, a, 40)}).status_code == 200
    r = src.get(f"/models/{spec['name']}/export")
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-aucstream-model"
    blob = r.content
    r = dst.post("/models/import?name=moved", content=blob,
                 headers={"content-type": "application/x-aucstream-model"})
    assert r.status_code == 201, r.text
    moved, orig = r.json(), src.get(f"/models/{spec['name']}").json()
    for key in ("version", "events", "rolling_auc", "params", "features", "learner",
                "buffer_fill"):
        assert moved[key] == orig[key], key
    assert moved["name"] == "moved"
    probe = _probe(spec)
    a = src.post("/score", json={"model": spec["name"], "items": probe}).json()
    b = dst.post("/score", json={"model": "moved", "items": probe}).json()
    assert a == b
    more = _events(spec, 120, 30)
    assert src.post("/learn", json={"model": spec["name"], "events": more}).status_code == 200
    assert dst.post("/learn", json={"model": "moved", "events": more}).status_code == 200
    a = src.post("/score", json={"model": spec["name"], "items": probe}).json()
    b = dst.post("/score", json={"model": "moved", "items": probe}).json()
    assert a["scores"] == b["scores"] and a["version"] == b["version"] == 150
    # and back, under its exported name, into a store where it is gone
    assert src.delete(f"/models/{spec['name']}").status_code == 204
    back = src.post("/models/import", content=dst.get("/models/moved/export").content)
    assert back.status_code == 201 and back.json()["name"] == "moved"


def _bad_exports(blob: bytes) -> dict[str, bytes]:
    doc = msgpack.unpackb(blob, raw=False)
    out = {"truncated": blob[: len(blob) // 2], "not msgpack": b"\xc1\xc1garbage",
           "another file": b'{"hello": "world"}'}
    out["foreign format version"] = msgpack.packb({**doc, "format": 99}, use_bin_type=True)
    out["not an export"] = msgpack.packb({**doc, "kind": "something"}, use_bin_type=True)
    out["damaged state"] = msgpack.packb({**doc, "state": doc["state"][:-40]},
                                         use_bin_type=True)
    out["bad learner"] = msgpack.packb({**doc, "config": {**doc["config"], "learner": "nope"}},
                                       use_bin_type=True)
    out["wrong dimension"] = msgpack.packb(
        {**doc, "config": {**doc["config"], "features": {"kind": "dense", "dim": 4}}},
        use_bin_type=True)
    return out


def test_damaged_or_foreign_exports_are_refused_and_create_nothing(client):
    spec = SPECS[1]
    client.post("/models", json=spec)
    client.post("/learn", json={"model": "d", "events": _events(spec, 0, 20)})
    blob = client.get("/models/d/export").content
    expected = {"truncated": "not a model export", "not msgpack": "not a model export",
                "another file": "not a model export",
                "foreign format version": "format 99; this aucstream reads format 1",
                "not an aucstream model export": "",
                "damaged state": "", "bad learner": "Unknown learner 'nope'",
                "wrong dimension": "does not restore"}
    for what, bad in _bad_exports(blob).items():
        r = client.post("/models/import?name=x", content=bad)
        assert r.status_code == 422, (what, r.text)
        body = r.json()
        assert body["error"] == "validation_error" and body["details"][0]["loc"] == ["body"]
        assert expected.get(what, "") in body["message"], (what, body["message"])
    assert [m["name"] for m in client.get("/models").json()["models"]] == ["d"]
    r = client.post("/models/import", content=blob)  # its own name: taken
    assert r.status_code == 409
    assert client.post("/models/import?name=bad%20name", content=blob).status_code == 422
    assert client.get("/models/nope/export").status_code == 404
