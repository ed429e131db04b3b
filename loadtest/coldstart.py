"""Cold start as a new user meets it: ``aucstream serve`` on an empty numba cache.

Measures the time from starting the process to ``/healthz`` and to ``/readyz`` 200, then
for every learner a first ``POST /models`` + ``POST /learn`` (2 events) + ``POST /score``
(dense d = 5; and hashed 2^8 for sparse-capable learners), then the same start again on
the now-filled cache. Targets (issue 14): ready ≤ 30 s cold on 2 cores; after ready, a
first create + learn + score of any learner ≤ 1 s.

    python -m loadtest.coldstart            # markdown report on stdout
    python -m loadtest.coldstart --write    # also into bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from aucstream import models
from loadtest.bench_service import write_marked

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "RESULTS.md"
BEGIN, END = "<!-- coldstart:begin -->", "<!-- coldstart:end -->"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(tmp: Path, cache: Path) -> tuple[subprocess.Popen, str, float, float]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUCSTREAM_")}
    env.update(NUMBA_CACHE_DIR=str(cache), AUCSTREAM_DATA_DIR=str(tmp / "data"),
               AUCSTREAM_LOG_LEVEL="warning")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "aucstream.service.cli", "serve",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    up = None
    while True:
        if proc.poll() is not None:
            raise RuntimeError("the service exited")
        try:
            r = httpx.get(f"{url}/readyz", timeout=2)
            up = up if up is not None else time.monotonic() - t0
            if r.status_code == 200:
                return proc, url, up, time.monotonic() - t0
        except httpx.HTTPError:
            pass
        if time.monotonic() - t0 > 600:
            raise RuntimeError("not ready in 10 minutes")
        time.sleep(0.05)


def _first_uses(url: str) -> list[tuple[str, str, float]]:
    out = []
    with httpx.Client(base_url=url, timeout=120) as c:
        for name in models.available():
            kinds = [("dense", {"kind": "dense", "dim": 5})]
            if models.base._lookup(name).accepts_sparse:
                kinds.append(("hashed", {"kind": "hashed", "bits": 8}))
            for kind, features in kinds:
                model = f"{name}-{kind}"
                if kind == "dense":
                    events = [{"x": [1.0, 2, 3, 4, 5], "label": 1},
                              {"x": [0.0, 1, 0, 1, 0], "label": 0}]
                    items = [{"x": [1.0, 2, 3, 4, 5]}]
                else:
                    events = [{"features": {"a": 1.0, "b": "x"}, "label": 1},
                              {"features": {"c": 2.0}, "label": 0}]
                    items = [{"features": {"a": 1.0}}]
                t = time.monotonic()
                codes = [c.post("/models", json={"name": model, "learner": name,
                                                  "features": features}).status_code,
                         c.post("/learn", json={"model": model, "events": events}).status_code,
                         c.post("/score", json={"model": model, "items": items}).status_code]
                if codes != [201, 200, 200]:
                    raise RuntimeError(f"{model}: {codes}")
                out.append((name, kind, time.monotonic() - t))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.coldstart",
                                description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="also into bench/RESULTS.md")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aucstream-cold-") as tmp_:
        tmp = Path(tmp_)
        cache = tmp / "numba"
        rows = []
        for label in ("empty numba cache", "filled cache (a restart)"):  # same cache dir
            print(f"starting on the {label} ...", file=sys.stderr, flush=True)
            proc, url, up, ready = _start(tmp / label.split()[0], cache)
            try:
                uses = _first_uses(url)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            worst = max(uses, key=lambda u: u[2])
            rows.append((label, up, ready, worst))
            print(f"  HTTP up {up:.1f} s, ready {ready:.1f} s, slowest first use "
                  f"{worst[0]} ({worst[1]}) {worst[2]:.2f} s", file=sys.stderr)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"{when}; `python -m loadtest.coldstart`; {platform.processor() or 'cpu'}, "
             f"nproc {os.cpu_count()}, Python {platform.python_version()}. First use = "
             "POST /models + /learn (2 events) + /score of every learner (dense d = 5; "
             "hashed 2^8 too where sparse-capable), right after ready.", "",
             "| start | HTTP answering s | /readyz 200 s | slowest first use |",
             "|---|---|---|---|"]
    for label, up, ready, (name, kind, secs) in rows:
        lines.append(f"| {label} | {up:.1f} | {ready:.1f} | {name} ({kind}) {secs:.2f} s |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_marked(RESULTS, BEGIN, END, "## Cold start (issue 14)", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
