"""The embedded store: one SQLite file, the same semantics as the Redis store.

``<data_dir>/aucstream.sqlite3`` in WAL mode with ``synchronous=FULL``: a returned
append or checkpoint is in the fsynced WAL, so neither a killed process nor a power cut
loses it. An append that raises was rolled back whole (SQLite's atomic commit), so its
outcome is always known: StoreUnavailable means it was not written. Each write is one
``BEGIN IMMEDIATE`` transaction, which takes the database's single write lock up front
(waiting up to the busy timeout), so threads of one process and several processes
(uvicorn workers) can share the file; readers never block in WAL.

Appends are group-committed: threads that want to append while another thread holds the
write turn queue up, and the next turn commits all queued appends in one transaction —
one fsync for many requests under concurrency, each append still all or nothing.

Tables: ``models`` (a fresh integer id per creation, the config, the log end),
``log`` (one row per entry), ``id_log``, ``id_windows`` and ``id_released`` (the dedup
window: the digests of each append's ids, and what is forgotten; see
service/store/sqlite_ids.py, which also keeps each process's copy of it in memory),
``checkpoints``, ``slates``, ``slate_data`` and ``slate_claims`` (kept impressions: one
row per kept /score request, its items apart, and the items whose status moved; see
service/store/sqlite_impressions.py,
which also keeps each process's in-memory id index), ``impression_counts`` (kept items per
model and status, kept in step by every write, so that the cap of a keep and the counts
need no scan), ``leases`` (per model *name*
the last fencing token granted and the current holder and expiry: the row outlives the
model, whose deletion only frees the lease, so that a re-created model's tokens go on
growing), ``replicas`` (the registry: replica id -> expiry) and ``wakes`` (replica,
model name: wake-ups for owners, taken by ``woken``). Lease and registry times
are ``time.time()`` of the writing process, read inside the write transaction, so that a
wait for the write turn never makes them stale. An impression is expired
at ``now`` when ``expires_at <= now``: reads leave it out, and keeps and claims delete at
most ``_EXPIRE_SLICE`` expired slates per call. Connections are pooled, one per
concurrently running call. Writers take turns through a thread lock and an ``flock`` on
``<file>.lock`` before BEGIN IMMEDIATE (see :meth:`SqliteStore._writer`).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any, NoReturn, cast

from aucstream.service.store import sqlite_ids
from aucstream.service.store import sqlite_impressions as impressions
from aucstream.service.store.base import (
    IMPRESSION_STATUSES,
    AppendResult,
    Checkpoint,
    Delta,
    Impression,
    Lease,
    LeaseLost,
    LogEntry,
    ModelExists,
    ModelNotFound,
    PackedItems,
    StoreUnavailable,
    check_delta_versions,
    check_event_ids,
    check_keep_group,
    check_name,
    check_position,
    check_replica,
    check_time,
    check_token,
    check_ttl,
)

__all__ = ["SqliteStore"]

FILENAME = "aucstream.sqlite3"
# 2: impressions in slates (version 1's per-item rows migrate); 3: the dedup window as a
# log of digests, and the slates' items in slate_data (version 2's rows migrate)
_SCHEMA_VERSION = 3
_TRIM_SLICE = 50_000  # event positions whose id_log rows one trim transaction deletes
_WINDOW_IDLE_S = 300.0  # seconds after which an unused copy of a dedup window is dropped
_EXPIRE_SLICE = 200  # expired slates (kept requests) a keep or claim deletes, at most

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS models (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        config TEXT NOT NULL,
        created_at REAL NOT NULL,
        log_end INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS log (
        model INTEGER NOT NULL,
        end_pos INTEGER NOT NULL,
        start_pos INTEGER NOT NULL,
        payload BLOB NOT NULL,
        skip TEXT NOT NULL,
        PRIMARY KEY (model, end_pos)
    )""",
    # the dedup window (service/store/sqlite_ids.py)
    *sqlite_ids.SCHEMA,
    """CREATE TABLE IF NOT EXISTS pins (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        model INTEGER NOT NULL,
        at_pos INTEGER NOT NULL,
        candidate INTEGER
    )""",
    "CREATE INDEX IF NOT EXISTS pins_model ON pins (model, seq)",
    """CREATE TABLE IF NOT EXISTS checkpoints (
        model INTEGER PRIMARY KEY,
        version INTEGER NOT NULL,
        blob BLOB NOT NULL,
        created_at REAL NOT NULL
    )""",
    # impressions: the slate tables (service/store/sqlite_impressions.py) and the counts
    *impressions.SCHEMA,
    """CREATE TABLE IF NOT EXISTS impression_counts (
        model INTEGER NOT NULL,
        status TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (model, status)
    ) WITHOUT ROWID""",
    # ownership leases and the replica registry (issue 15; created on opening an older file)
    """CREATE TABLE IF NOT EXISTS leases (
        name TEXT PRIMARY KEY,
        token INTEGER NOT NULL,
        holder TEXT,
        expires_at REAL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS replicas (
        id TEXT PRIMARY KEY,
        expires_at REAL NOT NULL
    ) WITHOUT ROWID""",
    # added within schema version 3: an older aucstream ignores it (its owners publish
    # whole checkpoints only, and its followers read only those)
    """CREATE TABLE IF NOT EXISTS deltas (
        model INTEGER NOT NULL,
        version INTEGER NOT NULL,
        base INTEGER NOT NULL,
        blob BLOB NOT NULL,
        PRIMARY KEY (model, version)
    )""",
    # added within schema version 2: an older aucstream ignores it (it never wakes an
    # owner, whose sync loop then finds its entries within a sync_interval)
    """CREATE TABLE IF NOT EXISTS wakes (
        replica TEXT NOT NULL,
        name TEXT NOT NULL,
        PRIMARY KEY (replica, name)
    ) WITHOUT ROWID""",
)


