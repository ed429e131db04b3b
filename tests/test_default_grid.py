"""bench.default_grid: grid parsing and the leave-one-stream-out choice."""

from __future__ import annotations

import numpy as np
import pytest

from bench.default_grid import parse_grid, report, served_quality


def test_parse_grid_reads_numbers_and_booleans():
    grid = parse_grid(["zeta=0.1,1,10", "R=1e5", "normalize=true,False"])
    assert grid == {"zeta": [0.1, 1, 10], "R": [100000.0], "normalize": [True, False]}
    with pytest.raises(SystemExit):
        parse_grid(["zeta"])


def test_leave_one_out_counts_the_point_best_on_the_other_streams():
    grid = {"a": [1, 2]}
    # a=1 has the best mean (0.85 vs 0.8375) and wins s1..s3 by 0.1; a=2 wins s4 by 0.25.
    # Leaving s4 out picks a=1; leaving out any of s1..s3 picks a=2 (0.85 vs 0.833).
    q = {"s1": (0.9, 0.8), "s2": (0.9, 0.8), "s3": (0.9, 0.8), "s4": (0.7, 0.95)}
    results = {(s, "raw", f"a={v}"): q[s][i] for s in q for i, v in enumerate((1, 2))}
    lines = report(grid, results, {"a=2": "old default"}).splitlines()
    row1 = next(line for line in lines if line.startswith("| a=1 |"))
    row2 = next(line for line in lines if line.startswith("| a=2 (old default) |"))
    assert row1 == "| a=1 | 0.8500 | 0.250 | 3 | 1 | 1 of 4 |"
    assert row2 == "| a=2 (old default) | 0.8375 | 0.100 | 1 | 3 | 3 of 4 |"
    assert lines.index(row1) < lines.index(row2)  # ranked by the mean


def test_served_quality_is_the_mean_auc_of_batches_scored_before_learning(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    y = (X[:, 0] > 0.3).astype(np.int64)
    np.savez(tmp_path / "s.npz", X=X, y=y)
    stream = {"name": "s", "path": str(tmp_path / "s.npz"), "kind": "dense",
              "n_features": 3, "feed": "raw"}
    q = served_quality(stream, "solam", {"zeta": 1.0})
    # The first batch is scored by an empty model (all scores 0, AUC 0.5); later ones
    # by a model that has learned the rule.
    assert 0.75 < q < 1.0
