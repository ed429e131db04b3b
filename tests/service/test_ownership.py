"""Scale-out: one owner learns each model, the other replicas serve its publications.

Replicas here are apps (real HTTP through TestClient, real background threads) or model
hosts driven by hand, on one store of the test's backend (SQLite file or Redis server).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from aucstream.service.codec import encode_batch
from aucstream.service.encoding import EncodedBatch
from aucstream.service.hosting import ModelHost
from aucstream.service.metrics import Metrics
from aucstream.service.ownership import preferred_owner
from aucstream.service.store import open_store
from aucstream.service.store.base import LeaseLost
from tests.service.test_api import metrics_of


def _spec(name: str) -> dict:
    return {"name": name, "learner": "cbr_diag_fifo", "features": {"kind": "dense", "dim": 3}}


def _events(n: int, seed: int, tag: str) -> list[dict]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)
    return [{"x": X[i].tolist(), "label": int(y[i]), "id": f"{tag}-{i}"} for i in range(n)]


def _until(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# names whose preferred owner differs between replicas "a" and "b"
NAMES = [f"m{i}" for i in range(40)]
A_NAMES = [n for n in NAMES if preferred_owner(n, ["a", "b"]) == "a"][:2]
B_NAMES = [n for n in NAMES if preferred_owner(n, ["a", "b"]) == "b"][:2]


def test_each_model_has_one_owner_and_followers_serve_what_it_learned(app_client):
    a = app_client(replica_id="a")
    b = app_client(replica_id="b")
    for name in A_NAMES + B_NAMES:
        assert a.post("/models", json=_spec(name)).status_code == 201
    # each model goes to its preferred replica, and both agree who that is
    for name in A_NAMES + B_NAMES:
        want = "a" if name in A_NAMES else "b"
        _until(lambda n=name, w=want: a.get(f"/models/{n}").json()["owner"] == w
               and b.get(f"/models/{n}").json()["owner"] == w)
    assert metrics_of(a)[("aucstream_owned_models", ())] == len(A_NAMES)
    assert metrics_of(b)[("aucstream_owned_models", ())] == len(B_NAMES)
    assert metrics_of(a)[("aucstream_replicas", ())] == 2
    # learn on the follower: the acknowledgement means the owner applied it, and a score
    # on the acknowledging replica right after sees at least that version
    name = A_NAMES[0]
    probe = {"model": name, "items": [{"x": [1.0, 0.0, 0.0]}, {"x": [-1.0, 0.0, 0.0]}]}
    for k in range(5):
        r = b.post("/learn", json={"model": name, "events": _events(40, k, f"b{k}")})
        assert r.status_code == 200, r.text  # 202 would be "durable, not applied yet"
        version = r.json()["version"]
        s = b.post("/score", json=probe).json()
        assert s["version"] >= version
    # the owner learned every event once; the follower never applied a batch itself
    info_a, info_b = a.get(f"/models/{name}").json(), _until(
        lambda: (i := b.get(f"/models/{name}").json())["version"] == 200 and i)
    assert info_a["version"] == 200 and info_a["events"] == info_b["events"]
    assert a.post("/score", json=probe).json()["scores"] == b.post("/score",
                                                                  json=probe).json()["scores"]
    # counters: the follower's requests brought 200 events, counted there (once)
    learned = sum(v for (n, labels), v in metrics_of(b).items()
                  if n == "aucstream_events_learned_total" and ("model", name) in labels)
    assert learned == 200
    learned_a = sum(v for (n, labels), v in metrics_of(a).items()
                    if n == "aucstream_events_learned_total" and ("model", name) in labels)
    assert learned_a == 0


def test_a_clean_shutdown_hands_the_models_over_at_once(app_client):
    a = app_client(replica_id="a")
    b = app_client(replica_id="b")
    name = A_NAMES[0]
    assert a.post("/models", json=_spec(name)).status_code == 201
    _until(lambda: b.get(f"/models/{name}").json()["owner"] == "a")
    assert a.post("/learn", json={"model": name, "events": _events(50, 1, "x")}).status_code \
        == 200
    a.__exit__(None, None, None)  # releases its leases and withdraws
    _until(lambda: b.get(f"/models/{name}").json()["owner"] == "b", timeout=5.0)
    r = b.post("/learn", json={"model": name, "events": _events(50, 2, "y")})
    assert r.status_code == 200 and r.json()["version"] == 100


# ----------------------------------------------------------------- hosts by hand
def _host(settings_for, replica: str, **overrides) -> ModelHost:
    s = settings_for(replica_id=replica, **overrides)
    store = open_store(s.redis_url, s.data_dir, prefix=s.redis_prefix)
    host = ModelHost(store, s, Metrics())
    host.recover()
    return host


def _config(name: str) -> dict:
    return {"name": name, "learner": "cbr_diag_fifo", "params": {},
            "features": {"kind": "dense", "dim": 3}, "seed": 0, "standardize": False,
            "rolling_window": 100, "created_at": 0.0, "uid": name, "feedback": None}


def _batch(n: int, seed: int) -> tuple[EncodedBatch, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.where(X[:, 0] > 0, 1, -1).astype(np.int8)
    return EncodedBatch(n=n, X=X), y


def test_a_killed_owner_is_replaced_after_its_lease_and_nothing_is_lost(settings_for):
    ttl = 0.5
    a = _host(settings_for, "a", lease_ttl=ttl)
    b = _host(settings_for, "b", lease_ttl=ttl)
    for h in (a, b):
        h.keep_leases()  # both announce
    name = A_NAMES[0]
    model_a = a.create(_config(name))
    b.sync_once()
    model_b = b.get(name)
    assert model_a.owned and not model_b.owned and model_b.owner == "a"
    acked = 0
    for k in range(4):
        batch, y = _batch(30, k)
        _accepted, _, version, applied = a.append_and_apply(model_a, batch, y,
                                                           [f"{k}-{i}" for i in range(30)])
        assert applied
        acked = version
    # "kill -9" of a: it stops renewing, publishing and following, mid-stream; b follows
    # whatever a published, then takes the model over once a's lease and announcement
    # have lapsed, from checkpoint + log
    a.follow_once()
    died = time.monotonic()
    _until(lambda: (b.keep_leases(), b.sync_once(), model_b.owned)[-1], timeout=10 * ttl)
    took = time.monotonic() - died
    assert took <= 2 * ttl + 0.5
    assert model_b.version == acked
    # the survivor holds exactly what a replay of the whole log gives
    replay = _host(settings_for, "replay")
    fresh = replay._new_model(model_b.config)
    fresh.catch_up(replay.store, None, None)
    probe, _ = _batch(20, 99)
    np.testing.assert_array_equal(model_b.snapshot.score(probe), fresh.snapshot.score(probe))
    # the stale owner wakes up: its fenced writes are refused, and it steps down
    with pytest.raises(LeaseLost):
        model_a.checkpoint(a.store, a.settings, trim=False)
    a.keep_leases()
    assert not model_a.owned
    # learning on a (now a follower) is acknowledged once b applied and published it
    stop = threading.Event()

    def follow() -> None:
        last = 0.0
        while not stop.is_set():  # both replicas' background loops, as the app runs them
            if time.monotonic() - last >= ttl / 3:
                a.keep_leases()
                b.keep_leases()
                last = time.monotonic()
            b.follow_once()
            a.follow_once()
            time.sleep(0.01)

    t = threading.Thread(target=follow)
    t.start()
    try:
        batch, y = _batch(30, 50)
        _, _, version, applied = a.append_and_apply(model_a, batch, y,
                                                    [f"late-{i}" for i in range(30)])
        assert applied and version == acked + 30 and model_a.version >= version
    finally:
        stop.set()
        t.join()
    for h in (a, b, replay):
        h.store.close()


@contextlib.contextmanager
def _following(*hosts: ModelHost, pause: float) -> Iterator[None]:
    """The hosts' fast follow loops on a thread, as the app runs them, for the block."""
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            for h in hosts:
                h.follow_once()
            time.sleep(pause)

    t = threading.Thread(target=follow)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def _count_looks(host: ModelHost, name: str) -> list[int]:
    """Count the host's log_bounds calls on ``name`` (a one-item list, updated in place)."""
    looks = [0]
    bounds = host.store.log_bounds

    def counted(n: str) -> tuple[int, int, int]:
        looks[0] += n == name
        return bounds(n)

    host.store.log_bounds = counted  # type: ignore[method-assign]
    return looks


