"""bench/auto.py measures what it says: per-batch served quality, scored before learning."""

from __future__ import annotations

import numpy as np

from aucstream import models
from aucstream.models.preprocessing import StandardScaler
from bench import auto as bench_auto
from tests.helpers import sparse_stream, stream


def test_served_quality_is_the_mean_auc_of_batches_scored_before_learning(tmp_path):
    X, y = stream(2600, 6, seed=1, pos_rate=0.2)
    path = tmp_path / "s.npz"
    np.savez(path, X=X, y=y)
    spec = {"name": "s", "path": str(path), "kind": "dense", "n_features": 6}
    out = bench_auto.run_one(spec, "cbr_fifo", "cbr_fifo", {"C": 0.1})
    lrn = models.create("cbr_fifo", n_features=6, seed=0, C=0.1)
    scaler = StandardScaler(6)
    aucs, served = [], []
    for a in range(0, 2600, bench_auto.BATCH):
        Xb, yb = X[a:a + 500], y[a:a + 500]
        s = lrn.score(scaler.transform(Xb))
        served.append(s)
        aucs.append(models.auc(yb, s))
        lrn.learn(scaler.learn_transform(Xb), yb)
    assert out["batches"] == 6 and out["n"] == 2600
    assert out["served_quality"] == np.mean(aucs)
    assert out["stream_auc"] == models.auc(y, np.concatenate(served))


def test_auto_runs_on_a_hashed_stream_and_reports_its_choice(tmp_path):
    (indptr, indices, values), y = sparse_stream(1500, 1 << 12, nnz=10, seed=2)
    path = tmp_path / "h.npz"
    np.savez(path, indptr=indptr, indices=indices, values=values, y=y)
    spec = {"name": "h", "path": str(path), "kind": "hashed", "n_features": 1 << 12}
    out = bench_auto.run_one(spec, "auto", "auto", {"min_events": 0, "block": 100})
    assert 0.5 < out["served_quality"] <= 1.0
    assert out["promotions"] >= 0 and 0 <= out["served_candidate"] < len(out["quality"])
    labels = [m for m, _, _ in bench_auto.methods_for(1 << 12)]
    assert labels[0] == "auto" and labels[-2:] == ["vw", "river"]


def test_the_verdicts_compare_auto_with_vw_and_the_best_candidate():
    rows = [{"stream": "adclick-1", "method": m, "served_quality": q, "stream_auc": q,
             "events_per_s": 1.0, "served_candidate": 0, "promotions": 0}
            for m, q in (("auto", 0.70), ("cbr_diag_fifo C=0.001", 0.704), ("vw", 0.695))]
    text = bench_auto.report(rows, "header")
    assert "| adclick-1 | 0.7000 | 0.6950 | 0.7040 | **no** | yes |" in text
