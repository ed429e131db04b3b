"""The Redis store's dedup window in the fields layout (digests packed in one hash), the
floor, released ranges, and models of the layout before it (one sorted set of ids), which
keep deduplicating; the log layout's own tests are in test_redis_id_window.py."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from aucstream.service.store import RedisStore
from tests.redis_servers import RedisCluster, RedisServer, fast_redis_store

REC = 14  # bytes per record: 8-byte digest, 6-byte position


def digest(eid: str) -> bytes:
    return hashlib.blake2b(eid.encode(), digest_size=8).digest()


def records(r: redis.Redis, prefix: str, name: str) -> dict[bytes, int]:
    """Every record of the model's dedup hash: digest -> position (each digest once)."""
    out: dict[bytes, int] = {}
    for field, value in r.hgetall(f"{prefix}:{{{name}}}:dedup").items():
        assert len(value) % REC == 0
        for i in range(0, len(value), REC):
            d, pos = value[i:i + 8], int.from_bytes(value[i + 8:i + REC], "big")
            assert int(field) == int.from_bytes(d, "big") % nb_of(r, prefix, name)
            assert d not in out
            out[d] = pos
    return out


def nb_of(r: redis.Redis, prefix: str, name: str) -> int:
    return int(r.hget(f"{prefix}:{{{name}}}:meta", "nb"))


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    yield client
    client.close()


def ids(prefix: str, first: int, n: int) -> list[str]:
    return [f"{prefix}{i:06d}" for i in range(first, first + n)]


def test_records_spread_over_fields_with_their_positions(redis_server: RedisServer,
                                                         r: redis.Redis) -> None:
    store = fast_redis_store(redis_server.url, "dd1", dedup_layout="fields")
    store.create_model("m", {})
    batch = ids("ad1-", 0, 3_000)
    store.append("m", b"p", [*batch[:1_500], None, *batch[1_500:]])
    got = records(r, "dd1", "m")
    want = {digest(e): i + 1 + (i >= 1_500) for i, e in enumerate(batch)}
    assert got == want
    nb = nb_of(r, "dd1", "m")
    assert r.hlen("dd1:{m}:dedup") == len({int.from_bytes(d, "big") % nb for d in want})
    store.close()


def test_bytes_per_id_at_the_window(redis_server: RedisServer, r: redis.Redis) -> None:
    """Issue 15's target: at most 50 bytes of Redis per remembered id (MEMORY USAGE of
    the dedup hash, every element counted), at the window the store was sized for."""
    window = 40_000
    store = RedisStore.from_url(redis_server.url, prefix="dd2", dedup_window=window,
                                dedup_layout="fields")
    store.create_model("m", {})
    for k in range(0, window, 500):
        store.append("m", b"", ids("ad1-", k, 500))
    size = r.memory_usage("dd2:{m}:dedup", samples=0)
    assert size / window <= 50
    # the previous layout's sorted set, for scale: more than twice as much
    r.zadd("dd2:zset", {e: i for i, e in enumerate(ids("ad1-", 0, window))})
    assert r.memory_usage("dd2:zset", samples=0) > 2 * size
    store.close()


