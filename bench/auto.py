"""Served quality without hand tuning: ``auto`` against single learners at their defaults,
Vowpal Wabbit's default and River's, on the same events in the same order.

Each stream is fed as the service feeds a model: in batches of 500, every batch is first
scored by the model as it stands (one snapshot ranks the whole batch, as one /score
request ranks its candidates), then learned. **Served quality** is the mean over batches
(those with both classes) of the AUC of the scores served for that batch; the AUC of all
served scores over the whole stream is given beside it.

Streams:

- ``adclick-<seed>``: the synthetic ad-click feed of ``loadtest/feed.py`` (3 % positive,
  ~35 named features an event), hashed into 2^20 dimensions by the service's encoder;
- every packaged dataset of at least 2,000 rows (``bench.datasets``), shuffled once
  (seed 0), standardised online as the service's ``"standardize": true`` does (the
  scaler's statistics before a batch transform it for scoring; learning updates them).

Methods: ``auto`` (the built-in candidate set for the stream's dimension), each of those
candidates alone, VW (``--loss_function logistic``, its default adaptive normalised
update, -l 0.5, 20 bits) and River's ``LogisticRegression`` (SGD 0.01). VW and River are
fed the same features (hashed indices, or the standardised rows).

    python -m bench.auto                     # every stream: 1M ad-click events × 2 seeds
    python -m bench.auto --quick             # 100k ad-click events, the small datasets
    python -m bench.auto --write             # also bench/RESULTS.md and bench/results/auto/

Progress goes to stderr; the report (markdown) to stdout. Nothing tracked is written
without ``--write``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from aucstream import models
from aucstream.models.auto import default_candidates
from aucstream.models.preprocessing import StandardScaler
from loadtest.bench_service import write_marked

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "RESULTS.md"
RESULTS_DIR = HERE / "results" / "auto"
BATCH = 500
ADCLICK_BITS = 20
MIN_ROWS = 2000
BEGIN, END = "<!-- auto:begin -->", "<!-- auto:end -->"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Streams, prepared once and saved for the workers
# --------------------------------------------------------------------------------------------
def _adclick(seed: int, n: int, into: Path) -> dict[str, Any]:
    from aucstream.service.encoding import FeatureEncoder
    from loadtest.feed import AdClickFeed

    feed = AdClickFeed(seed=seed)
    enc = FeatureEncoder({"kind": "hashed", "bits": ADCLICK_BITS})
    parts = []
    for start in range(0, n, 50_000):
        events = feed.events(start, min(n, start + 50_000))
        b = enc.encode(events)
        parts.append((b.indptr, b.indices, b.values,
                      np.array([e["label"] for e in events], np.int64)))
    indptr = [np.zeros(1, np.int64)]
    offset = 0
    for p in parts:
        indptr.append(p[0][1:] + offset)
        offset += int(p[0][-1])
    path = into / f"adclick-{seed}.npz"
    np.savez(path, indptr=np.concatenate(indptr),
             indices=np.concatenate([p[1] for p in parts]),
             values=np.concatenate([p[2] for p in parts]),
             y=np.concatenate([p[3] for p in parts]))
    return {"name": f"adclick-{seed}", "path": str(path), "kind": "hashed",
            "n_features": 1 << ADCLICK_BITS}


def _dataset(name: str, into: Path) -> dict[str, Any] | None:
    from bench import datasets

    ds = datasets.load(name, download=False)
    if ds.X.shape[0] < MIN_ROWS:
        return None
    order = np.random.default_rng(0).permutation(ds.X.shape[0])
    path = into / f"{name}.npz"
    np.savez(path, X=ds.X[order], y=ds.y[order])
    return {"name": name, "path": str(path), "kind": "dense", "n_features": ds.X.shape[1]}


def _load(stream: dict[str, Any]) -> tuple[Any, np.ndarray, int]:
    z = np.load(stream["path"])
    if stream["kind"] == "hashed":
        return (z["indptr"], z["indices"], z["values"]), z["y"], int(z["y"].shape[0])
    return z["X"], z["y"], int(z["y"].shape[0])


def _rows(X: Any, a: int, b: int) -> Any:
    if isinstance(X, np.ndarray):
        return X[a:b]
    indptr, indices, values = X
    lo, hi = indptr[a], indptr[b]
    return indptr[a:b + 1] - lo, indices[lo:hi], values[lo:hi]


# --------------------------------------------------------------------------------------------
# Methods behind one interface: score(X) then learn(X, y), per batch
# --------------------------------------------------------------------------------------------
class _Ours:
    def __init__(self, learner: str, params: dict[str, Any], d: int) -> None:
        self.model = models.create(learner, n_features=d, seed=0, **params)

    def score(self, X: Any) -> np.ndarray:
        return self.model.score(X)

    def learn(self, X: Any, y: np.ndarray) -> None:
        self.model.learn(X, y)


def _lines(X: Any) -> list[str]:
    if isinstance(X, np.ndarray):
        return ["|f " + " ".join(f"{j}:{v!r}" for j, v in enumerate(row) if v != 0.0)
                for row in X.tolist()]
    indptr, indices, values = X
    idx, val = indices.tolist(), values.tolist()
    return ["|f " + " ".join(f"{idx[k]}:{val[k]!r}" for k in range(indptr[r], indptr[r + 1]))
            for r in range(indptr.shape[0] - 1)]


class _VW:
    def __init__(self) -> None:
        import vowpalwabbit

        self.ws = vowpalwabbit.Workspace(
            f"--loss_function logistic --quiet -b {ADCLICK_BITS} -l 0.5 --random_seed 0")

    def score(self, X: Any) -> np.ndarray:
        out = []
        for line in _lines(X):
            ex = self.ws.parse(line)
            out.append(self.ws.predict(ex))
            self.ws.finish_example(ex)
        return np.array(out)

    def learn(self, X: Any, y: np.ndarray) -> None:
        for line, t in zip(_lines(X), y.tolist(), strict=True):
            ex = self.ws.parse(("1 " if t == 1 else "-1 ") + line)
            self.ws.learn(ex)
            self.ws.finish_example(ex)


class _River:
    def __init__(self) -> None:
        from river import linear_model, optim

        self.model = linear_model.LogisticRegression(optimizer=optim.SGD(0.01),
                                                     intercept_lr=0.01, l2=0.0)

    @staticmethod
    def _dicts(X: Any) -> list[dict[int, float]]:
        if isinstance(X, np.ndarray):
            return [dict(enumerate(row)) for row in X.tolist()]
        indptr, indices, values = X
        idx, val = indices.tolist(), values.tolist()
        out = []
        for r in range(indptr.shape[0] - 1):
            row: dict[int, float] = {}
            for k in range(indptr[r], indptr[r + 1]):
                row[idx[k]] = row.get(idx[k], 0.0) + val[k]
            out.append(row)
        return out

    def score(self, X: Any) -> np.ndarray:
        return np.array([self.model._raw_dot_one(x) for x in self._dicts(X)])

    def learn(self, X: Any, y: np.ndarray) -> None:
        for x, t in zip(self._dicts(X), y.tolist(), strict=True):
            self.model.learn_one(x, t == 1)


# --defaults: single-learner defaults before and after a change, on the same streams.
DEFAULT_CHANGES = [
    ("fcbr_fifo σ=1, raw rows (old default)", "fcbr_fifo", {"normalize": False}),
    ("fcbr_fifo σ=1, unit rows (new default)", "fcbr_fifo", {"normalize": True}),
    ("fcbr_fifo σ=10, raw rows", "fcbr_fifo", {"normalize": False, "sigma": 10.0}),
]


def methods_for(d: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, learner, params) of every method run on a stream of dimension d."""
    out = [("auto", "auto", {})]
    for c in default_candidates(d):
        label = c["learner"] + "".join(f" {k}={v:g}" for k, v in c["params"].items())
        out.append((label, c["learner"], c["params"]))
    return [*out, ("vw", "vw", {}), ("river", "river", {})]


