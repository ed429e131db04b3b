"""The SQLite store across processes: killed writers, concurrent writers, a locked file."""

from __future__ import annotations

import fcntl
import multiprocessing
import multiprocessing.queues
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from aucstream.service.store import LogEntry, SqliteStore, StoreUnavailable, open_store
from aucstream.service.store.sqlite_store import FILENAME

ROOT = Path(__file__).resolve().parents[2]

# Appends n batches of 5 ids (n < 0: forever) and prints "<start> <end> <batch>" after
# each return (-1 -1 if every id was a duplicate).
WRITER = textwrap.dedent(
    """
    import sys
    from aucstream.service.store import SqliteStore

    path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = SqliteStore(path)
    print("ready", flush=True)
    sys.stdin.readline()  # "go": start together with the other writers
    b = 0
    while n < 0 or b < n:
        # the ids of even batches are shared by every writer with the same n
        batch = [f"{b}-{k}" if b % 2 == 0 else f"{tag}{b}-{k}" for k in range(5)]
        r = store.append("m", f"{tag} {b}".encode(), batch)
        e = r.entry
        # one write per line: with PYTHONUNBUFFERED, print() writes its pieces one by one,
        # and a kill between two of them left the reader half a line
        sys.stdout.write(f"{-1 if e is None else e.start} {-1 if e is None else e.end} {b}\\n")
        sys.stdout.flush()
        b += 1
    """
)


