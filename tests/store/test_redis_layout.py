"""The Redis key layout: documented keys, one hash slot per model, a crash-tolerant index."""

from __future__ import annotations

import hashlib

import msgpack
import pytest

from aucstream.service.store import RedisStore
from aucstream.service.store.redis_store import _IMP_KEYS, _record
from tests.redis_servers import RedisCluster, RedisServer, fast_redis_store


def test_key_layout(redis_server: RedisServer) -> None:
    store = fast_redis_store(redis_server.url, "lay")
    store.create_model("m", {"k": 1})
    store.append("m", b"\x00payload", ["a", "b", "a"])
    store.save_checkpoint("m", 2, b"\x80state")
    store.keep_impressions("m", [("i1", b"\x00row1"), ("i2", b"row2")], 1000.5, 1060.5, 10)
    store.claim_impressions("m", ["i2"], ["pending"], "labelled", 1001.0)
    store.acquire_lease("m", "r:1", 30.0)
    store.announce_replica("r:1", 30.0)
    r = redis_server.client()
    try:
        keys = {bytes(k).decode(): r.type(k) for k in r.scan_iter(match="lay:*")}
        tokens = sorted(k for k in keys if k.startswith("lay:{m}:tok:"))
        assert len(tokens) == 1 and len(tokens[0]) == len("lay:{m}:tok:") + 32
        assert r.get(tokens[0]) == b"1:0:2:2"  # what the append did: written, start, end, skip
        assert 0 < r.pttl(tokens[0]) <= store._token_ttl_ms
        del keys[tokens[0]]
        assert keys == {
            "lay:models": b"set",
            "lay:{m}:config": b"hash",
            "lay:{m}:meta": b"hash",
            "lay:{m}:log": b"stream",
            "lay:{m}:dlog": b"stream",
            "lay:{m}:ckpt": b"hash",
            "lay:{m}:imp": b"hash",
            "lay:{m}:imp:shown:pending": b"zset",
            "lay:{m}:imp:exp:pending": b"zset",
            "lay:{m}:imp:shown:labelled": b"zset",
            "lay:{m}:imp:exp:labelled": b"zset",
            "lay:{m}:lease": b"string",
            "lay:{m}:lease:last": b"string",
            "lay:replicas": b"zset",
        }
        ((entry_id, fields),) = r.xrange("lay:{m}:log") or []
        assert entry_id == b"2-0"
        assert fields == {b"p": b"\x00payload", b"s": b"0", b"k": b"2"}
        # the dedup window (log layout): an entry per append that took ids, at its log
        # end: its start, the ids' 8-byte digests, the mask ("" when every event has one)
        ((entry_id, fields),) = r.xrange("lay:{m}:dlog") or []
        digests = b"".join(hashlib.blake2b(e, digest_size=8).digest() for e in (b"a", b"b"))
        assert entry_id == b"2-0" and fields == {b"s": b"0", b"d": digests, b"m": b""}
        meta = r.hgetall("lay:{m}:meta")
        # versions are unique: the generation at creation, then the append's token
        assert meta[b"dver"] == tokens[0].rpartition(":")[2].encode()
        assert len(meta[b"dgen"]) == 32 and b"nb" not in meta
        assert r.hget("lay:{m}:ckpt", "blob") == b"\x80state"  # raw bytes, no pickle
        assert r.hget("lay:{m}:meta", "end") == b"2"
        # impressions: id -> msgpack [payload, shown_at, expires_at, status]; per status
        # a zset by shown_at and one by expires_at
        assert r.hget("lay:{m}:imp", "i1") == msgpack.packb(  # (packed by the client)
            [b"\x00row1", 1000.5, 1060.5, "pending"], use_bin_type=False)
        assert msgpack.unpackb(r.hget("lay:{m}:imp", "i2"), raw=True)[3] == b"labelled"
        assert r.zrange("lay:{m}:imp:shown:pending", 0, -1, withscores=True) == [(b"i1", 1000.5)]
        assert r.zrange("lay:{m}:imp:exp:pending", 0, -1, withscores=True) == [(b"i1", 1060.5)]
        assert r.zrange("lay:{m}:imp:shown:labelled", 0, -1, withscores=True) == [
            (b"i2", 1000.5)]
        assert r.zrange("lay:{m}:imp:exp:labelled", 0, -1, withscores=True) == [(b"i2", 1060.5)]
        # the lease: "token:holder", expiring on the server's clock; the last token granted
        assert r.get("lay:{m}:lease") == b"1:r:1"
        assert 25_000 < r.pttl("lay:{m}:lease") <= 30_000
        assert r.get("lay:{m}:lease:last") == b"1"
        # the registry: replica -> expiry in ms of the server's clock
        ((member, expiry),) = r.zrange("lay:replicas", 0, -1, withscores=True)
        secs, micros = r.time()
        assert member == b"r:1" and 25_000 < expiry - (secs * 1000 + micros // 1000) <= 30_000
        store.delete_model("m")
        # everything goes but the append records, which expire on their own, and the last
        # lease token, which a re-created model's tokens go on from
        assert sorted(bytes(k).decode() for k in r.scan_iter(match="lay:{*")) == sorted(
            [*tokens, "lay:{m}:lease:last"])
        # impression keys left without a config (say, by hand) go when it is created again
        r.hset("lay:{m}:imp", "i1", b"x")
        r.zadd("lay:{m}:imp:shown:timed_out", {"i1": 1.0})
        store.create_model("m", {})
        assert sorted(bytes(k).decode() for k in r.scan_iter(match="lay:{*")) == sorted(
            [*tokens, "lay:{m}:config", "lay:{m}:meta", "lay:{m}:lease:last"])
        assert store.get_impressions("m", ["i1"], 0.0) == {}
    finally:
        r.close()
        store.close()


def test_list_models_survives_a_crash_between_index_and_config(
    redis_server: RedisServer,
) -> None:
    store = fast_redis_store(redis_server.url)
    store.create_model("real", {})
    r = redis_server.client()
    try:
        prefix = store._prefix
        r.sadd(f"{prefix}:models", "ghost")  # create_model died after indexing "ghost"
        assert store.list_models() == ["real"]
        store.create_model("ghost", {"now": "real"})
        assert store.list_models() == ["ghost", "real"]
        r.srem(f"{prefix}:models", "ghost")  # a model the index lost: still reachable
        assert store.get_config("ghost") == {"now": "real"}
    finally:
        r.close()
        store.close()


@pytest.mark.parametrize("name", ["m", "a}b", "{x}", "with:colons"])
def test_a_model_lives_in_one_cluster_slot(redis_cluster: RedisCluster, name: str) -> None:
    store = RedisStore.from_url(redis_cluster.url, prefix="slot", socket_timeout=2)
    store.create_model(name, {})
    store.append(name, b"p", ["a"])
    store.save_checkpoint(name, 1, b"s")
    r = redis_cluster.nodes[0].client()
    try:
        suffixes = ("config", "meta", "log", "ids", "dedup", "dlog", "ckpt", "pins",
                    "tok:" + "0" * 32, "lease", "lease:last", *_IMP_KEYS)
        slots = {r.cluster("KEYSLOT", f"slot:{{{name}}}:{x}") for x in suffixes}
        assert len(slots) == 1
        assert store.read_log(name, 0)[0].payload == b"p"
        assert store.keep_impressions(name, [("i", b"row")], 10.0, 20.0, 5) == 1
        assert store.claim_impressions(name, ["i"], ["pending"], "timing_out", 11.0) == ["i"]
        assert [i for i, _ in store.due_impressions(name, ["timing_out"], 10.0, 11.0, 5)] == ["i"]
        assert store.count_impressions(name, 11.0)["timing_out"] == 1
        lease = store.acquire_lease(name, "r", 30.0)
        assert lease is not None
        assert store.save_checkpoint(name, 1, b"t", token=lease.token) is False
        store.trim(name, 1, 0, token=lease.token)
        assert store.release_lease(name, "r", lease.token)
        store.delete_model(name)
    finally:
        r.close()
        store.close()


@pytest.mark.parametrize("size", [0, 1, 31, 32, 255, 256, 65_535, 65_536])
def test_a_pending_record_is_msgpacks_own(size: int) -> None:
    """The keep script stores the records the client puts together: byte for byte what
    msgpack packs (raw, no bin type: what the scripts' cmsgpack reads), at every size of
    header."""
    payload = bytes(k % 251 for k in range(size))
    for shown, expires in ((1000.0, 1000.5), (1.7e9 + 0.123, 1.7e9 + 3600.123), (5e-324, 1e308)):
        assert _record(payload, shown, expires) == msgpack.packb(
            [payload, shown, expires, "pending"], use_bin_type=False)
