"""The embedded store's dedup window: an append-only log of the ids' digests, and each
process's copy of the window in memory (schema version 3).

Version 2 kept one row per remembered id in ``event_ids``, keyed by the id. Ids such as
uuids land all over that B-tree: an append of 500 of them dirtied ~500 pages, which the
commit wrote to the WAL and a checkpoint wrote again, 13.4 ms per append at the default
window against 1.6 ms now (bench/dedup_memory.py, "SQLite append speed"). Now an append that
records ids adds one ``id_log`` row (keyed by the model and the append's end position,
so it goes at the table's end) holding the BLAKE2b-64 digests of those ids and their
positions, and the duplicates are decided on an :class:`~.id_window.IdWindow`, the same
table the Redis store's appenders keep. Every write runs under the store's single write
lock, so a copy read up to the last ``id_log`` row inside the write transaction is exact.

Forgetting is a number, as in the Redis store: ``id_windows.floor`` (ids at positions
<= floor are forgotten; ``trim`` raises it, then deletes the rows below it in slices)
and ``id_released`` ranges (``release_ids``). Either moves ``id_windows.ver``, which a
copy compares to know when to read them again. An event is wrongly taken for a
duplicate only when its 64-bit digest equals that of an id in the window: probability
~W / 2**64 per event with W ids remembered.

Tables:

- ``id_log``: (model, end_pos) -> the digests (``<u8``) and positions (``<i8``) of the
  ids an append recorded;
- ``id_windows``: model -> floor, ver (no row: 0, 0);
- ``id_released``: (model, lo, hi): positions lo + 1 .. hi forgotten.
"""

from __future__ import annotations

import sqlite3

import numpy as np

from aucstream.service.store.id_digests import id_digests
from aucstream.service.store.id_window import IdWindow

