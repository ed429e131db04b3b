"""The evaluation protocol (bench/protocol.py, bench/eval.py) on a small real dataset.

The full evaluation is a benchmark (``python -m bench.eval``); these tests check the protocol
machinery: folds, scaling without leakage, CV isolation, determinism, prequential AUC.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pytest

from aucstream import models
from aucstream.models.preprocessing import StandardScaler
from bench import datasets, paper_tables
from bench import eval as bench_eval
from bench.protocol import (
    Method,
    Scaler,
    cross_validate,
    evaluate_split,
    grid_points,
    outer_splits,
    prequential,
    stratified_folds,
    tune_prequential,
)


@pytest.fixture(scope="module")
def glass():
    ds = datasets.load("glass")
    return ds.X, ds.y


class Recorder:
    """A real learner (oam_seq) that logs every matrix it learns from or scores."""

    log: ClassVar[list[tuple[str, np.ndarray]]] = []

    def __init__(self, n_features: int, seed: int = 0, **params) -> None:
        self.inner = models.create("oam_seq", n_features=n_features, seed=seed, **params)

    def learn(self, X, y):
        Recorder.log.append(("learn", np.array(X)))
        self.inner.learn(X, y)
        return self

    def score(self, X):
        Recorder.log.append(("score", np.array(X)))
        return self.inner.score(X)

    def score_then_learn(self, X, y):
        Recorder.log.append(("learn", np.array(X)))
        return self.inner.score_then_learn(X, y)


def _recorder(grid=None) -> Method:
    Recorder.log = []
    return Method("rec", "rec", {"capacity": 20}, grid or {"C": [0.01, 1.0]}, factory=Recorder)


# ------------------------------------------------------------------------------ folds
def test_folds_are_disjoint_cover_everything_and_are_stratified(glass):
    _, y = glass
    parts = stratified_folds(y, 5, np.random.default_rng(0))
    allidx = np.concatenate(parts)
    assert np.array_equal(np.sort(allidx), np.arange(y.shape[0]))
    sizes = [p.shape[0] for p in parts]
    assert max(sizes) - min(sizes) <= 1
    pos = [int(y[p].sum()) for p in parts]
    assert max(pos) - min(pos) <= 1


def test_outer_splits_partition_each_run_and_shuffle_the_training_order(glass):
    _, y = glass
    splits = list(outer_splits(y, folds=5, runs=3, seed=1))
    assert len(splits) == 15
    for run in range(3):
        mine = [s for s in splits if s.run == run]
        tests = np.concatenate([s.test for s in mine])
        assert np.array_equal(np.sort(tests), np.arange(y.shape[0]))  # each row tested once
        for s in mine:
            assert np.intersect1d(s.train, s.test).size == 0
            assert np.array_equal(np.sort(np.r_[s.train, s.test]), np.arange(y.shape[0]))
            assert not np.all(np.diff(s.train) > 0)  # a random order, not file order
    # different runs partition differently
    assert not np.array_equal(splits[0].test, splits[5].test)


# ------------------------------------------------------------------------------ scaling
@pytest.mark.parametrize("kind", ["zscore", "minmax", "pm1"])
def test_scaler_uses_training_rows_only(kind):
    rng = np.random.default_rng(0)
    Xtr = rng.normal(3.0, 2.0, size=(50, 4))
    s = Scaler(kind).fit(Xtr)
    Z = s.transform(Xtr)
    if kind == "zscore":
        np.testing.assert_allclose(Z.mean(0), 0, atol=1e-12)
        np.testing.assert_allclose(Z.std(0), 1, atol=1e-12)
    else:
        np.testing.assert_allclose(Z.min(0), -1 if kind == "pm1" else 0, atol=1e-12)
        np.testing.assert_allclose(Z.max(0), 1, atol=1e-12)
    # transforming other rows does not refit
    s.transform(rng.normal(100.0, 50.0, size=(10, 4)))
    np.testing.assert_array_equal(s.transform(Xtr), Z)


def test_l2_rows_and_constant_features():
    X = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(Scaler("l2").fit(X).transform(X)[0], [0.6, 0.8, 0.0])
    assert np.all(Scaler("l2").transform(X)[2] == 0)
    Z = Scaler("zscore").fit_transform(X)
    assert np.all(np.isfinite(Z))
    both = Scaler("pm1_l2").fit(X)
    np.testing.assert_allclose(both.transform(X),
                               Scaler("l2").transform(Scaler("pm1").fit(X).transform(X)))
    np.testing.assert_allclose(np.linalg.norm(both.transform(X), axis=1), 1.0)


@pytest.mark.parametrize("scaling", ["zscore", "minmax"])
def test_no_leakage_poisoning_the_test_fold_changes_nothing_the_models_learn(glass, scaling):
    X, y = glass
    split = next(outer_splits(y, 5, 1, seed=3))
    method = _recorder()
    r1 = evaluate_split(method, X, y, split, scaling=scaling, cv_folds=3, seed=0)
    learned1 = [a for kind, a in Recorder.log if kind == "learn"]
    poisoned = X.copy()
    poisoned[split.test] = poisoned[split.test] * 1000.0 + 1e6  # wild held-out rows
    method = _recorder()
    r2 = evaluate_split(method, poisoned, y, split, scaling=scaling, cv_folds=3, seed=0)
    learned2 = [a for kind, a in Recorder.log if kind == "learn"]
    assert len(learned1) == len(learned2) == 2 * 3 + 1  # 2 grid points × 3 CV folds + final
    for a, b in zip(learned1, learned2, strict=True):
        np.testing.assert_array_equal(a, b)
    assert r1["params"] == r2["params"]
    # the final model's training input is scaled with its own statistics
    final = learned1[-1]
    if scaling == "zscore":
        np.testing.assert_allclose(final.mean(0), 0, atol=1e-9)
    else:
        assert final.min() == 0.0 and final.max() == 1.0


def test_cv_never_sees_the_test_fold(glass):
    X, y = glass
    ids = np.arange(y.shape[0], dtype=np.float64)
    Xid = np.column_stack([X, ids])  # unscaled id column identifies every row
    split = next(outer_splits(y, 5, 1, seed=5))
    method = _recorder()
    evaluate_split(method, Xid, y, split, scaling="none", cv_folds=3, seed=0)
    *cv_calls, final_learn, final_score = Recorder.log
    test_ids = set(split.test.tolist())
    for _, arr in cv_calls:
        assert not test_ids & set(arr[:, -1].astype(int).tolist())
    seen = np.concatenate([a[:, -1] for k, a in cv_calls if k == "score"]).astype(int)
    # each training row is validated once per grid point (2 points)
    assert np.array_equal(np.sort(seen), np.repeat(np.sort(split.train), 2))
    assert final_learn[0] == "learn" and final_score[0] == "score"
    assert np.array_equal(final_learn[1][:, -1].astype(int), split.train)  # in split order
    assert np.array_equal(final_score[1][:, -1].astype(int), split.test)


def test_cross_validation_picks_the_best_mean_and_breaks_ties_by_grid_order(glass):
    X, y = glass
    method = Method("oam", "oam_seq", {"capacity": 20}, {"C": [1e-4, 1e-2, 1.0]})
    best, means = cross_validate(method, X, y, scaling="zscore", k=3, seed=0)
    assert len(means) == 3 and best == {"C": [1e-4, 1e-2, 1.0][int(np.argmax(means))]}
    same = Method("oam", "oam_seq", {"capacity": 20}, {"C": [0.5, 0.5]})
    best, means = cross_validate(same, X, y, scaling="zscore", k=3, seed=0)
    assert means[0] == means[1]
    assert best == {"C": 0.5}
    assert grid_points({"a": [1, 2], "b": ["x"]}) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]


def test_diverging_grid_point_cannot_win(glass):
    X, y = glass
    method = Method("opauc", "opauc", {"lam": 1e-4}, {"eta": [2.0**10, 2.0**-6]})
    best, means = cross_validate(method, X, y, scaling="zscore", k=3, seed=0)
    assert math.isnan(means[0]) and best == {"eta": 2.0**-6}


# ------------------------------------------------------------------------------ determinism
def test_evaluation_is_deterministic_given_the_seed(glass):
    X, y = glass
    method = Method("cbr", "cbr_rs", {"capacity": 10}, {"C": [2.0**-8, 2.0**-2]})

    def run(seed):
        return [evaluate_split(method, X, y, s, scaling="zscore", cv_folds=3, seed=seed)
                for s in outer_splits(y, 5, 1, seed)]

    a, b, c = run(7), run(7), run(8)
    for ra, rb in zip(a, b, strict=True):
        assert ra["auc"] == rb["auc"] and ra["params"] == rb["params"]
    assert [r["auc"] for r in a] != [r["auc"] for r in c]
    assert all(0.5 < r["auc"] <= 1.0 for r in a)


def test_offline_task_matches_a_direct_split_evaluation(glass):
    X, y = glass
    m = Method("oam", "oam_seq", {"capacity": 20}, {"C": [0.01, 1.0]})
    ref = bench_eval.DataRef("glass")
    got = bench_eval._offline_task("t", "zscore", 3, 5, 2, 11, ref, m, 1, 3)
    split = next(s for s in outer_splits(y, 5, 2, 11) if (s.run, s.fold) == (1, 3))
    want = evaluate_split(m, X, y, split, scaling="zscore", cv_folds=3, seed=11)
    assert got["auc"] == want["auc"] and got["params"] == want["params"]


# ------------------------------------------------------------------------------ prequential
def test_prequential_auc_is_models_auc_of_score_then_learn(glass):
    X, y = glass
    order = np.random.default_rng(0).permutation(y.shape[0])
    X, y = X[order], y[order]
    method = Method("cbr", "cbr_fifo", {"capacity": 10}, {})
    r = prequential(method, X, y, {"C": 0.05}, seed=3, window=50, n_points=7, chunk=16)
    scaler = StandardScaler(X.shape[1])
    twin = models.create("cbr_fifo", n_features=X.shape[1], seed=0, capacity=10, C=0.05)
    want = twin.score_then_learn(scaler.learn_transform(X), y)
    np.testing.assert_allclose(r["scores"], want, rtol=0, atol=1e-12)
    assert r["auc"] == models.auc(y, want)
    assert r["curve_t"][-1] == y.shape[0] and len(r["curve_t"]) == 7
    roll = models.RollingAUC(50)
    roll.update(want, y)
    assert r["curve_auc"][-1] == pytest.approx(roll.value, abs=1e-12)
    assert r["curve_auc"][-1] == pytest.approx(models.auc(y[-50:], want[-50:]), abs=1e-12)


def test_prequential_tuning_uses_only_the_prefix(glass):
    X, y = glass
    order = np.random.default_rng(1).permutation(y.shape[0])
    X, y = X[order], y[order]
    method = _recorder({"C": [0.01, 1.0]})
    tune_prequential(method, X, y, prefix=80, seed=0)
    assert Recorder.log and all(a.shape[0] <= 80 for _, a in Recorder.log)


def test_river_peer_prequential_matches_its_own_scores():
    pytest.importorskip("river")
    from bench.peers import RiverLR

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(np.int64)
    a = RiverLR(3, lr=0.1)
    pre = a.score_then_learn(X, y)
    b = RiverLR(3, lr=0.1)
    for i in range(60):  # score each row with the model as it stands, then learn it
        assert pre[i] == pytest.approx(b.score(X[i:i + 1])[0], abs=1e-12)
        b.learn(X[i:i + 1], y[i:i + 1])
    assert models.auc(y, a.score(X)) > 0.9


# ------------------------------------------------------------------------------ tables, report
def test_paper_tables_cover_the_datasets_we_run():
    assert set(paper_tables.TABLES["d43"]) == {
        "glass", "ionosphere", "diabetes", "vehicle", "german", "svmguide3", "spambase",
        "segment"}
    for table in paper_tables.TABLES.values():
        for row in table.values():
            for mean, std, _ in row.values():
                assert 0.5 < mean < 1.0 and 0 <= std < 0.2
    assert paper_tables.paper("d43", "glass", "cbr_fifo")[0] == 0.823
    assert paper_tables.paper("d52", "spambase", "fcbr_fifo") == (0.9724, 0.0006, 11.585)
    for key in bench_eval.TABLES:
        cfg = bench_eval.table_config(key)
        names = {r.name for r in cfg.data}
        assert names <= set(datasets.available())
        assert set(paper_tables.TABLES.get(key, {})) <= names
    # every packaged dataset is evaluated somewhere (pima is diabetes, row for row)
    used = {r.name for key in bench_eval.TABLES for r in bench_eval.table_config(key).data}
    used |= set(bench_eval.stream_config().datasets)
    assert set(datasets.available()) - used == {"pima"}


def test_report_edits_only_its_own_section(tmp_path, monkeypatch):
    md = tmp_path / "RESULTS.md"
    md.write_text("# Bench\n\n## Learner throughput\nkeep me\n")
    monkeypatch.setattr(bench_eval, "RESULTS_MD", md)
    bench_eval.write_results_md(["first"])
    bench_eval.write_results_md(["second"])
    text = md.read_text()
    assert "keep me" in text and "second" in text and "first" not in text
    assert text.count(bench_eval.MARK_START) == 1 and text.count(bench_eval.MARK_END) == 1
    # a hand-written notes block inside the section survives regeneration
    notes = f"{bench_eval.NOTES_START}\nmy analysis\n{bench_eval.NOTES_END}"
    md.write_text(text.replace("second", notes) + "\n## Later section\ntail\n")
    bench_eval.write_results_md(["third"])
    text = md.read_text()
    assert "my analysis" in text and "third" in text and "tail" in text and "keep me" in text


def test_ceiling_bounds_the_protocol_from_above():
    """The peeking upper bounds of ``bench.ceiling`` are ≥ the protocol's own number."""
    from bench import ceiling

    res = ceiling.ceiling("d43", "glass", ("oam_seq",))
    r = res["learners"]["oam_seq"]
    assert res["splits"] == 50
    assert 0.5 < r["cv"] <= r["oracle"] <= 1.0
    assert r["best_fixed"] <= r["oracle"]
    assert 0.5 < res["rbf_svc"] <= 1.0
    stored = bench_eval.summarize(
        bench_eval._load_json(bench_eval.results_path("d43", False))["entries"]["glass|oam_seq"])
    assert r["cv"] == pytest.approx(stored["auc"], abs=1e-12)
    assert "| oam_seq |" in ceiling.markdown(res)


def test_a_report_without_write_leaves_the_tracked_files_alone(tmp_path):
    """`bench.eval report` (no --write) works on a scratch copy of the saved results."""
    import hashlib
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    tracked = [root / "bench" / "RESULTS.md", *sorted((root / "bench" / "results").rglob("*"))]

    def digest() -> dict[str, str]:
        return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in tracked
                if p.is_file()}

    before = digest()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "bench.eval", "report", "--quick"], cwd=root,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert digest() == before
    (scratch,) = (tmp_path / "aucstream" / "bench").iterdir()
    assert (scratch / "results" / "eval-quick" / "REPORT.md").is_file()
    assert str(scratch) in r.stderr