def _wal(c: sqlite3.Connection, timeout: float) -> None:
    """Put the file in WAL mode. While another process switches a new file to WAL, the
    pragma fails at once with "database is locked" (SQLite does not wait on the busy
    handler there): processes that open a new file together (``--workers 2`` on an
    empty data dir) retry for up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            c.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


class SqliteStore:
    """The durable log in one SQLite file.

    Parameters
    ----------
    path : str or Path
        The database file; its directory is created if missing.
    busy_timeout : float
        Seconds a write waits for another writer's lock before StoreUnavailable.
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = 10.0) -> None:
        self._path = Path(path)
        self._timeout = busy_timeout
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._lock_fd: int | None = None
        self._lock_pid = 0
        self._idle: list[sqlite3.Connection] = []
        self._jobs: list[_AppendJob] = []  # appends waiting for a write turn
        self._pid = os.getpid()
        self._closed = False
        # model name -> this process's copy of its dedup window (used under the write turn)
        self._id_logs: dict[str, sqlite_ids.IdLog] = {}
        self._id_logs_swept = time.monotonic()
        # model name -> (its id, the id index of its kept impressions)
        self._indexes: dict[str, tuple[int, impressions.IdIndex]] = {}
        with self._guard("open"):
            self._path.parent.mkdir(parents=True, exist_ok=True)
            with self._tx() as c:
                (user_version,) = c.execute("PRAGMA user_version").fetchone()
                if user_version > _SCHEMA_VERSION:
                    raise StoreUnavailable(
                        f"{self._path} has schema version {user_version}; this aucstream "
                        f"knows {_SCHEMA_VERSION} (upgrade aucstream)"
                    )
                for stmt in _SCHEMA:
                    c.execute(stmt)
                impressions.split_slates(c)
                impressions.migrate_rows(c)
                sqlite_ids.migrate_event_ids(c)
                c.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")

    @classmethod
    def in_dir(cls, data_dir: str | Path, *, busy_timeout: float = 10.0) -> SqliteStore:
        """The store ``<data_dir>/aucstream.sqlite3``."""
        return cls(Path(data_dir) / FILENAME, busy_timeout=busy_timeout)

    @property
    def path(self) -> Path:
        return self._path

    def __repr__(self) -> str:
        return f"SqliteStore({str(self._path)!r})"

    # -- connections and transactions -------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        c = sqlite3.connect(
            self._path, timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        try:
            c.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
            _wal(c, self._timeout)
            c.execute("PRAGMA synchronous = FULL")
        except BaseException:
            c.close()
            raise
        return c

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"SQLite store {self._path} is closed")
            if self._pid != os.getpid():  # forked: the parent's connections are not ours
                self._idle, self._pid = [], os.getpid()
            c = self._idle.pop() if self._idle else None
        if c is None:
            c = self._connect()
        broken = False
        try:
            yield c
        except sqlite3.Error:
            broken = True  # maybe (I/O error, ...): the next call opens a fresh connection
            raise
        finally:
            with self._lock:
                keep = not (broken or self._closed or c.in_transaction)
                if keep:
                    self._idle.append(c)
            if not keep:
                c.close()

    @contextmanager
    def _tx(self, mode: str = "IMMEDIATE", *, durable: bool = True
            ) -> Iterator[sqlite3.Connection]:
        """One transaction: IMMEDIATE for writes (takes the write lock), DEFERRED to read.
        ``durable=False`` commits without an fsync (for hints such as wake-ups, which a
        power cut may lose at no cost; a crashed process loses nothing committed).
        ``synchronous = NORMAL`` rather than OFF: in WAL mode NORMAL still syncs the WAL
        before a checkpoint copies it into the database (which this commit may run), so
        a power cut loses the latest commits but never leaves the file corrupt."""
        with self._conn() as c, self._writer() if mode == "IMMEDIATE" else nullcontext():
            if not durable:
                c.execute("PRAGMA synchronous = NORMAL")
            try:
                c.execute(f"BEGIN {mode}")
                try:
                    yield c
                except BaseException:
                    if c.in_transaction:
                        c.execute("ROLLBACK")
                    raise
                c.execute("COMMIT")
            finally:
                if not durable:
                    c.execute("PRAGMA synchronous = FULL")

    @contextmanager
    def _writer(self) -> Iterator[None]:
        """The write turn: first among this process's threads, then among processes.

        SQLite's own busy handler polls with sleeps growing to 100 ms, so under steady
        contention one writer can starve the others for seconds. A thread lock plus an
        ``flock`` on ``<file>.lock`` (polled every few hundred microseconds, up to the busy
        timeout) hands the turn over promptly; BEGIN IMMEDIATE then rarely waits.
        """
        deadline = time.monotonic() + self._timeout
        if not self._write_lock.acquire(timeout=self._timeout):
            raise self._locked("another thread of this process")
        try:
            if self._lock_fd is None or self._lock_pid != os.getpid():
                # (after a fork the inherited descriptor would share the parent's lock)
                self._lock_fd = os.open(f"{self._path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
                self._lock_pid = os.getpid()
            fd = self._lock_fd
            delay = 0.0001
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise self._locked(f"another process (through {self._path}.lock)") from None
                    time.sleep(delay)
                    delay = min(2 * delay, 0.0005)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._write_lock.release()

    def _locked(self, holder: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"SQLite store {self._path} is locked: {holder} kept writing for more than "
            f"{self._timeout} s"
        )

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(
                f"SQLite store {self._path} failed ({what}): {type(exc).__name__}: {exc}"
            ) from exc

    @staticmethod
    def _model(c: sqlite3.Connection, name: str) -> tuple[int, int]:
        row = c.execute("SELECT id, log_end FROM models WHERE name = ?", (name,)).fetchone()
        if row is None:
            _not_found(name)
        return int(row[0]), int(row[1])

    # -- the Store protocol ----------------------------------------------------------

    def ping(self) -> None:
        with self._guard("ping"), self._conn() as c:
            c.execute("SELECT 1").fetchone()

    def create_model(self, name: str, config: dict[str, Any],
                     start: tuple[int, bytes] | None = None) -> None:
        check_name(name)
        text = json.dumps(config)
        version = 0 if start is None else check_position(start[0], "version")
        now = time.time()
        with self._guard("create_model"), self._tx() as c:
            cur = c.execute(
                "INSERT INTO models (name, config, created_at, log_end) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (name, text, now, version),
            )
            if cur.rowcount == 0:
                raise ModelExists(f"Model {name!r} exists already")
            if start is not None:
                c.execute("INSERT INTO checkpoints (model, version, blob, created_at) "
                          "VALUES (?, ?, ?, ?)", (cur.lastrowid, version, bytes(start[1]), now))

    def get_config(self, name: str) -> dict[str, Any]:
        check_name(name)
        with self._guard("get_config"), self._conn() as c:
            row = c.execute("SELECT config FROM models WHERE name = ?", (name,)).fetchone()
        if row is None:
            _not_found(name)
        return cast(dict[str, Any], json.loads(row[0]))

    def list_models(self) -> list[str]:
        with self._guard("list_models"), self._conn() as c:
            rows = c.execute("SELECT name FROM models").fetchall()
        return sorted(r[0] for r in rows)

    def delete_model(self, name: str) -> None:
        check_name(name)
        with self._guard("delete_model"), self._tx() as c:
            mid, _ = self._model(c, name)
            for table in ("log", "checkpoints", "deltas", "pins", "impression_counts"):
                c.execute(f"DELETE FROM {table} WHERE model = ?", (mid,))
            sqlite_ids.drop_model(c, mid)
            impressions.drop_model(c, mid)
            c.execute("DELETE FROM models WHERE id = ?", (mid,))
            # the lease goes, its last token stays (the row is keyed by the name)
            c.execute("UPDATE leases SET holder = NULL, expires_at = NULL WHERE name = ?",
                      (name,))
        with self._lock:
            self._indexes.pop(name, None)
            self._id_logs.pop(name, None)

    def append(self, name: str, payload: bytes, event_ids: Sequence[str | None]) -> AppendResult:
        check_name(name)
        job = _AppendJob(name, bytes(payload), check_event_ids(event_ids))
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"SQLite store {self._path} is closed")
            self._jobs.append(job)
        with ExitStack() as turn:
            try:
                turn.enter_context(self._writer())
            except StoreUnavailable:
                with self._lock:
                    if job in self._jobs:  # never taken: it certainly was not written
                        self._jobs.remove(job)
                raise
            self._commit_queued(job)
        if job.error is not None:
            if isinstance(job.error, (sqlite3.Error, OSError)):
                raise StoreUnavailable(
                    f"SQLite store {self._path} failed (append): "
                    f"{type(job.error).__name__}: {job.error}") from job.error
            raise job.error
        assert job.result is not None
        return job.result

    def _commit_queued(self, job: _AppendJob) -> None:
        """With the write turn held: commit every queued append in one transaction."""
        with self._guard("append"):
            if not job.done:  # nobody took it: this thread commits every queued append
                with self._lock:
                    batch, self._jobs = self._jobs, []
                try:
                    with self._conn() as c:
                        c.execute("BEGIN IMMEDIATE")
                        try:
                            for j in batch:
                                try:
                                    j.result = self._append_in(c, j.name, j.payload, j.ids)
                                except ModelNotFound as exc:
                                    j.error = exc
                        except BaseException:
                            if c.in_transaction:
                                c.execute("ROLLBACK")
                            raise
                        c.execute("COMMIT")
                except BaseException as exc:
                    for j in batch:
                        j.result = None
                        j.error = exc
                        self._id_logs.pop(j.name, None)  # it may hold ids rolled back
                    raise
                finally:
                    for j in batch:
                        j.done = True

    def _append_in(self, c: sqlite3.Connection, name: str, data: bytes,
                   ids: list[str | None]) -> AppendResult:
        """One append inside an open write transaction."""
        mid, start = self._model(c, name)
        if not ids:
            return AppendResult(entry=None, duplicates=(), version=start)
        skip: list[int] = []
        end = start + len(ids)
        if any(i is not None for i in ids):
            log = self._id_log(name, mid)
            log.sync(c)
            skip, end = log.append(c, start, ids)
        if end == start:
            return AppendResult(entry=None, duplicates=tuple(skip), version=start)
        self._insert_entry(c, mid, start, end, data, skip)
        entry = LogEntry(start=start, end=end, payload=data, skip=tuple(skip))
        return AppendResult(entry=entry, duplicates=entry.skip, version=end)

    def _id_log(self, name: str, mid: int) -> sqlite_ids.IdLog:
        """This process's copy of a model's dedup window (under the write turn). Copies
        not appended with for ``_WINDOW_IDLE_S`` are dropped (read again when needed): a
        copy holds ~40-70 bytes per remembered id."""
        now = time.monotonic()
        if now - self._id_logs_swept > _WINDOW_IDLE_S:
            self._id_logs_swept = now
            for idle in [n for n, w in self._id_logs.items() if now - w.used > _WINDOW_IDLE_S]:
                del self._id_logs[idle]
        log = self._id_logs.get(name)
        if log is None or log.mid != mid:  # (a model made again under the name)
            log = self._id_logs[name] = sqlite_ids.IdLog(mid)
        log.used = now
        return log

    @staticmethod
    def _insert_entry(c: sqlite3.Connection, mid: int, start: int, end: int, data: bytes,
                      skip: Sequence[int]) -> None:
        c.execute(
            "INSERT INTO log (model, end_pos, start_pos, payload, skip) VALUES (?, ?, ?, ?, ?)",
            (mid, end, start, data, ",".join(map(str, skip))),
        )
        c.execute("UPDATE models SET log_end = ? WHERE id = ?", (end, mid))

    def set_pin(self, name: str, candidate: int | None, token: int | None = None) -> int:
        check_name(name)
        token = check_token(token)
        with self._guard("set_pin"), self._tx() as c:
            mid, end = self._model(c, name)
            self._fence(c, name, token, "set_pin")
            c.execute("INSERT INTO pins (model, at_pos, candidate) VALUES (?, ?, ?)",
                      (mid, end, candidate))
        return end

    def read_pins(self, name: str) -> list[tuple[int, int | None]]:
        check_name(name)
        with self._guard("read_pins"), self._tx("DEFERRED") as c:
            mid, _ = self._model(c, name)
            rows = c.execute("SELECT at_pos, candidate FROM pins WHERE model = ? ORDER BY seq",
                             (mid,)).fetchall()
        return [(int(a), None if b is None else int(b)) for a, b in rows]

    def release_ids(self, name: str, start: int, end: int) -> None:
        check_name(name)
        start = check_position(start, "start")
        end = check_position(end, "end")
        with self._guard("release_ids"), self._tx() as c:
            mid, _ = self._model(c, name)
            sqlite_ids.release(c, mid, start, end)

    def read_log(self, name: str, after: int, limit: int | None = None) -> list[LogEntry]:
        check_name(name)
        after = check_position(after, "after")
        n = -1 if limit is None else check_position(limit, "limit")
        with self._guard("read_log"), self._tx("DEFERRED") as c:
            mid, _ = self._model(c, name)
            rows = c.execute(
                "SELECT start_pos, end_pos, payload, skip FROM log "
                "WHERE model = ? AND end_pos > ? ORDER BY end_pos LIMIT ?",
                (mid, after, n),
            ).fetchall()
        return [
            LogEntry(
                start=s, end=e, payload=bytes(p), skip=tuple(map(int, k.split(","))) if k else ()
            )
            for s, e, p, k in rows
        ]

    def log_bounds(self, name: str) -> tuple[int, int, int]:
        check_name(name)
        with self._guard("log_bounds"), self._tx("DEFERRED") as c:
            mid, end = self._model(c, name)
            n, first = c.execute(
                "SELECT COUNT(*), MIN(start_pos) FROM log WHERE model = ?", (mid,)
            ).fetchone()
        return int(n), end if first is None else int(first), end

    def save_checkpoint(self, name: str, version: int, blob: bytes,
                        token: int | None = None) -> bool:
        check_name(name)
        version = check_position(version, "version")
        token = check_token(token)
        data = bytes(blob)
        with self._guard("save_checkpoint"), self._tx() as c:
            mid, end = self._model(c, name)
            self._fence(c, name, token, "save_checkpoint")
            if version > end:
                raise ValueError(f"checkpoint version {version} is beyond the log end of {name!r}")
            cur = c.execute(
                "INSERT INTO checkpoints (model, version, blob, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (model) DO UPDATE SET version = excluded.version, "
                "blob = excluded.blob, created_at = excluded.created_at "
                "WHERE excluded.version > checkpoints.version",
                (mid, version, data, time.time()),
            )
            if cur.rowcount == 0:
                return False
            c.execute("DELETE FROM deltas WHERE model = ? AND version <= ?", (mid, version))
            return True

    def load_checkpoint(self, name: str) -> Checkpoint | None:
        check_name(name)
        with self._guard("load_checkpoint"), self._tx("DEFERRED") as c:
            mid, _ = self._model(c, name)
            row = c.execute(
                "SELECT version, blob, created_at FROM checkpoints WHERE model = ?", (mid,)
            ).fetchone()
        if row is None:
            return None
        return Checkpoint(version=int(row[0]), blob=bytes(row[1]), created_at=float(row[2]))

    def publish_delta(self, name: str, base: int, version: int, blob: bytes,
                      token: int | None = None) -> bool:
        check_name(name)
        base, version = check_delta_versions(base, version)
        token = check_token(token)
        data = bytes(blob)
        with self._guard("publish_delta"), self._tx() as c:
            mid, end = self._model(c, name)
            self._fence(c, name, token, "publish_delta")
            if version > end:
                raise ValueError(f"delta version {version} is beyond the log end of {name!r}")
            newest = c.execute(
                "SELECT MAX(v) FROM (SELECT version AS v FROM checkpoints WHERE model = ?1 "
                "UNION ALL SELECT MAX(version) FROM deltas WHERE model = ?1)", (mid,)
            ).fetchone()[0]
            if newest is not None and newest >= version:
                return False
            c.execute("INSERT INTO deltas (model, version, base, blob) VALUES (?, ?, ?, ?)",
                      (mid, version, base, data))
            return True

    def read_deltas(self, name: str, after: int) -> list[Delta]:
        check_name(name)
        after = check_position(after, "after")
        with self._guard("read_deltas"), self._tx("DEFERRED") as c:
            mid, _ = self._model(c, name)
            rows = c.execute("SELECT base, version, blob FROM deltas WHERE model = ? "
                             "AND version > ? ORDER BY version", (mid, after)).fetchall()
        return [Delta(base=int(b), version=int(v), blob=bytes(d)) for b, v, d in rows]

    def publication_version(self, name: str) -> int:
        check_name(name)
        with self._guard("publication_version"), self._conn() as c:
            row = c.execute(
                "SELECT m.id, (SELECT version FROM checkpoints WHERE model = m.id), "
                "(SELECT MAX(version) FROM deltas WHERE model = m.id) "
                "FROM models m WHERE m.name = ?", (name,)).fetchone()
        if row is None:
            _not_found(name)
        return max(int(row[1] or 0), int(row[2] or 0))

    def trim(self, name: str, upto: int, keep_ids: int, token: int | None = None) -> None:
        check_name(name)
        upto = check_position(upto, "upto")
        keep_ids = check_position(keep_ids, "keep_ids")
        token = check_token(token)
        with self._guard("trim"), self._tx() as c:
            mid, _ = self._model(c, name)
            self._fence(c, name, token, "trim")
            row = c.execute("SELECT version FROM checkpoints WHERE model = ?", (mid,)).fetchone()
            if row is None:
                return
            upto = min(upto, int(row[0]))
            c.execute("DELETE FROM log WHERE model = ? AND end_pos <= ?", (mid, upto))
            drop = upto - keep_ids
            lo = sqlite_ids.raise_floor(c, mid, drop)  # (forgotten from here on)
        # The forgotten ids' rows go in slices, each its own short write, not to hold the
        # write turn long. A slice left undone is done by the next trim.
        while lo is not None and lo <= drop:
            hi = min(lo + _TRIM_SLICE - 1, drop)
            with self._guard("trim"), self._tx() as c:
                self._fence(c, name, token, "trim")
                sqlite_ids.drop_below(c, mid, hi)
            lo = hi + 1

    # -- leases and the replica registry ---------------------------------------------

    @staticmethod
    def _fence(c: sqlite3.Connection, name: str, token: int | None, what: str) -> None:
        """In a write transaction: LeaseLost unless ``token`` is None or the model's lease
        is held, unexpired, with exactly that token."""
        if token is None:
            return
        row = c.execute("SELECT token, holder, expires_at FROM leases WHERE name = ?",
                        (name,)).fetchone()
        if row is None or row[1] is None or row[0] != token or row[2] <= time.time():
            raise LeaseLost(f"Model {name!r}: {what} refused, the lease with token {token} "
                            "is not held (expired, or taken by another replica)")

    def acquire_lease(self, name: str, replica: str, ttl: float) -> Lease | None:
        check_name(name)
        replica = check_replica(replica)
        seconds = check_ttl(ttl) / 1000
        with self._guard("acquire_lease"), self._tx() as c:
            self._model(c, name)
            now = time.time()
            row = c.execute("SELECT token, holder, expires_at FROM leases WHERE name = ?",
                            (name,)).fetchone()
            if row is not None and row[1] is not None and row[2] > now:  # held
                if row[1] != replica:
                    return None
                c.execute("UPDATE leases SET expires_at = ? WHERE name = ?",
                          (now + seconds, name))
                return Lease(holder=replica, token=int(row[0]), ttl=seconds)
            token = 1 if row is None else int(row[0]) + 1  # free or expired: taken
            c.execute("INSERT INTO leases (name, token, holder, expires_at) VALUES (?, ?, ?, ?) "
                      "ON CONFLICT (name) DO UPDATE SET token = excluded.token, "
                      "holder = excluded.holder, expires_at = excluded.expires_at",
                      (name, token, replica, now + seconds))
        return Lease(holder=replica, token=token, ttl=seconds)

    def renew_lease(self, name: str, replica: str, token: int, ttl: float) -> bool:
        check_name(name)
        replica = check_replica(replica)
        token = check_position(token, "token")
        seconds = check_ttl(ttl) / 1000
        with self._guard("renew_lease"), self._tx() as c:
            now = time.time()
            cur = c.execute("UPDATE leases SET expires_at = ? "
                            "WHERE name = ? AND holder = ? AND token = ? AND expires_at > ?",
                            (now + seconds, name, replica, token, now))
            return cur.rowcount > 0

    def release_lease(self, name: str, replica: str, token: int) -> bool:
        check_name(name)
        replica = check_replica(replica)
        token = check_position(token, "token")
        with self._guard("release_lease"), self._tx() as c:
            cur = c.execute("UPDATE leases SET holder = NULL, expires_at = NULL "
                            "WHERE name = ? AND holder = ? AND token = ? AND expires_at > ?",
                            (name, replica, token, time.time()))
            return cur.rowcount > 0

    def get_lease(self, name: str) -> Lease | None:
        check_name(name)
        with self._guard("get_lease"), self._tx("DEFERRED") as c:
            self._model(c, name)
            row = c.execute("SELECT token, holder, expires_at FROM leases WHERE name = ?",
                            (name,)).fetchone()
            now = time.time()
        if row is None or row[1] is None or row[2] <= now:
            return None
        return Lease(holder=str(row[1]), token=int(row[0]), ttl=float(row[2]) - now)

    def checkpoint_version(self, name: str) -> int:
        check_name(name)
        with self._guard("checkpoint_version"), self._conn() as c:
            row = c.execute("SELECT c.version FROM models m LEFT JOIN checkpoints c "
                            "ON c.model = m.id WHERE m.name = ?", (name,)).fetchone()
        if row is None:
            _not_found(name)
        return 0 if row[0] is None else int(row[0])

    def announce_replica(self, replica: str, ttl: float) -> list[str]:
        replica = check_replica(replica)
        seconds = check_ttl(ttl) / 1000
        with self._guard("announce_replica"), self._tx() as c:
            now = time.time()
            c.execute("DELETE FROM replicas WHERE expires_at <= ?", (now,))
            c.execute("INSERT INTO replicas (id, expires_at) VALUES (?, ?) "
                      "ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at",
                      (replica, now + seconds))
            rows = c.execute("SELECT id FROM replicas").fetchall()
            c.execute("DELETE FROM wakes WHERE replica NOT IN (SELECT id FROM replicas)")
        return sorted(str(r[0]) for r in rows)

    def withdraw_replica(self, replica: str) -> None:
        replica = check_replica(replica)
        with self._guard("withdraw_replica"), self._tx() as c:
            c.execute("DELETE FROM replicas WHERE id = ?", (replica,))
            c.execute("DELETE FROM wakes WHERE replica = ?", (replica,))

    def wake(self, replica: str, names: Sequence[str]) -> None:
        replica = check_replica(replica)
        names = [check_name(n) for n in names]
        if not names:
            return
        with self._guard("wake"), self._tx(durable=False) as c:
            c.executemany("INSERT OR IGNORE INTO wakes (replica, name) VALUES (?, ?)",
                          [(replica, n) for n in names])

    def woken(self, replica: str) -> list[str]:
        replica = check_replica(replica)
        with self._guard("woken"):
            # a read first: asked every few tens of ms, and a write transaction would
            # take the write turn (and fsync) each time
            with self._conn() as c:
                if c.execute("SELECT 1 FROM wakes WHERE replica = ? LIMIT 1",
                             (replica,)).fetchone() is None:
                    return []
            with self._tx(durable=False) as c:
                rows = c.execute("SELECT name FROM wakes WHERE replica = ?",
                                 (replica,)).fetchall()
                c.execute("DELETE FROM wakes WHERE replica = ?", (replica,))
        return sorted(str(r[0]) for r in rows)

    # -- impressions -----------------------------------------------------------------

    def keep_impressions(self, name: str, items: Sequence[tuple[str, bytes]], shown_at: float,
                         expires_at: float, max_pending: int) -> int:
        return self.keep_impression_groups(name, [(items, shown_at, expires_at)],
                                           max_pending)[0]

    def keep_impression_groups(
        self, name: str,
        groups: Sequence[tuple[Sequence[tuple[str, bytes]] | PackedItems, float, float]],
        max_pending: int,
    ) -> list[int]:
        check_name(name)
        checked = [check_keep_group(*group) for group in groups]
        cap = check_position(max_pending, "max_pending")
        # one transaction: concurrent /score requests share its commit (the fsync)
        index: impressions.IdIndex | None = None
        try:
            self._rebuild_index(name)
            with self._guard("keep_impressions"), self._tx() as c:
                mid, _ = self._model(c, name)
                with self._index(c, name, mid) as index:
                    return impressions.keep_groups(c, index, mid, checked, cap, _EXPIRE_SLICE)
        except BaseException:
            if index is not None:  # it may hold slates that were rolled back
                index.forget()
            raise

    def get_impressions(self, name: str, ids: Sequence[str], now: float) -> dict[str, Impression]:
        check_name(name)
        wanted = _check_ids(ids)
        t = check_time(now, "now")
        with self._guard("get_impressions"), self._tx("DEFERRED") as c:
            mid, _ = self._model(c, name)
            with self._index(c, name, mid) as index:
                return impressions.find(c, index, mid, wanted, t)

    def claim_impressions(self, name: str, ids: Sequence[str], from_status: Sequence[str],
                          to_status: str, now: float) -> list[str]:
        check_name(name)
        wanted = _check_ids(ids)
        sources = _check_statuses(from_status, "from_status")
        to = _check_status(to_status, "to_status")
        t = check_time(now, "now")
        self._rebuild_index(name)
        with self._guard("claim_impressions"), self._tx() as c:
            mid, _ = self._model(c, name)
            impressions.expire(c, mid, t, _EXPIRE_SLICE)
            if not sources or not wanted:
                return []
            with self._index(c, name, mid) as index:
                return impressions.move(c, index, mid, wanted, set(sources), to, t)

    def take_impressions(self, name: str, ids: Sequence[str], from_status: Sequence[str],
                         to_status: str, now: float) -> tuple[dict[str, Impression], list[str]]:
        check_name(name)
        wanted = _check_ids(ids)
        sources = _check_statuses(from_status, "from_status")
        to = _check_status(to_status, "to_status")
        t = check_time(now, "now")
        self._rebuild_index(name)
        with self._guard("take_impressions"), self._tx() as c:
            mid, _ = self._model(c, name)
            impressions.expire(c, mid, t, _EXPIRE_SLICE)
            with self._index(c, name, mid) as index:
                found = impressions.find(c, index, mid, wanted, t)
                if not sources or not found:
                    return found, []
                return found, impressions.move(c, index, mid, list(found), set(sources), to, t)

    def due_impressions(self, name: str, statuses: Sequence[str], shown_before: float,
                        now: float, limit: int) -> list[tuple[str, Impression]]:
        check_name(name)
        wanted = _check_statuses(statuses, "statuses")
        before = check_time(shown_before, "shown_before")
        t = check_time(now, "now")
        n = check_position(limit, "limit")
        with self._guard("due_impressions"), self._tx("DEFERRED") as c:
            mid, _ = self._model(c, name)
            return impressions.due(c, mid, wanted, before, t, n)

    def count_impressions(self, name: str, now: float) -> dict[str, int]:
        check_name(name)
        t = check_time(now, "now")
        with self._guard("count_impressions"), self._tx("DEFERRED") as c:
            mid, _ = self._model(c, name)
            return impressions.count(c, mid, t)

    def _rebuild_index(self, name: str) -> None:
        """Before a write transaction: rebuild this store object's id index of ``name``
        if it is due, on a thread of its own from a read transaction (readers never wait
        in WAL, and writers are not kept waiting for the read)."""
        got = self._indexes.get(name)
        if got is None or not got[1].due():
            return
        mid, index = got

        def read() -> tuple[Any, int]:
            with self._tx("DEFERRED") as c:
                return impressions.read_index(c, mid)

        index.rebuild(read)

    @contextmanager
    def _index(self, c: sqlite3.Connection, name: str, mid: int
               ) -> Iterator[impressions.IdIndex]:
        """This store object's id index of a model's kept impressions, caught up in the
        transaction of ``c`` and held (its lock) for the block. Keyed by name, so that a
        model made again under the name gets a new one and the old one goes."""
        with self._lock:
            got = self._indexes.get(name)
            if got is None or got[0] != mid:
                got = self._indexes[name] = (mid, impressions.IdIndex())
        index = got[1]
        with index.lock:
            index.catch_up(c, mid)
            yield index

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()
        with self._write_lock:
            if self._lock_fd is not None and self._lock_pid == os.getpid():
                os.close(self._lock_fd)
            self._lock_fd = None