def test_an_owner_looks_at_a_model_only_when_a_follower_wakes_it(settings_for):
    a = _host(settings_for, "a", follow_interval=0.01)
    b = _host(settings_for, "b")
    for h in (a, b):
        h.keep_leases()
    name = A_NAMES[0]
    model = a.create(_config(name))
    b.sync_once()
    follower = b.get(name)
    assert model.owned and a.scaled_out and follower.owner == "a"
    looks = _count_looks(a, name)
    started = time.monotonic()
    while time.monotonic() - started < 0.3:
        a.follow_once()
        time.sleep(0.002)
    assert looks[0] == 0  # idle: no store call for it in the fast loop
    # a learn on the follower wakes the owner, which applies and publishes it at once
    # (the follower's acknowledgement waits for that publication)
    with _following(a, b, pause=0.005):
        batch, y = _batch(10, 1)
        # (no sync loop runs here: without the wake-up nothing would apply it)
        _, _, version, applied = b.append_and_apply(follower, batch, y,
                                                    [f"b-{i}" for i in range(10)])
    assert applied and version == 10 and model.version == 10 and follower.version == 10
    assert 1 <= looks[0] <= 3
    for h in (a, b):
        h.store.close()


def test_an_owner_publishes_what_a_waiting_follower_appended_at_once(settings_for):
    """A follower's learn waits for the owner's publication: the owner publishes it as
    soon as it has applied it, not at its next publish_interval."""
    over = {"publish_interval": 60.0, "append_resolve_timeout": 5.0, "lease_ttl": 60.0}
    a = _host(settings_for, "a", follow_interval=0.005, **over)
    b = _host(settings_for, "b", follow_interval=0.005, **over)
    for h in (a, b):
        h.keep_leases()
    name = A_NAMES[0]
    model = a.create(_config(name))
    b.sync_once()
    follower = b.get(name)
    waits = []
    with _following(a, b, pause=0.002):
        for k in range(3):  # the first publication of all comes at once anyway
            batch, y = _batch(10, k)
            started = time.monotonic()
            _, _, version, applied = b.append_and_apply(follower, batch, y,
                                                        [f"b{k}-{i}" for i in range(10)])
            waits.append(time.monotonic() - started)
            assert applied and version == 10 * (k + 1) == follower.version
    assert model.version == 30 and max(waits) < 2.0, waits
    for h in (a, b):
        h.store.close()