__all__ = ["SCHEMA", "IdLog", "migrate_event_ids"]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS id_log (
        model INTEGER NOT NULL,
        end_pos INTEGER NOT NULL,
        digests BLOB NOT NULL,
        positions BLOB NOT NULL,
        PRIMARY KEY (model, end_pos)
    )""",
    """CREATE TABLE IF NOT EXISTS id_windows (
        model INTEGER PRIMARY KEY,
        floor INTEGER NOT NULL,
        ver INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS id_released (
        model INTEGER NOT NULL,
        lo INTEGER NOT NULL,
        hi INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS id_released_model ON id_released (model, hi)",
)

_MIGRATE_CHUNK = 10_000  # ids per id_log row made from a version-2 ``event_ids`` table


class IdLog:
    """One model's window as this process has read it (model id ``mid``; ``seen``: the
    end position of the last ``id_log`` row read or written; ``ver``: the version of the
    forgetting in force). Used inside write transactions only: the store's write turn
    keeps its users one at a time."""

    __slots__ = ("mid", "seen", "used", "ver", "window")

    def __init__(self, mid: int) -> None:
        self.mid = mid
        self.used = 0.0  # time.monotonic() of the last append (the store drops idle copies)
        self.seen = 0
        self.ver = -1  # none read: the first sync reads floor and released ranges
        self.window = IdWindow()

    def sync(self, c: sqlite3.Connection) -> None:
        """Read what other processes changed since the last call."""
        row = c.execute("SELECT floor, ver FROM id_windows WHERE model = ?",
                        (self.mid,)).fetchone()
        floor, ver = (0, 0) if row is None else (int(row[0]), int(row[1]))
        if ver != self.ver:
            rel = c.execute("SELECT lo, hi FROM id_released WHERE model = ? AND hi > ?",
                            (self.mid, floor)).fetchall()
            self.window.forget(floor, rel)
            self.ver = ver
        rows = c.execute("SELECT end_pos, digests, positions FROM id_log "
                         "WHERE model = ? AND end_pos > ? ORDER BY end_pos",
                         (self.mid, self.seen)).fetchall()
        if rows:
            self.window.record(np.frombuffer(b"".join(r[1] for r in rows), "<u8"),
                               np.frombuffer(b"".join(r[2] for r in rows), "<i8"))
            self.seen = int(rows[-1][0])

    def append(self, c: sqlite3.Connection, start: int, ids: list[str | None]
               ) -> tuple[list[int], int]:
        """Decide an append's duplicates and record its other ids (after :meth:`sync`, in
        the same write transaction): the indexes of the duplicates, and the log end after
        it. If the transaction then fails, the caller must drop this copy."""
        has = np.array([i is not None for i in ids], bool)
        named = np.flatnonzero(has)
        digs = id_digests([i for i in ids if i is not None])
        learned = np.ones(len(ids), bool)
        learned[named] = self.window.keep(digs)
        positions = start + np.cumsum(learned)
        fresh = learned[named]
        end = start + int(learned.sum())
        if fresh.any():
            d = np.ascontiguousarray(digs[fresh])
            p = np.ascontiguousarray(positions[named[fresh]], dtype="<i8")
            c.execute("INSERT INTO id_log (model, end_pos, digests, positions) "
                      "VALUES (?, ?, ?, ?)", (self.mid, end, d.astype("<u8").tobytes(),
                                              p.tobytes()))
            self.window.record(d, p)
            self.seen = end
        return np.flatnonzero(~learned).tolist(), end


def _bump(c: sqlite3.Connection, mid: int, floor: int) -> None:
    c.execute("INSERT INTO id_windows (model, floor, ver) VALUES (?, ?, 1) "
              "ON CONFLICT (model) DO UPDATE SET floor = MAX(floor, excluded.floor), "
              "ver = ver + 1", (mid, floor))


def release(c: sqlite3.Connection, mid: int, start: int, end: int) -> None:
    """Forget the ids recorded at positions ``start + 1 .. end``."""
    if end > start:
        c.execute("INSERT INTO id_released (model, lo, hi) VALUES (?, ?, ?)", (mid, start, end))
        _bump(c, mid, 0)


def raise_floor(c: sqlite3.Connection, mid: int, floor: int) -> int | None:
    """Forget the ids at positions ``<= floor``; the lowest ``id_log`` end position left
    to delete (None if none): :func:`drop_below` takes them in slices."""
    row = c.execute("SELECT floor FROM id_windows WHERE model = ?", (mid,)).fetchone()
    if floor > (0 if row is None else int(row[0])):
        _bump(c, mid, floor)
        c.execute("DELETE FROM id_released WHERE model = ? AND hi <= ?", (mid, floor))
    (lowest,) = c.execute("SELECT MIN(end_pos) FROM id_log WHERE model = ?", (mid,)).fetchone()
    return None if lowest is None or lowest > floor else int(lowest)


def drop_below(c: sqlite3.Connection, mid: int, upto: int) -> None:
    """Delete the ``id_log`` rows whose ids are all at positions ``<= upto`` (forgotten)."""
    c.execute("DELETE FROM id_log WHERE model = ? AND end_pos <= ?", (mid, upto))


def drop_model(c: sqlite3.Connection, mid: int) -> None:
    for table in ("id_log", "id_windows", "id_released"):
        c.execute(f"DELETE FROM {table} WHERE model = ?", (mid,))


def migrate_event_ids(c: sqlite3.Connection) -> int:
    """Move the ids of version 2's ``event_ids`` table (if there is one) into ``id_log``
    rows, then drop it. Returns the ids moved."""
    if c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'event_ids'"
                 ).fetchone() is None:
        return 0
    moved = 0
    for (mid,) in c.execute("SELECT DISTINCT model FROM event_ids").fetchall():
        rows = c.execute("SELECT event_id, pos FROM event_ids WHERE model = ? ORDER BY pos",
                         (mid,)).fetchall()
        for a in range(0, len(rows), _MIGRATE_CHUNK):
            chunk = rows[a:a + _MIGRATE_CHUNK]
            c.execute("INSERT INTO id_log (model, end_pos, digests, positions) "
                      "VALUES (?, ?, ?, ?)",
                      (mid, int(chunk[-1][1]),
                       id_digests([r[0] for r in chunk]).astype("<u8").tobytes(),
                       np.array([r[1] for r in chunk], "<i8").tobytes()))
        moved += len(rows)
    c.execute("DROP TABLE event_ids")  # (its index goes with it)
    return moved
