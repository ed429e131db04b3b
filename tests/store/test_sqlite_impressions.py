"""The embedded store's slate layout of impressions (service/store/sqlite_impressions.py):
against a plain reference of the Store contract, through two store objects on one file
(two processes' id indexes) with index rebuilds forced; the digest table against a dict;
and a file of schema version 1 (one row per impression) migrated on opening."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aucstream.service.store import SqliteStore
from aucstream.service.store import sqlite_impressions as impressions
from aucstream.service.store.base import IMPRESSION_STATUSES, Impression
from aucstream.service.store.digest_table import DigestTable

CONFIG = {"learner": "cbr_fifo"}
IDS = [f"i{k}" for k in range(5)] + ["", "é", "a\0b"]


class Reference:
    """The Store contract's impressions in a few lines (all expired items dropped)."""

    def __init__(self) -> None:
        self.imps: dict[str, list[Any]] = {}  # id -> [payload, shown, expires, status]

    def live(self, now: float) -> dict[str, list[Any]]:
        return {i: v for i, v in self.imps.items() if v[2] > now}

    def keep(self, items: list[tuple[str, bytes]], shown: float, expires: float,
             cap: int) -> int:
        held = len(self.live(shown))
        kept = 0
        first: dict[str, bytes] = {}
        for item_id, payload in items:
            first.setdefault(item_id, payload)
        for item_id, payload in first.items():
            if held >= cap:
                break
            if item_id in self.imps and self.imps[item_id][2] > shown:
                continue
            self.imps[item_id] = [payload, shown, expires, "pending"]
            held += 1
            kept += 1
        return kept

    def get(self, ids: list[str], now: float) -> dict[str, Impression]:
        live = self.live(now)
        return {i: Impression(*live[i]) for i in dict.fromkeys(ids) if i in live}

    def claim(self, ids: list[str], sources: list[str], to: str, now: float) -> list[str]:
        live = self.live(now)
        moved = [i for i in dict.fromkeys(ids) if i in live and live[i][3] in sources]
        for i in moved:
            self.imps[i][3] = to
        return moved

    def due(self, statuses: list[str], before: float, now: float,
            limit: int) -> list[tuple[str, Impression]]:
        found = sorted((v[1], i) for i, v in self.live(now).items()
                       if v[3] in statuses and v[1] <= before)
        return [(i, Impression(*self.imps[i])) for _, i in found[:limit]]

    def count(self, now: float) -> dict[str, int]:
        out = dict.fromkeys(IMPRESSION_STATUSES, 0)
        for v in self.live(now).values():
            out[v[3]] += 1
        return out


_ids = st.lists(st.sampled_from(IDS), max_size=6)
_statuses = st.lists(st.sampled_from(IMPRESSION_STATUSES), max_size=3)
_op = st.one_of(
    st.tuples(st.just("keep"), st.lists(st.tuples(st.lists(st.tuples(st.sampled_from(IDS),
        st.binary(max_size=5)), max_size=6), st.integers(0, 3), st.integers(1, 8)),
        min_size=1, max_size=4), st.integers(0, 14)),
    st.tuples(st.just("get"), _ids),
    st.tuples(st.just("claim"), _ids, _statuses, st.sampled_from(IMPRESSION_STATUSES)),
    st.tuples(st.just("due"), _statuses, st.integers(0, 5), st.integers(0, 20)),
    st.tuples(st.just("count")),
)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(_op, st.integers(0, 1), st.integers(0, 3)), max_size=25))
def test_two_stores_on_one_file_match_the_reference(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        ops: list[tuple[Any, int, int]]) -> None:
    monkeypatch.setattr(impressions, "_REBUILD_MIN", 3)  # rebuild indexes often
    monkeypatch.setattr("aucstream.service.store.sqlite_store._EXPIRE_SLICE", 2)
    path = tmp_path_factory.mktemp("slates") / "s.db"
    stores = [SqliteStore(path), SqliteStore(path)]
    try:
        stores[0].create_model("m", CONFIG)
        ref = Reference()
        now = 1000.0
        for op, who, step in ops:
            now += step
            s = stores[who]
            if op[0] == "keep":  # requests shown a little apart, in order, kept at once
                _, groups, cap = op
                shown = [now + d for d in np.cumsum([g[1] for g in groups])]
                got = s.keep_impression_groups(
                    "m", [(g[0], t, t + g[2]) for g, t in zip(groups, shown, strict=True)], cap)
                assert got == [ref.keep(g[0], t, t + g[2], cap)
                               for g, t in zip(groups, shown, strict=True)]
                now = shown[-1]
            elif op[0] == "get":
                assert s.get_impressions("m", op[1], now) == ref.get(op[1], now)
            elif op[0] == "claim":
                assert (s.claim_impressions("m", op[1], op[2], op[3], now)
                        == ref.claim(op[1], op[2], op[3], now))
            elif op[0] == "due":
                _, statuses, back, limit = op
                assert (s.due_impressions("m", statuses, now - back, now, limit)
                        == ref.due(statuses, now - back, now, limit))
            assert s.count_impressions("m", now) == ref.count(now)
    finally:
        for s in stores:
            s.close()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3), st.integers(0, 2**40)),
                max_size=300))
