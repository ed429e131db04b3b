"""Replay a dataset of :mod:`bench.datasets` into a running aucstream, in order.

Creates a dense model of the dataset's dimension (or reuses it with ``--resume``), sends
the rows as labelled events in batches, in file order (or a seeded shuffle), and reports
the model's prequential rolling AUC from ``GET /models/{name}`` as it goes. Event ids are
``<dataset>-<row>``; an interrupted replay resumed with ``--resume`` continues at the row
the model's version says it reached (the replay being its only writer), so it learns no
row twice even beyond the service's dedup window. ``--client-auc`` also scores each batch
before learning it and reports the exact AUC of those scores over the whole stream
(test-then-train at batch granularity).

    python -m loadtest.replay glass --learner cbr_fifo --url http://127.0.0.1:8000
    python -m loadtest.replay a9a --learner solam --batch 500 --standardize --shuffle 0
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlparse

import numpy as np

__all__ = ["HttpJson", "ReplayResult", "dataset_events", "replay"]


class JsonClient(Protocol):
    def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, Any]: ...


class HttpJson:
    """A keep-alive JSON client on http.client (no dependencies): ``(status, body)``."""

    def __init__(self, url: str, key: str | None = None, timeout: float = 60.0) -> None:
        u = urlparse(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._factory = http.client.HTTPSConnection if u.scheme == "https" else \
            http.client.HTTPConnection
        self._host, self._port = u.hostname, u.port
        self._prefix = u.path.rstrip("/")
        self._timeout = timeout
        self._headers = {"content-type": "application/json"}
        if key:
            self._headers["authorization"] = f"Bearer {key}"
        self._conn: http.client.HTTPConnection | None = None

    def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        for attempt in (0, 1):  # one reconnect: the server may close idle connections
            if self._conn is None:
                self._conn = self._factory(self._host, self._port, timeout=self._timeout)
            try:
                self._conn.request(method, self._prefix + path, body=data,
                                   headers=self._headers)
                r = self._conn.getresponse()
                raw = r.read()
            except (ConnectionError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
                continue
            return r.status, (json.loads(raw) if raw else None)
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def dataset_events(X: np.ndarray, y: np.ndarray, prefix: str,
                   rows: np.ndarray | None = None) -> list[dict[str, Any]]:
    """Labelled dense events of the rows (all, in order, by default) with ids
    ``<prefix>-<row>``."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, d) and y (n,); got {X.shape} and {y.shape}")
    if not np.isfinite(X).all():
        raise ValueError("X has non-finite values; the service refuses them")
    order = np.arange(X.shape[0]) if rows is None else np.asarray(rows)
    return [{"x": X[i].tolist(), "label": int(y[i] > 0), "id": f"{prefix}-{i}"}
            for i in order.tolist()]


@dataclass
class ReplayResult:
    model: str
    events: int  # events sent
    accepted: int  # learned by this replay
    duplicates: int  # skipped as already learned (a resumed replay)
    version: int
    rolling_auc: float | None
    client_auc: float | None
    seconds: float
    progress: list[dict[str, Any]] = field(default_factory=list)


def _exact_auc(y: np.ndarray, s: np.ndarray) -> float | None:
    from aucstream.models import auc

    value = auc(y, s)
    return None if value != value else float(value)


