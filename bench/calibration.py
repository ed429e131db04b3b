"""Are /score's probabilities click probabilities? The ad-click feed, served as the service does.

Each learner takes the hashed ad-click feed (``loadtest/feed.py``, 2^20) in batches of
500: a batch is scored first (probabilities from the calibration map as published
then, :class:`aucstream.models.calibration.PlattCalibrator`, exactly as ``/score``
answers), then learned test-then-train, and its prequential scores feed the map. Over
the 10,000 events after the first 30,000 (and after the first 190,000) it compares:

- the mean probability with the observed click rate (target: within ±10 %);
- the log loss with the constant predictor's (the click rate of the events before the
  window: the best constant a server knows then) and with Vowpal Wabbit's logistic
  regression at its defaults on the same events in the same order (its probabilities
  σ(margin); target: ours below the constant and within 5 % of VW).

    python -m bench.calibration            # two seeds, the report on stdout
    python -m bench.calibration --write    # also bench/RESULTS.md
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
from aucstream.models.calibration import PlattCalibrator
from bench.auto import _VW, _adclick, _load, _rows
from loadtest.bench_service import write_marked

RESULTS_MD = Path(__file__).resolve().with_name("RESULTS.md")
BATCH = 500
WINDOWS = ((30_000, 40_000), (190_000, 200_000))
LEARNERS = ("cbr_diag_fifo", "solam", "auto")


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def log_loss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(np.where(y == 1, np.log(p), np.log1p(-p))))


def served_probabilities(stream: dict[str, Any], method: str, n: int) -> np.ndarray:
    """The probability each event was served with before it was learned."""
    X, y, _ = _load(stream)
    out = np.empty(n)
    if method == "vw":
        vw = _VW()
        for a in range(0, n, BATCH):
            b = min(n, a + BATCH)
            out[a:b] = 1.0 / (1.0 + np.exp(-vw.score(_rows(X, a, b))))
            vw.learn(_rows(X, a, b), y[a:b])
        return out
    lrn = models.create(method, n_features=stream["n_features"], seed=0)
    cal = PlattCalibrator()
    for a in range(0, n, BATCH):
        b = min(n, a + BATCH)
        Xb, yb = _rows(X, a, b), y[a:b]
        out[a:b] = cal.predict(lrn.score(Xb))
        cal.update(lrn.score_then_learn(Xb, yb), yb)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.calibration",
                                description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--learners", nargs="+", default=list(LEARNERS))
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    n = WINDOWS[-1][1]
    rows = []
    with tempfile.TemporaryDirectory(prefix="aucstream-calibration-") as tmp:
        for seed in args.seeds:
            say(f"preparing adclick-{seed} ({n:,} events)")
            stream = _adclick(seed, n, Path(tmp))
            y = _load(stream)[1]
            probs = {}
            for method in (*args.learners, "vw"):
                t0 = time.perf_counter()
                probs[method] = served_probabilities(stream, method, n)
                say(f"  {method}: {time.perf_counter() - t0:.0f}s")
            for lo, hi in WINDOWS:
                yw = y[lo:hi]
                rate = float(yw.mean())
                const = float(y[:lo].mean())
                base = log_loss(yw, np.full(hi - lo, const))
                vw_loss = log_loss(yw, probs["vw"][lo:hi])
                for method in (*args.learners, "vw"):
                    pw = probs[method][lo:hi]
                    loss = log_loss(yw, pw)
                    rel = pw.mean() / rate - 1.0
                    auc = float(models.auc(yw, pw))
                    ok = (abs(rel) <= 0.10 and loss < base
                          and (method == "vw" or loss <= 1.05 * vw_loss))
                    rows.append(f"| adclick-{seed} | {lo:,}–{hi:,} | {method} | {rate:.4f} | "
                                f"{pw.mean():.4f} ({rel:+.1%}) | {loss:.4f} | {base:.4f} | "
                                f"{loss / vw_loss - 1:+.1%} | {auc:.4f} | "
                                f"{'met' if ok else 'not met'} |")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = "\n".join([
        f"{when}; `python -m bench.calibration {' '.join(argv)}`. Hashed ad-click feed "
        f"(2^20), batches of {BATCH}: each scored (probabilities from the map as it stands) "
        "before it is learned. Constant = the click rate of every event before the window. "
        "Targets: mean probability within ±10 % of the click rate, log loss below the "
        "constant's and at most 5 % above VW's (VW's own row: the first two only).", "",
        "| stream | events | method | click rate | mean probability | log loss | constant's "
        "| vs VW | AUC | targets |", "|---|---|---|---|---|---|---|---|---|---|", *rows])
    print(text)
    if args.write:
        write_marked(RESULTS_MD, "<!-- calibration:begin -->", "<!-- calibration:end -->",
                     "## Calibrated probabilities on the ad-click feed (issue 12)", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