def test_digest_table_matches_a_dict(puts: list[tuple[int, int, int]]) -> None:
    table, ref = DigestTable(), {}
    for a in range(0, len(puts), 7):  # batches, with repeats inside some
        chunk = puts[a:a + 7]
        digs = np.array([(k, k2) for k, k2, _ in chunk], np.uint64).reshape(-1, 2)
        table.put(digs, np.array([v for *_, v in chunk], np.int64))
        for k, k2, v in chunk:
            ref[(k, k2)] = v
        assert len(table) == len(ref)
    probe = [(k, k2) for k in range(42) for k2 in range(4)]
    got = table.get(np.array(probe, np.uint64)).tolist()
    assert got == [ref.get(p, -1) for p in probe]
    with pytest.raises(ValueError, match="one int >= 0"):
        table.put(np.zeros((1, 2), np.uint64), np.array([-1]))


def test_a_version_1_file_is_migrated(tmp_path: Path) -> None:
    """Per-item rows of the first layout become slates, statuses and counts kept."""
    path = tmp_path / "s.db"
    SqliteStore(path).create_model("m", CONFIG)
    c = sqlite3.connect(path, isolation_level=None)
    (mid,) = c.execute("SELECT id FROM models WHERE name = 'm'").fetchone()
    c.execute("CREATE TABLE impressions (model INTEGER NOT NULL, id TEXT NOT NULL, "
              "payload BLOB NOT NULL, shown_at REAL NOT NULL, expires_at REAL NOT NULL, "
              "status TEXT NOT NULL, PRIMARY KEY (model, id))")
    c.execute("CREATE INDEX impressions_due ON impressions (model, status, shown_at, id)")
    rows = [("a", b"pa", 10.0, 100.0, "pending"), ("b", b"", 11.0, 100.0, "labelled"),
            ("c", b"pc", 12.0, 20.0, "timing_out"), ("d", b"pd", 9.0, 15.0, "pending")]
    c.executemany("INSERT INTO impressions VALUES (?, ?, ?, ?, ?, ?)",
                  [(mid, *r) for r in rows])
    for status in ("pending", "labelled", "timing_out"):
        c.execute("INSERT INTO impression_counts VALUES (?, ?, ?)",
                  (mid, status, sum(r[4] == status for r in rows)))
    c.execute("PRAGMA user_version = 1")
    c.close()
    s = SqliteStore(path)
    try:
        assert s.get_impressions("m", ["a", "b", "c", "d", "x"], 14) == {
            r[0]: Impression(*r[1:]) for r in rows}
        assert s.count_impressions("m", 16) == {
            "pending": 1, "labelled": 1, "timing_out": 1, "timed_out": 0}
        assert [i for i, _ in s.due_impressions("m", ["pending", "timing_out"], 50, 16, 9)] == [
            "a", "c"]
        assert s.claim_impressions("m", ["c", "a"], ["timing_out"], "timed_out", 16) == ["c"]
        assert s.keep_impressions("m", [("d", b"new"), ("a", b"no")], 30, 90, 10) == 1
        assert s.count_impressions("m", 30) == {
            "pending": 2, "labelled": 1, "timing_out": 0, "timed_out": 0}
    finally:
        s.close()
    c = sqlite3.connect(path)
    assert c.execute("PRAGMA user_version").fetchone() == (3,)  # (the current version)
    assert c.execute("SELECT 1 FROM sqlite_master WHERE name LIKE 'impressions%'").fetchall() == []
    c.close()


def test_a_slate_all_claimed_is_due_again_when_an_item_goes_back_to_pending(
        tmp_path: Path) -> None:
    """The sweep's index holds slates with pending or timing-out items only: it must take
    a slate back when a claim reopens one of its items."""
    s = SqliteStore(tmp_path / "s.db")
    try:
        s.create_model("m", CONFIG)
        s.keep_impressions("m", [("a", b"1"), ("b", b"2")], 10, 100, 9)
        assert s.claim_impressions("m", ["a", "b"], ["pending"], "timing_out", 11) == ["a", "b"]
        assert s.claim_impressions("m", ["a", "b"], ["timing_out"], "timed_out", 11) == ["a", "b"]
        assert s.due_impressions("m", ["pending", "timing_out"], 50, 12, 9) == []
        assert s.claim_impressions("m", ["b"], ["timed_out"], "pending", 12) == ["b"]
        assert [i for i, _ in s.due_impressions("m", ["pending"], 50, 12, 9)] == ["b"]
        assert s.claim_impressions("m", ["b"], ["pending"], "timing_out", 13) == ["b"]
        assert [i for i, _ in s.due_impressions("m", ["timing_out"], 50, 13, 9)] == ["b"]
    finally:
        s.close()


