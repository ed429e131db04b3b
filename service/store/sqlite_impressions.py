"""The embedded store's impressions: one row per kept /score request (a *slate*).

A /score request with feedback keeps ~100 items at once, and must return fast. One row
per item put each item's id into B-tree indexes whose pages are scattered by the ids, so a
keep of 100 items dirtied ~100 pages of each index and cost 1.5-2.7 ms once a model held
200k-1M impressions (a commit rewrote those pages to the WAL). Here a keep inserts one
row per request, at the end of the table: ~0.1 ms for 100 items, whatever the table holds.

Tables (created by :data:`SCHEMA`):

- ``slates``: per keep, ``shown_at``, ``expires_at``, ``n`` items and ``open`` (how many
  of them are ``pending`` or ``timing_out``: what the timeout sweep looks for). The id is
  ``INTEGER PRIMARY KEY AUTOINCREMENT``: slates are numbered in commit order (SQLite has
  one writer) and a number is never reused once committed.
- ``slate_data``: per slate (the same id), its model, ``ids`` (a JSON array), ``digests``
  (each id's BLAKE2b-128), ``payloads`` (concatenated) and ``ends`` (each payload's end
  offset, uint32): ~21 kB for 100 one-hot items, written once. (Until schema version 3
  they were columns of ``slates``, and SQLite rewrites a whole row to change one column:
  each claim that moved a slate's ``open`` wrote its ~21 kB again, 11 of the 20 ms of a
  claim of 500 scattered labels, and the timeout sweep rewrote every slate once.)
- ``slate_claims``: (slate, position) -> status, for items whose status is not
  ``pending``; an item without a row is pending.
- ``impression_counts`` (the store's): unexpired-or-not-yet-deleted items per status.

Finding an item by id goes through :class:`IdIndex`, an in-memory map digest -> (slate,
position) per model (service/store/digest_table.py, ~48 B per id) that each store object
keeps and brings up to date by reading the ``digests`` of slates numbered above the last
it read (one range scan, in order; a later slate of an id overrides an earlier one, and
an id is kept again only once its earlier impression expired). Several processes sharing
the file each keep their own index. Index entries of deleted slates are harmless (the
slate row is gone: not found) and are dropped when the index is rebuilt, once it holds
more than twice the live items.

Every function runs inside the caller's transaction (connection ``c``) and takes the
model's integer id.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from aucstream.service.store.base import IMPRESSION_STATUSES, Impression, PackedItems
from aucstream.service.store.digest_table import DigestTable
from aucstream.service.store.id_digests import id_digests_128

log = logging.getLogger("aucstream.store")

__all__ = ["SCHEMA", "IdIndex", "count", "drop_model", "due", "expire", "find", "keep_groups",
           "migrate_rows", "move", "read_index", "split_slates"]

_SLATES = """CREATE TABLE IF NOT EXISTS {} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        model INTEGER NOT NULL,
        shown_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        n INTEGER NOT NULL,
        open INTEGER NOT NULL
    )"""
_SLATE_INDEXES = (
    "CREATE INDEX IF NOT EXISTS slates_expiry ON slates (model, expires_at)",
    # the timeout sweep's scan: only slates with items still pending or timing out
    "CREATE INDEX IF NOT EXISTS slates_open ON slates (model, shown_at) WHERE open > 0",
)
SCHEMA = (
    _SLATES.format("slates"),
    *_SLATE_INDEXES,
    # (the large columns last: a read of the first ones leaves their overflow pages be)
    """CREATE TABLE IF NOT EXISTS slate_data (
        id INTEGER PRIMARY KEY,
        model INTEGER NOT NULL,
        ends BLOB NOT NULL,
        digests BLOB NOT NULL,
        ids TEXT NOT NULL,
        payloads BLOB NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS slate_claims (
        slate INTEGER NOT NULL,
        pos INTEGER NOT NULL,
        status TEXT NOT NULL,
        PRIMARY KEY (slate, pos)
    ) WITHOUT ROWID""",
)

_OPEN = frozenset(("pending", "timing_out"))
_STRIDE = 1 << 24  # index value = slate * _STRIDE + position (far more than a request holds)
_IN_CHUNK = 500  # values per "IN (...)", well under SQLite's variable limit
_REBUILD_MIN = 1 << 16  # ids an index holds before it may be rebuilt to forget deleted ones


# Both look slates up by rowid. The unary ``+`` keeps SQLite from using the model's
# expiry index instead (its choice for an equality on an indexed column): that walks
# every (unexpired) slate the model holds, and with one slate per kept request of one
# item a keep took 16 ms at 200,000 slates (0.34 ms by rowid).
SLATES_SINCE = "SELECT id, digests FROM slate_data WHERE id > ? AND +model = ? ORDER BY id"


def live_slates(columns: str, n: int) -> str:
    """SELECT ``columns`` of the ``n`` slates given by id, of a model, unexpired at a time."""
    return (f"SELECT {columns} FROM slates WHERE id IN ({', '.join('?' * n)}) "
            "AND +model = ? AND +expires_at > ?")


class IdIndex:
    """One model's kept ids -> ``slate * 2^24 + position``, read up to slate ``seen``."""

    __slots__ = ("lock", "rebuild_above", "rebuilding", "seen", "table")

    def __init__(self) -> None:
        self.table = DigestTable()
        self.seen = 0
        self.rebuild_above = _REBUILD_MIN
        self.lock = threading.Lock()
        self.rebuilding: threading.Thread | None = None

    def due(self) -> bool:
        """Whether the index holds enough ids to be rebuilt from the store, forgetting the
        ids of slates deleted since (amortised: a rebuild comes after as many new ids
        again as the one before kept)."""
        return len(self.table) > self.rebuild_above

    def catch_up(self, c: sqlite3.Connection, mid: int) -> None:
        """Read the digests of the slates committed since the last call (caller holds
        ``lock``). Writers :meth:`rebuild` first, outside their write transaction; here
        only an index twice past due is rebuilt (a reader's, or a missed one)."""
        if len(self.table) > 2 * self.rebuild_above:
            self.replace(*read_index(c, mid))
            return
        self.seen = _put_since(self.table, c, mid, self.seen)

    def rebuild(self, read: Callable[[], tuple[DigestTable, int]]) -> None:
        """If due, rebuild from ``read()`` (every unexpired slate's ids, from a read
        transaction of its own) on a thread of its own, one at a time: ~1M ids take
        140-317 ms to read (the 1M default of max_pending), which neither the write turn
        nor the writer that found the index due waits for; the index serves as it is
        meanwhile. Slates committed after that read are the next catch-up's. A failed
        read leaves the index as it was (due again)."""
        with self.lock:
            if not self.due() or self.rebuilding is not None:
                return

            def run() -> None:
                try:
                    table, seen = read()
                    with self.lock:
                        if self.due():
                            self.replace(table, seen)
                except Exception as exc:  # (the store closed or failed meanwhile)
                    log.debug("id index rebuild failed: %s", exc)
                finally:
                    with self.lock:
                        self.rebuilding = None

            self.rebuilding = threading.Thread(target=run, name="aucstream-id-index",
                                               daemon=True)
            self.rebuilding.start()

    def replace(self, table: DigestTable, seen: int) -> None:
        """Take ``table``, read up to slate ``seen`` (caller holds ``lock``)."""
        self.table, self.seen = table, seen
        self.rebuild_above = max(2 * len(table), _REBUILD_MIN)

    def record(self, first: int, digests: list[np.ndarray]) -> None:
        """Slates ``first``, ``first + 1``, ... (their ids' digests) were just added in
        the write transaction this index was caught up in (caller holds ``lock``): take
        them now rather than read them back at the next catch-up. If that transaction
        fails, :meth:`forget` must follow (the numbers may be used again)."""
        if not digests or first <= self.seen:
            return
        self.table.put(np.concatenate(digests),
                       np.concatenate([(first + r) * _STRIDE + np.arange(len(d), dtype=np.int64)
                                       for r, d in enumerate(digests)]))
        self.seen = first + len(digests) - 1

    def forget(self) -> None:
        """Start over: the next catch-up reads every slate again."""
        with self.lock:
            self.table.clear()
            self.seen = 0

    def locate(self, ids: list[str], digests: np.ndarray | None = None
               ) -> dict[str, tuple[int, int]]:
        """(slate, position) of each id the index knows (its slate may be gone since);
        ``digests``, if given, are the ids' (id_digests_128)."""
        if not ids:
            return {}
        at = self.table.get(id_digests_128(ids) if digests is None else digests).tolist()
        return {i: divmod(v, _STRIDE) for i, v in zip(ids, at, strict=True) if v >= 0}


def read_index(c: sqlite3.Connection, mid: int) -> tuple[DigestTable, int]:
    """A fresh id index's table of a model's slates, and the last slate it read; with
    room for as many ids again, the next rebuild's threshold, so that it never grows in
    a writer's path."""
    table = DigestTable()
    seen = _put_since(table, c, mid, 0)
    table.reserve(max(2 * len(table), _REBUILD_MIN) + 1)
    return table, seen


def _put_since(table: DigestTable, c: sqlite3.Connection, mid: int, seen: int) -> int:
    """Put the ids of the model's slates after slate ``seen`` into ``table`` (in slate
    order: a later slate of an id wins); the last slate read."""
    rows = c.execute(SLATES_SINCE, (seen, mid)).fetchall()
    if not rows:
        return seen
    digs = np.frombuffer(b"".join(r[1] for r in rows), "<u8").reshape(-1, 2)
    at = np.concatenate([r[0] * _STRIDE + np.arange(len(r[1]) // 16, dtype=np.int64)
                         for r in rows])
    table.put(digs, at)
    return int(rows[-1][0])


def _chunks(values: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for a in range(0, len(values), _IN_CHUNK):
        yield values[a:a + _IN_CHUNK]


def _claims(c: sqlite3.Connection, slates: Iterable[int]) -> dict[tuple[int, int], str]:
    """The (slate, position) -> status rows of ``slates`` (items not listed are pending)."""
    out: dict[tuple[int, int], str] = {}
    for chunk in _chunks(sorted(set(slates))):
        for s, p, status in c.execute(
                f"SELECT slate, pos, status FROM slate_claims WHERE slate IN "
                f"({', '.join('?' * len(chunk))})", chunk):
            out[(s, p)] = status
    return out


def _live(c: sqlite3.Connection, mid: int, slates: Iterable[int], now: float,
          columns: str = "id") -> dict[int, tuple[Any, ...]]:
    """The rows (``columns``, the id first) of ``slates`` that exist and are unexpired."""
    out: dict[int, tuple[Any, ...]] = {}
    for chunk in _chunks(sorted(set(slates))):
        for row in c.execute(live_slates(columns, len(chunk)), (*chunk, mid, now)):
            out[row[0]] = row
    return out


def _data(c: sqlite3.Connection, slates: Iterable[int], columns: str
          ) -> dict[int, tuple[Any, ...]]:
    """``slate_data`` rows (``columns``, the id first) of ``slates``."""
    out: dict[int, tuple[Any, ...]] = {}
    for chunk in _chunks(sorted(set(slates))):
        for row in c.execute(f"SELECT {columns} FROM slate_data WHERE id IN "
                             f"({', '.join('?' * len(chunk))})", chunk):
            out[row[0]] = row
    return out


def _payload(payloads: bytes, ends: bytes, k: int) -> bytes:
    e = np.frombuffer(ends, "<u4")
    return bytes(payloads[(int(e[k - 1]) if k else 0):int(e[k])])


# --------------------------------------------------------------------------- writes
def add_counts(c: sqlite3.Connection, mid: int, deltas: Counter[str]) -> None:
    """Add ``deltas`` to the model's impression counts by status."""
    for status, d in deltas.items():
        if d:
            c.execute("INSERT INTO impression_counts (model, status, n) VALUES (?, ?, ?) "
                      "ON CONFLICT (model, status) DO UPDATE SET n = n + excluded.n",
                      (mid, status, d))


def expire(c: sqlite3.Connection, mid: int, now: float, limit: int) -> int:
    """Delete at most ``limit`` slates expired at ``now``, oldest expiry first, with their
    claims and counts. Returns how many slates went."""
    rows = c.execute("SELECT id, n FROM slates WHERE model = ? AND expires_at <= ? "
                     "ORDER BY expires_at LIMIT ?", (mid, now, limit)).fetchall()
    if not rows:
        return 0
    gone = [r[0] for r in rows]
    claims = _claims(c, gone)
    deltas = Counter(claims.values())
    deltas["pending"] += sum(r[1] for r in rows) - len(claims)
    for chunk in _chunks(gone):
        marks = ", ".join("?" * len(chunk))
        c.execute(f"DELETE FROM slate_claims WHERE slate IN ({marks})", chunk)
        c.execute(f"DELETE FROM slate_data WHERE id IN ({marks})", chunk)
        c.execute(f"DELETE FROM slates WHERE id IN ({marks})", chunk)
    add_counts(c, mid, Counter({s: -k for s, k in deltas.items()}))
    return len(rows)


def expired_items(c: sqlite3.Connection, mid: int, now: float) -> int:
    """Items in slates expired at ``now`` and not deleted yet."""
    (n,) = c.execute("SELECT COALESCE(SUM(n), 0) FROM slates WHERE model = ? "
                     "AND expires_at <= ?", (mid, now)).fetchone()
    return int(n)


def keep_groups(c: sqlite3.Connection, index: IdIndex, mid: int,
                groups: Sequence[tuple[PackedItems, float, float]], cap: int,
                expire_limit: int) -> list[int]:
    """Keep each group ``(items, shown, expires)`` as one slate, in order: the items not
    kept already and unexpired at ``shown``, in order, while the model holds fewer than
    ``cap`` unexpired items. Returns how many each group kept.
    Caller holds ``index.lock`` and caught it up in this (write) transaction; the new
    slates go into the index here, so the caller must :meth:`IdIndex.forget` if the
    transaction then fails.

    The whole call makes a fixed number of statements and numba calls, however many
    groups it has: each one lets the GIL go, and under concurrent requests every taking
    back can wait for a busy thread's switch interval (a group of 7 requests took 8 ms
    with a few statements per group, against ~2 in a quiet process)."""
    if not groups:
        return []
    first = min(g[1] for g in groups)
    last = max(g[1] for g in groups)
    ids = [i for items, _, _ in groups for i in items.ids]
    digests = id_digests_128(ids)
    where = index.locate(ids, digests)
    # read before the expired slates go: what was live at the first showing
    expiry = {row[0]: row[1] for row in _live(c, mid, {s for s, _ in where.values()}, first,
                                              "id, expires_at").values()}
    lapsing = [] if last == first else c.execute(  # (expiry, items) gone by the last showing
        "SELECT expires_at, n FROM slates WHERE model = ? AND expires_at > ? "
        "AND expires_at <= ?", (mid, first, last)).fetchall()
    dropped = expire(c, mid, last, expire_limit)
    (held,) = c.execute("SELECT COALESCE(SUM(n), 0) FROM impression_counts WHERE model = ?",
                        (mid,)).fetchone()
    if dropped >= expire_limit:  # maybe more expired slates left
        held -= expired_items(c, mid, last)
    added: dict[str, float] = {}  # id -> expiry, of the slates this call adds
    kept_here: list[tuple[float, int]] = []  # (expiry, items) of those slates
    rows: list[tuple[Any, ...]] = []  # slates
    data: list[tuple[Any, ...]] = []  # their slate_data, but the ids
    new_digests: list[np.ndarray] = []  # of each row
    out: list[int] = []
    # The common case, ids never seen before (uuids): each group takes its first items
    # while there is room, with no look at each id.
    unseen = not where and len(set(ids)) == len(ids)
    at = 0  # where the group's ids begin in ``ids``
    for items, shown, expires in groups:
        room = cap - (held + sum(n for e, n in lapsing if e > shown)
                      + sum(n for e, n in kept_here if e > shown))
        take: list[int] | range  # positions in ``ids``
        if unseen:
            take = range(at, at + max(0, min(room, len(items))))
        else:
            take = []
            for k, item_id in enumerate(items.ids, at):
                if len(take) >= room:
                    break
                if item_id in added:
                    if added[item_id] > shown:
                        continue
                elif item_id in where and expiry.get(where[item_id][0], shown) > shown:
                    continue  # kept already, and not expired: left as it is
                take.append(k)
        out.append(len(take))
        if not take:
            at += len(items)
            continue
        if isinstance(take, range):  # the group's first items: a prefix of its buffer
            kept = ids[take.start:take.stop]
            ends = items.ends[:len(take)]
            blob = items.blob[:int(ends[-1])]
            picked = digests[take.start:take.stop]
        else:
            kept = [ids[k] for k in take]
            payloads = [items.payload(k - at) for k in take]
            ends = np.cumsum([len(p) for p in payloads], dtype=np.int64)
            blob = b"".join(payloads)
            picked = digests[take]
        at += len(items)
        if ends[-1] >= 1 << 32:
            raise ValueError("one request's impressions must take less than 4 GiB")
        if not unseen:  # (else no later group holds these ids)
            for i in kept:
                added[i] = expires
        kept_here.append((expires, len(take)))
        if expires > last:  # (else expired by the call's last showing: deleted at once)
            rows.append((mid, shown, expires, len(take), len(take)))
            data.append((mid, json.dumps(kept, ensure_ascii=False), picked.tobytes(), blob,
                         ends.astype("<u4").tobytes()))
            new_digests.append(picked)
    if rows:
        c.executemany("INSERT INTO slates (model, shown_at, expires_at, n, open) "
                      "VALUES (?, ?, ?, ?, ?)", rows)
        add_counts(c, mid, Counter({"pending": sum(r[3] for r in rows)}))
        # AUTOINCREMENT numbers the rows of one writer's transaction one after another
        (newest,) = c.execute("SELECT last_insert_rowid()").fetchone()
        first_id = newest - len(rows) + 1
        c.executemany("INSERT INTO slate_data (id, model, ids, digests, payloads, ends) "
                      "VALUES (?, ?, ?, ?, ?, ?)",
                      [(first_id + k, *d) for k, d in enumerate(data)])
        index.record(first_id, new_digests)
    return out


def move(c: sqlite3.Connection, index: IdIndex, mid: int, ids: list[str],
         sources: set[str], to: str, now: float) -> list[str]:
    """Move each unexpired item among ``ids`` whose status is in ``sources`` to ``to``;
    the ids moved, in order. Caller holds ``index.lock``, caught up in this (write)
    transaction."""
    where = index.locate(ids)
    live = _live(c, mid, {s for s, _ in where.values()}, now)
    where = {i: sp for i, sp in where.items() if sp[0] in live}
    claims = _claims(c, {s for s, _ in where.values()})
    status = {i: claims.get(sp, "pending") for i, sp in where.items()}
    moved = [i for i in ids if i in status and status[i] in sources]
    changed = [i for i in moved if status[i] != to]
    if not changed:
        return moved
    rows = [(*where[i], to) for i in changed]
    if to == "pending":
        c.executemany("DELETE FROM slate_claims WHERE slate = ? AND pos = ?",
                      [r[:2] for r in rows])
    else:
        c.executemany("INSERT INTO slate_claims (slate, pos, status) VALUES (?, ?, ?) "
                      "ON CONFLICT (slate, pos) DO UPDATE SET status = excluded.status", rows)
    opened: Counter[int] = Counter()
    counts: Counter[str] = Counter()
    for i in changed:
        opened[where[i][0]] += (to in _OPEN) - (status[i] in _OPEN)
        counts[status[i]] -= 1
        counts[to] += 1
    c.executemany("UPDATE slates SET open = open + ? WHERE id = ?",
                  [(d, s) for s, d in opened.items() if d])
    add_counts(c, mid, counts)
    return moved


def drop_model(c: sqlite3.Connection, mid: int) -> None:
    """Delete every slate of the model and their claims."""
    for table, column in (("slate_claims", "slate"), ("slate_data", "id")):
        c.execute(f"DELETE FROM {table} WHERE {column} IN "
                  "(SELECT id FROM slates WHERE model = ?)", (mid,))
    c.execute("DELETE FROM slates WHERE model = ?", (mid,))


def migrate_rows(c: sqlite3.Connection) -> int:
    """Move the rows of the one-row-per-item ``impressions`` table of schema version 1
    (if there is one) into single-item slates, then drop it. Returns the rows moved."""
    if c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'impressions'"
                 ).fetchone() is None:
        return 0
    moved = 0
    for mid, item_id, payload, shown, expires, status in c.execute(
            "SELECT model, id, payload, shown_at, expires_at, status FROM impressions "
            "ORDER BY model, shown_at, id").fetchall():
        sid = c.execute(
            "INSERT INTO slates (model, shown_at, expires_at, n, open) VALUES (?, ?, ?, 1, ?)",
            (mid, shown, expires, int(status in _OPEN))).lastrowid
        c.execute("INSERT INTO slate_data (id, model, ids, digests, payloads, ends) "
                  "VALUES (?, ?, ?, ?, ?, ?)",
                  (sid, mid, json.dumps([item_id], ensure_ascii=False),
                   id_digests_128([item_id]).tobytes(), bytes(payload),
                   np.array([len(payload)], "<u4").tobytes()))
        if status != "pending":
            c.execute("INSERT INTO slate_claims (slate, pos, status) VALUES (?, 0, ?)",
                      (sid, status))
        moved += 1
    c.execute("DROP TABLE impressions")  # (its indexes go with it)
    return moved


def split_slates(c: sqlite3.Connection) -> int:
    """Move the item columns of schema version 2's ``slates`` (if it has them) into
    ``slate_data``, keeping the slates' numbers and the numbering's high mark. Returns
    the slates moved."""
    columns = {r[1] for r in c.execute("PRAGMA table_info(slates)")}
    if "payloads" not in columns:
        return 0
    moved = c.execute("INSERT INTO slate_data (id, model, ids, digests, payloads, ends) "
                      "SELECT id, model, ids, digests, payloads, ends FROM slates").rowcount
    seq = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'slates'").fetchone()
    c.execute(_SLATES.format("slates_v3"))
    c.execute("INSERT INTO slates_v3 (id, model, shown_at, expires_at, n, open) "
              "SELECT id, model, shown_at, expires_at, n, open FROM slates")
    c.execute("DROP TABLE slates")  # (its indexes go with it)
    c.execute("ALTER TABLE slates_v3 RENAME TO slates")
    for stmt in _SLATE_INDEXES:
        c.execute(stmt)
    # (a deleted slate's number must not come back)
    if seq is not None and not c.execute(
            "UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'slates'",
            (seq[0],)).rowcount:
        c.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('slates', ?)", (seq[0],))
    return moved


# --------------------------------------------------------------------------- reads
def find(c: sqlite3.Connection, index: IdIndex, mid: int, ids: list[str],
         now: float) -> dict[str, Impression]:
    """The unexpired impressions among ``ids``, in the order given. Caller holds
    ``index.lock``, caught up in this transaction."""
    where = index.locate(ids)
    rows = _live(c, mid, {s for s, _ in where.values()}, now, "id, shown_at, expires_at")
    # (a slate's payloads whole: incremental blob I/O of one item's bytes took as long as
    # a slate's ~16 kB, 12-18 µs, for the overflow pages it walks)
    data = _data(c, rows, "id, ends, payloads")
    claims = _claims(c, rows)
    out: dict[str, Impression] = {}
    for i in ids:
        sp = where.get(i)
        if sp is None or sp[0] not in rows:
            continue
        _, shown, expires = rows[sp[0]]
        _, ends, payloads = data[sp[0]]
        out[i] = Impression(payload=_payload(payloads, ends, sp[1]), shown_at=float(shown),
                            expires_at=float(expires), status=claims.get(sp, "pending"))
    return out


def due(c: sqlite3.Connection, mid: int, statuses: list[str], before: float, now: float,
        limit: int) -> list[tuple[str, Impression]]:
    """Unexpired items with a status in ``statuses`` shown at or before ``before``, oldest
    showing first, ties by id, at most ``limit``. Pending and timing-out items are found
    through the slates that still have some (``slates_open``); other statuses scan every
    slate of the model shown by then."""
    if limit <= 0 or not statuses:
        return []
    wanted = set(statuses)
    sql = ("SELECT id, shown_at, expires_at FROM slates "
           + ("INDEXED BY slates_open " if wanted <= _OPEN else "")
           + "WHERE model = ? " + ("AND open > 0 " if wanted <= _OPEN else "")
           + "AND shown_at <= ? AND expires_at > ? ORDER BY shown_at, id")
    # The best ``limit`` so far as (shown, id, slate, position, status); payloads and
    # Impressions only for those returned. (It used to build every wanted item of 64
    # slates a batch: ~6,400 Impressions to return 500, 42 ms of a sweep's 48.)
    found: list[tuple[float, str, int, int, str]] = []
    expiry: dict[int, float] = {}
    cursor = c.execute(sql, (mid, before, now))
    while True:
        rows = cursor.fetchmany(8)
        if not rows:
            break
        if len(found) >= limit and rows[0][1] > found[-1][0]:
            break  # (later slates come after every item kept)
        claims = _claims(c, [r[0] for r in rows])
        data = _data(c, [r[0] for r in rows], "id, ids")
        for sid, shown, expires in rows:
            expiry[sid] = float(expires)
            for k, item_id in enumerate(json.loads(data[sid][1])):
                status = claims.get((sid, k), "pending")
                if status in wanted:
                    found.append((float(shown), item_id, sid, k, status))
        found.sort(key=lambda x: (x[0], x[1]))
        del found[limit:]
    payloads = _data(c, {f[2] for f in found}, "id, ends, payloads")
    return [(i, Impression(payload=_payload(payloads[sid][2], payloads[sid][1], k),
                           shown_at=shown, expires_at=expiry[sid], status=status))
            for shown, i, sid, k, status in found]


def count(c: sqlite3.Connection, mid: int, now: float) -> dict[str, int]:
    """Unexpired items by status (every status of IMPRESSION_STATUSES)."""
    out = dict.fromkeys(IMPRESSION_STATUSES, 0)
    for status, n in c.execute("SELECT status, n FROM impression_counts WHERE model = ?",
                               (mid,)):
        out[status] += n
    # items of expired slates not deleted yet (few, unless no keep or claim ran for a while)
    rows = c.execute("SELECT id, n FROM slates WHERE model = ? AND expires_at <= ?",
                     (mid, now)).fetchall()
    if rows:
        claims = _claims(c, [r[0] for r in rows])
        for status in claims.values():
            out[status] -= 1
        out["pending"] -= sum(r[1] for r in rows) - len(claims)
    return out
