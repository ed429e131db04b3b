"""Evidence for a learner's default parameters: a grid over every dataset, leave one out.

A stream has no training set to cross-validate on, so a default must do well on data it
was not chosen on. For each grid point this runs the learner test-then-train over every
bundled dataset (shuffled once, seed 0) and the hashed ad-click feed, and records the
served quality: the mean over batches of the AUC of the scores served for that batch
before it is learned (batches of min(500, n/20) rows, so small sets get ~20 batches).
Then, leaving each stream out in turn, it picks the grid point with the best mean over
the others: a default that wins most of those folds is not an artefact of one dataset.
Dense sets run twice: as they arrive (raw) and standardised online
(``models.preprocessing.StandardScaler``, as ``bench.auto`` feeds them).

    python -m bench.default_grid solam --grid zeta=0.1,0.3,1,3,10,30,100 R=1,10,100,1e5
    python -m bench.default_grid solam --grid ... --write   # also bench/RESULTS.md

Progress goes to stderr, the report (markdown) to stdout; nothing tracked is written
without ``--write``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import shlex
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from aucstream import models
from aucstream.models.preprocessing import StandardScaler
from bench.auto import _adclick, _load, _rows
from loadtest.bench_service import write_marked

RESULTS_MD = Path(__file__).resolve().with_name("RESULTS.md")
ADCLICK_EVENTS = 200_000


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def parse_grid(specs: list[str]) -> dict[str, list[Any]]:
    """``["zeta=1,10", "R=1e5"]`` -> ``{"zeta": [1, 10], "R": [100000.0]}``."""
    grid: dict[str, list[Any]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not values:
            raise SystemExit(f"--grid entries look like name=v1,v2; got {spec!r}")
        grid[name] = [_value(v) for v in values.split(",")]
    return grid


def _streams(into: Path) -> list[dict[str, Any]]:
    from bench import datasets

    out = []
    for name in datasets.available():
        ds = datasets.load(name, download=False)
        order = np.random.default_rng(0).permutation(ds.X.shape[0])
        path = into / f"{name}.npz"
        np.savez(path, X=ds.X[order], y=ds.y[order])
        for feed in ("raw", "standardised"):
            out.append({"name": name, "path": str(path), "kind": "dense",
                        "n_features": ds.X.shape[1], "feed": feed})
    say(f"preparing adclick-1 ({ADCLICK_EVENTS:,} events)")
    ad = _adclick(1, ADCLICK_EVENTS, into)
    for feed in ("raw", "standardised"):  # hashed rows are never standardised
        out.append({**ad, "feed": feed})
    return out


def served_quality(stream: dict[str, Any], learner: str, params: dict[str, Any]) -> float:
    """Mean over batches of the AUC of the scores served before learning the batch."""
    X, y, n = _load(stream)
    lrn = models.create(learner, n_features=stream["n_features"], seed=0, **params)
    scaler = (StandardScaler(stream["n_features"])
              if stream["feed"] == "standardised" and stream["kind"] == "dense" else None)
    batch = min(500, max(10, n // 20))
    aucs = []
    for a in range(0, n, batch):
        b = min(n, a + batch)
        Xs = Xl = _rows(X, a, b)
        yb = y[a:b]
        if scaler is not None:
            Xs, Xl = scaler.transform(Xs), scaler.learn_transform(Xs)
        s = lrn.score(Xs)
        if 0 < yb.sum() < b - a:
            aucs.append(float(models.auc(yb, s)) if np.isfinite(s).all() else math.nan)
        try:
            with np.errstate(all="ignore"):
                lrn.learn(Xl, yb)
        except models.NonFiniteError:  # refused: the model keeps its state
            pass
    return float(np.nanmean(aucs)) if aucs else math.nan


def _task(args: tuple) -> tuple[str, str, str, float]:
    stream, learner, key, params = args
    return stream["name"], stream["feed"], key, served_quality(stream, learner, params)


def _key(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float | int) and not isinstance(v, bool)
                    else f"{k}={v}" for k, v in params.items())


def report(grid: dict[str, list[Any]], results: dict[tuple[str, str, str], float],
           marks: dict[str, str]) -> str:
    keys = [_key(dict(zip(grid, vals, strict=True))) for vals in itertools.product(*grid.values())]
    lines = []
    for feed in ("raw", "standardised"):
        names = sorted({s for s, f, _ in results if f == feed})
        if not names:
            continue
        best = {s: max(results[s, feed, k] for k in keys) for s in names}
        rows = []
        for k in keys:
            v = np.array([results[s, feed, k] for s in names])
            gap = np.array([best[s] for s in names]) - v
            rows.append((float(np.nanmean(v)), k, float(np.nanmax(gap)),
                         int((gap <= 0.01).sum()), int((gap > 0.03).sum())))
        rows.sort(key=lambda r: -r[0])
        loo: dict[str, int] = {}
        for s in names:
            pick = max(keys, key=lambda k, s=s: np.nanmean(
                [results[o, feed, k] for o in names if o != s]))
            loo[pick] = loo.get(pick, 0) + 1
        lines += [f"**{feed}** ({len(names)} streams). Grid points by mean served quality "
                  f"(top 8{', and ' + ', '.join(marks.values()) if marks else ''}); 'gap' is "
                  "the distance to the best grid point of each stream:", "",
                  "| params | mean | largest gap | streams within 0.01 | streams > 0.03 below "
                  "| chosen when leaving one stream out |", "|---|---|---|---|---|---|"]
        shown = rows[:8] + [r for r in rows[8:] if r[1] in marks]
        for mean, k, worst, near, far in shown:
            mark = f" ({marks[k]})" if k in marks else ""
            lines.append(f"| {k}{mark} | {mean:.4f} | {worst:.3f} | {near} | {far} | "
                         f"{loo.get(k, 0)} of {len(names)} |")
        lines.append("")
        cols = list(dict.fromkeys([*marks, *(k for _, k, *_ in shown)]))[:3]
        lines += ["| stream | " + " | ".join(cols) + " | best (params) |",
                  "|---" * (len(cols) + 2) + "|"]
        for s in names:
            top = max(keys, key=lambda k, s=s: results[s, feed, k])
            lines.append(f"| {s} | " + " | ".join(f"{results[s, feed, k]:.4f}" for k in cols)
                         + f" | {best[s]:.4f} ({top}) |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.default_grid",
                                description=__doc__.split("\n")[0])
    p.add_argument("learner")
    p.add_argument("--grid", nargs="+", required=True, metavar="NAME=V1,V2")
    p.add_argument("--fixed", nargs="*", default=[], metavar="NAME=V",
                   help="parameters held fixed at one value")
    p.add_argument("--default", default=None, help="the default, as its grid key "
                   "(e.g. 'zeta=1 R=10'): marked in the table")
    p.add_argument("--old-default", default=None, help="a previous default, marked too")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    grid = parse_grid(args.grid)
    fixed = {k: v[0] for k, v in parse_grid(args.fixed).items()}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aucstream-grid-") as tmp:
        streams = _streams(Path(tmp))
        tasks = [(s, args.learner, _key(dict(zip(grid, vals, strict=True))),
                  {**fixed, **dict(zip(grid, vals, strict=True))})
                 for s in streams for vals in itertools.product(*grid.values())]
        say(f"{len(tasks)} runs of {args.learner} over {len(streams)} streams")
        results: dict[tuple[str, str, str], float] = {}
        with ProcessPoolExecutor(args.jobs) as pool:
            for i, (s, feed, key, q) in enumerate(pool.map(_task, tasks, chunksize=4), 1):
                results[s, feed, key] = q
                if i % 50 == 0 or i == len(tasks):
                    say(f"  {i}/{len(tasks)} runs, {time.perf_counter() - t0:.0f}s")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    fixed_text = f", fixed {_key(fixed)}" if fixed else ""
    head = (f"{when}; `python -m bench.default_grid {shlex.join(argv)}`"
            f" ({args.learner}{fixed_text}): served quality = mean over batches of the AUC "
            "of the scores served before learning the batch; every bundled dataset "
            "(shuffled once, seed 0) and 200k events of the hashed ad-click feed.")
    marks = {k: label for k, label in ((args.default, "default"),
                                       (args.old_default, "old default")) if k}
    text = head + "\n\n" + report(grid, results, marks)
    print(text)
    if args.write:
        tag = args.learner
        write_marked(RESULTS_MD, f"<!-- grid-{tag}:begin -->", f"<!-- grid-{tag}:end -->",
                     f"## Default parameters of {tag}: grid, leave one stream out (issue 11)",
                     text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
