"""The /score express lane: serves the well-formed case itself, exactly as the route
would, and hands everything else to the route with the body intact."""

from __future__ import annotations

import asyncio
import json

import pytest

from aucstream.service.api.score_lane import ScoreLane

from .test_api import DENSE, HASHED, dense_events, hashed_events, metrics_of


def _items(events):
    return [{k: v for k, v in e.items() if k not in ("label", "id")} for e in events]


def _with_escape(items):
    """The same items, but with a JSON escape in one key: the fast parser leaves such a
    body to the route (pydantic), which decodes it to the same key."""
    body = json.dumps(items)
    return body.replace('"site"', '"\\u0073ite"', 1)


@pytest.mark.parametrize("spec", [DENSE, HASHED], ids=["dense", "hashed"])
def test_lane_and_route_give_the_same_answer(client, spec):
    client.post("/models", json=spec)
    name = spec["name"]
    events = dense_events(40) if spec is DENSE else hashed_events(60)
    assert client.post("/learn", json={"model": name, "events": events}).status_code == 200
    items = _items(events[:25])
    if spec is DENSE:
        escaped_items = json.dumps(items).replace('"x"', '"\\u0078"', 1)
    else:
        escaped_items = _with_escape(items)
    for top_k in (None, 3):
        tail = "" if top_k is None else f', "top_k": {top_k}'
        fast = client.post("/score", json={"model": name, "items": items,
                                           **({} if top_k is None else {"top_k": top_k})})
        slow = client.post("/score", content=f'{{"model": "{name}", "items": {escaped_items}'
                                             f'{tail}}}',
                           headers={"content-type": "application/json"})
        assert fast.status_code == slow.status_code == 200, (fast.text, slow.text)
        assert fast.json() == slow.json()
        assert fast.headers["content-type"] == slow.headers["content-type"]
        assert len(fast.json()["ranking"]) == (top_k or 25)


def test_lane_requests_get_ids_and_metrics(client):
    client.post("/models", json=DENSE)
    client.post("/learn", json={"model": "m", "events": dense_events(10)})
    before = metrics_of(client).get(
        ("aucstream_score_latency_seconds_count", (("model", "m"),)), 0.0)
    r = client.post("/score", json={"model": "m", "items": [{"x": [0.1] * 5}] * 3},
                    headers={"x-request-id": "abc123"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "abc123"
    after = metrics_of(client)[("aucstream_score_latency_seconds_count", (("model", "m"),))]
    assert after == before + 1


def test_lane_keeps_auth(app_client):
    client = app_client(api_keys="w1", read_keys="r1")
    client.post("/models", json=DENSE, headers={"Authorization": "Bearer w1"})
    body = {"model": "m", "items": [{"x": [0.0] * 5}]}
    assert client.post("/score", json=body).status_code == 401
    r = client.post("/score", json=body, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    for key in ("r1", "w1"):
        r = client.post("/score", json=body, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200 and r.json()["version"] == 0


# ---------------------------------------------------------------------------- ASGI level
class _Inner:
    """The application behind the lane: records what reached it, reading the body."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes, list[str]]] = []

    async def __call__(self, scope, receive, send) -> None:
        body, kinds = b"", []
        while True:
            message = await receive()
            kinds.append(message["type"])
            body += message.get("body", b"")
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        self.calls.append((scope["path"], body, kinds))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def _call(app, *, path="/score", method="POST", chunks=(b"",), headers=(), end="done"):
    """Run the lane over ``app``'s state on one request; returns (inner, sent)."""
    inner = _Inner()
    lane = ScoreLane(inner)
    queue = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
             for i, c in enumerate(chunks)]
    if end == "disconnect":
        queue[-1]["more_body"] = True
        queue.append({"type": "http.disconnect"})
    sent = []

    async def receive():
        if queue:
            return queue.pop(0)
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": list(headers),
             "app": app}
    asyncio.run(lane(scope, receive, send))
    return inner, sent


def _served(sent) -> dict:
    assert sent[0]["status"] == 200
    return json.loads(sent[1]["body"])


def test_lane_serves_the_common_case_without_the_route(client):
    client.post("/models", json=DENSE)
    body = json.dumps({"model": "m", "items": [{"x": [0.5] * 5}] * 4}).encode()
    inner, sent = _call(client.app, chunks=(body[:10], body[10:]))
    assert inner.calls == []
    assert _served(sent)["ranking"] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("case", "kwargs"),
    [
        ("another path", {"path": "/learn"}),
        ("another method", {"method": "GET"}),
        ("an unknown model", {"chunks": (b'{"model": "zz", "items": [{"x": [1,2,3,4,5]}]}',)}),
        ("a malformed body", {"chunks": (b'{"model": "m", "items": [{"x": [1,2', b",3]}]}",)}),
        ("a wrong dimension", {"chunks": (b'{"model": "m", "items": [{"x": [1, 2]}]}',)}),
        ("a client gone mid-body", {"chunks": (b'{"model": "m", ',), "end": "disconnect"}),
    ],
)
def test_lane_hands_everything_else_over_with_the_body_intact(client, case, kwargs):
    client.post("/models", json=DENSE)
    inner, sent = _call(client.app, **kwargs)
    assert len(inner.calls) == 1, case
    path, body, kinds = inner.calls[0]
    assert path == kwargs.get("path", "/score")
    assert body == b"".join(kwargs.get("chunks", (b"",)))
    assert kinds[-1] == ("http.disconnect" if kwargs.get("end") else "http.request")
    assert sent[0]["status"] == 299


def test_lane_hands_over_a_body_over_the_limit_unread_beyond_it(app_client):
    client = app_client(max_body_bytes=1024)
    client.post("/models", json=DENSE)
    chunks = (b'{"model": "m", "items": [' + b" " * 700, b" " * 700, b'{"x": [1,2,3,4,5]}]}')
    inner, _ = _call(client.app, chunks=chunks)
    assert len(inner.calls) == 1 and inner.calls[0][1] == b"".join(chunks)
    r = client.post("/score", content=b"".join(chunks),
                    headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"


def test_lane_leaves_refusals_to_the_route(app_client):
    client = app_client(api_keys="w1", read_keys="r1")
    client.post("/models", json=DENSE, headers={"Authorization": "Bearer w1"})
    body = b'{"model": "m", "items": [{"x": [1,2,3,4,5]}]}'
    for headers in ((), ((b"authorization", b"Bearer nope"),), ((b"authorization", b"r1"),)):
        inner, _ = _call(client.app, chunks=(body,), headers=headers)
        assert len(inner.calls) == 1 and inner.calls[0][1] == body
    inner, sent = _call(client.app, chunks=(body,), headers=((b"authorization", b"Bearer r1"),))
    assert inner.calls == [] and _served(sent)["version"] == 0