def replay(client: JsonClient, name: str, learner: str, X: np.ndarray, y: np.ndarray, *,
           prefix: str, params: dict[str, Any] | None = None, batch: int = 100,
           standardize: bool = False, rolling_window: int | None = None,
           resume: bool = False, recreate: bool = False, shuffle: int | None = None,
           client_auc: bool = False, every: int = 10,
           say: Callable[[str], None] = print) -> ReplayResult:
    """Replay ``(X, y)`` into model ``name`` through ``client``; see the module doc."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1; got {batch}")
    status, info = client("GET", f"/models/{name}")
    if status == 200 and recreate:
        client("DELETE", f"/models/{name}")
        status = 404
    if status == 200 and not resume:
        raise SystemExit(f"model {name!r} exists: pass --resume to continue it or "
                         "--recreate to start over")
    if status == 404:
        body: dict[str, Any] = {"name": name, "learner": learner, "params": params or {},
                                "features": {"kind": "dense", "dim": int(X.shape[1])},
                                "standardize": standardize}
        if rolling_window is not None:
            body["rolling_window"] = rolling_window
        status, info = client("POST", "/models", body)
        if status != 201:
            raise SystemExit(f"creating {name!r}: {status} {info}")
    elif status != 200:
        raise SystemExit(f"GET /models/{name}: {status} {info}")
    rows = None
    if shuffle is not None:
        rows = np.random.default_rng(shuffle).permutation(X.shape[0])
    events = dataset_events(X, y, prefix, rows)
    if resume and status == 200:
        # Continue where the model's version says the replay got (it is assumed to be the
        # model's only writer): resending from the start relied on ids, which the service
        # forgets beyond its dedup window, and learned those rows twice.
        events = events[min(int(info["version"]), len(events)):]
    accepted = dups = 0
    seen_y: list[np.ndarray] = []
    seen_s: list[np.ndarray] = []
    progress: list[dict[str, Any]] = []
    started = time.perf_counter()
    n_batches = (len(events) + batch - 1) // batch
    for k in range(n_batches):
        chunk = events[k * batch:(k + 1) * batch]
        if client_auc:
            items = [{"x": e["x"]} for e in chunk]
            status, out = client("POST", "/score", {"model": name, "items": items})
            if status != 200:
                raise SystemExit(f"POST /score: {status} {out}")
            seen_s.append(np.asarray(out["scores"]))
            seen_y.append(np.array([e["label"] for e in chunk]))
        status, out = client("POST", "/learn", {"model": name, "events": chunk})
        if status != 200:
            raise SystemExit(f"POST /learn (batch {k}): {status} {out}")
        accepted += out["accepted"]
        dups += out["duplicates"]
        if (k + 1) % every == 0 or k + 1 == n_batches:
            _, info = client("GET", f"/models/{name}")
            elapsed = time.perf_counter() - started
            row = {"events": min((k + 1) * batch, len(events)), "version": info["version"],
                   "rolling_auc": info["rolling_auc"], "seconds": elapsed}
            progress.append(row)
            auc_txt = "n/a" if info["rolling_auc"] is None else f"{info['rolling_auc']:.4f}"
            say(f"{row['events']:>9,} / {len(events):,} events  version {info['version']:>9,}"
                f"  rolling AUC {auc_txt}  {row['events'] / max(elapsed, 1e-9):,.0f} events/s")
    _, info = client("GET", f"/models/{name}")
    c_auc = None
    if client_auc and seen_y:
        c_auc = _exact_auc(np.concatenate(seen_y), np.concatenate(seen_s))
    return ReplayResult(model=name, events=len(events), accepted=accepted, duplicates=dups,
                        version=int(info["version"]), rolling_auc=info["rolling_auc"],
                        client_auc=c_auc, seconds=time.perf_counter() - started,
                        progress=progress)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.replay",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="a name of bench.datasets.available()")
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--key", help="bearer key, when the service requires one")
    p.add_argument("--learner", default="cbr_fifo")
    p.add_argument("--params", type=json.loads, default={}, help='JSON, e.g. \'{"C": 0.1}\'')
    p.add_argument("--model", help="model name (default: <dataset>-<learner>)")
    p.add_argument("--batch", type=int, default=100, help="events per learn request")
    p.add_argument("--standardize", action="store_true", help="online standardisation")
    p.add_argument("--rolling-window", type=int)
    p.add_argument("--shuffle", type=int, metavar="SEED", help="replay a seeded permutation")
    p.add_argument("--limit", type=int, help="replay only the first N rows")
    p.add_argument("--every", type=int, default=10, help="report every N batches")
    p.add_argument("--client-auc", action="store_true",
                   help="score each batch before learning it; report the stream's AUC")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="continue an existing model")
    g.add_argument("--recreate", action="store_true", help="delete the model first")
    args = p.parse_args(argv)

    from bench import datasets

    ds = datasets.load(args.dataset, log=lambda m: print(m, file=sys.stderr))
    X, y = ds.X, ds.y
    if args.limit is not None:
        X, y = X[: args.limit], y[: args.limit]
    name = args.model or f"{args.dataset}-{args.learner}".replace("_", "-")
    print(f"replaying {ds!r} into {args.url} as {name!r} ({args.learner}, batches of "
          f"{args.batch})", file=sys.stderr)
    client = HttpJson(args.url, args.key)
    try:
        res = replay(client, name, args.learner, X, y, prefix=args.dataset,
                     params=args.params, batch=args.batch, standardize=args.standardize,
                     rolling_window=args.rolling_window, resume=args.resume,
                     recreate=args.recreate, shuffle=args.shuffle,
                     client_auc=args.client_auc, every=args.every,
                     say=lambda m: print(m, file=sys.stderr))
    finally:
        client.close()
    out = {"model": res.model, "events": res.events, "accepted": res.accepted,
           "duplicates": res.duplicates, "version": res.version,
           "rolling_auc": res.rolling_auc, "client_auc": res.client_auc,
           "seconds": round(res.seconds, 3)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