def _make(learner: str, params: dict[str, Any], d: int) -> Any:
    if learner == "vw":
        return _VW()
    if learner == "river":
        return _River()
    return _Ours(learner, params, d)


def _auc_or_nan(y: np.ndarray, s: np.ndarray) -> float:
    if not np.isfinite(s).all():
        return float("nan")
    return float(models.auc(y, s))


def run_one(stream: dict[str, Any], label: str, learner: str,
            params: dict[str, Any]) -> dict[str, Any]:
    """Score-then-learn the stream in batches; the served-quality figures."""
    X, y, n = _load(stream)
    d = stream["n_features"]
    method = _make(learner, params, d)
    scaler = StandardScaler(d) if stream["kind"] == "dense" and not _RAW else None
    served = np.empty(n)
    batch_aucs: list[float] = []
    failed = None
    t0 = time.perf_counter()
    for a in range(0, n, BATCH):
        b = min(n, a + BATCH)
        Xb, yb = _rows(X, a, b), y[a:b]
        if scaler is not None:
            Xs, Xl = scaler.transform(Xb), scaler.learn_transform(Xb)
        else:
            Xs = Xl = Xb
        s = method.score(Xs)
        served[a:b] = s
        if 0 < yb.sum() < yb.shape[0]:
            batch_aucs.append(_auc_or_nan(yb, s))
        try:
            with np.errstate(all="ignore"):
                method.learn(Xl, yb)
        except models.NonFiniteError as exc:  # refused: the model keeps its state
            failed = failed or f"batch at {a}: {exc}"
    seconds = time.perf_counter() - t0
    extra: dict[str, Any] = {}
    if learner == "auto":
        lrn = method.model
        extra = {"served_candidate": lrn.served, "promotions": lrn.promotions,
                 "quality": [None if math.isnan(q) else q for q in lrn.quality.tolist()]}
    return {"stream": stream["name"], "method": label, "n": n,
            "served_quality": float(np.nanmean(batch_aucs)) if batch_aucs else float("nan"),
            "stream_auc": _auc_or_nan(y, served), "batches": len(batch_aucs),
            "seconds": seconds, "events_per_s": n / seconds, "refused": failed, **extra}