class _AppendJob:
    """An append waiting for a write turn; the turn's holder fills result or error."""

    __slots__ = ("done", "error", "ids", "name", "payload", "result")

    def __init__(self, name: str, payload: bytes, ids: list[str | None]) -> None:
        self.name = name
        self.payload = payload
        self.ids = ids
        self.done = False
        self.result: AppendResult | None = None
        self.error: BaseException | None = None


def _not_found(name: str) -> NoReturn:
    raise ModelNotFound(f"Model {name!r} not found")


def _check_ids(ids: Sequence[str]) -> list[str]:
    """The distinct ids in order, each a str (TypeError otherwise)."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"ids must be a sequence of str, not a {type(ids).__name__}")
    out = list(ids)
    for i, item_id in enumerate(out):
        if not isinstance(item_id, str):
            raise TypeError(f"impression id {i} must be a str; got {type(item_id).__name__}")
    return list(dict.fromkeys(out))


def _check_status(status: str, what: str) -> str:
    """A status of IMPRESSION_STATUSES (ValueError otherwise)."""
    if status not in IMPRESSION_STATUSES:
        raise ValueError(f"{what} must be one of {IMPRESSION_STATUSES}; got {status!r}")
    return status


def _check_statuses(statuses: Sequence[str], what: str) -> list[str]:
    """The distinct statuses, each of IMPRESSION_STATUSES (ValueError otherwise)."""
    if isinstance(statuses, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of statuses, not a {type(statuses).__name__}")
    return [_check_status(s, what) for s in dict.fromkeys(statuses)]
