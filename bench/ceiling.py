"""How high can a linear scorer go on one dataset under a table's protocol? (evidence, not a result)

When our AUC falls short of a paper's, this asks whether *any* tuning could close the gap on our
copy of the data. On exactly the table's splits and scaling it reports, per learner:

* ``CV``: the protocol (hyperparameters by CV inside the training part): the table's number;
* ``best fixed``: the best single grid value, chosen by its mean *test* AUC over all splits;
* ``oracle``: the grid value chosen on each split's *test* fold.

The last two peek at the test folds, so they are upper bounds on what tuning can do, never
results. A kernel scorer (scikit-learn's RBF ``SVC``, default ``C`` and ``gamma='scale'``, no
tuning) is run on the same splits to show how much of the data is ranked only non-linearly.

Usage::

    python -m bench.ceiling --table d43 --dataset ionosphere

Writes ``bench/results/ceiling/<table>-<dataset>.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from bench import eval as bench_eval
from bench.protocol import Method, Scaler, evaluate_split, grid_points, outer_splits, safe_auc

DEFAULT_LEARNERS = ("cbr_fifo", "cbr_rs", "oam_seq", "opauc", "batch_lr")


def _rbf_svc(X: np.ndarray, y: np.ndarray, split: Any, scaling: str) -> float:
    from sklearn.svm import SVC

    scaler = Scaler(scaling).fit(X[split.train])
    model = SVC(C=1.0, gamma="scale").fit(scaler.transform(X[split.train]), y[split.train])
    return safe_auc(y[split.test], model.decision_function(scaler.transform(X[split.test])))


def ceiling(table: str, dataset: str, learners: tuple[str, ...], seed: int = 0
            ) -> dict[str, Any]:
    cfg = bench_eval.table_config(table)
    ref = next(r for r in cfg.data if r.name == dataset)
    scaling = ref.scaling or cfg.scaling
    X, y = bench_eval._load(ref.name, ref.rows)
    splits = list(outer_splits(y, cfg.folds, cfg.runs, seed))
    methods: list[Method] = [m for m in cfg.methods if m.key in learners]
    out: dict[str, Any] = {"table": table, "dataset": dataset, "scaling": scaling,
                           "splits": len(splits), "seed": seed, "learners": {}}
    for m in methods:
        t0 = time.perf_counter()
        points = grid_points(m.grid)
        # test AUC of every grid point on every split: (splits, points)
        grid_auc = np.array([[evaluate_split(m, X, y, s, scaling=scaling, cv_folds=cfg.cv_folds,
                                             seed=seed, points=[p])["auc"] for p in points]
                             for s in splits])
        cv = np.array([evaluate_split(m, X, y, s, scaling=scaling, cv_folds=cfg.cv_folds,
                                      seed=seed)["auc"] for s in splits])
        fixed_means = np.nanmean(grid_auc, axis=0)
        best = int(np.nanargmax(fixed_means))
        out["learners"][m.key] = {
            "cv": float(np.nanmean(cv)),
            "best_fixed": float(fixed_means[best]),
            "best_fixed_params": points[best],
            "oracle": float(np.nanmean(np.nanmax(grid_auc, axis=1))),
            "seconds": time.perf_counter() - t0,
        }
        print(f"  {m.key}: {out['learners'][m.key]}", file=sys.stderr)
    out["rbf_svc"] = float(np.mean([_rbf_svc(X, y, s, scaling) for s in splits]))
    return out


def markdown(res: dict[str, Any]) -> str:
    from bench import paper_tables

    lines = [f"{res['dataset']} ({res['table']} protocol, {res['scaling']} scaling, "
             f"{res['splits']} splits)", "",
             "| learner | CV (the protocol) | best fixed value (peeks) | oracle per split (peeks) "
             "| paper |", "|---|---|---|---|---|"]
    for key, r in res["learners"].items():
        p = paper_tables.paper(res["table"], res["dataset"], key)
        lines.append(f"| {key} | {r['cv']:.3f} | {r['best_fixed']:.3f} "
                     f"({bench_eval._fmt_params(r['best_fixed_params'])}) | {r['oracle']:.3f} | "
                     f"{f'{p[0]:.3f}' if p else '—'} |")
    lines.append(f"| RBF SVC (untuned, non-linear) | {res['rbf_svc']:.3f} | | | — |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ceiling", description=__doc__.split("\n")[0])
    ap.add_argument("--table", default="d43", choices=bench_eval.TABLES)
    ap.add_argument("--dataset", default="ionosphere")
    ap.add_argument("--learner", default=",".join(DEFAULT_LEARNERS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true",
                    help="save the result under bench/results/ceiling (tracked)")
    args = ap.parse_args(argv)
    res = ceiling(args.table, args.dataset, tuple(args.learner.split(",")), args.seed)
    if args.write:
        path = bench_eval.RESULTS_DIR / "ceiling" / f"{args.table}-{args.dataset}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=1, sort_keys=True,
                                   default=bench_eval._json_default))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
