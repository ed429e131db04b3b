"""The fault benchmark's load: marked events, 16 retrying clients, poison inputs.

Every event sent carries a unique event number k ("marker") in its payload, so that the
durable log can be audited event by event afterwards, with or without ids: a dense model
gets ``x[0] = k * 2^-20`` and a hashed model the numeric feature ``evn = k * 2^-20``
(exact in float64; events of the ad-click pool whose features collide with ``evn``'s
hashed index are left out of the pool, so that the value at that index is the marker
alone). Ids, when sent, are ``e<k>``.

Clients follow the service's contract: 503 (nothing learned) and a refused connection
(nothing sent) are retried with the same body; 504 ``outcome_unknown``, a read timeout
and a dropped connection are retried only by requests with ids. Every attempt's outcome
is recorded per request, for the audit and the 5xx counts.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from loadtest.feed import AdClickFeed, DenseFeed

__all__ = ["DENSE", "HASHED", "MARK", "MARK_FEATURE", "POISON", "Load", "ModelSpec", "Req",
           "marker_index", "score_items"]

MARK = 2.0 ** -20  # marker value = k * MARK, exact for k < 2^53
MARK_FEATURE = "evn"
MAX_EVENTS = 1000  # AUCSTREAM_MAX_EVENTS_PER_REQUEST of the benchmark's service
MAX_BODY = 1 << 20  # AUCSTREAM_MAX_BODY_BYTES of the benchmark's service
POOL = 8192  # distinct feed events, reused with fresh markers
RETRY_WAIT = {"503": 0.2, "504": 0.2, "conn": 0.1, "timeout": 0.2, "dropped": 0.1}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    learner: str
    features: dict[str, Any]

    @property
    def hashed(self) -> bool:
        return self.features["kind"] == "hashed"

    def create_body(self) -> dict[str, Any]:
        return {"name": self.name, "learner": self.learner, "features": self.features}


HASHED = ModelSpec("f-hashed", "cbr_diag_fifo", {"kind": "hashed", "bits": 18})
DENSE = ModelSpec("f-dense", "cbr_fifo", {"kind": "dense", "dim": 8})


def marker_index(bits: int) -> int:
    """The hashed index of the marker feature, as the service computes it."""
    from aucstream.service.encoding import FeatureEncoder

    enc = FeatureEncoder({"kind": "hashed", "bits": bits})
    return int(enc.encode([{"features": {MARK_FEATURE: 0.5}}]).indices[0])


_pools: dict[str, list[tuple[Any, int]]] = {}


def pool(spec: ModelSpec) -> list[tuple[Any, int]]:
    """(features dict or x row, label) of the model's event pool (built once)."""
    if spec.name in _pools:
        return _pools[spec.name]
    if spec.hashed:
        from aucstream.service.encoding import FeatureEncoder

        events = AdClickFeed(seed=11).events(0, POOL)
        enc = FeatureEncoder(spec.features).encode(events)
        hit = np.flatnonzero(enc.indices == marker_index(spec.features["bits"]))
        bad = set((np.searchsorted(enc.indptr, hit, side="right") - 1).tolist())
        out = [(e["features"], int(e["label"])) for i, e in enumerate(events) if i not in bad]
    else:
        events = DenseFeed(spec.features["dim"], seed=12).events(0, POOL)
        out = [(e["x"], int(e["label"])) for e in events]
    _pools[spec.name] = out
    return out


def marked_event(spec: ModelSpec, k: int, ids: bool, **override: Any) -> dict[str, Any]:
    """Event number ``k`` of the model's stream; ``override`` replaces features (hashed)
    or ``x[1]`` (dense, key ``x1``)."""
    events = pool(spec)
    feats, label = events[k % len(events)]
    if spec.hashed:
        ev: dict[str, Any] = {"features": {**feats, MARK_FEATURE: k * MARK, **override}}
    else:
        x = [k * MARK, *feats[1:]]
        if "x1" in override:
            x[1] = override["x1"]
        ev = {"x": x}
    ev["label"] = label
    if ids:
        ev["id"] = f"e{k}"
    return ev


def score_items(spec: dict[str, Any], n: int = 3) -> list[dict[str, Any]]:
    """Score items for any feature spec (a created poison model's too)."""
    if spec.get("kind") == "hashed":
        return [{"features": f} for f, _ in pool(HASHED)[:n]]
    rng = np.random.default_rng(5)
    return [{"x": rng.normal(size=int(spec.get("dim", 1))).round(4).tolist()} for _ in range(n)]


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def error_body_ok(raw: bytes) -> bool:
    """Whether a 4xx body is the documented ``{"error", "message", "details"}``."""
    try:
        body = json.loads(raw)
    except ValueError:
        return False
    return (isinstance(body, dict) and {"error", "message", "details"} <= set(body)
            and isinstance(body["error"], str) and isinstance(body["details"], list))


