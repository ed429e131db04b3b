"""Interactive load on a running aucstream with locust (``pip install locust``; not a test
dependency).

    locust -f loadtest/locustfile.py --host http://127.0.0.1:8000
    locust -f loadtest/locustfile.py --host http://127.0.0.1:8000 --headless -u 16 -r 4 -t 1m

Each simulated user learns batches of ad-click-like events (``loadtest.feed``) into one
shared hashed model and scores candidate lists against it, 1 learn for every
``AUCSTREAM_LOCUST_SCORES_PER_LEARN`` scores. Score bodies are serialised ahead of time;
learn bodies are made on the fly (~10-20 ms of client CPU per 500 events: add
``--processes N`` when locust's CPU runs out before the service's). Every user draws its
own slice of the event stream (distinct ids), so nothing is learned twice.
For throughput numbers use ``python -m loadtest.bench_service`` instead.

Environment: ``AUCSTREAM_LOCUST_MODEL`` (default ``locust-ads``), ``..._LEARNER``
(``cbr_diag_fifo``), ``..._BITS`` (20), ``..._BATCH`` (events per learn, 500),
``..._CANDIDATES`` (items per score, 100), ``..._SCORES_PER_LEARN`` (4), ``..._KEY``
(a bearer key, when the service requires one). The model is created (or kept) at start.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path

from locust import HttpUser, between, events, task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtest.feed import AdClickFeed

MODEL = os.environ.get("AUCSTREAM_LOCUST_MODEL", "locust-ads")
LEARNER = os.environ.get("AUCSTREAM_LOCUST_LEARNER", "cbr_diag_fifo")
BITS = int(os.environ.get("AUCSTREAM_LOCUST_BITS", "20"))
BATCH = int(os.environ.get("AUCSTREAM_LOCUST_BATCH", "500"))
CANDIDATES = int(os.environ.get("AUCSTREAM_LOCUST_CANDIDATES", "100"))
SCORES_PER_LEARN = int(os.environ.get("AUCSTREAM_LOCUST_SCORES_PER_LEARN", "4"))
KEY = os.environ.get("AUCSTREAM_LOCUST_KEY")

HEADERS = {"content-type": "application/json"}
if KEY:
    HEADERS["authorization"] = f"Bearer {KEY}"

_users = itertools.count()
_SLICE = 10_000_000  # events reserved for each user: distinct ids, no overlaps
_score_bodies: list[bytes] = []


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


@events.test_start.add_listener
def _setup(environment, **_kwargs) -> None:
    """Create the model if missing, and serialise a pool of score requests."""
    import urllib.error
    import urllib.request

    host = environment.host or "http://127.0.0.1:8000"
    body = _dumps({"name": MODEL, "learner": LEARNER,
                   "features": {"kind": "hashed", "bits": BITS}})
    req = urllib.request.Request(f"{host}/models", data=body, headers=HEADERS, method="POST")
    try:
        urllib.request.urlopen(req, timeout=30).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # 409: it exists, keep it
            raise
    feed = AdClickFeed(seed=99)
    for k in range(50):
        items = [{"features": e["features"]}
                 for e in feed.events(k * CANDIDATES, (k + 1) * CANDIDATES)]
        _score_bodies.append(_dumps({"model": MODEL, "items": items}))


class AucstreamUser(HttpUser):
    wait_time = between(0.0, 0.05)

    def on_start(self) -> None:
        self.index = next(_users)
        self.feed = AdClickFeed(seed=7, id_prefix=f"locust-{os.getpid()}-{self.index}-")
        self.position = self.index * _SLICE
        self.scores = itertools.cycle(_score_bodies[self.index % 50:] +
                                      _score_bodies[: self.index % 50])

    @task(1)
    def learn(self) -> None:
        batch = self.feed.events(self.position, self.position + BATCH)
        self.position += BATCH
        body = _dumps({"model": MODEL, "events": batch})
        with self.client.post("/learn", data=body, headers=HEADERS, name="/learn",
                              catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"{r.status_code}: {r.text[:200]}")

    @task(SCORES_PER_LEARN)
    def score(self) -> None:
        with self.client.post("/score", data=next(self.scores), headers=HEADERS,
                              name="/score", catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"{r.status_code}: {r.text[:200]}")
