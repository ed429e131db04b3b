"""Memory and learn speed of compact hashed models (issue 15, item 5).

A hashed model's learner used to be sized 2^bits whatever it learned; a compact one is
sized to the hashed columns it has seen (``service/feature_index.py``). For each learner,
on the ad-click feed (``loadtest/feed.py``, ~34 features per event) hashed into 2^20:

- **RSS per model**: a fresh subprocess hosts ``--models`` models that each learn until
  they have seen ``--features`` distinct columns (10,000 by default), and reports the
  growth of its resident set divided by the number of models, compact and full-sized.
  Batches are encoded once, outside the models, as the JSON fast path does (the slower
  pydantic path also fills a per-model string cache, not counted here).
- **Learn speed**: events/s of ``HostedModel._learn`` on 500-event batches after a
  50,000-event warm stream, compact against full-sized (best of 3).

    python -m bench.compact_memory
    python -m bench.compact_memory --write    # bench/RESULTS.md, "## Compact hashed models"
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
LEARNERS = ("cbr_diag_fifo", "solam", "logistic_nag", "auto")
RSS_TARGET = 2 * 2**20
SPEED_TARGET = 1.5


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _child(learner: str, compact: bool, n_models: int, features: int) -> dict:
    """Runs in a subprocess: RSS growth per model."""
    from aucstream.service.encoding import FeatureEncoder
    from aucstream.service.hosting import HostedModel, build_config
    from loadtest.feed import AdClickFeed

    config = build_config("m", learner, {}, {"kind": "hashed", "bits": 20}, 0, False, 1000)
    config = dict(config, compact=compact and config["compact"])
    enc = FeatureEncoder({"kind": "hashed", "bits": 20})
    feed = AdClickFeed(seed=1)
    batches, seen, k = [], set(), 0
    while len(seen) < features:
        ev = feed.events(k, k + 500)
        k += 500
        b = enc.encode(ev)
        X = b.learner_input()
        seen.update(X[1].tolist())
        batches.append((X, np.array([e["label"] for e in ev], np.int8)))
    warm = HostedModel(config)  # compile and fault in everything once
    for X, y in batches[:2]:
        warm._learn(X, y)
    warm._make_snapshot()
    del warm
    import gc
    gc.collect()
    before = _rss()
    hosted = []
    accounted = 0
    for i in range(n_models):
        m = HostedModel(dict(config, name=f"m{i}"))
        for X, y in batches:
            m._learn(X, y)
        m._snapshot = m._make_snapshot()
        accounted += m.memory_bytes()
        hosted.append(m)
    gc.collect()
    return {"rss_per_model": (_rss() - before) / n_models, "accounted": accounted / n_models,
            "events": k, "features": len(seen),
            "learner_dim": hosted[0].learner.n_features}


def rss(learner: str, compact: bool, n_models: int, features: int) -> dict:
    code = ("import json, sys; from bench.compact_memory import _child; "
            f"print(json.dumps(_child({learner!r}, {compact}, {n_models}, {features})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(REPO),
                                                     **_env()}).stdout
    return json.loads(out.strip().splitlines()[-1])


def _env() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def speed(learner: str, batches: int = 40) -> tuple[float, float]:
    from aucstream.service.hosting import HostedModel, build_config
    from loadtest.feed import AdClickFeed

    config = build_config("m", learner, {}, {"kind": "hashed", "bits": 20}, 0, False, 1000)
    feed = AdClickFeed(seed=1)
    warm = feed.events(0, 50_000)
    later = [feed.events(50_000 + 500 * j, 50_500 + 500 * j) for j in range(batches)]
    rates = {}
    for label, c in (("compact", config), ("full", dict(config, compact=False))):
        best = []
        for _ in range(3):
            m = HostedModel(c)
            b = m.encoder.encode(warm)
            m._learn(b.learner_input(), np.array([e["label"] for e in warm], np.int8))
            enc = [(m.encoder.encode(x), np.array([e["label"] for e in x], np.int8))
                   for x in later]
            t = time.perf_counter()
            for eb, y in enc:
                m._learn(eb.learner_input(), y)
            best.append(time.perf_counter() - t)
        rates[label] = 500 * batches / min(best)
    return rates["compact"], rates["full"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", nargs="+", default=list(LEARNERS))
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--features", type=int, default=10_000)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for learner in args.learners:
        print(f"{learner}: RSS", file=sys.stderr)
        c = rss(learner, True, args.models, args.features)
        f = rss(learner, False, max(2, args.models // 5), args.features)
        print(f"{learner}: speed", file=sys.stderr)
        sc, sf = speed(learner)
        rows.append((learner, c, f, sc, sf))
    lines = ["| learner | distinct features | compact: RSS per model | learner columns | "
             "full-sized: RSS per model | ≤ 2 MB | learn events/s compact | full-sized | "
             "slowdown | ≤ 1.5× |", "|---|---|---|---|---|---|---|---|---|---|"]
    for learner, c, f, sc, sf in rows:
        slow = sf / sc
        lines.append(
            f"| {learner} | {c['features']:,} | {c['rss_per_model'] / 2**20:.2f} MB "
            f"(accounted {c['accounted'] / 2**20:.2f}) | {c['learner_dim']:,} | "
            f"{f['rss_per_model'] / 2**20:.1f} MB | "
            f"{'yes' if c['rss_per_model'] <= RSS_TARGET else '**no**'} | {sc:,.0f} | "
            f"{sf:,.0f} | {slow:.2f}× | {'yes' if slow <= SPEED_TARGET else '**no**'} |")
    from loadtest.bench_service import code_version, cpu_model
    body = (f"`python -m bench.compact_memory` on {dt.date.today()}, {cpu_model()}, code "
            f"{code_version()}: ad-click events hashed into 2^20, each model learning until "
            f"it has seen {args.features:,} distinct columns; RSS growth of a subprocess "
            f"hosting {args.models} compact (or {max(2, args.models // 5)} full-sized) "
            "models, per model (learner, scoring snapshot, feature index, rolling AUC, "
            "calibration); 'accounted' is GET /models' memory_bytes. Learn speed: "
            "HostedModel._learn on 500-event batches after 50,000 events, best of 3.\n\n"
            + "\n".join(lines) + "\n")
    print(body)
    if args.write:
        from loadtest.bench_service import write_marked
        write_marked(REPO / "bench" / "RESULTS.md", "<!-- compact:start -->",
                     "<!-- compact:end -->", "## Compact hashed models", body)


if __name__ == "__main__":
    main()