def test_trim_forgets_across_fields_and_cleans_up(redis_server: RedisServer,
                                                  r: redis.Redis) -> None:
    store = RedisStore.from_url(redis_server.url, prefix="dd3", dedup_window=0,
                                dedup_layout="fields")
    store.create_model("m", {})
    n = 6_000
    for k in range(0, n, 1_000):
        store.append("m", b"p", ids("e", k, 1_000))
    store.save_checkpoint("m", n, b"s")
    store.trim("m", n, keep_ids=1_000)  # positions <= 5000 forgotten
    assert r.hget("dd3:{m}:meta", "floor") == b"5000"
    # remembered exactly from position 5001 on, whichever field an id is in
    probe = ["e000000", "e002500", "e004999", "e005000", "e005999"]
    assert store.append("m", b"q", probe).duplicates == (3, 4)
    # the forgotten ids were learned again: positions 6001..6003
    again = records(r, "dd3", "m")
    assert [again[digest(e)] for e in probe[:3]] == [6001, 6002, 6003]
    # trims sweep fields: after enough of them, no forgotten record is left
    nb = nb_of(r, "dd3", "m")
    for _ in range(nb // 256 + 1):
        store.trim("m", n, keep_ids=1_000)
    left = records(r, "dd3", "m")
    assert all(pos > 5_000 for pos in left.values())
    assert len(left) == 1_000 + 3
    store.close()


def test_release_across_fields_until_the_floor_passes(redis_server: RedisServer,
                                                      r: redis.Redis) -> None:
    store = fast_redis_store(redis_server.url, "dd4", dedup_layout="fields")
    store.create_model("m", {})
    store.append("m", b"1", ids("a", 0, 500))  # 1..500
    refused = store.append("m", b"2", ids("a", 500, 500))  # 501..1000
    store.append("m", b"3", ids("a", 1_000, 500))  # 1001..1500
    assert refused.entry is not None
    store.release_ids("m", refused.entry.start, refused.entry.end)
    store.release_ids("m", 1_400, 1_410)  # a second range
    assert r.hget("dd4:{m}:meta", "rel") == b"500:1000,1400:1410"
    probe = ["a000499", "a000500", "a000999", "a001000", "a001399", "a001400", "a001409"]
    res = store.append("m", b"4", probe)
    assert res.duplicates == (0, 3, 4)  # 1..500 and 1001..1400 stay; the rest go again
    # retried ids were learned again, once: a second retry is a duplicate
    assert store.append("m", b"5", probe).entry is None
    # a trim past a range drops it, and releases below the floor are no-ops
    store.save_checkpoint("m", 1_504, b"s")
    store.trim("m", 1_504, keep_ids=104)  # floor 1400
    assert r.hget("dd4:{m}:meta", "rel") == b"1400:1410"
    store.release_ids("m", 0, 1_000)
    assert r.hget("dd4:{m}:meta", "rel") == b"1400:1410"
    store.trim("m", 1_504, keep_ids=0)
    assert r.hget("dd4:{m}:meta", "rel") is None
    store.close()


def test_a_digest_across_two_records_is_no_match(redis_server: RedisServer,
                                                 r: redis.Redis) -> None:
    """Records are found at multiples of 14 bytes only: the 8 bytes of a digest that
    happen to straddle two records are not a remembered id."""
    store = fast_redis_store(redis_server.url, "dd5", dedup_layout="fields")
    store.create_model("m", {})
    store.append("m", b"1", ["x"])  # creates meta's field count; position 1
    nb = nb_of(r, "dd5", "m")
    d = digest("target")
    field = str(int.from_bytes(d, "big") % nb)
    # record 1: some digest with position bytes d[:6]; record 2: d[6:] then the rest
    fake = b"\x01" * 8 + d[:6] + d[6:] + b"\x02" * 6 + (5).to_bytes(6, "big")
    assert d in fake
    r.hset("dd5:{m}:dedup", field, fake)
    r.hset("dd5:{m}:meta", "end", 10**12)  # positions beyond the forged ones
    res = store.append("m", b"2", ["target"])
    assert res.duplicates == () and res.entry is not None
    assert store.append("m", b"3", ["target"]).entry is None  # now remembered
    store.close()


def test_a_model_made_with_another_window_keeps_its_field_count(
        redis_server: RedisServer, r: redis.Redis) -> None:
    small = RedisStore.from_url(redis_server.url, prefix="dd6", dedup_window=0,
                                dedup_layout="fields")
    big = RedisStore.from_url(redis_server.url, prefix="dd6", dedup_window=10**6,
                              dedup_layout="fields")
    assert small._fields != big._fields
    small.create_model("m", {})
    big.append("m", b"1", ids("b", 0, 300))
    small.append("m", b"2", ids("b", 300, 300))
    assert nb_of(r, "dd6", "m") == small._fields
    assert big.append("m", b"3", ids("b", 0, 600)).entry is None
    assert small.append("m", b"4", ids("b", 0, 600)).entry is None
    records(r, "dd6", "m")  # every record in the field of the model's count
    small.close()
    big.close()


def previous_layout(r: Any, prefix: str, name: str, batches: list[list[str]]) -> None:
    """A model as the previous version wrote it: config, meta end, log, and the ids in
    one sorted set id -> position (no dedup hash, no field count)."""
    base = f"{prefix}:{{{name}}}:"
    r.hset(base + "config", mapping={"json": "{}", "created_at": "0.0"})
    end = 0
    for b in batches:
        start = end
        r.zadd(base + "ids", {e: start + i + 1 for i, e in enumerate(b)})
        end += len(b)
        r.xadd(base + "log", {"p": b"old", "s": str(start), "k": ""}, id=f"{end}-0")
    r.hset(base + "meta", "end", end)
    r.sadd(f"{prefix}:models", name)


def test_a_model_of_the_previous_layout_keeps_deduplicating(redis_server: RedisServer,
                                                            r: redis.Redis) -> None:
    previous_layout(r, "dd7", "m", [ids("o", 0, 3_000), ids("o", 3_000, 3_000)])
    store = fast_redis_store(redis_server.url, "dd7")
    # ids in the zset are duplicates, new ones go to the dedup hash
    res = store.append("m", b"n", ["o000000", "n1", "o005999", "n2", "n1"])
    assert res.duplicates == (0, 2, 4)
    assert res.entry is not None and (res.entry.start, res.entry.end) == (6_000, 6_002)
    assert "m" in store._legacy
    assert r.zcard("dd7:{m}:ids") == 6_000 and set(records(r, "dd7", "m").values()) == {
        6_001, 6_002}
    assert nb_of(r, "dd7", "m") == store._fields
    # a second store object finds out by itself
    other = fast_redis_store(redis_server.url, "dd7")
    assert other.append("m", b"o", ["o002000", "n1", "n3"]).duplicates == (0, 1)
    # release: the zset's ids of the range go too
    store.release_ids("m", 1_000, 2_000)
    assert store.append("m", b"r", ["o000999", "o001000"]).duplicates == (0,)
    # trims empty the zset in slices; Redis drops it once empty; appends stop sending ids
    store.save_checkpoint("m", 6_004, b"s")
    store.trim("m", 6_004, keep_ids=3)  # floor 6001: every zset id goes
    assert not r.exists("dd7:{m}:ids")
    assert store.append("m", b"x", ["o004000", "n2", "n3"]).duplicates == (1, 2)
    assert "m" not in store._legacy
    # delete removes both layouts' keys
    previous_layout(r, "dd7", "k", [ids("o", 0, 10)])
    store.append("k", b"y", ["z"])
    store.delete_model("k")
    assert not r.exists("dd7:{k}:ids", "dd7:{k}:dedup", "dd7:{k}:meta")
    store.close()
    other.close()


def test_previous_layout_on_a_cluster(redis_cluster: RedisCluster) -> None:
    rc = redis.RedisCluster.from_url(redis_cluster.url.replace("redis+cluster", "redis"))
    try:
        name = "legacy"
        previous_layout(rc, "dd8", name, [ids("o", 0, 100)])
        store = RedisStore.from_url(redis_cluster.url, prefix="dd8", socket_timeout=2)
        assert store.append(name, b"n", ["o000050", "n"]).duplicates == (0,)
        store.release_ids(name, 0, 100)
        assert store.append(name, b"m", ["o000050", "n"]).duplicates == (1,)
        store.save_checkpoint(name, 102, b"s")
        store.trim(name, 102, keep_ids=0)
        assert not rc.exists(f"dd8:{{{name}}}:ids")
        assert store.append(name, b"k", ["o000050", "n"]).entry is not None
        store.delete_model(name)
        assert not rc.exists(f"dd8:{{{name}}}:dedup")
        store.close()
    finally:
        rc.close()