def _task(args: tuple) -> dict[str, Any]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    stream, label, learner, params = args
    out = run_one(stream, label, learner, params)
    say(f"  {out['stream']:<14} {label:<32} served {out['served_quality']:.4f}  "
        f"stream {out['stream_auc']:.4f}  {out['seconds']:.0f}s")
    return out


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def _fmt(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"


def report(results: list[dict[str, Any]], header: str) -> str:
    streams = list(dict.fromkeys(r["stream"] for r in results))
    lines = [header, "", "| stream | method | served quality | stream AUC | events/s | note |",
             "|---|---|---|---|---|---|"]
    verdicts = []
    for st in streams:
        rows = [r for r in results if r["stream"] == st]
        for r in rows:
            note = ""
            if r["method"] == "auto":
                note = f"serving {r['served_candidate']}, {r['promotions']} promotions"
            if r.get("refused"):
                note = (note + "; " if note else "") + "refused a batch"
            lines.append(f"| {st} | {r['method']} | {_fmt(r['served_quality'])} | "
                         f"{_fmt(r['stream_auc'])} | {r['events_per_s']:,.0f} | {note} |")
        by = {r["method"]: r["served_quality"] for r in rows}
        auto = by.get("auto", float("nan"))
        cands = [q for m, q in by.items() if m not in ("auto", "vw", "river")
                 and not math.isnan(q)]
        best = max(cands) if cands else float("nan")
        vw = by.get("vw", float("nan"))
        need = 0.01 if st.startswith("adclick") else 0.0
        verdicts.append((st, auto, vw, best, auto >= vw + need, auto >= best - 0.005))
    lines += ["", "| stream | auto | VW | best candidate alone | auto ≥ VW"
              " (+0.01 on ad-click) | auto within 0.005 of the best candidate |",
              "|---|---|---|---|---|---|"]
    for st, auto, vw, best, beat_vw, near_best in verdicts:
        lines.append(f"| {st} | {_fmt(auto)} | {_fmt(vw)} | {_fmt(best)} | "
                     f"{'yes' if beat_vw else '**no**'} | {'yes' if near_best else '**no**'} |")
    return "\n".join(lines)


def _header(argv: list[str], n_adclick: int) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "models", "bench"],
                           cwd=HERE, capture_output=True, text=True).stdout.strip()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (f"{when}; `python -m bench.auto {' '.join(argv)}`".rstrip() + f"; commit {commit}"
            + (" + local changes" if dirty else "") + f"; {platform.processor() or 'cpu'}, "
            f"Python {platform.python_version()}. Batches of {BATCH}: each scored by the "
            f"model before it, then learned. Ad-click streams: {n_adclick:,} events, hashed "
            f"into 2^{ADCLICK_BITS}. Datasets: shuffled once (seed 0), standardised online.")


