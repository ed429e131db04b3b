"""The Redis store's log layout of the dedup window: appenders decide duplicates on their
own copy of the window, and the append script writes only if that copy is current.

The fields layout is the reference: the same operations on a model of each layout give
the same entries and duplicates, with several appenders taking turns."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aucstream.service.store import RedisStore
from aucstream.service.store.base import StoreUnavailable
from tests.redis_servers import RedisServer, fast_redis_store

ids_ = st.one_of(st.none(), st.sampled_from([f"e{i}" for i in range(6)]))
ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.lists(ids_, max_size=6)),
    st.tuples(st.just("release"), st.integers(0, 2)),  # the last entry, if it wrote one
    st.tuples(st.just("trim"), st.integers(0, 4)),  # keep_ids
), max_size=25)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
@example(ops=[("append", 0, ["e1", "e2"]), ("release", 1), ("append", 2, ["e1", "e3"]),
              ("trim", 1), ("append", 0, ["e1", "e2", None, "e3"])])
def test_the_log_layout_deduplicates_as_the_fields_layout(redis_server: RedisServer,
                                                          ops: list[tuple]) -> None:
    prefix = f"w{uuid.uuid4().hex[:10]}"
    logs = [fast_redis_store(redis_server.url, prefix) for _ in range(3)]
    ref = fast_redis_store(redis_server.url, prefix, dedup_layout="fields")
    try:
        logs[0].create_model("log", {})
        ref.create_model("ref", {})
        last = None
        for op in ops:
            if op[0] == "append":
                got = logs[op[1]].append("log", b"p", op[2])
                want = ref.append("ref", b"p", op[2])
                assert (got.duplicates, got.version) == (want.duplicates, want.version)
                assert (got.entry is None) == (want.entry is None)
                if got.entry is not None:
                    last = (got.entry.start, got.entry.end)
            elif op[0] == "release" and last is not None:
                logs[op[1]].release_ids("log", *last)
                ref.release_ids("ref", *last)
            elif op[0] == "trim":
                end = ref.log_bounds("ref")[2]
                for store, name in ((logs[0], "log"), (ref, "ref")):
                    store.save_checkpoint(name, end, b"s")
                    store.trim(name, end, keep_ids=op[1])
        assert logs[0].read_log("log", 0) == ref.read_log("ref", 0)
    finally:
        for s in (*logs, ref):
            s.close()


def test_a_model_made_again_elsewhere_is_read_afresh(redis_server: RedisServer) -> None:
    """A copy of the window of a deleted model must not decide for the model made again
    under its name: the generation differs, so the copy is read from scratch."""
    a = fast_redis_store(redis_server.url, "again")
    b = fast_redis_store(redis_server.url, "again")
    try:
        a.create_model("m", {})
        assert a.append("m", b"p", ["x", "y"]).duplicates == ()
        b.delete_model("m")
        b.create_model("m", {})
        res = a.append("m", b"q", ["x", "y", "x"])
        assert res.duplicates == (2,) and res.version == 2
        # and a model of the fields layout made under that name in between
        b.delete_model("m")
        RedisStore(b._r, prefix="again", dedup_layout="fields").create_model("m", {})
        assert a.append("m", b"r", ["x", "x"]).duplicates == (1,)
        assert "m" in a._fields_models
        b.delete_model("m")
        b.create_model("m", {})
        assert a.append("m", b"s", ["x"]).duplicates == ()
        assert "m" not in a._fields_models
    finally:
        a.close()
        b.close()


def test_a_stale_or_fenced_append_writes_nothing(redis_server: RedisServer) -> None:
    store = fast_redis_store(redis_server.url)
    try:
        store.create_model("m", {})
        store.append("m", b"p", ["a"])
        keys = store._keys("m", "config", "meta", "log", "dlog", "tok:" + "1" * 32)
        window = store._windows["m"]
        args = [b"late", 60_000, window.gen, window.gen, 1, "", b"\x00" * 8, b"", b"v2"]
        assert store._append_log(keys=keys, args=args) == [-6]  # the version at creation
        args[3] = window.dver
        fenced = store._keys("m", "tok:" + "2" * 32)[0]
        store._fence(keys=[fenced], args=[60_000])
        assert store._append_log(keys=[*keys[:4], fenced], args=args) == [-2, b"fenced"]
        assert store.log_bounds("m") == (1, 0, 1)
        assert store._append_log(keys=keys, args=args)[:3] == [1, 1, 2]
    finally:
        store.close()


def test_concurrent_appenders_take_each_id_once(redis_server: RedisServer) -> None:
    """Two stores (two replicas) and two threads each append overlapping ids at once:
    every id is learned exactly once."""
    prefix = f"c{uuid.uuid4().hex[:10]}"
    stores = [fast_redis_store(redis_server.url, prefix) for _ in range(2)]
    stores[0].create_model("m", {})
    learned: list[int] = []
    lock = threading.Lock()

    def run(store: RedisStore, seed: int) -> None:
        for k in range(40):
            batch = [f"id{(seed * 7 + k * 5 + j) % 300}" for j in range(10)]
            res = store.append("m", b"p", batch)
            with lock:
                learned.append(len(batch) - len(res.duplicates))

    threads = [threading.Thread(target=run, args=(stores[i % 2], i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        seen = set()
        for seed in range(4):
            for k in range(40):
                seen.update(f"id{(seed * 7 + k * 5 + j) % 300}" for j in range(10))
        assert sum(learned) == len(seen) == stores[1].log_bounds("m")[2]
    finally:
        for s in stores:
            s.close()


def test_bytes_per_remembered_id(redis_server: RedisServer) -> None:
    """The window costs Redis ~8 bytes of digest per id plus the entry (issue: <= 50 B)."""
    store = fast_redis_store(redis_server.url)
    r = redis.Redis.from_url(redis_server.url)
    try:
        store.create_model("big", {})
        store.create_model("small", {})
        for k in range(40):
            store.append("big", b"p", [f"b{k}-{j}" for j in range(500)])
        for k in range(500):
            store.append("small", b"p", [f"s{k}"])
        per_id_big = r.memory_usage(f"{store._prefix}:{{big}}:dlog", samples=0) / 20_000
        per_id_small = r.memory_usage(f"{store._prefix}:{{small}}:dlog", samples=0) / 500
        assert per_id_big < 12 and per_id_small < 50, (per_id_big, per_id_small)
    finally:
        r.close()
        store.close()


def test_an_appender_that_keeps_losing_gives_up(redis_server: RedisServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Other appenders moving the window on at every try: 'nothing written', after the
    append's time, never a decision on a stale copy."""
    store = fast_redis_store(redis_server.url, resolve_timeout=0.2)
    other = fast_redis_store(redis_server.url, store._prefix)
    try:
        store.create_model("m", {})
        store.append("m", b"p", ["a"])
        real = store._append_log
        turn = iter(range(10**6))

        def racing(keys, args):  # another replica appends just before each try
            other.append("m", b"o", [f"o{next(turn)}"])
            return real(keys=keys, args=args)

        monkeypatch.setattr(store, "_append_log", racing)
        store._append_time = 0.3
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable, match="nothing was written"):
            store.append("m", b"q", ["b"])
        assert time.monotonic() - t0 < 5
        monkeypatch.setattr(store, "_append_log", real)
        assert store.append("m", b"q", ["b", "a"]).duplicates == (1,)
    finally:
        store.close()
        other.close()


