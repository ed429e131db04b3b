"""The Redis store when the server stops, crashes, hangs, refuses writes or restarts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from aucstream.service.store import (
    AppendOutcomeUnknown,
    AppendResult,
    RedisStore,
    StoreUnavailable,
    open_store,
)
from aucstream.service.store.id_digests import digest_args
from tests.redis_servers import RedisServer, fast_redis_store, free_port


def every_method(store: RedisStore) -> dict[str, Callable[[], object]]:
    return {
        "ping": store.ping,
        "create_model": lambda: store.create_model("other", {}),
        "get_config": lambda: store.get_config("m"),
        "list_models": store.list_models,
        "delete_model": lambda: store.delete_model("m"),
        "append": lambda: store.append("m", b"p", ["z"]),
        "read_log": lambda: store.read_log("m", 0),
        "log_bounds": lambda: store.log_bounds("m"),
        "save_checkpoint": lambda: store.save_checkpoint("m", 1, b"s"),
        "load_checkpoint": lambda: store.load_checkpoint("m"),
        "trim": lambda: store.trim("m", 1, 0),
        "acquire_lease": lambda: store.acquire_lease("m", "r", 10.0),
        "release_lease": lambda: store.release_lease("m", "r", 1),
        "get_lease": lambda: store.get_lease("m"),
        "checkpoint_version": lambda: store.checkpoint_version("m"),
        "fenced save_checkpoint": lambda: store.save_checkpoint("m", 1, b"s", token=1),
        "announce_replica": lambda: store.announce_replica("r", 10.0),
        "withdraw_replica": lambda: store.withdraw_replica("r"),
    }


def fill(store: RedisStore) -> None:
    store.create_model("m", {"k": 1})
    store.append("m", b"one", ["a", "b"])
    store.append("m", b"two", ["c", None])
    store.save_checkpoint("m", 2, b"state")


def check_intact(store: RedisStore) -> None:
    assert store.list_models() == ["m"]
    assert store.get_config("m") == {"k": 1}
    assert [(e.start, e.end, e.payload) for e in store.read_log("m", 0)] == [
        (0, 2, b"one"),
        (2, 4, b"two"),
    ]
    ckpt = store.load_checkpoint("m")
    assert ckpt is not None
    assert (ckpt.version, ckpt.blob) == (2, b"state")
    assert store.append("m", b"again", ["a"]).entry is None  # ids survived too


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_stopped_server_gives_store_unavailable_then_recovers(
    own_redis: RedisServer, kill: bool
) -> None:
    store = fast_redis_store(own_redis.url)
    fill(store)
    own_redis.stop(kill=kill)
    for what, call in every_method(store).items():
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable, match=f"Redis at 127.0.0.1:{own_redis.port}"):
            call()
        assert time.monotonic() - t0 < 5, what
    own_redis.start()  # same port and dir: the AOF is replayed
    check_intact(store)  # the same store object, no reconnect call
    assert store.append("m", b"three", ["d"]).version == 5
    store.close()


def test_hung_server_times_out(own_redis: RedisServer) -> None:
    store = fast_redis_store(own_redis.url)
    fill(store)
    own_redis.pause()
    try:
        with pytest.raises(StoreUnavailable, match="Timeout"):
            store.read_log("m", 0)
        # sent, unanswered, and the server stays out of reach while the store tries to
        # fence it: the outcome is unknown, and said so
        t0 = time.monotonic()
        with pytest.raises(AppendOutcomeUnknown, match="may or may not"):
            store.append("m", b"p", ["x"])
        assert time.monotonic() - t0 < 10
    finally:
        own_redis.resume()
    # On resuming, the server ran the queued append or one of the queued fences first
    # (then the append was a no-op): either way a retry with the same id learns it once.
    r = store.append("m", b"p", ["x"])
    assert r.version == 5 and (r.entry is None) == (r.duplicates == (0,))
    assert [e.end for e in store.read_log("m", 0)] == [2, 4, 5]
    store.close()


@pytest.mark.parametrize("ids", [["x", "y"], [None, None]], ids=["with ids", "without ids"])
def test_an_append_cut_off_by_a_stall_is_found_out_once_the_server_resumes(
    own_redis: RedisServer, ids: list[str | None]
) -> None:
    """A stall longer than the socket timeout but shorter than the resolve timeout: the
    append answers what really happened (written once), with or without event ids."""
    store = fast_redis_store(own_redis.url, resolve_timeout=8.0)
    fill(store)
    own_redis.pause()
    threading.Timer(2.5, own_redis.resume).start()
    t0 = time.monotonic()
    r = store.append("m", b"p", ids)
    assert time.monotonic() - t0 > 2  # it did wait for the server
    assert r.entry is not None and (r.entry.start, r.entry.end) == (4, 6)
    assert [e.end for e in store.read_log("m", 0)] == [2, 4, 6]
    store.close()


def test_a_fenced_append_is_never_written(own_redis: RedisServer) -> None:
    """The fence and the append are scripts, run one at a time: if the fence runs first
    the append is a no-op whenever it arrives; if the append ran first the fence returns
    its record. Either answer is final. (The fields layout's script; the log layout's in
    test_redis_id_window.py.)"""
    store = fast_redis_store(own_redis.url, dedup_layout="fields")
    fill(store)
    token = "tok:" + "f" * 32
    key = f"{store._prefix}:{{m}}:{token}"
    with pytest.raises(StoreUnavailable, match="fenced"):
        store._find_out("m", key, TimeoutError("cut off"), time.monotonic() + 1)
    keys = [f"{store._prefix}:{{m}}:{part}"
            for part in ("config", "meta", "log", "ids", "dedup")]

    def args(payload: bytes, ids: list[str | None]) -> list[object]:
        """The append script's arguments, as RedisStore.append sends them."""
        given = [i for i in ids if i is not None]
        mask = b"" if len(given) == len(ids) else bytes(49 if i else 48 for i in ids)
        packed, fields = digest_args(given, store._fields) if given else (b"", b"")
        return [payload, packed, 60_000, mask, store._fields, fields, b"", b"1"]

    res = store._append(keys=[*keys, key], args=args(b"late", ["z"]))
    assert res == [-2, b"fenced"]
    assert store.log_bounds("m") == (2, 0, 4)
    assert store.append("m", b"p", ["z"]).version == 5  # the id was not taken either
    # an append that ran: the fence returns its record instead
    ran = f"{store._prefix}:{{m}}:tok:" + "a" * 32
    store._append(keys=[*keys, ran], args=args(b"ran", [None]))
    assert store._find_out("m", ran, TimeoutError("cut off"), time.monotonic() + 1) == b"1:5:6:"
    store.close()


