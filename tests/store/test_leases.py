"""Ownership leases, fencing tokens and the replica registry (issue 15), on every store.

Times: a lease that must still be held is given 30 s or more; one that must run out is
given 0.2 s and then polled for (at most a few seconds), so that a loaded machine makes
the tests slower, never wrong.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from aucstream.service.store import Lease, LeaseLost, ModelNotFound, Store

LONG = 30.0  # seconds: a lease that outlives the test
SHORT = 0.2  # seconds: a lease that runs out during the test
WAIT = 5.0  # seconds: the most a test waits for a short lease to run out


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"still not {what} after {WAIT} s"
        time.sleep(0.02)


def run_out(store: Store, name: str) -> None:
    wait_until(lambda: store.get_lease(name) is None, f"free: {name}")


@pytest.fixture
def model(store: Store) -> str:
    store.create_model("m", {"k": 1})
    store.append("m", b"one", ["a", "b"])
    store.append("m", b"two", ["c", "d"])
    return "m"


# -- acquire, renew, expire, release ---------------------------------------------------


def test_acquire_renew_and_refuse(store: Store, model: str) -> None:
    assert store.get_lease(model) is None
    lease = store.acquire_lease(model, "a", LONG)
    assert lease == Lease(holder="a", token=1, ttl=LONG)
    held = store.get_lease(model)
    assert held is not None and (held.holder, held.token) == ("a", 1)
    assert 0 < held.ttl <= LONG
    # the holder renews: the token stays, the expiry moves to now + ttl
    assert store.acquire_lease(model, "a", 3 * LONG) == Lease("a", 1, 3 * LONG)
    held = store.get_lease(model)
    assert held is not None and LONG < held.ttl <= 3 * LONG
    # another replica is refused, and changes nothing
    assert store.acquire_lease(model, "b", LONG) is None
    after = store.get_lease(model)
    assert after is not None and (after.holder, after.token) == ("a", 1)
    assert after.ttl > LONG


def test_a_renewal_can_shorten_the_lease(store: Store, model: str) -> None:
    store.acquire_lease(model, "a", LONG)
    assert store.acquire_lease(model, "a", SHORT) == Lease("a", 1, SHORT)
    run_out(store, model)


def test_an_expired_lease_is_taken_over_with_the_next_token(store: Store, model: str) -> None:
    assert store.acquire_lease(model, "a", SHORT) is not None
    run_out(store, model)
    assert store.acquire_lease(model, "b", LONG) == Lease("b", 2, LONG)
    assert store.acquire_lease(model, "a", LONG) is None  # a's renewal comes too late
    held = store.get_lease(model)
    assert held is not None and (held.holder, held.token) == ("b", 2)


def test_an_expired_lease_taken_again_by_its_holder_gets_a_new_token(
    store: Store, model: str
) -> None:
    """Not a renewal: someone may have held it meanwhile, so the holder must find out."""
    store.acquire_lease(model, "a", SHORT)
    run_out(store, model)
    assert store.acquire_lease(model, "a", LONG) == Lease("a", 2, LONG)


def test_release(store: Store, model: str) -> None:
    lease = store.acquire_lease(model, "a", LONG)
    assert lease is not None
    assert not store.release_lease(model, "a", lease.token + 1)  # wrong token
    assert not store.release_lease(model, "b", lease.token)  # not the holder
    assert store.get_lease(model) is not None
    assert store.release_lease(model, "a", lease.token)
    assert store.get_lease(model) is None
    assert not store.release_lease(model, "a", lease.token)  # once
    # the token is not reused; anyone may take the free lease
    assert store.acquire_lease(model, "b", LONG) == Lease("b", 2, LONG)
    assert not store.release_lease(model, "a", 2)


def test_renew_extends_only_the_holders_lease_with_its_token(store: Store, model: str) -> None:
    lease = store.acquire_lease(model, "a", SHORT)
    assert lease is not None
    assert not store.renew_lease(model, "a", lease.token + 1, LONG)  # wrong token
    assert not store.renew_lease(model, "b", lease.token, LONG)  # not the holder
    assert store.renew_lease(model, "a", lease.token, LONG)
    time.sleep(2 * SHORT)  # past the first expiry: the renewal holds it
    held = store.get_lease(model)
    assert held is not None and (held.holder, held.token) == ("a", lease.token)
    assert held.ttl > LONG / 2
    assert not store.renew_lease("missing", "a", lease.token, LONG)


def test_renew_never_takes_a_free_or_lapsed_lease(store: Store, model: str) -> None:
    # a renewal racing a hand-over: the lease was released, or ran out; either way it
    # stays free for the next owner (acquire_lease would have taken it, token + 1)
    lease = store.acquire_lease(model, "a", LONG)
    assert lease is not None and store.release_lease(model, "a", lease.token)
    assert not store.renew_lease(model, "a", lease.token, LONG)
    assert store.get_lease(model) is None
    lease = store.acquire_lease(model, "a", SHORT)
    assert lease is not None
    run_out(store, model)
    assert not store.renew_lease(model, "a", lease.token, LONG)
    assert store.get_lease(model) is None
    assert store.acquire_lease(model, "b", LONG) == Lease("b", lease.token + 1, LONG)


def test_a_lapsed_lease_cannot_be_released(store: Store, model: str) -> None:
    store.acquire_lease(model, "a", SHORT)
    run_out(store, model)
    assert not store.release_lease(model, "a", 1)
    assert store.acquire_lease(model, "b", LONG) == Lease("b", 2, LONG)


def test_tokens_grow_by_one_per_change_of_hands_and_never_repeat(
    store: Store, model: str
) -> None:
    seen = []
    for i in range(6):
        replica = "ab"[i % 2]
        lease = store.acquire_lease(model, replica, LONG)
        assert lease is not None
        # renewals in between keep the token
        assert store.acquire_lease(model, replica, LONG) == lease
        seen.append(lease.token)
        assert store.release_lease(model, replica, lease.token)
    assert seen == [1, 2, 3, 4, 5, 6]


def test_models_have_their_own_leases(store: Store, model: str) -> None:
    store.create_model("other", {})
    assert store.acquire_lease(model, "a", LONG) == Lease("a", 1, LONG)
    assert store.acquire_lease("other", "b", LONG) == Lease("b", 1, LONG)
    assert store.release_lease("other", "b", 1)
    a = store.get_lease(model)
    assert a is not None and (a.holder, a.token) == ("a", 1)
    assert store.acquire_lease("other", "a", LONG) == Lease("a", 2, LONG)


def test_replica_ids_are_any_strings(store: Store, model: str) -> None:
    for replica in ("host:8000:pid 12", "é{x}", "7"):
        lease = store.acquire_lease(model, replica, LONG)
        assert lease is not None and lease.holder == replica
        got = store.get_lease(model)
        assert got is not None and got.holder == replica
        assert store.release_lease(model, replica, lease.token)


# -- fenced writes ---------------------------------------------------------------------


def snapshot(store: Store, name: str, known: list[str | None]) -> tuple[object, ...]:
    """What a fenced write could change; ``known`` are ids the model holds (probed with an
    append of duplicates only, which writes nothing while they are kept)."""
    ckpt = store.load_checkpoint(name)
    return (None if ckpt is None else (ckpt.version, ckpt.blob), store.log_bounds(name),
            [(e.start, e.end) for e in store.read_log(name, 0)], store.read_pins(name),
            store.read_deltas(name, 0), store.publication_version(name),
            store.append(name, b"probe", known).entry)


def stale_writes(store: Store, name: str, token: int) -> dict[str, Callable[[], object]]:
    return {
        "save_checkpoint": lambda: store.save_checkpoint(name, 4, b"stale", token=token),
        "publish_delta": lambda: store.publish_delta(name, 2, 4, b"stale", token=token),
        "trim": lambda: store.trim(name, 4, 0, token=token),
        "set_pin": lambda: store.set_pin(name, 1, token=token),
    }


def refused_all(store: Store, name: str, token: int, known: list[str | None] | None = None,
                ) -> None:
    known = ["a", "c"] if known is None else known
    before = snapshot(store, name, known)
    assert before[-1] is None
    for what, call in stale_writes(store, name, token).items():
        with pytest.raises(LeaseLost, match=f"token {token}"):
            call()
        assert snapshot(store, name, known) == before, what


def test_fenced_writes_pass_with_the_holders_token(store: Store, model: str) -> None:
    lease = store.acquire_lease(model, "a", LONG)
    assert lease is not None
    assert store.save_checkpoint(model, 2, b"s2", token=lease.token)
    assert store.publish_delta(model, 2, 3, b"d3", token=lease.token)
    assert store.set_pin(model, 3, token=lease.token) == 4
    store.trim(model, 4, 0, token=lease.token)  # lowered to the checkpoint: 2
    assert [(e.start, e.end) for e in store.read_log(model, 0)] == [(2, 4)]
    assert store.append(model, b"again", ["a", "b"]).entry is not None  # ids <= 2 went
    assert store.read_pins(model) == [(4, 3)]
    ckpt = store.load_checkpoint(model)
    assert ckpt is not None and (ckpt.version, ckpt.blob) == (2, b"s2")


def test_fenced_writes_are_refused_without_the_lease(store: Store, model: str) -> None:
    refused_all(store, model, 1)  # nobody holds it
    store.save_checkpoint(model, 2, b"s2")  # no token: as before leases
    lease = store.acquire_lease(model, "a", LONG)
    assert lease is not None
    refused_all(store, model, lease.token + 1)  # a token not granted yet
    refused_all(store, model, 0)
    assert store.release_lease(model, "a", lease.token)
    refused_all(store, model, lease.token)  # released


def test_a_stale_owner_is_fenced_after_a_takeover(store: Store, model: str) -> None:
    old = store.acquire_lease(model, "a", SHORT)
    assert old is not None
    assert store.save_checkpoint(model, 2, b"by a", token=old.token)
    run_out(store, model)
    refused_all(store, model, old.token)  # expired, not taken yet
    new = store.acquire_lease(model, "b", LONG)
    assert new is not None and new.token == old.token + 1
    refused_all(store, model, old.token)  # taken by b
    assert store.save_checkpoint(model, 4, b"by b", token=new.token)
    # writes without a token are not fenced, whoever holds the lease
    assert store.set_pin(model, None) == 4


def test_fenced_writes_check_the_model_first(store: Store, model: str) -> None:
    lease = store.acquire_lease(model, "a", LONG)
    assert lease is not None
    with pytest.raises(ValueError, match="beyond the log end"):
        store.save_checkpoint(model, 99, b"s", token=lease.token)
    for call in stale_writes(store, "nope", lease.token).values():
        with pytest.raises(ModelNotFound, match="nope"):
            call()


# -- races -----------------------------------------------------------------------------


def race(stores: list[Store], name: str) -> list[Lease | None]:
    """Each store acquires ``name``'s lease from a thread of its own, all at once."""
    barrier = threading.Barrier(len(stores))
    got: list[Lease | None] = [None] * len(stores)
    errors: list[BaseException] = []

    def take(i: int) -> None:
        try:
            barrier.wait(timeout=WAIT)
            got[i] = stores[i].acquire_lease(name, f"r{i}", LONG)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=2 * WAIT)
    assert not errors and not any(t.is_alive() for t in threads), errors
    return got