def test_an_entry_whose_wake_up_was_lost_is_applied_by_the_sync_loop(settings_for):
    a = _host(settings_for, "a")
    b = _host(settings_for, "b")
    for h in (a, b):
        h.keep_leases()
    name = A_NAMES[0]
    model = a.create(_config(name))
    batch, y = _batch(10, 2)
    # appended by another replica that died before waking the owner
    b.store.append(name, encode_batch(y, X=batch.X), [f"b-{i}" for i in range(10)])
    a.follow_once()
    assert model.version == 0
    a.sync_once()
    assert model.version == 10
    for h in (a, b):
        h.store.close()


def test_a_renewal_racing_a_hand_over_leaves_the_lease_free(settings_for):
    a = _host(settings_for, "a")
    a.keep_leases()
    name = A_NAMES[0]
    model = a.create(_config(name))
    token = model.token
    assert token is not None
    # the hand-over released the lease before the lease keeper saw the demotion: the
    # keeper must not take the lease back (a fresh token under "a" would keep the next
    # owner waiting a whole lease time)
    assert a.store.release_lease(name, "a", token)
    a.keep_leases()
    assert not model.owned
    assert a.store.get_lease(name) is None
    a.store.close()


def _hashed_batch(n: int, seed: int) -> tuple[EncodedBatch, np.ndarray]:
    """Rows of 8 hashed features each, from a vocabulary that keeps growing."""
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, 200 + 300 * seed, size=(n, 8)).astype(np.int64)
    y = np.where(rng.random(n) < 0.3, 1, -1).astype(np.int8)
    return (EncodedBatch(n=n, indptr=np.arange(0, 8 * n + 1, 8, dtype=np.int64),
                         indices=np.sort(indices, axis=1).reshape(-1),
                         values=rng.random(8 * n)), y)


def _state_nbytes(state: dict) -> int:
    return sum(_state_nbytes(v) if isinstance(v, dict) else getattr(v, "nbytes", 0)
               for v in state.values())


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return type(a) is type(b) and a == b


def _owner_and_follower(settings_for, **config):
    """Hosts "a" (owning a hashed model) and "b" (following it) that publish and reload
    on every round of their loops, with leases that outlast the test."""
    over = {"publish_interval": 1e-6, "max_staleness": 1e-6, "lease_ttl": 60.0}
    a, b = _host(settings_for, "a", **over), _host(settings_for, "b", **over)
    for h in (a, b):
        h.keep_leases()
    name = A_NAMES[0]
    model = a.create({**_config(name), "features": {"kind": "hashed", "bits": 16}, **config})
    b.sync_once()
    return a, b, name, model, b.get(name)


