"""Delayed clicks: how much ranking quality timeout negatives cost, and how much the
late-positive rule wins back.

The hashed ad-click feed on a clock (``loadtest.delays.DelayedClicks``: 10 impressions a
second, clicks after a mixture of short and multi-hour delays, 10 % never attributed, a
one-day attribution window). Impressions are served in slices of 500 (scored by the model
as it stands), and between slices the model learns every label that has arrived by then,
in arrival order, under one of four rules:

- **immediate**: the eventual label, learned as soon as the impression is shown (no
  delay at all: the reference no real server reaches);
- **perfect**: learned when *timeout* learns it (at the click if it comes before T,
  else at T), but with the eventual label: a click after T makes it a positive at T.
  The same timing as the service, with labels that are never wrong;
- **timeout**: the service with ``negative_after_s = T`` and no correction: a click
  before T is learned as a positive when it arrives; otherwise a negative at T, and a
  click after T is lost;
- **fake negative** (what the service does): as *timeout*, and a click after its
  timeout negative is learned as a positive too when it arrives (Ktena et al. 2019,
  without importance weights).

Quality is the AUC of the served scores against the eventual labels (clicks observed
within the window), over every impression after the first 20,000, and the mean AUC per
served slice. The share of the gap closed is (fake negative − timeout) /
(perfect − timeout); ES-DFM reports ~35 % on Criteo's conversion logs for its correction.

    python -m bench.delayed_feedback            # report on stdout
    python -m bench.delayed_feedback --write    # also bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from aucstream import models
from bench.auto import _adclick, _load, _rows
from loadtest.bench_service import write_marked
from loadtest.delays import DelayedClicks, Timeline

RESULTS_MD = Path(__file__).resolve().with_name("RESULTS.md")
SLICE = 500
WARMUP = 20_000
RULES = ("immediate", "perfect", "timeout", "fake negative")


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def learn_events(t: Timeline, rule: str, timeout_s: float) -> tuple[np.ndarray, ...]:
    """(arrival time, impression index, label ±1) of every label the rule learns, sorted
    by arrival (ties by impression)."""
    n = t.shown_at.shape[0]
    idx = np.arange(n)
    observed = np.isfinite(t.click_at)
    due = t.shown_at + timeout_s
    if rule == "immediate":
        when, who, lab = t.shown_at, idx, np.where(observed, 1, -1)
    else:
        early = observed & (t.click_at < due)
        when = np.where(early, t.click_at, due)
        who, lab = idx, np.where(early, 1, -1)
        if rule == "perfect":
            lab = np.where(observed, 1, -1)
        if rule == "fake negative":
            late = observed & ~early
            when = np.concatenate([when, t.click_at[late]])
            who = np.concatenate([who, idx[late]])
            lab = np.concatenate([lab, np.ones(int(late.sum()), np.int64)])
    order = np.lexsort((who, when))
    return when[order], who[order], lab[order]


def run(X: Any, t: Timeline, rule: str, timeout_s: float, learner: str,
        params: dict[str, Any], n_features: int) -> np.ndarray:
    """The served score of every impression under one rule."""
    lrn = models.create(learner, n_features=n_features, seed=0, **params)
    when, who, lab = learn_events(t, rule, timeout_s)
    n = t.shown_at.shape[0]
    served = np.empty(n)
    k = 0  # next learn event
    indptr, indices, values = X
    for a in range(0, n, SLICE):
        b = min(n, a + SLICE)
        served[a:b] = lrn.score(_rows(X, a, b))
        end = t.shown_at[b] if b < n else np.inf
        stop = int(np.searchsorted(when, end, side="left"))
        while k < stop:  # the labels that arrived before the next slice is served
            j = min(stop, k + SLICE)
            rows = who[k:j]
            starts, ends = indptr[rows], indptr[rows + 1]
            take = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
            ptr = np.concatenate([[0], np.cumsum(ends - starts)])
            lrn.learn((ptr, indices[take], values[take]), lab[k:j])
            k = j
    return served


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.delayed_feedback",
                                description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--timeouts", type=float, nargs="+", default=[900.0, 3600.0],
                   help="negative_after_s values (seconds)")
    p.add_argument("--learner", default="cbr_diag_fifo")
    p.add_argument("--params", default='{"C": 0.0001}', help="JSON")
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    import json

    params = json.loads(args.params)
    rows = []
    with tempfile.TemporaryDirectory(prefix="aucstream-delays-") as tmp:
        for seed in args.seeds:
            say(f"preparing adclick-{seed} ({args.events:,} impressions)")
            stream = _adclick(seed, args.events, Path(tmp))
            X, _, n = _load(stream)
            clicks = DelayedClicks(seed=seed)
            t = clicks.timeline(0, n)
            truth = np.isfinite(t.click_at).astype(np.int64)
            for timeout in args.timeouts:
                late = truth.astype(bool) & (t.click_at - t.shown_at >= timeout)
                out = {}
                for rule in RULES:
                    t0 = time.perf_counter()
                    s = run(X, t, rule, timeout, args.learner, params, stream["n_features"])
                    w = slice(WARMUP, n)
                    per = [float(models.auc(truth[a:a + SLICE], s[a:a + SLICE]))
                           for a in range(WARMUP, n, SLICE)
                           if 0 < truth[a:a + SLICE].sum() < len(truth[a:a + SLICE])]
                    out[rule] = (float(models.auc(truth[w], s[w])), float(np.mean(per)))
                    say(f"  seed {seed} T={timeout:g}s {rule}: AUC {out[rule][0]:.4f} "
                        f"({time.perf_counter() - t0:.0f}s)")
                gap = out["perfect"][0] - out["timeout"][0]
                closed = (out["fake negative"][0] - out["timeout"][0]) / gap if gap > 0 else np.nan
                rows.append(f"| adclick-{seed} | {timeout:g} | {late.sum() / truth.sum():.0%} | "
                            + " | ".join(f"{out[r][0]:.4f} ({out[r][1]:.4f})" for r in RULES)
                            + f" | {closed:.0%} |")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = "\n".join([
        f"{when}; `python -m bench.delayed_feedback {' '.join(argv)}`; {args.learner} "
        f"{json.dumps(params)}, hashed ad-click feed (2^20), {args.events:,} impressions at "
        "10/s; click delays: 70 % exponential with mean 60 s, 30 % with mean 3 h, 10 % of "
        "clicks never attributed, one-day window. AUC of the served scores against the "
        f"eventual labels after the first {WARMUP:,} impressions (mean AUC per served slice "
        f"of {SLICE}).", "",
        "| stream | T (s) | clicks after T | " + " | ".join(RULES) + " | gap closed |",
        "|---" * (len(RULES) + 4) + "|", *rows])
    print(text)
    if args.write:
        write_marked(RESULTS_MD, "<!-- delayed:begin -->", "<!-- delayed:end -->",
                     "## Delayed feedback: timeout negatives and late positives (issue 12)",
                     text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