def test_a_store_that_lost_history_is_read_afresh(redis_server: RedisServer) -> None:
    """Redis restored to an older state (a failover to a lagging replica, an old AOF),
    then moved on by other appenders to the same log end: a copy that saw the lost
    appends must not decide on them (the lost ids are new again)."""
    a = fast_redis_store(redis_server.url)
    b = fast_redis_store(redis_server.url, a._prefix)
    r = redis.Redis.from_url(redis_server.url)
    try:
        a.create_model("m", {})
        meta, log, dlog = (f"{a._prefix}:{{m}}:{k}" for k in ("meta", "log", "dlog"))
        before = r.hgetall(meta)
        assert a.append("m", b"p", ["x", "y"]).version == 2  # a's copy: x, y
        # the loss: back to the state before that append
        r.delete(log, dlog)
        r.delete(meta)
        r.hset(meta, mapping=before)
        assert b.append("m", b"q", ["p", "q"]).version == 2  # the same log end again
        assert b.append("m", b"q", ["r"]).version == 3
        res = a.append("m", b"s", ["x", "y", "p"])
        assert res.duplicates == (2,) and res.version == 5
    finally:
        r.close()
        a.close()
        b.close()


def test_idle_copies_are_dropped_and_read_again(redis_server: RedisServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from aucstream.service.store import redis_store

    store = fast_redis_store(redis_server.url)
    try:
        for name in ("a", "b"):
            store.create_model(name, {})
            store.append(name, b"p", ["x", "y"])
        assert set(store._windows) == {"a", "b"}
        monkeypatch.setattr(redis_store, "_WINDOW_IDLE_S", 0.05)
        time.sleep(0.1)
        assert store.append("a", b"q", ["x", "z"]).duplicates == (0,)  # a read afresh
        assert set(store._windows) == {"a"}
        assert store.append("b", b"q", ["y", "z"]).duplicates == (0,)
    finally:
        store.close()