def test_followers_chain_the_owners_deltas_and_hold_its_state_bit_for_bit(settings_for):
    """The owner publishes what changed (a delta) and every so often the whole state;
    the follower applies the deltas to what it loaded last, reads a whole state only to
    start or to skip a gap, and holds the owner's state to the bit, also across a
    regular checkpoint and a change of owner."""
    a, b, name, model, follower = _owner_and_follower(settings_for, rolling_window=2000)
    loads = [0]
    load = b.store.load_checkpoint

    def counted(n: str):
        loads[0] += n == name
        return load(n)

    b.store.load_checkpoint = counted  # type: ignore[method-assign]
    wholes = [0]
    save = a.store.save_checkpoint

    def saved(n: str, *args, **kwargs):
        wholes[0] += n == name
        return save(n, *args, **kwargs)

    a.store.save_checkpoint = saved  # type: ignore[method-assign]
    rounds = []  # per round: (whole states the owner published, the follower loaded)
    for k in range(12):
        batch, y = _hashed_batch(200, k)
        a.append_and_apply(model, batch, y, [None] * 200)
        w, n = wholes[0], loads[0]
        a.follow_once()  # publishes
        if k == 6:  # a regular checkpoint: whole, and the deltas before it go
            model.checkpoint(a.store, a.settings, publishes=True)
            assert a.store.read_deltas(name, 0) == []
        b.follow_once()  # loads
        rounds.append((wholes[0] - w, loads[0] - n))
        assert follower.version == model.version == 200 * (k + 1)
        with model.lock, follower.lock:
            assert _same(follower.full_state(), model.full_state()), k
    # a whole state is read only when the owner published one since the last round
    assert all(loaded == (whole > 0) for whole, loaded in rounds), rounds
    assert sum(whole == 0 for whole, _ in rounds) >= 6, rounds  # the rest were deltas
    # the states held for deltas count in each side's memory
    for m, attr in ((follower, "followed"), (model, "published_state")):
        held = getattr(m, attr)
        with_held = m.memory_bytes()
        setattr(m, attr, None)
        assert with_held - m.memory_bytes() == _state_nbytes(held[1]) > 100_000
        setattr(m, attr, held)
    # a new owner publishes its first state whole, then deltas against it
    token = model.token
    a._demote(model, "test")
    assert token is not None and a.store.release_lease(name, "a", token)
    b._take(follower)
    assert follower.owned and follower.followed is None
    for k in range(12, 15):
        batch, y = _hashed_batch(200, k)
        b.append_and_apply(follower, batch, y, [None] * 200)
        b.follow_once()
        a.follow_once()
        assert model.version == follower.version
        with model.lock, follower.lock:
            assert _same(follower.full_state(), model.full_state()), k
    assert [d.base for d in b.store.read_deltas(name, 0)] == [2600, 2800]
    for h in (a, b):
        h.store.close()


def test_a_follower_that_loaded_between_publications_takes_the_chain_past_it(settings_for):
    """A replica loads a model at the log's end, which can fall between two of the
    owner's publications (the owner had learned more and not yet published it). The
    owner's next delta then starts before the follower's version, and the checkpoint is
    older still: the follower takes the checkpoint and the chain on past its own version
    (it used to wait for the next whole publication, and a learn there for the owner to
    publish: 202 after 10 s in CI)."""
    over = {"publish_interval": 1e-6, "max_staleness": 1e-6, "lease_ttl": 60.0}
    a, b = _host(settings_for, "a", **over), _host(settings_for, "b", **over)
    for h in (a, b):
        h.keep_leases()
    name = A_NAMES[0]
    model = a.create({**_config(name), "features": {"kind": "hashed", "bits": 16}})
    for k in range(2):
        a.append_and_apply(model, *_hashed_batch(200, k), [None] * 200)
        model.publish(a.store, a.settings)  # whole at 200, then the delta 200 -> 400
    a.append_and_apply(model, *_hashed_batch(200, 2), [None] * 200)  # 600: not published
    b.sync_once()  # loads the model: the checkpoint, then the log to its end
    follower = b.get(name)
    assert not follower.owned and follower.version == 600
    a.append_and_apply(model, *_hashed_batch(200, 3), [None] * 200)
    model.publish(a.store, a.settings)  # the delta 400 -> 800
    assert [(d.base, d.version) for d in a.store.read_deltas(name, 0)] == [(200, 400),
                                                                        (400, 800)]
    b.follow_once()
    assert follower.version == model.version == 800
    with model.lock, follower.lock:
        assert _same(follower.full_state(), model.full_state())
    # and from there on the chain goes on from the follower's own version
    a.append_and_apply(model, *_hashed_batch(200, 4), [None] * 200)
    model.publish(a.store, a.settings)
    b.follow_once()
    assert follower.version == 1000 and follower.followed is not None
    for h in (a, b):
        h.store.close()