@pytest.mark.parametrize("objects", ["one-store-object", "two-store-objects"])
def test_concurrent_acquires_have_exactly_one_winner(
    make_store: Callable[[], Store], objects: str
) -> None:
    first = make_store()
    stores = [first, first if objects == "one-store-object" else make_store()]
    first.create_model("m", {})
    for round_ in range(5):
        got = race(stores, "m")
        winners = [lease for lease in got if lease is not None]
        assert len(winners) == 1, got
        (won,) = winners
        assert won.token == round_ + 1
        held = first.get_lease("m")
        assert held is not None and (held.holder, held.token) == (won.holder, won.token)
        assert first.release_lease("m", won.holder, won.token)


# -- missing models, delete and re-create -----------------------------------------------


def test_missing_model(store: Store) -> None:
    for call in (lambda: store.acquire_lease("nope", "a", LONG),
                 lambda: store.get_lease("nope"),
                 lambda: store.checkpoint_version("nope")):
        with pytest.raises(ModelNotFound, match="nope"):
            call()
    assert store.release_lease("nope", "a", 1) is False  # no lease to give up
    assert store.list_models() == []


def test_delete_and_recreate_frees_the_lease_and_fences_the_old_owner(
    store: Store, model: str
) -> None:
    old = store.acquire_lease(model, "a", LONG)
    assert old is not None and old.token == 1
    store.delete_model(model)
    with pytest.raises(ModelNotFound):
        store.acquire_lease(model, "a", LONG)
    with pytest.raises(ModelNotFound):
        store.save_checkpoint(model, 0, b"s", token=old.token)
    store.create_model(model, {"k": 2})
    store.append(model, b"new", ["x", "y", "z", "w"])
    assert store.get_lease(model) is None  # the new model's lease is free
    refused_all(store, model, old.token, ["x", "w"])
    # tokens go on from the deleted model's: the old owner's token never comes back,
    # and its renewal shows a new token, so it knows it must reload
    new = store.acquire_lease(model, "b", LONG)
    assert new is not None and new.token == old.token + 1
    refused_all(store, model, old.token, ["x", "w"])
    assert store.acquire_lease(model, "a", LONG) is None
    assert store.release_lease(model, "b", new.token)
    again = store.acquire_lease(model, "a", LONG)
    assert again is not None and again.token == new.token + 1