@dataclass
class Req:
    """One request (all its attempts): which events it carried and what came back."""

    model: str | None  # the audited model its events went to (None: not audited)
    k0: int  # markers k0 .. k0 + n - 1
    n: int
    ids: bool
    kind: str  # "load", "probe", or a poison kind
    statuses: list[str] = field(default_factory=list)
    final: str = ""  # acked / refused (4xx) / failed / gave-up
    body_ok: bool | None = None  # a 4xx answered with the documented error body
    detail: str = ""  # the first bytes of an unexpected answer
    seconds: float = 0.0  # from the first attempt to the last answer

    @property
    def acked(self) -> bool:
        return self.final == "acked"


def _outcome(exc: Exception) -> str:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return "conn"  # nothing was sent
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    return "dropped"  # sent, connection lost before the answer


# ------------------------------------------------------------------- poison inputs
# kind -> (expected answer, cap on attempts per run or 0). "reject": a 4xx (413/422) with
# the error body and nothing learned; "no-5xx": any answer but a 5xx, the model finite.
POISON: dict[str, tuple[str, int]] = {
    "max-float": ("reject", 0), "1e160": ("reject", 0), "-1e200": ("reject", 0),
    "subnormal": ("no-5xx", 0), "nan-token": ("reject", 0), "inf-token": ("reject", 0),
    "bad-utf8": ("reject", 0), "noam-sigma": ("reject", 3), "opauc-eta": ("reject", 3),
    "oversized-body": ("reject", 0), "too-many-events": ("reject", 0),
}