def test_publications_from_two_threads_form_one_chain(settings_for):
    """The follow loop and the sync loop both publish: their deltas never fork (two
    against one base would leave a follower of one branch a gap until the next whole)."""
    a = _host(settings_for, "a", lease_ttl=60.0)
    a.keep_leases()
    name = A_NAMES[0]
    model = a.create({**_config(name), "features": {"kind": "hashed", "bits": 16}})
    published: list[tuple[int | None, int]] = []  # (base or None for whole, version)
    save, delta = a.store.save_checkpoint, a.store.publish_delta

    def saved(n, version, blob, token=None):
        kept = save(n, version, blob, token=token)
        published.append((None, version))
        return kept

    def delta_kept(n, base, version, blob, token=None):
        kept = delta(n, base, version, blob, token=token)
        published.append((base, version))
        return kept

    a.store.save_checkpoint = saved  # type: ignore[method-assign]
    a.store.publish_delta = delta_kept  # type: ignore[method-assign]
    model.publish(a.store, a.settings)  # whole: the deltas' first base
    stop = threading.Event()
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            while not stop.is_set():
                model.publish(a.store, a.settings)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=publish) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for k in range(40):
            a.append_and_apply(model, *_hashed_batch(20, k), [None] * 20)
            time.sleep(0.002)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert sum(base is not None for base, _ in published) >= 5
    # each delta is taken against the publication just before it
    for (_, before), (base, _) in itertools.pairwise(published):
        assert base is None or base == before, published
    a.store.close()


def test_a_former_owner_follows_the_deltas_of_its_successor(settings_for):
    """An owner that hands a model over holds the state of its last version: when the
    successor publishes that version whole (not newer: it loads nothing) and then deltas,
    it chains them from its own state rather than waiting for the next whole one."""
    a, b, name, model, follower = _owner_and_follower(settings_for)
    a.append_and_apply(model, *_hashed_batch(100, 0), [None] * 100)
    token = model.token
    a._demote(model, "test")
    assert token is not None and a.store.release_lease(name, "a", token)
    b._take(follower)
    b.follow_once()  # its first publication: whole, at the version a holds
    assert follower.version == model.version == 100
    b.append_and_apply(follower, *_hashed_batch(100, 1), [None] * 100)
    b.follow_once()  # a delta 100 -> 200
    assert [(d.base, d.version) for d in b.store.read_deltas(name, 0)] == [(100, 200)]
    a.follow_once()
    assert model.version == 200
    with model.lock, follower.lock:
        assert _same(model.full_state(), follower.full_state())
    for h in (a, b):
        h.store.close()


def test_a_follower_skips_deltas_that_do_not_chain_from_the_state_it_starts_at(settings_for):
    """A follower that reads the deltas, then the checkpoint a publication saved in
    between: the deltas from before the checkpoint do not apply to it."""
    a, b, name, model, follower = _owner_and_follower(settings_for)
    a.append_and_apply(model, *_hashed_batch(100, 0), [None] * 100)
    a.follow_once()  # whole, at 100
    b.follow_once()
    assert follower.version == 100
    for k in (1, 2):
        a.append_and_apply(model, *_hashed_batch(100, k), [None] * 100)
        a.follow_once()  # deltas 100 -> 200 -> 300 (the follower does not look)
    stale = a.store.read_deltas(name, 200)
    assert [(d.base, d.version) for d in stale] == [(200, 300)]
    a.append_and_apply(model, *_hashed_batch(100, 3), [None] * 100)
    model.checkpoint(a.store, a.settings, publishes=True)  # whole at 400: the deltas go
    b.store.read_deltas = lambda n, after: stale  # type: ignore[method-assign]
    b.follow_once()  # (read before the checkpoint landed; no chain from 100)
    assert follower.version == model.version == 400
    with model.lock, follower.lock:
        assert _same(follower.full_state(), model.full_state())
    for h in (a, b):
        h.store.close()