def test_a_stopped_server_fails_appends_at_once(own_redis: RedisServer) -> None:
    """Connection refused: the append certainly did not go out, so 503-grade at once,
    not after the resolve timeout."""
    store = fast_redis_store(own_redis.url, resolve_timeout=30.0)
    fill(store)
    own_redis.stop(kill=True)
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable, match="connecting"):
        store.append("m", b"p", ["x"])
    assert time.monotonic() - t0 < 5
    own_redis.start()
    assert store.append("m", b"p", ["x"]).version == 5
    store.close()


def test_read_only_server_refuses_writes(own_redis: RedisServer) -> None:
    store = fast_redis_store(own_redis.url)
    fill(store)
    admin = own_redis.client()
    admin.replicaof("127.0.0.1", "1")  # a master that never answers: stays read-only
    try:
        with pytest.raises(StoreUnavailable, match=r"READONLY|read only|read-only"):
            store.append("m", b"p", ["x"])
        with pytest.raises(StoreUnavailable):
            store.save_checkpoint("m", 4, b"s")
        assert store.log_bounds("m") == (2, 0, 4)  # reads still work
    finally:
        admin.replicaof("NO", "ONE")
        admin.close()
    assert store.append("m", b"p", ["x"]).version == 5
    store.close()


def test_out_of_memory_writes_nothing(own_redis: RedisServer) -> None:
    store = fast_redis_store(own_redis.url)
    fill(store)
    admin = own_redis.client()
    admin.config_set("maxmemory", "1")
    try:
        with pytest.raises(StoreUnavailable, match="OutOfMemory"):
            store.append("m", b"p", ["x", "y"])
        with pytest.raises(StoreUnavailable, match="OutOfMemory"):
            store.create_model("n", {})
    finally:
        admin.config_set("maxmemory", "0")
        admin.close()
    check_intact(store)
    assert store.log_bounds("m") == (2, 0, 4)
    assert store.append("m", b"p", ["x", "y"]).version == 6
    store.close()


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_no_acknowledged_append_lost_when_redis_restarts_under_load(
    own_redis: RedisServer, kill: bool
) -> None:
    """A writer appends without pause; redis-server is stopped (or killed) and restarted.

    Every append that returned is in the log afterwards; a failed append is retried with
    the same ids until it returns, and no id is learned twice. An append cut off by the
    restart is often found out instead of failing (it waits for the server to come back),
    so "hit" counts failures and appends that waited.
    """
    store = fast_redis_store(own_redis.url)
    store.create_model("m", {})
    acked: list[AppendResult] = []
    failures = 0
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        nonlocal failures
        try:
            b = 0
            while not stop.is_set():
                batch = [f"b{b}-{k}" for k in range(5)]
                while True:  # the service's retry: same payload, same ids
                    t0 = time.monotonic()
                    try:
                        acked.append(store.append("m", b"batch %d" % b, batch))
                        if time.monotonic() - t0 > 0.05:
                            failures += 1
                        break
                    except (StoreUnavailable, AppendOutcomeUnknown):
                        failures += 1
                        time.sleep(0.01)
                b += 1
        except BaseException as exc:
            errors.append(exc)

    th = threading.Thread(target=writer)
    th.start()
    try:
        for _ in range(2):
            time.sleep(0.3)
            own_redis.stop(kill=kill)
            time.sleep(0.1)
            own_redis.start()
        time.sleep(0.3)
    finally:
        stop.set()
        th.join(timeout=30)
    assert not errors
    assert failures > 0  # the restarts did hit the writer
    n_batches = len(acked)
    assert n_batches > 10

    log = store.read_log("m", 0)
    by_end = {e.end: e for e in log}
    for r in acked:
        if r.entry is not None:  # None: a retry of an append that had gone through
            assert by_end[r.entry.end] == r.entry
    # contiguous, and every id of every batch learned exactly once
    assert [e.start for e in log] == [0] + [e.end for e in log[:-1]]
    learned = [
        f"b{int(e.payload.split()[1])}-{k}" for e in log for k in range(5) if k not in e.skip
    ]
    assert len(learned) == len(set(learned)) == log[-1].end
    assert set(learned) >= {f"b{b}-{k}" for b in range(n_batches) for k in range(5)}
    store.close()


def test_unreachable_at_start() -> None:
    store = fast_redis_store(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens
    with pytest.raises(StoreUnavailable, match="ConnectionError"):
        store.ping()
    with pytest.raises(StoreUnavailable):
        store.append("m", b"p", [None])
    store.close()
    with pytest.raises(StoreUnavailable, match="Cluster"):
        open_store(f"redis+cluster://127.0.0.1:{free_port()}", "unused")
