"""The fault benchmark (loadtest/faults.py): its audit counts what it claims, and two
short real runs on the SQLite store (kill -9 of the service; poison inputs) account for
every event."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from aucstream.service.codec import encode_batch
from aucstream.service.encoding import FeatureEncoder
from aucstream.service.store import SqliteStore
from loadtest import faults
from loadtest._faults_audit import audit_model, markers_of
from loadtest._faults_load import DENSE, HASHED, POISON, Req, marked_event, marker_index
from loadtest._faults_run import Options, run_one

CONFIG = {"name": "m", "learner": "cbr_fifo", "params": {}, "features": DENSE.features,
          "seed": 0, "standardize": False, "rolling_window": 100, "uid": "m"}


def test_markers_survive_encoding_both_kinds() -> None:
    hashed = [marked_event(HASHED, k, ids=False) for k in (1, 7, 123_456)]
    X = FeatureEncoder(HASHED.features).encode(hashed).learner_input()
    assert markers_of(X, marker_index(18)).tolist() == [1, 7, 123_456]
    dense = np.array([marked_event(DENSE, k, ids=True)["x"] for k in (3, 99)])
    assert markers_of(dense, None).tolist() == [3, 99]
    dense[1, 0] = np.nan
    assert markers_of(dense, None).tolist() == [3, -1]


def test_audit_counts_lost_twice_unacked_refused_and_unknown(tmp_path) -> None:
    store = SqliteStore.in_dir(tmp_path)
    store.create_model("m", CONFIG)

    def append(k0: int, x1: float | None = None) -> None:
        events = [marked_event(DENSE, k, ids=False) for k in range(k0, k0 + 5)]
        X = np.array([e["x"] for e in events])
        if x1 is not None:
            X[:, 1] = x1
        y = np.array([e["label"] for e in events], np.int8)
        store.append("m", encode_batch(y, X=X), [None] * 5)  # no ids: the store keeps all

    reqs = [Req("m", 1, 5, True, "load", ["200"], "acked"),  # in the log once
            Req("m", 6, 5, False, "load", ["200"], "acked"),  # never appended: lost
            Req("m", 11, 5, False, "load", ["503", "200"], "acked"),  # appended twice
            Req("m", 16, 5, True, "load", ["504", "200"], "acked"),  # appended twice
            Req("m", 21, 5, True, "load", ["dropped"], "failed"),  # learned, never acked
            Req("m", 31, 5, True, "1e160", ["422"], "refused"),  # learned despite a 4xx
            Req("m", 26, 5, True, "max-float", ["200"], "acked"),  # refused by the replay
            Req("other", 1, 5, True, "load", ["200"], "acked")]  # another model's
    for k0 in (1, 11, 11, 16, 16, 21, 31):
        append(k0)
    append(100)  # markers 100..104: no request sent them
    append(26, x1=1e300)  # overflows cbr_fifo: the service refuses the entry
    a = audit_model(store, "m", None, reqs)
    store.close()
    assert a.entries == 9 and a.rows == 45
    assert a.refused_entries == 1 and not a.replay_error
    assert a.learned == 40
    assert a.acked == 25
    assert a.lost == 10 and a.lost_poison == 5
    assert a.twice_ids == 5
    assert a.twice_noids == 5 and a.twice_noids_after == Counter({"503→200": 5})
    assert a.unacked_learned == 5
    assert a.learned_despite_4xx == 5
    assert a.unknown == 5 and a.unreadable == 0


def test_results_section_is_replaced_in_place(tmp_path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n\nother tables\n")
    faults.write_results(path, "RUN-ONE")
    faults.write_results(path, "RUN-TWO")
    text = path.read_text()
    assert text.startswith("# Results\n\nother tables\n")
    assert text.count(faults.BEGIN) == text.count(faults.END) == 1
    assert "RUN-TWO" in text and "RUN-ONE" not in text


@pytest.mark.slow
def test_kill9_on_sqlite_loses_nothing(tmp_path) -> None:
    row = run_one("sqlite", "kill9", Options(duration=4, clients=8, drain=15), tmp_path)
    assert row.acked > 1000, row.notes
    assert sum(a.acked for a in row.audits) == row.acked
    assert row.lost == 0 and row.twice_ids == 0 and row.twice_noids == 0, row.notes
    assert row.mid_ready is not None and row.final_ready is not None
    assert row.statuses["500"] == 0, row.unexpected
    assert not row.serving, row.serving
    assert set(row.model_vs_log.values()) == {0} and all(row.scores_match.values())
    report = faults.report([row], Options(), "test", "n/a")
    assert "| sqlite | kill9 |" in report and "**PASS** 0 acknowledged events lost" in report


@pytest.mark.slow
def test_poison_on_sqlite_is_accounted(tmp_path) -> None:
    row = run_one("sqlite", "poison", Options(duration=3, clients=8, drain=10), tmp_path)
    assert set(POISON) <= set(row.poison), row.poison  # every kind was sent
    assert row.acked > 1000
    assert row.lost == row.lost_poison, row.notes  # no event of the normal load is lost
    assert row.twice_ids == 0 and row.twice_noids == 0
    for kind in ("nan-token", "inf-token", "oversized-body", "too-many-events"):
        assert set(row.poison[kind]) <= {"413", "422"}, (kind, row.poison[kind])
        assert not row.poison_bad_body[kind]
    assert not row.serving, row.serving
    assert set(row.model_vs_log.values()) == {0} and all(row.scores_match.values())
    assert "Poison inputs" in faults.report([row], Options(), "test", "n/a")