def test_a_keep_that_fails_after_taking_its_slates_into_the_index_is_forgotten(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A keep puts its new slates into the id index before its commit; if the
    transaction then fails, their numbers are used again by the next keep, whose ids must
    still be found (the index starts over)."""
    store = SqliteStore(tmp_path / "s.db")
    store.create_model("m", CONFIG)
    assert store.keep_impression_groups("m", [([("a", b"1")], 10.0, 100.0)], 10) == [1]
    record = impressions.IdIndex.record

    def record_then_fail(self: impressions.IdIndex, first: int, digests: Any) -> None:
        record(self, first, digests)
        raise sqlite3.OperationalError("disk I/O error")  # as a commit that fails

    monkeypatch.setattr(impressions.IdIndex, "record", record_then_fail)
    with pytest.raises(Exception, match="disk I/O error"):
        store.keep_impression_groups("m", [([("b", b"2")], 11.0, 100.0)], 10)
    monkeypatch.undo()
    assert store.keep_impression_groups("m", [([("c", b"3")], 12.0, 100.0)], 10) == [1]
    assert store.get_impressions("m", ["a", "b", "c"], 13.0) == {
        "a": Impression(b"1", 10.0, 100.0, "pending"),
        "c": Impression(b"3", 12.0, 100.0, "pending")}
    store.close()


@pytest.mark.parametrize("sql", [impressions.SLATES_SINCE, impressions.live_slates("id", 3)])
def test_slates_are_looked_up_by_rowid_not_by_walking_the_models_expiry_index(
        tmp_path: Path, sql: str) -> None:
    SqliteStore(tmp_path / "s.sqlite3").close()  # (the schema, with its indexes)
    with sqlite3.connect(tmp_path / "s.sqlite3") as c:
        plan = " ".join(r[-1] for r in c.execute("EXPLAIN QUERY PLAN " + sql,
                                                 (1,) * sql.count("?")))
    assert "USING INTEGER PRIMARY KEY" in plan, plan
    assert "slates_expiry" not in plan and "TEMP B-TREE" not in plan, plan


_V2_SLATES = """CREATE TABLE slates (
    id INTEGER PRIMARY KEY AUTOINCREMENT, model INTEGER NOT NULL, shown_at REAL NOT NULL,
    expires_at REAL NOT NULL, n INTEGER NOT NULL, open INTEGER NOT NULL, ids TEXT NOT NULL,
    digests BLOB NOT NULL, payloads BLOB NOT NULL, ends BLOB NOT NULL)"""


@pytest.mark.parametrize("deleted_last", [False, True])
def test_a_version_2_file_gets_its_slates_items_split_off(tmp_path: Path,
                                                          deleted_last: bool) -> None:
    """Version 2 kept a slate's items in its row: they move to slate_data, the numbers
    and the numbering's high mark stay (a deleted slate's number never comes back)."""
    path = tmp_path / "s.db"
    SqliteStore(path).create_model("m", CONFIG)
    c = sqlite3.connect(path, isolation_level=None)
    (mid,) = c.execute("SELECT id FROM models WHERE name = 'm'").fetchone()
    c.execute("DROP TABLE slates")
    c.execute("DROP TABLE slate_data")
    c.execute(_V2_SLATES)
    c.execute("CREATE INDEX slates_expiry ON slates (model, expires_at)")
    c.execute("CREATE INDEX slates_open ON slates (model, shown_at) WHERE open > 0")
    for sid, ids, pays in ((3, ["a", "b"], [b"pa", b"pbb"]), (7, ["c"], [b"pc"])):
        c.execute("INSERT INTO slates VALUES (?, ?, 10.0, 100.0, ?, 1, ?, ?, ?, ?)",
                  (sid, mid, len(ids), json.dumps(ids),
                   impressions.id_digests_128(ids).tobytes(), b"".join(pays),
                   np.cumsum([len(p) for p in pays]).astype("<u4").tobytes()))
    c.execute("INSERT INTO slate_claims VALUES (3, 1, 'labelled')")
    c.execute("INSERT INTO impression_counts VALUES (?, 'pending', 2), (?, 'labelled', 1)",
              (mid, mid))
    if deleted_last:  # the newest slate went (expired): its number is the high mark
        c.execute("DELETE FROM slates WHERE id = 7")
        c.execute("UPDATE impression_counts SET n = 1 WHERE status = 'pending'")
    c.execute("PRAGMA user_version = 2")
    c.close()
    s = SqliteStore(path)
    try:
        want = {"a": Impression(b"pa", 10.0, 100.0, "pending"),
                "b": Impression(b"pbb", 10.0, 100.0, "labelled")}
        if not deleted_last:
            want["c"] = Impression(b"pc", 10.0, 100.0, "pending")
        assert s.get_impressions("m", ["a", "b", "c"], 20) == want
        assert [i for i, _ in s.due_impressions("m", ["pending"], 50, 20, 9)] == (
            ["a"] if deleted_last else ["a", "c"])
        assert s.keep_impressions("m", [("d", b"pd")], 30, 90, 10) == 1
        assert s.claim_impressions("m", ["a", "d"], ["pending"], "labelled", 31) == ["a", "d"]
    finally:
        s.close()
    c = sqlite3.connect(path)
    assert {r[1] for r in c.execute("PRAGMA table_info(slates)")} == {
        "id", "model", "shown_at", "expires_at", "n", "open"}
    assert c.execute("SELECT id FROM slates WHERE id > 7").fetchall() == [(8,)]  # "d"
    assert c.execute("SELECT open FROM slates ORDER BY id").fetchall() == (
        [(0,), (0,)] if deleted_last else [(0,), (1,), (0,)])
    c.close()


def test_due_returns_the_oldest_items_up_to_the_limit_across_many_slates(tmp_path: Path) -> None:
    """Slates shown at the same time or apart, items claimed in between: every limit
    gives the first items by (shown, id) of the reference, with their payloads."""
    s = SqliteStore(tmp_path / "s.db")
    ref = Reference()
    try:
        s.create_model("m", CONFIG)
        shown = [5.0, 5.0, 3.0, 7.0, 5.0, 1.0] * 5
        for k, t in enumerate(shown):
            items = [(f"{(7 * k + j) % 97:02d}-{k}", f"p{k}.{j}".encode()) for j in range(6)]
            assert s.keep_impressions("m", items, t, 100.0, 10**6) == ref.keep(
                items, t, 100.0, 10**6)
        some = [f"{(7 * k + 2) % 97:02d}-{k}" for k in range(0, 30, 3)]
        assert s.claim_impressions("m", some, ["pending"], "labelled", 8.0) == ref.claim(
            some, ["pending"], "labelled", 8.0)
        for limit in (0, 1, 2, 5, 6, 7, 50, 133, 200):
            for statuses in (["pending"], ["labelled"], ["pending", "labelled"]):
                assert (s.due_impressions("m", statuses, 6.0, 8.0, limit)
                        == ref.due(statuses, 6.0, 8.0, limit)), (limit, statuses)
    finally:
        s.close()


def test_a_writer_rebuilds_its_id_index_outside_the_write_transaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index rebuild (the store's every unexpired slate read again, to forget deleted
    slates' ids; 140-317 ms at a million ids) runs on a thread of its own in a read
    transaction, not inside a write: neither the write turn nor the writer waits for it."""
    statements: list[tuple[int, str]] = []  # (connection, statement)
    connect = SqliteStore._connect

    def traced(self: SqliteStore) -> sqlite3.Connection:
        c = connect(self)
        key = id(c)
        c.set_trace_callback(lambda t: statements.append((key, t)))
        return c

    monkeypatch.setattr(SqliteStore, "_connect", traced)
    s = SqliteStore(tmp_path / "s.sqlite3")
    s.create_model("m", CONFIG)
    for k in range(12):  # short-lived slates of 2 items: the index fills with the dead
        assert s.keep_impressions("m", [(f"a{k}", b"x"), (f"b{k}", b"y")],
                                  100.0 + k, 101.0 + k, 100) == 2
    index = s._indexes["m"][1]
    before = len(index.table)
    assert before == 24 and not index.due() and index.rebuilding is None
    index.rebuild_above = before - 1  # due now (not twice past due: no rebuild in a read)
    statements.clear()
    assert s.keep_impressions("m", [("c", b"z")], 200.0, 300.0, 100) == 1
    while (t := index.rebuilding) is not None:
        t.join()
    assert len(index.table) < before  # the expired slates' ids are gone
    assert s.take_impressions("m", ["c", "a0"], ["pending"], "labelled", 201.0)[1] == ["c"]
    full = [(c, t) for c, t in statements if "FROM slate_data WHERE id > 0 " in t]
    assert full, statements  # it was due, and was rebuilt
    for conn, read in full:  # in a read transaction of that connection
        mine = [t for c, t in statements if c == conn]
        opened = [t for t in mine[:mine.index(read)] if t.startswith("BEGIN")]
        assert opened and opened[-1].startswith("BEGIN DEFERRED"), mine
    s.close()