class Load:
    """``clients`` threads sending batches of ``batch`` events to ``models`` (client c to
    model c mod len), one request in 5 without ids, every ``poison_every``-th request of
    each client a poison input (0 = none), until :meth:`stop`."""

    def __init__(self, url: str, models: list[ModelSpec], clients: int, batch: int,
                 poison_every: int = 0, drain: float = 30.0) -> None:
        self.url = url
        self.models = models
        self.n_clients = clients
        self.batch = batch
        self.poison_every = poison_every
        self.drain = drain
        self._next = itertools.count(1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.drain_deadline = math.inf
        self.records: list[list[Req]] = [[] for _ in range(clients)]
        self.acked_events = [0] * clients
        self.live: list[Counter] = [Counter() for _ in range(clients)]
        self.created: list[dict[str, Any]] = []  # poison models the service created
        self._caps: Counter = Counter()
        self._threads: list[threading.Thread] = []
        self.started = 0.0

    # ------------------------------------------------------------------ control
    def start(self) -> None:
        for spec in self.models:
            pool(spec)  # built before the clock starts
        self.started = time.monotonic()
        self._threads = [threading.Thread(target=self._client, args=(c,), daemon=True,
                                          name=f"faults-client-{c}")
                         for c in range(self.n_clients)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """No new requests; retries go on for ``drain`` seconds, then give up."""
        self.drain_deadline = time.monotonic() + self.drain
        self._stop.set()
        for t in self._threads:
            t.join(self.drain + 90)

    def abort(self) -> None:
        """Stop at once (Ctrl-C, failure): no retries, threads left to end by themselves."""
        self.drain_deadline = 0.0
        self._stop.set()
        deadline = time.monotonic() + 2.0  # daemon threads: a request in flight may linger
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def alloc(self, n: int) -> int:
        with self._lock:
            k0 = next(self._next)
            for _ in range(n - 1):
                next(self._next)
        return k0

    def progress(self) -> tuple[int, Counter]:
        total: Counter = Counter()
        for c in self.live:
            try:
                total.update(dict(c))
            except RuntimeError:  # a client added a key meanwhile: skip it this time
                continue
        return sum(self.acked_events), total

    def all_records(self) -> list[Req]:
        return [r for recs in self.records for r in recs]

    # ------------------------------------------------------------------ clients
    def _client(self, c: int) -> None:
        with httpx.Client(base_url=self.url, timeout=httpx.Timeout(60.0, connect=2.0)) as http:
            for i in itertools.count(1):
                if self._stop.is_set():
                    return
                if self.poison_every and i % self.poison_every == 0:
                    self._poison(http, c, (i // self.poison_every + c) % len(POISON))
                else:
                    spec = self.models[c % len(self.models)]
                    self.learn(http, spec, self.batch, ids=(i + c) % 5 != 0, client=c)

    def learn(self, http: httpx.Client, spec: ModelSpec, n: int, *, ids: bool, client: int,
              kind: str = "load", retry: bool = True) -> Req:
        k0 = self.alloc(n)
        events = [marked_event(spec, k, ids) for k in range(k0, k0 + n)]
        rec = Req(spec.name, k0, n, ids, kind)
        self._send(http, client, rec, "/learn", dumps({"model": spec.name, "events": events}),
                   retry=retry)
        return rec

    def _send(self, http: httpx.Client, client: int, rec: Req, path: str, body: bytes, *,
              retry: bool) -> httpx.Response | None:
        self.records[client].append(rec)
        live = self.live[client]
        t0 = time.monotonic()
        try:
            return self._attempts(http, client, rec, path, body, retry=retry, live=live)
        finally:
            rec.seconds = time.monotonic() - t0

    def _attempts(self, http: httpx.Client, client: int, rec: Req, path: str, body: bytes, *,
                  retry: bool, live: Counter) -> httpx.Response | None:
        while True:
            resp = None
            try:
                resp = http.post(path, content=body,
                                 headers={"content-type": "application/json"})
                status = str(resp.status_code)
            except httpx.TransportError as exc:
                status = _outcome(exc)
            rec.statuses.append(status)
            live[status] += 1
            if status in ("200", "201", "202"):
                rec.final = "acked"
                if rec.model is not None and path == "/learn":
                    self.acked_events[client] += rec.n
                return resp
            if resp is not None and 400 <= resp.status_code < 500:
                rec.final = "refused"
                rec.body_ok = error_body_ok(resp.content)
                rec.detail = resp.text[:200]
                return resp
            if resp is not None and not rec.detail:
                rec.detail = resp.text[:200]
            safe = status in ("503", "conn") or (rec.ids and status in RETRY_WAIT)
            if not (retry and safe):
                rec.final = "failed"
                return resp
            if time.monotonic() > self.drain_deadline:
                rec.final = "gave-up"
                return resp
            time.sleep(RETRY_WAIT[status])

    # ------------------------------------------------------------------ poison
    def _poison(self, http: httpx.Client, c: int, which: int) -> None:
        kinds = list(POISON)
        for j in range(len(kinds)):  # the next kind not at its cap
            kind = kinds[(which + j) % len(kinds)]
            cap = POISON[kind][1]
            with self._lock:
                if cap and self._caps[kind] >= cap:
                    continue
                self._caps[kind] += 1
            break
        else:
            return
        if kind in ("noam-sigma", "opauc-eta"):
            self._poison_model(http, c, kind)
            return
        hashed = kind in ("max-float", "1e160", "nan-token", "bad-utf8", "oversized-body")
        spec = HASHED if hashed else DENSE
        if spec not in self.models:
            return
        n = MAX_EVENTS + 1 if kind == "too-many-events" else 5
        k0 = self.alloc(n)
        events = [marked_event(spec, k, True) for k in range(k0, k0 + n)]
        bad = events[n // 2]
        if kind == "max-float":
            bad["features"]["a"] = 1.7976931348623157e308
        elif kind == "1e160":
            bad["features"]["price"] = 1e160
        elif kind == "-1e200":
            bad["x"][1] = -1e200
        elif kind == "subnormal":
            bad["x"][1] = 5e-324
        elif kind in ("nan-token", "bad-utf8"):
            bad["features"]["__poison__"] = "__poison__"
        elif kind == "inf-token":
            bad["x"][1] = "__inf__"
        elif kind == "oversized-body":
            bad["features"]["blob"] = "x" * (MAX_BODY + 1000)
        body = dumps({"model": spec.name, "events": events})
        if kind == "nan-token":
            body = body.replace(b'"__poison__":"__poison__"', b'"nan":NaN')
        elif kind == "bad-utf8":
            body = body.replace(b'"__poison__":"__poison__"', b'"\xff\xfe":1.0')
        elif kind == "inf-token":
            body = body.replace(b'"__inf__"', b"Infinity")
        self._send(http, c, Req(spec.name, k0, n, True, kind), "/learn", body, retry=False)

    def _poison_model(self, http: httpx.Client, c: int, kind: str) -> None:
        learner, params = (("noam", {"sigma": 1e-300}) if kind == "noam-sigma"
                           else ("opauc", {"eta": 1e30}))
        spec = ModelSpec(f"poison-{kind}-{self.alloc(1)}", learner, {"kind": "dense", "dim": 8})
        body = {**spec.create_body(), "params": params}
        rec = Req(None, 0, 0, False, kind)
        self._send(http, c, rec, "/models", dumps(body), retry=False)
        if rec.acked:  # created: it must still never break; learn on it once
            with self._lock:
                self.created.append(body)
            k0 = self.alloc(5)
            events = [marked_event(DENSE, k, True) for k in range(k0, k0 + 5)]
            self._send(http, c, Req(None, k0, 5, True, f"{kind}: learn"), "/learn",
                       dumps({"model": spec.name, "events": events}), retry=False)