def test_checkpoint_version(store: Store, model: str) -> None:
    assert store.checkpoint_version(model) == 0
    store.save_checkpoint(model, 2, b"s2")
    assert store.checkpoint_version(model) == 2
    store.save_checkpoint(model, 1, b"s1")  # older: ignored
    assert store.checkpoint_version(model) == 2
    store.create_model("imported", {}, start=(7, b"s7"))
    assert store.checkpoint_version("imported") == 7
    store.delete_model(model)
    store.create_model(model, {})
    assert store.checkpoint_version(model) == 0


# -- the replica registry ----------------------------------------------------------------


def test_announce_lists_the_live_replicas_sorted(make_store: Callable[[], Store]) -> None:
    one, two = make_store(), make_store()
    assert one.announce_replica("r2", LONG) == ["r2"]
    assert two.announce_replica("r1", LONG) == ["r1", "r2"]
    assert one.announce_replica("r3:x é", LONG) == ["r1", "r2", "r3:x é"]
    assert one.announce_replica("r2", LONG) == ["r1", "r2", "r3:x é"]  # once each


def test_announced_replicas_expire_and_withdraw(make_store: Callable[[], Store]) -> None:
    one, two = make_store(), make_store()
    assert one.announce_replica("a", LONG) == ["a"]
    assert "s" in two.announce_replica("s", SHORT)  # included, however short its ttl
    wait_until(lambda: one.announce_replica("a", LONG) == ["a"], "forgotten: s")
    # a re-announcement extends a replica's time
    two.announce_replica("b", SHORT)
    two.announce_replica("b", LONG)
    time.sleep(2 * SHORT)
    assert one.announce_replica("a", LONG) == ["a", "b"]
    two.withdraw_replica("b")
    assert one.announce_replica("a", LONG) == ["a"]
    two.withdraw_replica("b")  # not known: nothing
    two.withdraw_replica("never")
    one.withdraw_replica("a")
    assert two.announce_replica("c", LONG) == ["c"]