def write(results: list[dict[str, Any]], text: str) -> None:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "auto.json").write_text(json.dumps(results, indent=1) + "\n")
    write_marked(RESULTS_MD, BEGIN, END, "## Served quality without tuning: `auto` (issue 11)",
                 text)


def _defaults(names: list[str], args: Any) -> int:
    """Served quality of each DEFAULT_CHANGES row on every dataset, fed raw."""
    global _RAW
    _RAW = True
    with tempfile.TemporaryDirectory(prefix="aucstream-defaults-") as tmp:
        streams = [s for n in names if (s := _dataset(n, Path(tmp))) is not None]
        tasks = [(s, *m) for s in streams for m in DEFAULT_CHANGES]
        with ProcessPoolExecutor(args.jobs, initializer=_set_raw) as pool:
            results = list(pool.map(_task, tasks))
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    labels = [m[0] for m in DEFAULT_CHANGES]
    lines = [f"{when}; `python -m bench.auto --defaults`; datasets of at least {MIN_ROWS:,} "
             f"rows, shuffled once (seed 0), fed raw (no standardisation), batches of "
             f"{BATCH}: served quality (stream AUC)", "",
             "| dataset | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for st in dict.fromkeys(r["stream"] for r in results):
        row = {r["method"]: r for r in results if r["stream"] == st}
        lines.append(f"| {st} | " + " | ".join(
            f"{_fmt(row[m]['served_quality'])} ({_fmt(row[m]['stream_auc'])})"
            for m in labels) + " |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_marked(RESULTS_MD, "<!-- defaults:begin -->", "<!-- defaults:end -->",
                     "## Single-learner defaults (issue 11)", text)
    return 0


_RAW = False  # --defaults: datasets fed as they are


def _set_raw() -> None:
    global _RAW
    _RAW = True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.auto", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="100k ad-click events, small sets")
    p.add_argument("--adclick-events", type=int, default=None)
    p.add_argument("--seeds", type=int, nargs="*", default=[1, 2],
                   help="ad-click stream seeds (none: no ad-click stream)")
    p.add_argument("--datasets", nargs="*", default=None, help="default: every one ≥ 2,000 rows")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--defaults", action="store_true",
                   help="compare single-learner defaults (DEFAULT_CHANGES) on the datasets, "
                   "as they arrive raw (no standardisation)")
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    n_ad = args.adclick_events or (100_000 if args.quick else 1_000_000)
    from bench import datasets

    names = args.datasets if args.datasets is not None else datasets.available()
    if args.quick and args.datasets is None:
        names = ["segment", "spambase", "phishing", "svmguide1"]
    if args.defaults:
        return _defaults(names, args)
    with tempfile.TemporaryDirectory(prefix="aucstream-auto-") as tmp:
        into = Path(tmp)
        streams = []
        for seed in args.seeds:
            say(f"preparing adclick-{seed} ({n_ad:,} events)")
            streams.append(_adclick(seed, n_ad, into))
        for name in names:
            s = _dataset(name, into)
            if s is not None:
                streams.append(s)
        tasks = [(s, label, learner, params) for s in streams
                 for label, learner, params in methods_for(s["n_features"])]
        say(f"{len(tasks)} runs on {len(streams)} streams, {args.jobs} at a time")
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(_task, tasks))
    text = report(results, _header(argv, n_ad))
    print(text)
    if args.write:
        write(results, text)
        say(f"wrote {RESULTS_MD} and {RESULTS_DIR / 'auto.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
