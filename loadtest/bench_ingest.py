"""The stream-ingestion benchmark: events/s a model learns from a Redis stream.

Starts a throw-away ``redis-server`` (AOF, ``appendfsync always``, as the service
benchmark) and ``aucstream serve`` on it, fills a stream with ``--entries`` entries of
``--batch`` (500) hashed ad-click events each (ids included, as a producer should send
them), then creates a model with ``"ingest": {"redis_stream": ...}`` and times it from
creation until its version covers every event: the owner reads through a consumer group,
learns each entry through /learn's parser and durable append, and acknowledges it.
Prefilling measures what the ingester sustains (the producer is not what limits it). The
server's CPU time is reported too. This is a benchmark, not a test.

    python -m loadtest.bench_ingest                    # solam and cbr_diag_fifo
    python -m loadtest.bench_ingest --quick
    python -m loadtest.bench_ingest --write            # bench/RESULTS.md, "## Stream ingestion"
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import redis

from loadtest.bench_service import (
    RedisProcess,
    ServiceProcess,
    code_version,
    cpu_model,
    markdown_table,
    say,
    write_marked,
)
from loadtest.feed import AdClickFeed

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"solam": 300_000, "cbr_diag_fifo": 60_000}


def _http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def fill(r: redis.Redis, stream: str, entries: int, batch: int, seed: int) -> int:
    """Write the stream in pipelines; returns the events written."""
    feed = AdClickFeed(seed=seed)
    pipe = r.pipeline(transaction=False)
    for k in range(entries):
        pipe.xadd(stream, {"events": json.dumps(feed.events(k * batch, (k + 1) * batch))})
        if k % 50 == 49:
            pipe.execute()
    pipe.execute()
    return entries * batch


def run_one(service: ServiceProcess, r: redis.Redis, learner: str, entries: int, batch: int,
            bits: int) -> dict[str, Any]:
    stream = f"bench-ingest-{learner}"
    r.delete(stream, f"{stream}:dead")
    say(f"{learner}: filling {entries} entries of {batch} events")
    total = fill(r, stream, entries, batch, seed=7)
    cpu0 = service.cpu_seconds()
    t0 = time.perf_counter()
    _http("POST", f"{service.url}/models", {
        "name": f"ingest-{learner}", "learner": learner,
        "features": {"kind": "hashed", "bits": bits}, "ingest": {"redis_stream": stream}})
    version = 0
    while version < total:
        time.sleep(0.02)
        version = _http("GET", f"{service.url}/models/ingest-{learner}")["version"]
    elapsed = time.perf_counter() - t0
    cpu = service.cpu_seconds() - cpu0
    dead = r.xlen(f"{stream}:dead")
    pending = r.xpending(stream, "aucstream")["pending"]
    say(f"{learner}: {total} events in {elapsed:.2f} s = {total / elapsed:,.0f} events/s")
    return {"learner": learner, "events": total, "seconds": elapsed,
            "rate": total / elapsed, "cpu": cpu, "dead": dead, "pending": pending}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", nargs="+", default=list(TARGETS))
    ap.add_argument("--entries", type=int, default=400, help="stream entries per learner")
    ap.add_argument("--batch", type=int, default=500, help="events per entry")
    ap.add_argument("--bits", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="40 entries")
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = ap.parse_args(argv)
    entries = 40 if args.quick else args.entries
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rp = RedisProcess(work)
        rp.start()
        service = ServiceProcess(work, rp.url, log_level="warning")
        try:
            service.start()
            r = redis.Redis.from_url(rp.url)
            for learner in args.learners:
                rows.append(run_one(service, r, learner, entries, args.batch, args.bits))
            r.close()
        finally:
            service.stop()
            rp.stop()
    table = markdown_table(
        ["learner", "events", "seconds", "events/s", "target", "met", "server CPU s",
         "dead letters", "pending"],
        [[x["learner"], f"{x['events']:,}", f"{x['seconds']:.2f}", f"{x['rate']:,.0f}",
          f"{TARGETS.get(x['learner'], 0):,}",
          "yes" if x["rate"] >= TARGETS.get(x["learner"], 0) else "no",
          f"{x['cpu']:.1f}", x["dead"], x["pending"]] for x in rows])
    body = (f"`python -m loadtest.bench_ingest{' --quick' if args.quick else ''}` on "
            f"{dt.date.today()}, {cpu_model()}, code {code_version()}: a prefilled stream of "
            f"{entries} entries × {args.batch} hashed ad-click events (2^{args.bits}), "
            "redis-server with AOF appendfsync always, one `aucstream serve` process; from "
            "the model's creation until its version covers every event.\n\n" + table + "\n")
    print(body)
    if args.write:
        write_marked(REPO / "bench" / "RESULTS.md", "<!-- ingest:start -->",
                     "<!-- ingest:end -->", "## Stream ingestion", body)


if __name__ == "__main__":
    main()