def spawn_writer(path: Path, tag: str, n: int) -> subprocess.Popen[str]:
    """Start a writer process; it is ready when this returns, and starts on go()."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), tag, str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    return proc


def go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def check_log(store: SqliteStore) -> list[LogEntry]:
    log = store.read_log("m", 0)
    assert log
    assert [e.start for e in log] == [0] + [e.end for e in log[:-1]]
    assert store.log_bounds("m") == (len(log), 0, log[-1].end)
    return log


def test_open_store_makes_the_directory_and_file(tmp_path: Path) -> None:
    store = open_store(None, tmp_path / "a" / "b")
    store.create_model("m", {})
    store.close()
    path = tmp_path / "a" / "b" / FILENAME
    assert path.exists()
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again = open_store("", tmp_path / "a" / "b")
    assert again.list_models() == ["m"]
    again.close()


def test_unusable_path_gives_store_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreUnavailable, match="SQLite store"):
        SqliteStore.in_dir(tmp_path / "file" / "data")
    (tmp_path / "junk.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailable, match="DatabaseError"):
        SqliteStore(tmp_path / "junk.sqlite3")


def test_closed_store_gives_store_unavailable(tmp_path: Path) -> None:
    store = SqliteStore.in_dir(tmp_path)
    store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        store.list_models()


def test_killed_writer_loses_no_acknowledged_append(tmp_path: Path) -> None:
    path = tmp_path / FILENAME
    setup = SqliteStore(path)
    setup.create_model("m", {})
    setup.close()
    proc = spawn_writer(path, "w", -1)
    go(proc)
    assert proc.stdout is not None
    acked: list[tuple[int, int, int]] = []
    for line in proc.stdout:
        start, end, b = map(int, line.split())
        acked.append((start, end, b))
        if len(acked) == 200:
            proc.send_signal(signal.SIGKILL)  # mid-stream: it is appending right now
            break
    rest = proc.stdout.read()  # lines it printed before dying (some already buffered here)
    proc.wait(timeout=30)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    acked += [tuple(map(int, line.split())) for line in rest.splitlines()]  # type: ignore[misc]
    assert proc.returncode == -signal.SIGKILL

    store = SqliteStore(path)
    log = check_log(store)
    by_end = {e.end: e for e in log}
    for start, end, b in acked:
        assert by_end[end] == LogEntry(start, end, f"w {b}".encode(), ())
    assert len(log) in (len(acked), len(acked) + 1)  # + the append cut off by the kill
    store.append("m", b"after", ["new"])  # the file is fine for writing
    store.close()


def test_two_processes_append_to_one_file(tmp_path: Path) -> None:
    path = tmp_path / FILENAME
    n = 100
    setup = SqliteStore(path)
    setup.create_model("m", {})
    procs = [spawn_writer(path, tag, n) for tag in ("p", "q")]
    # a third writer: threads of this process
    local = threading.Thread(
        target=lambda: [setup.append("m", b"local %d" % i, [f"L{i}", None]) for i in range(n)]
    )
    for p in procs:
        go(p)
    local.start()
    outs = [p.communicate(timeout=60) for p in procs]
    local.join()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    setup.close()

    store = SqliteStore(path)
    log = check_log(store)
    learned: list[str] = []
    for e in log:
        tag, b = e.payload.decode().split()
        if tag == "local":
            learned += [f"L{b}", f"none{b}"]
            continue
        ids = [f"{b}-{k}" if int(b) % 2 == 0 else f"{tag}{b}-{k}" for k in range(5)]
        learned += [i for k, i in enumerate(ids) if k not in e.skip]
    # the shared (even) batches were learned once, by whichever process came first
    assert len(learned) == len(set(learned)) == log[-1].end
    assert log[-1].end == (n // 2) * 5 + 2 * (n // 2) * 5 + 2 * n
    # every line a writer printed matches the log
    by_end = {e.end: e for e in log}
    for tag, (out, _) in zip(("p", "q"), outs, strict=True):
        for line in out.splitlines():
            start, end, batch = map(int, line.split())
            if end >= 0:
                assert by_end[end].start == start
                assert by_end[end].payload == f"{tag} {batch}".encode()
    store.close()


def test_write_lock_held_too_long_gives_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / FILENAME
    store = SqliteStore(path, busy_timeout=0.2)
    store.create_model("m", {})
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            store.append("m", b"p", ["a"])
        assert store.log_bounds("m") == (0, 0, 0)  # readers are not blocked (WAL)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.append("m", b"p", ["a"]).version == 1
    store.close()


def test_writer_turn_held_too_long_gives_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / FILENAME
    store = SqliteStore(path, busy_timeout=0.2)
    store.create_model("m", {})
    fd = os.open(f"{path}.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as another process in the middle of a write
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            store.append("m", b"p", ["a"])
        assert store.read_log("m", 0) == []
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert store.append("m", b"p", ["a"]).version == 1
    store.close()


def test_wake_ups_skip_the_fsync_and_leave_every_connection_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Wake-ups are hints (committed without an fsync, but with synchronous=NORMAL, not
    OFF: OFF would let a checkpoint that such a commit runs copy an unsynced WAL, which a
    power cut can leave corrupt); the pooled connection they used goes back to
    synchronous=FULL, so the next append on it is durable."""
    statements: list[str] = []
    connect = SqliteStore._connect

    def traced(self: SqliteStore) -> sqlite3.Connection:
        c = connect(self)
        c.set_trace_callback(statements.append)
        return c

    monkeypatch.setattr(SqliteStore, "_connect", traced)
    store = SqliteStore(tmp_path / FILENAME)
    store.create_model("m", {})
    seen: list[int] = []
    barrier = threading.Barrier(3)

    def wake_and_append(k: int) -> None:
        barrier.wait()  # (threads at once: several pooled connections)
        store.wake("owner", [f"m{k}"])
        store.append("m", b"x", [f"id{k}"])

    threads = [threading.Thread(target=wake_and_append, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.woken("owner") == ["m0", "m1", "m2"]
    for c in store._idle:
        seen.append(c.execute("PRAGMA synchronous").fetchone()[0])
    assert seen and set(seen) == {2}  # FULL
    pragmas = {t.strip() for t in statements if "synchronous" in t and "=" in t}
    assert pragmas == {"PRAGMA synchronous = FULL", "PRAGMA synchronous = NORMAL"}
    store.close()


def _open_at(path: str, start: float, errors: multiprocessing.queues.Queue) -> None:
    while time.time() < start:
        pass
    try:
        SqliteStore(path).close()
        errors.put("")
    except Exception as exc:  # reported to the test
        errors.put(f"{type(exc).__name__}: {exc}")


def test_processes_that_open_a_new_file_together_all_open_it(tmp_path: Path) -> None:
    """`--workers 2` on an empty data dir: the processes switch the new file to WAL at the
    same moment, and SQLite refuses that pragma at once ("database is locked") to all but
    one; the others retry instead of failing to start."""
    ctx = multiprocessing.get_context("fork")
    for rep in range(6):
        path = str(tmp_path / f"new{rep}.sqlite3")
        errors = ctx.Queue()
        start = time.time() + 0.3
        procs = [ctx.Process(target=_open_at, args=(path, start, errors)) for _ in range(6)]
        for p in procs:
            p.start()
        got = [errors.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert got == [""] * len(procs), got
