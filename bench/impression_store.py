"""What keeping impressions costs the store itself, as a model fills up.

The ad-click feed's rows, encoded and packed as /score keeps them (hashed 2^20, 100 per
request, or ``--items``; ids random 128-bit hex, as uuids, unless ``--sequential-ids``),
kept through ``Store.keep_impression_groups`` in groups of ``--group`` requests (the group commit of
concurrent /score requests) until the model holds ``--prefill`` impressions; then timed:

- keep: milliseconds per request over the next ``--group`` × 40 requests;
- labels: items per second found and claimed by id, batches of 500 ids drawn at random
  from everything kept (as clicks arrive for scattered requests), through a second store
  object on the same backend (another process's view: its own id index, read from the
  store first); by ``take_impressions`` (one call, as the service joins labels since
  2026-11-29) and, alternating batch by batch, by ``get_impressions`` then
  ``claim_impressions`` (the two calls it replaced).

    python -m bench.impression_store [--redis] [--prefill 200000 1000000] [--group 16]
                                     [--items 100]

``--items 1`` is a fraud check's request (one event scored): one slate per item.

``--churn LIVE`` instead keeps requests that expire while the model goes on keeping
(each group shown a second after the one before, kept for ``LIVE`` seconds: about
``LIVE`` × ``--group`` × ``--items`` ids held at a time, ``--groups`` groups in all;
synthetic payloads), and gives the distribution of the time one group's keep takes:
the tail is where the embedded store's id index is rebuilt to forget expired ids, or
grows.

    python -m bench.impression_store --churn 600 [--groups 2500]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np

from aucstream.service.encoding import FeatureEncoder
from aucstream.service.feedback import impressions_of
from aucstream.service.store import PackedItems, SqliteStore, Store
from aucstream.service.store.redis_store import RedisStore
from loadtest.bench_service import RedisProcess, code_version, cpu_model
from loadtest.feed import AdClickFeed

MODEL = "bench-impressions"


def _requests(n: int, sequential: bool, seed: int = 7, items: int = 100
              ) -> list[list[tuple[str, bytes]]]:
    enc = FeatureEncoder({"kind": "hashed", "bits": 20})
    feed = AdClickFeed(seed=seed)
    rng = random.Random(seed)
    out = []
    for a in range(0, n, 10_000):
        events = feed.events(a, min(n, a + 10_000))
        for b in range(0, len(events), items):
            chunk = events[b:b + items]
            batch = enc.encode([{"features": e["features"]} for e in chunk])
            ids = ([e["id"] for e in chunk] if sequential else  # (uuid4-like otherwise)
                   [f"{rng.getrandbits(128):032x}" for _ in chunk])
            out.append(impressions_of(batch, ids, np.zeros(len(chunk)), 1))
    return out


def measure(make: Callable[[], Store], prefill: int, group: int, sequential: bool,
            items: int = 100) -> tuple[float, float, float]:
    timed = 40 * group
    reqs = _requests(prefill + timed * items, sequential, items=items)
    store: Store = make()
    store.create_model(MODEL, {"learner": "solam"})
    cap = 10 * (prefill + timed * items)
    held = prefill // items  # requests
    t_report = time.monotonic()
    for a in range(0, held, group):
        now = time.time()
        store.keep_impression_groups(
            MODEL, [(r, now, now + 86_400) for r in reqs[a:min(a + group, held)]], cap)
        if time.monotonic() - t_report > 10:
            print(f"  prefill {a * items:,} of {prefill:,}", file=sys.stderr, flush=True)
            t_report = time.monotonic()
    rest = reqs[held:]
    t0 = time.perf_counter()
    for a in range(0, len(rest), group):
        now = time.time()
        store.keep_impression_groups(MODEL, [(r, now, now + 86_400) for r in rest[a:a + group]],
                                     cap)
    keep_ms = (time.perf_counter() - t0) / len(rest) * 1e3
    ids = [i for r in reqs for i in r.ids]
    random.Random(1).shuffle(ids)
    other = make()
    other.get_impressions(MODEL, ids[:1], time.time())  # (its index read: not timed)
    found = [0, 0]  # (take, get + claim)
    spent = [0.0, 0.0]
    for k, a in enumerate(range(0, 40_000, 500)):
        now = time.time()
        batch = ids[a:a + 500]
        t0 = time.perf_counter()
        if k % 2 == 0:
            found[0] += len(other.take_impressions(MODEL, batch, ["pending"], "labelled",
                                                   now)[0])
        else:
            found[1] += len(other.get_impressions(MODEL, batch, now))
            other.claim_impressions(MODEL, batch, ["pending"], "labelled", now)
        spent[k % 2] += time.perf_counter() - t0
    for s in (store, other):
        s.close()
    return keep_ms, found[0] / spent[0], found[1] / spent[1]


def churn(make: Callable[[], Store], live: int, groups: int, group: int,
          items: int) -> np.ndarray:
    """Milliseconds of each group's keep after the first quarter (see the module's doc)."""
    rng = np.random.default_rng(0)
    store = make()
    store.create_model(MODEL, {"learner": "solam"})
    payload = b"x" * 150  # (the size of a one-hot 35-feature row's payload)
    ends = np.arange(150, 150 * (items + 1), 150, dtype=np.int64)

    def request() -> PackedItems:
        ids = [f"{v:032x}" for v in rng.integers(0, 2**62, items)]
        return PackedItems(ids, payload * items, ends.copy())

    spent = []
    for k in range(groups):
        shown = 1_000.0 + k
        batch = [(request(), shown, shown + live) for _ in range(group)]
        t0 = time.perf_counter()
        store.keep_impression_groups(MODEL, batch, 10**12)
        spent.append(time.perf_counter() - t0)
    store.close()
    return np.array(spent[groups // 4:]) * 1e3


@contextlib.contextmanager
def _backend(redis: bool) -> Iterator[Callable[[], Store]]:
    """A maker of store objects on a fresh backend: an SQLite file in a temporary
    folder, or a throw-away redis-server."""
    with tempfile.TemporaryDirectory(prefix="aucstream-bench-imp-") as tmp:
        if not redis:
            yield partial(SqliteStore.in_dir, Path(tmp) / "data")
            return
        server = RedisProcess(Path(tmp))
        server.start()
        try:
            yield partial(RedisStore.from_url, server.url)
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.impression_store",
                                description=__doc__.split("\n")[0])
    p.add_argument("--redis", action="store_true", help="a throw-away redis-server "
                   "(AOF, appendfsync always) instead of an SQLite file")
    p.add_argument("--prefill", type=int, nargs="+", default=[200_000, 1_000_000])
    p.add_argument("--group", type=int, default=16)
    p.add_argument("--items", type=int, default=100, help="items per /score request")
    p.add_argument("--sequential-ids", action="store_true", help="the feed's ids (ad7-0, "
                   "ad7-1, ...) instead of random 128-bit hex ids, as ad servers' uuids")
    p.add_argument("--churn", type=int, metavar="LIVE", help="seconds each kept request "
                   "lives, one group shown a second: the keeps' time distribution")
    p.add_argument("--groups", type=int, default=2500, help="groups kept with --churn")
    args = p.parse_args(argv)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; `python -m "
          f"bench.impression_store {' '.join(argv if argv is not None else sys.argv[1:])}`; "
          f"{'Redis' if args.redis else 'SQLite'}; {cpu_model()}; {code_version()}\n")
    if args.churn is not None:
        with _backend(args.redis) as make:
            ms = churn(make, args.churn, args.groups, args.group, args.items)
        held = args.churn * args.group * args.items
        print(f"| ids held | keep of {args.group} requests, ms: p50 | p99 | p99.9 | max |")
        print("|---|---|---|---|---|")
        print(f"| ~{held:,} | {np.median(ms):.2f} | {np.percentile(ms, 99):.2f} | "
              f"{np.percentile(ms, 99.9):.2f} | {ms.max():.2f} |")
        return 0
    print(f"| kept before | keep ms per {args.items}-item request | labels by id per s "
          "(take) | labels by id per s (get + claim) |")
    print("|---|---|---|---|")
    for prefill in args.prefill:
        with _backend(args.redis) as make:
            keep_ms, take, two = measure(make, prefill, args.group, args.sequential_ids,
                                         args.items)
        print(f"| {prefill:,} | {keep_ms:.3f} | {take:,.0f} | {two:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
