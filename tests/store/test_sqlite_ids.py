"""The embedded store's dedup window (service/store/sqlite_ids.py): a log of digests that
each process reads into its own copy, against a few lines of Python holding the rule."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aucstream.service.store import SqliteStore
from aucstream.service.store.base import StoreUnavailable

CONFIG = {"learner": "solam"}

ids_ = st.one_of(st.none(), st.sampled_from([f"e{i}" for i in range(6)]))
ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.lists(ids_, max_size=6)),
    st.tuples(st.just("release"), st.integers(0, 2)),  # the last entry, if it wrote one
    st.tuples(st.just("trim"), st.integers(0, 2), st.integers(0, 4)),  # keep_ids
    st.tuples(st.just("remake"), st.integers(0, 2)),  # the model deleted and made again
), max_size=25)


class Reference:
    """The rule of Store.append, release_ids and trim: an id is a duplicate while its
    latest record is at a position above the floor and outside every released range,
    or when it repeats an id earlier in its batch."""

    def __init__(self) -> None:
        self.end = 0
        self.at: dict[str, int] = {}
        self.floor = 0
        self.released: list[tuple[int, int]] = []

    def live(self, p: int) -> bool:
        return p > self.floor and not any(lo < p <= hi for lo, hi in self.released)

    def append(self, ids: list[str | None]) -> tuple[tuple[int, ...], int]:
        skip, batch = [], set()
        for k, i in enumerate(ids):
            if i is not None and (i in batch or (i in self.at and self.live(self.at[i]))):
                skip.append(k)
                continue
            self.end += 1
            if i is not None:
                batch.add(i)
                self.at[i] = self.end
        return tuple(skip), self.end


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
@example(ops=[("append", 0, ["e1", "e2"]), ("release", 1), ("append", 2, ["e1", "e3"]),
              ("trim", 1, 1), ("append", 0, ["e1", "e2", None, "e3"])])
def test_three_stores_on_one_file_deduplicate_as_the_reference(tmp_path: Path,
                                                               ops: list[tuple]) -> None:
    path = tmp_path / f"ids-{abs(hash(str(ops)))}.sqlite3"
    stores = [SqliteStore(path) for _ in range(3)]
    try:
        stores[0].create_model("m", CONFIG)
        ref, last = Reference(), None
        for op in ops:
            if op[0] == "append":
                got = stores[op[1]].append("m", b"p", op[2])
                skip, end = ref.append(op[2])
                assert (got.duplicates, got.version) == (skip, end), op
                if got.entry is not None:
                    last = (got.entry.start, got.entry.end)
            elif op[0] == "release" and last is not None:
                stores[op[1]].release_ids("m", *last)
                ref.released.append(last)
            elif op[0] == "trim":
                stores[op[1]].save_checkpoint("m", ref.end, b"s")
                stores[op[1]].trim("m", ref.end, keep_ids=op[2])
                ref.floor = max(ref.floor, ref.end - op[2])
            elif op[0] == "remake":
                stores[op[1]].delete_model("m")
                stores[op[1]].create_model("m", CONFIG)
                ref, last = Reference(), None
    finally:
        for s in stores:
            s.close()


def test_a_version_2_file_keeps_its_window(tmp_path: Path) -> None:
    """Version 2's event_ids rows become id_log rows: the ids stay duplicates, a trim
    forgets them by position as before, and the table is gone."""
    path = tmp_path / "s.db"
    SqliteStore(path).create_model("m", CONFIG)
    c = sqlite3.connect(path, isolation_level=None)
    (mid,) = c.execute("SELECT id FROM models WHERE name = 'm'").fetchone()
    c.execute("CREATE TABLE event_ids (model INTEGER NOT NULL, event_id TEXT NOT NULL, "
              "pos INTEGER NOT NULL, PRIMARY KEY (model, event_id)) WITHOUT ROWID")
    c.execute("CREATE INDEX event_ids_pos ON event_ids (model, pos)")
    c.executemany("INSERT INTO event_ids VALUES (?, ?, ?)",
                  [(mid, f"id{p}", p) for p in range(1, 25_001)])  # (3 rows of id_log)
    c.execute("UPDATE models SET log_end = 25000 WHERE id = ?", (mid,))
    c.execute("PRAGMA user_version = 2")
    c.close()
    s = SqliteStore(path)
    try:
        r = s.append("m", b"p", ["id7", "new", "id25000", "id12000"])
        assert r.duplicates == (0, 2, 3) and r.version == 25_001
        s.save_checkpoint("m", 25_001, b"s")
        s.trim("m", 25_001, keep_ids=13_001)  # forgets positions <= 12,000
        r = s.append("m", b"p", ["id7", "id12000", "id12001", "new"])
        assert r.duplicates == (2, 3) and r.version == 25_003
    finally:
        s.close()
    c = sqlite3.connect(path)
    assert c.execute("PRAGMA user_version").fetchone() == (3,)
    assert c.execute("SELECT 1 FROM sqlite_master WHERE name LIKE 'event_ids%'").fetchall() == []
    # the rows wholly below the floor went; the one reaching past it stays
    assert [e for (e,) in c.execute("SELECT end_pos FROM id_log ORDER BY end_pos")] == [
        20_000, 25_000, 25_001, 25_003]
    c.close()


def test_an_append_rolled_back_leaves_no_ids_in_the_copy(tmp_path: Path) -> None:
    """A copy records an append's ids before the commit: if the transaction fails, the
    copy must go, or those ids would stay duplicates in this process only."""
    s = SqliteStore(tmp_path / "s.db")
    try:
        s.create_model("m", CONFIG)
        s.append("m", b"p", ["a"])
        c = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
        # a trigger fails the log insert after the window has recorded the ids
        c.execute("CREATE TRIGGER no_log BEFORE INSERT ON log BEGIN "
                  "SELECT RAISE(ABORT, 'injected'); END")
        with pytest.raises(StoreUnavailable):
            s.append("m", b"p", ["b", "c"])
        c.execute("DROP TRIGGER no_log")
        c.close()
        r = s.append("m", b"p", ["b", "c", "a"])
        assert r.duplicates == (2,) and r.version == 3
    finally:
        s.close()


def test_an_idle_copy_is_dropped_and_read_again(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy holds ~40-70 bytes per remembered id: one not appended with for a while goes,
    and the next append reads the window again from the file."""
    import aucstream.service.store.sqlite_store as sqlite_store

    s = SqliteStore(tmp_path / "s.db")
    try:
        for name in ("a", "b"):
            s.create_model(name, CONFIG)
            s.append(name, b"p", ["x", "y"])
        assert set(s._id_logs) == {"a", "b"}
        monkeypatch.setattr(sqlite_store, "_WINDOW_IDLE_S", 0.0)
        s.append("a", b"p", ["z"])  # sweeps: both idle longer than 0 s, "a" made again
        assert set(s._id_logs) == {"a"}
        assert s.append("b", b"p", ["x", "w", "y"]).duplicates == (0, 2)  # read again
    finally:
        s.close()