# -- wake-ups ----------------------------------------------------------------------------


def test_wake_ups_are_taken_once_each_by_their_replica(make_store: Callable[[], Store]) -> None:
    one, two = make_store(), make_store()
    one.announce_replica("owner", LONG)
    two.announce_replica("other", LONG)
    assert one.woken("owner") == []
    two.wake("owner", ["m2", "m1"])
    two.wake("owner", ["m1"])  # twice before it is taken: once
    one.wake("other", ["m3"])
    two.wake("owner", [])
    assert one.woken("owner") == ["m1", "m2"]
    assert one.woken("owner") == []  # taken
    assert two.woken("other") == ["m3"]
    two.wake("owner", ["m 2:é"])  # any model name, any store object
    assert two.woken("owner") == ["m 2:é"]


def test_wake_ups_of_a_replica_that_is_gone_are_dropped(
        make_store: Callable[[], Store]) -> None:
    one, two = make_store(), make_store()
    one.announce_replica("a", LONG)
    one.announce_replica("b", LONG)
    two.wake("a", ["m"])
    two.wake("b", ["m"])
    one.withdraw_replica("a")
    assert one.woken("a") == []
    assert two.woken("b") == ["m"]


def test_bad_wake_ups_are_refused(store: Store) -> None:
    for replica in ("", "a\nb", None):
        with pytest.raises(ValueError, match="replica"):
            store.wake(replica, ["m"])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="replica"):
            store.woken(replica)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model name"):
        store.wake("a", ["ok", ""])
    assert store.woken("a") == []  # nothing of a refused call


# -- arguments -------------------------------------------------------------------------


@pytest.mark.parametrize("ttl", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_bad_ttls_are_refused(store: Store, model: str, ttl: object) -> None:
    with pytest.raises(ValueError, match="ttl"):
        store.acquire_lease(model, "a", ttl)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl"):
        store.renew_lease(model, "a", 1, ttl)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl"):
        store.announce_replica("a", ttl)  # type: ignore[arg-type]
    assert store.get_lease(model) is None


def test_bad_replicas_and_tokens_are_refused(store: Store, model: str) -> None:
    for replica in ("", "a\nb", None):
        with pytest.raises(ValueError, match="replica"):
            store.acquire_lease(model, replica, LONG)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="replica"):
            store.announce_replica(replica, LONG)  # type: ignore[arg-type]
    for token in (-1, True, 1.0, "1"):
        with pytest.raises(ValueError, match="token"):
            store.save_checkpoint(model, 2, b"s", token=token)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="token"):
            store.release_lease(model, "a", token)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="token"):
            store.renew_lease(model, "a", token, LONG)  # type: ignore[arg-type]
    assert store.load_checkpoint(model) is None
    assert store.get_lease(model) is None
