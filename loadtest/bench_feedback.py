"""What the ad-click flow costs: /score with impressions kept, and labels by id.

The service as a subprocess on loopback (``aucstream serve``, the embedded store, or
``--redis`` for a throw-away redis-server), one hashed model (2^20) with
``feedback``, warmed with 20,000 events. Then:

- score p50/p99 and requests/s at 1 and 16 clients, 100 candidates per request, with
  every candidate carrying an id (uuid-like hex; kept as an impression: a store write),
  against the same requests without ids (the express lane);
- learn events/s of label-only events ``{"id", "label"}`` for those kept items, against
  full events of the same size, at 1 and 4 clients, batches of 500.

Each score row also gives the CPU the service spent per request (every worker; and
redis-server's with ``--redis``), and the cores it kept busy: one Python process runs
its requests under one interpreter lock, so a service at ~1 core is bound by that lock
whatever the machine has left. Of that, the event loops' share (each worker's main
thread: parsing, scoring, answering; the rest is worker threads' store writes and
SQLite's own work), and the CPU this benchmark's client took per request on the same
machine.

    python -m loadtest.bench_feedback [--redis] [--workers N] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loadtest.bench_service import (
    Client,
    RedisProcess,
    ServiceProcess,
    child_pids,
    code_version,
    cpu_model,
    learn_bodies,
    main_thread_cpu_seconds,
    proc_cpu_seconds,
    self_cpu_seconds,
    send_learns,
    send_scores,
    summarize,
    write_marked,
)
from loadtest.feed import AdClickFeed

RESULTS_MD = Path(__file__).resolve().parent.parent / "bench" / "RESULTS.md"
MODEL = "bench-feedback"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _uid(event_id: str) -> str:
    """A uuid-like id for an event (random-looking hex, as ad servers' impression ids: the
    feed's own ids, ``ad7-0``, ``ad7-1``, ..., would keep a store's id indexes in order)."""
    return hashlib.blake2b(event_id.encode(), digest_size=16).hexdigest()


def _score_bodies(events: list[dict[str, Any]], candidates: int, ids: bool) -> list[bytes]:
    out = []
    for a in range(0, len(events) - candidates + 1, candidates):
        items = [{"features": e["features"], **({"id": _uid(e["id"])} if ids else {})}
                 for e in events[a:a + candidates]]
        out.append(json.dumps({"model": MODEL, "items": items}).encode())
    return out


def _cpu(service: ServiceProcess, redis: RedisProcess | None
         ) -> tuple[float, float, float, float]:
    """CPU seconds so far of the service (all workers), of its event loops (the workers'
    main threads), of redis-server (0 without) and of this process (the client)."""
    store = 0.0 if redis is None or redis.proc is None else proc_cpu_seconds(redis.proc.pid)
    workers = [service.pid] if service.workers == 1 else child_pids(service.pid)
    loops = sum(main_thread_cpu_seconds(p) for p in workers)
    return service.cpu_seconds(), loops, store, self_cpu_seconds()


async def _run(service: ServiceProcess, redis: RedisProcess | None,
               args: argparse.Namespace) -> list[list[str]]:
    url = service.url
    feed = AdClickFeed(seed=7)
    rows: list[list[str]] = []
    async with Client(url, 64) as client:
        await client.request("DELETE", f"/models/{MODEL}")
        status, body = await client.json("POST", "/models", {
            "name": MODEL, "learner": args.learner, "features": {"kind": "hashed", "bits": 20},
            "feedback": {"window_s": 3600, "negative_after_s": None,
                         "max_pending": 10_000_000}})
        if status != 201:
            raise RuntimeError(f"creating the model: {status} {body}")
        warm = feed.events(0, 20_000)
        for e in warm:
            e.pop("id")
        await send_learns(client, learn_bodies(MODEL, warm, 500), 4)
        start = 20_000
        for clients in (1, 16):
            for ids in (False, True):
                n = args.score_requests
                events = feed.events(start, start + n * args.candidates)
                start += n * args.candidates
                bodies = _score_bodies(events, args.candidates, ids)
                # fresh connections per run: idle pooled ones may have been closed by the
                # server's keep-alive timeout meanwhile (a POST is not retried on them)
                async with Client(url, clients) as fresh:
                    cpu0 = _cpu(service, redis)
                    t0 = time.perf_counter()
                    lat, statuses = await send_scores(fresh, bodies, clients,
                                                      max(1, len(bodies) // clients))
                    wall = time.perf_counter() - t0
                    cpu1 = _cpu(service, redis)
                s = summarize(lat)
                label = "with ids (kept)" if ids else "without ids (express lane)"
                served = cpu1[0] - cpu0[0]
                per = [1e3 * (b - a) / len(lat) for a, b in zip(cpu0, cpu1, strict=True)]
                cpu = (f"service CPU {per[0]:.2f} ms/req ({served / wall:.2f} cores; event "
                       f"loop{'s' if args.workers > 1 else ''} {per[1]:.2f}), client "
                       f"{per[3]:.2f}")
                if redis is not None:
                    cpu += f", redis-server {per[2]:.2f} ms/req"
                rows.append(["score", label, str(clients), f"{len(lat) / wall:,.0f} req/s",
                             f"{s['p50']:.2f} / {s['p99']:.2f}",
                             ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
                             + "; " + cpu])
                say(f"  score {label}, {clients} clients: p99 {s['p99']:.2f} ms")
                if ids and clients == 16:
                    kept_events = events
        # label-only learns for the items kept by the last run, and full events alike
        for clients in (1, 4):
            n = min(args.learn_events, len(kept_events))
            half = n // 2 if clients == 1 else n - n // 2
            part = kept_events[:half] if clients == 1 else kept_events[n // 2:n]
            labels = [{"id": _uid(e["id"]), "label": e["label"]} for e in part]
            full = [{"features": e["features"], "label": e["label"]}
                    for e in feed.events(start, start + len(part))]
            start += len(part)
            for what, evs in (("labels by id", labels), ("full events", full)):
                async with Client(url, clients) as fresh:
                    t0 = time.perf_counter()
                    tally = await send_learns(fresh, learn_bodies(MODEL, evs, 500), clients)
                    wall = time.perf_counter() - t0
                rows.append(["learn", what, str(clients), f"{tally.accepted / wall:,.0f} ev/s",
                             "", f"accepted {tally.accepted:,} of {len(evs):,}"])
                say(f"  learn {what}, {clients} clients: {tally.accepted / wall:,.0f} ev/s")
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_feedback",
                                description=__doc__.split("\n")[0])
    p.add_argument("--redis", action="store_true", help="a throw-away redis-server store")
    p.add_argument("--learner", default="solam")
    p.add_argument("--score-requests", type=int, default=2000)
    p.add_argument("--candidates", type=int, default=100)
    p.add_argument("--learn-events", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=1, help="the service's worker processes")
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aucstream-bench-feedback-") as tmp:
        redis = None
        if args.redis:
            redis = RedisProcess(Path(tmp))
            redis.start()
        service = ServiceProcess(Path(tmp), redis.url if redis else None, log_level="warning",
                                 workers=args.workers)
        try:
            service.start()
            rows = asyncio.run(_run(service, redis, args))
        finally:
            service.stop()
            if redis is not None:
                redis.stop()
    store = "Redis" if args.redis else "SQLite"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = "\n".join([
        f"{when}; `python -m loadtest.bench_feedback {' '.join(argv)}`; {store} store; "
        f"{args.learner}, hashed 2^20 with feedback; {args.workers} worker"
        f"{'s' if args.workers > 1 else ''}; {cpu_model()}; {code_version()}. "
        f"Score: {args.candidates} candidates per request (each with an id: kept). Learn: "
        "batches of 500.", "",
        "| path | requests | clients | rate | p50 / p99 (ms) | notes |",
        "|---|---|---|---|---|---|", *("| " + " | ".join(r) + " |" for r in rows)])
    print(text)
    if args.write:
        tag = ("redis" if args.redis else "sqlite") + (
            f"-workers{args.workers}" if args.workers > 1 else "")
        where = store + (f", {args.workers} workers" if args.workers > 1 else "")
        write_marked(RESULTS_MD, f"<!-- feedback-cost-{tag}:begin -->",
                     f"<!-- feedback-cost-{tag}:end -->",
                     f"## The ad-click flow's cost ({where}, issue 12)", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
