"""The store contract (service/store/base.py), one suite run against both stores."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aucstream.service.store import (
    IMPRESSION_STATUSES,
    AppendResult,
    Impression,
    LogEntry,
    ModelExists,
    ModelNotFound,
    PackedItems,
    Store,
)

CONFIG = {"learner": "cbr_fifo", "params": {"C": 0.5, "buffer": 100}, "dim": 8}
T0 = 1_700_000_000.123456  # unix seconds, with digits a 14-digit formatting would lose
ZERO = dict.fromkeys(IMPRESSION_STATUSES, 0)


@pytest.fixture
def model(store: Store) -> str:
    store.create_model("m", CONFIG)
    return "m"


def ids(prefix: str, n: int) -> list[str | None]:
    return [f"{prefix}{i}" for i in range(n)]


# -- models ----------------------------------------------------------------------------


def test_create_get_list_delete(store: Store) -> None:
    assert store.list_models() == []
    store.create_model("b", CONFIG)
    store.create_model("a", {"x": [1, 2.5, None, "s"]})
    assert store.list_models() == ["a", "b"]
    assert store.get_config("b") == CONFIG
    assert store.get_config("a") == {"x": [1, 2.5, None, "s"]}
    with pytest.raises(ModelExists):
        store.create_model("a", CONFIG)
    assert store.get_config("a") == {"x": [1, 2.5, None, "s"]}  # unchanged
    store.delete_model("a")
    assert store.list_models() == ["b"]
    with pytest.raises(ModelNotFound):
        store.get_config("a")
    with pytest.raises(ModelNotFound):
        store.delete_model("a")


def test_names_with_odd_characters(store: Store) -> None:
    names = ["x}y", "{z}", "a:b", "é ü", "m:{m}:log"]
    for n in names:
        store.create_model(n, {"n": n})
    for n in names:
        assert store.get_config(n) == {"n": n}
        store.append(n, n.encode(), [n])
    assert store.list_models() == sorted(names)
    for n in names:
        assert [e.payload for e in store.read_log(n, 0)] == [n.encode()]
    with pytest.raises(ValueError):
        store.create_model("", CONFIG)
    with pytest.raises(ValueError):
        store.create_model("a\nb", CONFIG)


def test_every_method_raises_model_not_found(store: Store) -> None:
    calls: list[Callable[[], object]] = [
        lambda: store.get_config("nope"),
        lambda: store.delete_model("nope"),
        lambda: store.append("nope", b"p", ["a"]),
        lambda: store.append("nope", b"p", []),
        lambda: store.read_log("nope", 0),
        lambda: store.log_bounds("nope"),
        lambda: store.save_checkpoint("nope", 0, b"s"),
        lambda: store.load_checkpoint("nope"),
        lambda: store.publish_delta("nope", 0, 1, b"d"),
        lambda: store.read_deltas("nope", 0),
        lambda: store.publication_version("nope"),
        lambda: store.trim("nope", 0, 0),
        lambda: store.keep_impressions("nope", [("a", b"p")], T0, T0 + 10, 10),
        lambda: store.keep_impressions("nope", [], T0, T0 + 10, 10),
        lambda: store.get_impressions("nope", ["a"], T0),
        lambda: store.get_impressions("nope", [], T0),
        lambda: store.claim_impressions("nope", ["a"], ["pending"], "labelled", T0),
        lambda: store.claim_impressions("nope", [], [], "labelled", T0),
        lambda: store.take_impressions("nope", ["a"], ["pending"], "labelled", T0),
        lambda: store.take_impressions("nope", [], [], "labelled", T0),
        lambda: store.due_impressions("nope", ["pending"], T0, T0, 10),
        lambda: store.due_impressions("nope", [], T0, T0, 0),
        lambda: store.count_impressions("nope", T0),
    ]
    for call in calls:
        with pytest.raises(ModelNotFound, match="nope"):
            call()
    assert store.list_models() == []


def test_data_is_shared_by_a_second_store_object(make_store: Callable[[], Store]) -> None:
    one, two = make_store(), make_store()
    one.create_model("m", CONFIG)
    one.append("m", b"p1", ["a", None])
    assert two.list_models() == ["m"]
    assert two.append("m", b"p2", ["a", "b"]).entry == LogEntry(2, 3, b"p2", (0,))
    one.close()
    three = make_store()
    assert [e.end for e in three.read_log("m", 0)] == [2, 3]


def test_ping(store: Store) -> None:
    store.ping()


# -- append ----------------------------------------------------------------------------


def test_append_assigns_contiguous_positions(store: Store, model: str) -> None:
    r1 = store.append(model, b"one", ids("a", 3))
    r2 = store.append(model, b"two", [None, None])
    r3 = store.append(model, b"three", ids("b", 5))
    assert r1 == AppendResult(LogEntry(0, 3, b"one", ()), (), 3)
    assert r2 == AppendResult(LogEntry(3, 5, b"two", ()), (), 5)
    assert r3 == AppendResult(LogEntry(5, 10, b"three", ()), (), 10)
    assert store.read_log(model, 0) == [r1.entry, r2.entry, r3.entry]
    assert store.log_bounds(model) == (3, 0, 10)


def test_payload_is_opaque_bytes(store: Store, model: str) -> None:
    payload = bytes(range(256)) * 3 + b"\x00\r\n"
    assert store.append(model, payload, [None]).entry is not None
    assert store.read_log(model, 0)[0].payload == payload
    store.append(model, bytearray(b"ba"), [None])  # type: ignore[arg-type]
    assert store.read_log(model, 1)[0].payload == b"ba"


def test_dedup_across_batches(store: Store, model: str) -> None:
    store.append(model, b"1", ["a", "b", "c"])
    r = store.append(model, b"2", ["x", "b", "y", "c"])
    assert r == AppendResult(LogEntry(3, 5, b"2", (1, 3)), (1, 3), 5)
    assert store.read_log(model, 3) == [LogEntry(3, 5, b"2", (1, 3))]


def test_dedup_within_a_batch_first_occurrence_wins(store: Store, model: str) -> None:
    r = store.append(model, b"1", ["a", "b", "a", None, "b", "a", "c"])
    assert r.entry == LogEntry(0, 4, b"1", (2, 4, 5))
    assert r.duplicates == (2, 4, 5)
    # the ids of the batch are now known
    assert store.append(model, b"2", ["c"]).entry is None


def test_none_ids_never_dedup(store: Store, model: str) -> None:
    r = store.append(model, b"1", [None, None, None])
    assert r.entry == LogEntry(0, 3, b"1", ())
    assert store.append(model, b"2", [None]).entry == LogEntry(3, 4, b"2", ())


def test_empty_string_is_an_id(store: Store, model: str) -> None:
    assert store.append(model, b"1", ["", None]).entry == LogEntry(0, 2, b"1", ())
    assert store.append(model, b"2", ["", None]).entry == LogEntry(2, 3, b"2", (0,))


def test_all_duplicate_batch_appends_nothing(store: Store, model: str) -> None:
    store.append(model, b"1", ["a", "b"])
    before = store.read_log(model, 0)
    r = store.append(model, b"2", ["b", "a", "b"])
    assert r == AppendResult(None, (0, 1, 2), 2)
    assert store.read_log(model, 0) == before
    assert store.log_bounds(model) == (1, 0, 2)
    assert store.append(model, b"3", []) == AppendResult(None, (), 2)
    assert store.log_bounds(model) == (1, 0, 2)


def test_bad_event_ids_rejected(store: Store, model: str) -> None:
    with pytest.raises(TypeError):
        store.append(model, b"p", ["a", 3])  # type: ignore[list-item]
    assert store.log_bounds(model) == (0, 0, 0)


# -- read_log --------------------------------------------------------------------------


def test_read_log_after_is_exclusive_and_limit(store: Store, model: str) -> None:
    entries = [store.append(model, b"%d" % i, [None] * (i + 1)).entry for i in range(5)]
    ends = [e.end for e in entries if e is not None]
    assert ends == [1, 3, 6, 10, 15]
    assert store.read_log(model, 0) == entries
    assert [e.end for e in store.read_log(model, 1)] == [3, 6, 10, 15]  # end == after: out
    assert [e.end for e in store.read_log(model, 2)] == [3, 6, 10, 15]  # inside an entry
    assert [e.end for e in store.read_log(model, 6)] == [10, 15]
    assert store.read_log(model, 15) == []
    assert store.read_log(model, 99) == []
    assert [e.end for e in store.read_log(model, 1, limit=2)] == [3, 6]
    assert [e.end for e in store.read_log(model, 0, limit=1)] == [1]
    assert [e.end for e in store.read_log(model, 0, limit=100)] == ends
    assert store.read_log(model, 0, limit=0) == []
    with pytest.raises(ValueError):
        store.read_log(model, -1)
    with pytest.raises(ValueError):
        store.read_log(model, 0, limit=-1)


def test_log_bounds(store: Store, model: str) -> None:
    assert store.log_bounds(model) == (0, 0, 0)
    store.append(model, b"1", [None] * 4)
    store.append(model, b"2", [None] * 3)
    assert store.log_bounds(model) == (2, 0, 7)


# -- checkpoints -----------------------------------------------------------------------


def test_checkpoints_only_move_forward(store: Store, model: str) -> None:
    assert store.load_checkpoint(model) is None
    store.append(model, b"1", [None] * 10)
    assert store.save_checkpoint(model, 0, b"s0")
    assert store.save_checkpoint(model, 5, b"s5")
    assert not store.save_checkpoint(model, 5, b"again")
    assert not store.save_checkpoint(model, 3, b"older")
    c = store.load_checkpoint(model)
    assert c is not None
    assert (c.version, c.blob) == (5, b"s5")
    assert c.created_at > 1.6e9
    blob = bytes(range(256)) * 1000
    assert store.save_checkpoint(model, 10, blob)
    c = store.load_checkpoint(model)
    assert c is not None
    assert (c.version, c.blob) == (10, blob)


def test_checkpoint_beyond_the_log_end_is_rejected(store: Store, model: str) -> None:
    store.append(model, b"1", [None] * 3)
    with pytest.raises(ValueError):
        store.save_checkpoint(model, 4, b"s")
    with pytest.raises(ValueError):
        store.save_checkpoint(model, -1, b"s")
    assert store.load_checkpoint(model) is None


def test_deltas_follow_the_checkpoint_and_go_with_the_next_one(store: Store,
                                                              model: str) -> None:
    store.append(model, b"1", [None] * 10)
    assert store.publication_version(model) == 0
    assert store.read_deltas(model, 0) == []
    assert store.publish_delta(model, 0, 2, b"d2")
    assert store.publish_delta(model, 2, 4, b"d4")
    assert not store.publish_delta(model, 3, 4, b"again")  # not newer than the last
    assert not store.publish_delta(model, 1, 3, b"older")
    assert store.publication_version(model) == 4
    blob = bytes(range(256)) * 1000
    assert store.publish_delta(model, 4, 7, blob)
    assert [(d.base, d.version, d.blob) for d in store.read_deltas(model, 0)] == [
        (0, 2, b"d2"), (2, 4, b"d4"), (4, 7, blob)]
    assert [d.version for d in store.read_deltas(model, 2)] == [4, 7]
    assert [d.version for d in store.read_deltas(model, 3)] == [4, 7]
    assert store.read_deltas(model, 7) == []
    # a checkpoint drops the deltas up to its version; none at or before it is taken
    assert store.save_checkpoint(model, 4, b"s4")
    assert [d.version for d in store.read_deltas(model, 0)] == [7]
    assert store.publication_version(model) == 7
    assert not store.publish_delta(model, 3, 4, b"d")
    assert store.save_checkpoint(model, 8, b"s8")
    assert store.read_deltas(model, 0) == []
    assert store.publication_version(model) == 8
    assert not store.publish_delta(model, 7, 8, b"d")
    assert store.publish_delta(model, 8, 10, b"d10")
    assert store.publication_version(model) == 10
    assert not store.save_checkpoint(model, 8, b"s8 again")  # not newer: deltas stay
    assert [d.version for d in store.read_deltas(model, 0)] == [10]


def test_bad_deltas_are_rejected(store: Store, model: str) -> None:
    store.append(model, b"1", [None] * 3)
    for base, version in ((0, 4), (2, 2), (3, 1), (-1, 2)):
        with pytest.raises(ValueError):
            store.publish_delta(model, base, version, b"d")
    with pytest.raises(ValueError):
        store.read_deltas(model, -1)
    assert store.read_deltas(model, 0) == [] and store.publication_version(model) == 0


# -- trim ------------------------------------------------------------------------------


def test_trim(store: Store, model: str) -> None:
    for i in range(4):  # entries covering 1..3, 4..6, 7..9, 10..12
        store.append(model, b"%d" % i, ids(f"e{i}-", 3))
    store.save_checkpoint(model, 7, b"s7")  # inside the third entry
    store.trim(model, 7, keep_ids=2)
    assert [(e.start, e.end) for e in store.read_log(model, 0)] == [(6, 9), (9, 12)]
    assert store.log_bounds(model) == (2, 6, 12)
    # ids at positions <= 5 are forgotten, 6 and later remembered
    r = store.append(model, b"x", ["e0-0", "e1-1", "e1-2", "e2-0", "e3-2"])
    assert r.duplicates == (2, 3, 4)
    assert r.entry == LogEntry(12, 14, b"x", (2, 3, 4))


def test_trim_keeps_the_entry_ending_one_past_the_checkpoint(store: Store, model: str) -> None:
    """Boundaries: an entry ending at the checkpoint goes, one ending one event past it
    stays (it holds an event the checkpoint lacks), and exactly the ids at positions
    <= checkpoint - keep_ids are forgotten."""
    for start, n in ((0, 3), (3, 2), (5, 2), (7, 1)):  # entries 0..3, 3..5, 5..7, 7..8
        store.append(model, b"%d" % start, [f"e{k}" for k in range(start, start + n)])
    store.save_checkpoint(model, 6, b"s6")
    store.trim(model, 6, keep_ids=0)
    assert [(e.start, e.end) for e in store.read_log(model, 0)] == [(5, 7), (7, 8)]
    assert store.log_bounds(model) == (2, 5, 8)
    store.save_checkpoint(model, 7, b"s7")
    store.trim(model, 7, keep_ids=1)
    assert [(e.start, e.end) for e in store.read_log(model, 0)] == [(7, 8)]
    assert store.log_bounds(model) == (1, 7, 8)
    assert store.read_log(model, 7) == [LogEntry(7, 8, b"7", ())]
    # events e0..e5 sit at positions 1..6 <= 7 - 1: forgotten; e6 (position 7) and e7 not
    r = store.append(model, b"x", ["e5", "e6", "e7", "e4"])
    assert r.duplicates == (1, 2)
    assert r.entry == LogEntry(8, 10, b"x", (1, 2))


def test_a_model_created_from_a_checkpoint_starts_its_log_there(store: Store) -> None:
    """An imported model: its log begins at the checkpoint's version, as a log trimmed to
    its end does; appends continue from there."""
    store.create_model("imp", {"k": 1}, start=(1234, b"\x00state"))
    assert store.log_bounds("imp") == (0, 1234, 1234)
    cp = store.load_checkpoint("imp")
    assert cp is not None and (cp.version, cp.blob) == (1234, b"\x00state")
    assert store.read_log("imp", 1234) == []
    r = store.append("imp", b"p", ["a", "b"])
    assert r.entry == LogEntry(1234, 1236, b"p", ())
    assert store.log_bounds("imp") == (1, 1234, 1236)
    assert store.save_checkpoint("imp", 1236, b"later")
    assert not store.save_checkpoint("imp", 1234, b"older")
    with pytest.raises(ModelExists):
        store.create_model("imp", {"k": 2}, start=(5, b"x"))
    store.delete_model("imp")
    store.create_model("imp", {"k": 3})  # recreated plainly: from 0, no checkpoint
    assert store.log_bounds("imp") == (0, 0, 0) and store.load_checkpoint("imp") is None


def test_pins_take_effect_at_the_log_end_and_go_with_the_model(store: Store) -> None:
    store.create_model("p", {})
    assert store.read_pins("p") == []
    store.append("p", b"a", [None] * 3)
    assert store.set_pin("p", 2) == 3
    store.append("p", b"b", [None] * 2)
    assert store.set_pin("p", None) == 5
    assert store.set_pin("p", 0) == 5
    assert store.read_pins("p") == [(3, 2), (5, None), (5, 0)]
    with pytest.raises(ModelNotFound):
        store.set_pin("nope", 1)
    with pytest.raises(ModelNotFound):
        store.read_pins("nope")
    store.delete_model("p")
    store.create_model("p", {})
    assert store.read_pins("p") == []  # a new generation starts unpinned


def test_trim_never_passes_the_checkpoint(store: Store, model: str) -> None:
    for i in range(3):
        store.append(model, b"%d" % i, ids(f"e{i}-", 2))
    store.trim(model, 6, keep_ids=0)  # no checkpoint: nothing goes
    assert store.log_bounds(model) == (3, 0, 6)
    assert store.append(model, b"d", ["e0-0"]).entry is None
    store.save_checkpoint(model, 2, b"s")
    store.trim(model, 6, keep_ids=0)  # as if upto=2
    assert store.log_bounds(model) == (2, 2, 6)
    assert store.append(model, b"d", ["e0-0", "e1-0"]).duplicates == (1,)


def test_trim_to_the_end_keeps_the_version(store: Store, model: str) -> None:
    store.append(model, b"1", ids("a", 5))
    store.save_checkpoint(model, 5, b"s")
    store.trim(model, 5, keep_ids=0)
    assert store.log_bounds(model) == (0, 5, 5)
    assert store.read_log(model, 0) == []
    # with keep_ids=0 every id up to the checkpoint is forgotten
    assert store.append(model, b"2", ids("a", 2)).entry == LogEntry(5, 7, b"2", ())
    assert store.read_log(model, 0) == [LogEntry(5, 7, b"2", ())]
    # the trimmed log is still readable from the checkpoint's version
    assert store.read_log(model, 5) == [LogEntry(5, 7, b"2", ())]


def test_trim_large_keep_keeps_all_ids(store: Store, model: str) -> None:
    store.append(model, b"1", ids("a", 5))
    store.save_checkpoint(model, 5, b"s")
    store.trim(model, 5, keep_ids=100)
    assert store.log_bounds(model) == (0, 5, 5)
    assert store.append(model, b"2", ids("a", 5)).entry is None


def test_trim_of_many_ids_forgets_exactly_the_old_ones(store: Store, model: str) -> None:
    """More ids than one trim step takes at a time (the SQLite store drops them in slices)."""
    for b in range(3):
        store.append(model, b"%d" % b, ids(f"b{b}-", 6_000))  # positions 1..18000
    store.save_checkpoint(model, 18_000, b"s")
    store.trim(model, 18_000, keep_ids=1_000)  # ids at positions <= 17000 go
    probe = ["b0-0", "b1-5999", "b2-4999", "b2-5000", "b2-5999"]  # 1, 12000, 17000, 17001, 18000
    assert store.append(model, b"p", probe).duplicates == (3, 4)
    store.trim(model, 18_000, keep_ids=1_000)  # nothing more to drop
    assert store.append(model, b"q", ["b2-5000"]).entry is None


# -- delete ----------------------------------------------------------------------------


def test_delete_removes_everything_and_a_recreated_model_starts_at_zero(
    store: Store, model: str
) -> None:
    store.append(model, b"1", ids("a", 4))
    store.save_checkpoint(model, 2, b"s")
    store.publish_delta(model, 2, 4, b"d")
    store.delete_model(model)
    assert store.list_models() == []
    store.create_model(model, {"new": True})
    assert store.get_config(model) == {"new": True}
    assert store.log_bounds(model) == (0, 0, 0)
    assert store.load_checkpoint(model) is None
    assert store.read_deltas(model, 0) == [] and store.publication_version(model) == 0
    assert store.read_log(model, 0) == []
    r = store.append(model, b"2", ids("a", 2))  # old ids are forgotten too
    assert r.entry == LogEntry(0, 2, b"2", ())


def test_models_are_independent(store: Store) -> None:
    store.create_model("a", CONFIG)
    store.create_model("b", CONFIG)
    store.append("a", b"a1", ["x", "y"])
    assert store.append("b", b"b1", ["x"]).entry == LogEntry(0, 1, b"b1", ())
    store.save_checkpoint("a", 2, b"sa")
    assert store.load_checkpoint("b") is None
    store.delete_model("a")
    assert store.read_log("b", 0) == [LogEntry(0, 1, b"b1", ())]


# -- concurrency and size --------------------------------------------------------------


def test_concurrent_appends_from_eight_threads(store: Store, model: str) -> None:
    n_threads, n_batches = 8, 25
    results: dict[int, list[AppendResult]] = {t: [] for t in range(n_threads)}
    errors: list[BaseException] = []
    start = threading.Barrier(n_threads)

    def work(t: int) -> None:
        try:
            start.wait()
            for b in range(n_batches):
                # 3 fresh ids, one id every thread also sends, one event without id
                batch = [f"t{t}-{b}-{k}" for k in range(3)] + [f"shared-{b}", None]
                results[t].append(store.append(model, f"{t}/{b}".encode(), batch))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors

    log = store.read_log(model, 0)
    assert len(log) == n_threads * n_batches
    assert log[0].start == 0
    for prev, cur in itertools.pairwise(log):
        assert cur.start == prev.end
    total = n_threads * n_batches * 4 + n_batches  # each shared id learned once
    assert log[-1].end == total
    assert store.log_bounds(model) == (len(log), 0, total)
    assert sum(len(e.skip) for e in log) == n_batches * (n_threads - 1)
    by_payload = {e.payload: e for e in log}
    for t, rs in results.items():
        for b, r in enumerate(rs):
            assert r.entry is not None
            assert by_payload[f"{t}/{b}".encode()] == r.entry
            ends = [x.entry.end for x in rs if x.entry is not None]
            assert ends == sorted(ends)  # each thread's appends in its own order


def test_large_batch_with_ids(store: Store, model: str) -> None:
    n = 10_000
    payload = b"x" * 1_000_000
    first = [f"event-{i:06d}" for i in range(n)]
    r = store.append(model, payload, first)
    assert r.entry == LogEntry(0, n, payload, ())
    second: list[str | None] = [f"event-{i:06d}" for i in range(n // 2, n + n // 2)]
    second[-1] = second[0]  # also a repeat within the batch
    r = store.append(model, b"two", second)
    dups = (*range(n // 2), n - 1)
    assert r.duplicates == dups
    assert r.entry == LogEntry(n, n + n // 2 - 1, b"two", dups)
    assert store.read_log(model, n) == [r.entry]
    assert store.read_log(model, 0, limit=1)[0].payload == payload


_id_batches = st.lists(
    st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "c", "", "é", "x\"y", "{z}"])),
             min_size=1, max_size=8),
    min_size=1, max_size=6)
_examples = itertools.count()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_id_batches)
def test_dedup_matches_a_reference(store: Store, batches: list[list[str | None]]) -> None:
    """Positions, skips and versions of any sequence of batches, against a few lines of
    Python: every id is learned once, its first occurrence wins, None never repeats."""
    name = f"ref{next(_examples)}"
    store.create_model(name, CONFIG)
    seen: set[str] = set()
    version = 0
    for k, batch in enumerate(batches):
        skip = []
        start = version
        for i, eid in enumerate(batch):
            if eid is not None and eid in seen:
                skip.append(i)
            else:
                if eid is not None:
                    seen.add(eid)
                version += 1
        payload = str(k).encode()
        entry = LogEntry(start, version, payload, tuple(skip)) if version > start else None
        assert store.append(name, payload, batch) == AppendResult(entry, tuple(skip), version)
    assert store.log_bounds(name)[2] == version


# -- impressions -----------------------------------------------------------------------


def pending(payload: bytes, shown_at: float, expires_at: float,
            status: str = "pending") -> Impression:
    return Impression(payload=payload, shown_at=shown_at, expires_at=expires_at, status=status)


def test_keep_then_get(store: Store, model: str) -> None:
    payload = bytes(range(256)) + b"\x00\r\n"
    assert store.keep_impressions(model, [("a", b"pa"), ("b", payload), ("", b"")],
                                  T0, T0 + 60, 100) == 3
    assert store.get_impressions(model, ["b", "nope", "a", ""], T0 + 1) == {
        "b": pending(payload, T0, T0 + 60),
        "a": pending(b"pa", T0, T0 + 60),
        "": pending(b"", T0, T0 + 60),
    }
    got = store.get_impressions(model, ["a"], T0)
    assert got["a"].shown_at == T0 and got["a"].expires_at == T0 + 60  # exact floats
    assert store.get_impressions(model, [], T0) == {}
    assert store.get_impressions(model, ["a", "a"], T0) == {"a": pending(b"pa", T0, T0 + 60)}
    assert store.keep_impressions(model, [], T0, T0 + 60, 100) == 0
    store.keep_impressions(model, [("c", bytearray(b"ba"))], T0, T0 + 60, 100)  # type: ignore[list-item]
    assert store.get_impressions(model, ["c"], T0)["c"].payload == b"ba"


def test_impression_ids_and_names_are_any_strings(store: Store) -> None:
    odd = ["x}y", "{z}", "a:b", "é ü", "m:{m}:imp", "id with spaces", "\"q\""]
    for n in ("x}y", "{m}"):
        store.create_model(n, CONFIG)
        assert store.keep_impressions(n, [(i, i.encode()) for i in odd], T0, T0 + 9, 100) == 7
        got = store.get_impressions(n, odd, T0)
        assert {i: imp.payload for i, imp in got.items()} == {i: i.encode() for i in odd}
        assert store.claim_impressions(n, odd, ["pending"], "labelled", T0) == odd
        assert store.count_impressions(n, T0) == {**ZERO, "labelled": 7}


def test_first_showing_wins(store: Store, model: str) -> None:
    assert store.keep_impressions(model, [("a", b"first"), ("a", b"again")], T0, T0 + 60, 100) == 1
    assert store.keep_impressions(model, [("a", b"later"), ("b", b"b")], T0 + 5, T0 + 90, 100) == 1
    assert store.get_impressions(model, ["a", "b"], T0 + 6) == {
        "a": pending(b"first", T0, T0 + 60),
        "b": pending(b"b", T0 + 5, T0 + 90),
    }
    # kept again once labelled: still left exactly as it is
    assert store.claim_impressions(model, ["a"], ["pending"], "labelled", T0 + 7) == ["a"]
    assert store.keep_impressions(model, [("a", b"third")], T0 + 8, T0 + 100, 100) == 0
    assert store.get_impressions(model, ["a"], T0 + 8) == {
        "a": pending(b"first", T0, T0 + 60, "labelled")}
    assert store.count_impressions(model, T0 + 8) == {**ZERO, "pending": 1, "labelled": 1}


def test_keep_stops_at_max_pending(store: Store, model: str) -> None:
    items = [(f"i{k}", b"%d" % k) for k in range(5)]
    assert store.keep_impressions(model, items, T0, T0 + 100, 3) == 3  # kept in order
    assert set(store.get_impressions(model, [i for i, _ in items], T0)) == {"i0", "i1", "i2"}
    assert store.keep_impressions(model, [("late", b"x")], T0, T0 + 100, 3) == 0
    # every status counts towards the cap, not only pending
    store.claim_impressions(model, ["i0"], ["pending"], "labelled", T0)
    store.claim_impressions(model, ["i1"], ["pending"], "timing_out", T0)
    assert store.keep_impressions(model, [("late", b"x")], T0, T0 + 100, 3) == 0
    # a kept id does not take a place; the new ones after it do, up to the cap
    assert store.keep_impressions(model, [("i0", b"x"), ("n1", b"1"), ("n2", b"2")],
                                  T0 + 1, T0 + 200, 4) == 1
    assert set(store.get_impressions(model, ["n1", "n2"], T0 + 1)) == {"n1"}
    assert store.keep_impressions(model, [("z", b"z")], T0 + 1, T0 + 200, 0) == 0
    # expired impressions do not count: at T0 + 100 only n1 is left
    assert store.keep_impressions(model, [(f"j{k}", b"") for k in range(5)],
                                  T0 + 100, T0 + 300, 3) == 2
    assert store.count_impressions(model, T0 + 100) == {**ZERO, "pending": 3}
    assert store.get_impressions(model, ["n1", "j0", "j1", "j2"], T0 + 100).keys() == {
        "n1", "j0", "j1"}


def test_keep_groups_equal_keeps_one_after_another(store: Store) -> None:
    """Several requests' keeps in one call (a group commit): each group is kept as its
    own call would be after the ones before it — repeats, the cap, expiry and all."""
    groups = [
        ([("a", b"1"), ("b", b"2"), ("a", b"again")], T0, T0 + 10),
        ([("b", b"later"), ("c", b"3"), ("d", b"4")], T0 + 1, T0 + 60),
        ([], T0 + 2, T0 + 60),
        ([("e", b"5"), ("f", b"6"), ("g", b"7")], T0 + 2, T0 + 60),  # the cap (5) bites
        ([("a", b"new"), ("h", b"8")], T0 + 10, T0 + 90),  # a, b expired: room again
    ]
    ids = ["a", "b", "c", "d", "e", "f", "g", "h"]
    # and packed, as the service hands them over (the first payload of each id)
    packed = [(PackedItems.of(items), shown, expires) for items, shown, expires in groups]
    for name in ("one-by-one", "grouped", "packed"):
        store.create_model(name, CONFIG)
    singles = [store.keep_impressions("one-by-one", items, shown, expires, 5)
               for items, shown, expires in groups]
    assert singles == [2, 2, 0, 1, 2]
    assert store.keep_impression_groups("grouped", groups, 5) == singles
    assert store.keep_impression_groups("packed", packed, 5) == singles
    for t in (T0 + 2, T0 + 10):
        for name in ("grouped", "packed"):
            assert (store.get_impressions(name, ids, t)
                    == store.get_impressions("one-by-one", ids, t))
            assert store.count_impressions(name, t) == store.count_impressions("one-by-one", t)
    assert store.keep_impression_groups("grouped", [], 5) == []


def test_packed_items_are_checked() -> None:
    items = PackedItems.of([("a", b"12"), ("b", bytearray(b"")), ("a", b"x"), ("c", b"3")])
    assert items.ids == ["a", "b", "c"] and items.blob == b"123"
    assert items.ends.tolist() == [2, 2, 3] and len(items) == 3
    assert items.pairs() == [("a", b"12"), ("b", b""), ("c", b"3")]
    assert [items.payload(k) for k in range(3)] == [b"12", b"", b"3"]
    ends = np.array([2, 3], np.int64)
    for bad in ([["a", "a"], b"123", ends], [["a", "b"], b"1234", ends],
                [["a", "b"], b"123", np.array([3, 2], np.int64)],
                [["a", "b"], b"123", np.array([2, 3], np.int32)],
                [["a"], b"123", ends]):
        with pytest.raises(ValueError):
            PackedItems(*bad)
    for bad in ([["a", 1], b"123", ends], [["a", "b"], "123", ends]):
        with pytest.raises(TypeError):
            PackedItems(*bad)
    with pytest.raises(TypeError):
        PackedItems.of([("a", "text")])  # type: ignore[list-item]


def test_a_bad_keep_group_writes_nothing(store: Store, model: str) -> None:
    good = ([("a", b"1")], T0, T0 + 10)
    for bad, exc in [(([("b", b"2")], T0, T0), ValueError),
                     (([("b", "text")], T0, T0 + 10), TypeError),
                     (([("b", b"2")], float("nan"), T0 + 10), ValueError)]:
        with pytest.raises(exc):
            store.keep_impression_groups(model, [good, bad], 9)  # type: ignore[list-item]
    with pytest.raises(ValueError):
        store.keep_impression_groups(model, [good], -1)
    with pytest.raises(ModelNotFound):
        store.keep_impression_groups("missing", [good], 9)
    assert store.count_impressions(model, T0) == ZERO


def test_max_pending_counts_unexpired_impressions_only_however_many_expired(
    store: Store, model: str
) -> None:
    """More expired impressions than one write drops at a time: the rest still do not
    count, and are not seen."""
    n = 2_500
    assert store.keep_impressions(model, [(f"o{k}", b"o") for k in range(n)],
                                  T0, T0 + 10, n) == n
    assert store.keep_impressions(model, [("p", b"1"), ("q", b"2"), ("r", b"3")],
                                  T0 + 20, T0 + 30, 2) == 2
    assert store.count_impressions(model, T0 + 20) == {**ZERO, "pending": 2}
    assert [i for i, _ in store.due_impressions(model, ["pending"], T0 + 20, T0 + 20, 10)] == [
        "p", "q"]
    assert store.get_impressions(model, ["o0", f"o{n - 1}", "p"], T0 + 20).keys() == {"p"}
    assert store.claim_impressions(model, ["o0", f"o{n - 1}", "q"], ["pending"], "labelled",
                                   T0 + 20) == ["q"]
    assert store.count_impressions(model, T0 + 20) == {**ZERO, "pending": 1, "labelled": 1}


def test_expired_impressions_are_not_seen_and_are_replaced(store: Store, model: str) -> None:
    store.keep_impressions(model, [("a", b"a"), ("b", b"b")], T0, T0 + 10, 100)
    store.keep_impressions(model, [("c", b"c")], T0 + 5, T0 + 100, 100)
    store.claim_impressions(model, ["b"], ["pending"], "labelled", T0 + 1)
    assert store.get_impressions(model, ["a", "b", "c"], T0 + 9.5).keys() == {"a", "b", "c"}
    # expired at expires_at: get, due, count and claim ignore it
    assert store.get_impressions(model, ["a", "b", "c"], T0 + 10).keys() == {"c"}
    assert store.due_impressions(model, IMPRESSION_STATUSES, T0 + 10, T0 + 10, 10) == [
        ("c", pending(b"c", T0 + 5, T0 + 100))]
    assert store.count_impressions(model, T0 + 10) == {**ZERO, "pending": 1}
    assert store.count_impressions(model, T0 + 9) == {**ZERO, "pending": 2, "labelled": 1}
    assert store.claim_impressions(model, ["a", "b", "c"], ["pending", "labelled"],
                                   "timing_out", T0 + 10) == ["c"]
    # an expired id is kept anew: as a new showing
    assert store.keep_impressions(model, [("a", b"a2"), ("b", b"b2"), ("c", b"c2")],
                                  T0 + 20, T0 + 40, 100) == 2
    assert store.get_impressions(model, ["a", "b", "c"], T0 + 20) == {
        "a": pending(b"a2", T0 + 20, T0 + 40),
        "b": pending(b"b2", T0 + 20, T0 + 40),
        "c": pending(b"c", T0 + 5, T0 + 100, "timing_out"),
    }
    assert store.count_impressions(model, T0 + 20) == {**ZERO, "pending": 2, "timing_out": 1}
    # reads at an earlier time do not bring back what a write dropped
    assert store.get_impressions(model, ["a"], T0 + 1) == {"a": pending(b"a2", T0 + 20, T0 + 40)}


def test_claim_moves_only_from_the_given_statuses(store: Store, model: str) -> None:
    store.keep_impressions(model, [(i, i.encode()) for i in "abcde"], T0, T0 + 60, 100)
    assert store.claim_impressions(model, ["d", "nope", "b", "d", "a"], ["pending"], "labelled",
                                   T0) == ["d", "b", "a"]  # in the order given, each once
    assert store.claim_impressions(model, ["a", "b", "c"], ["pending"], "labelled", T0) == ["c"]
    assert store.claim_impressions(model, ["a", "e"], ["pending"], "timing_out", T0) == ["e"]
    assert store.claim_impressions(model, ["e", "a"], ["timing_out", "labelled"], "timed_out",
                                   T0) == ["e", "a"]
    assert store.claim_impressions(model, ["a", "b"], [], "pending", T0) == []
    assert store.claim_impressions(model, [], ["pending"], "labelled", T0) == []
    # to the status it has: it matches, and stays
    assert store.claim_impressions(model, ["b"], ["labelled"], "labelled", T0) == ["b"]
    got = store.get_impressions(model, list("abcde"), T0)
    assert {i: imp.status for i, imp in got.items()} == {
        "a": "timed_out", "b": "labelled", "c": "labelled", "d": "labelled", "e": "timed_out"}
    assert got["a"] == pending(b"a", T0, T0 + 60, "timed_out")  # the rest unchanged
    assert store.count_impressions(model, T0) == {**ZERO, "labelled": 3, "timed_out": 2}
    # and back: nothing but a claim moves it
    assert store.claim_impressions(model, ["a"], ["timed_out"], "pending", T0) == ["a"]
    assert store.due_impressions(model, ["pending"], T0, T0, 10) == [
        ("a", pending(b"a", T0, T0 + 60))]


def test_take_reads_the_impressions_as_they_were_and_claims_at_once(store: Store,
                                                                    model: str) -> None:
    store.keep_impressions(model, [(i, i.encode()) for i in "abcd"], T0, T0 + 60, 100)
    store.keep_impressions(model, [("old", b"o")], T0 - 100, T0 - 1, 100)  # expired
    assert store.claim_impressions(model, ["b"], ["pending"], "timed_out", T0) == ["b"]
    found, moved = store.take_impressions(model, ["d", "nope", "b", "old", "a"], ["pending"],
                                          "labelled", T0)
    assert moved == ["d", "a"]  # in the order given
    assert list(found) == ["d", "b", "a"]  # unexpired, in the order given
    assert found["b"] == pending(b"b", T0, T0 + 60, "timed_out")
    assert found["d"] == pending(b"d", T0, T0 + 60) and found["a"] == pending(b"a", T0, T0 + 60)
    got = store.get_impressions(model, list("abcd"), T0)
    assert {i: imp.status for i, imp in got.items()} == {
        "a": "labelled", "b": "timed_out", "c": "pending", "d": "labelled"}
    assert store.count_impressions(model, T0) == {**ZERO, "pending": 1, "labelled": 2,
                                                  "timed_out": 1}
    # a second take finds them labelled and moves nothing; with no source, nothing moves
    found, moved = store.take_impressions(model, ["a", "c"], ["pending"], "labelled", T0)
    assert moved == ["c"] and found["a"].status == "labelled" and found["c"].status == "pending"
    assert store.take_impressions(model, ["a"], [], "labelled", T0) == (
        {"a": pending(b"a", T0, T0 + 60, "labelled")}, [])
    assert store.take_impressions(model, [], ["pending"], "labelled", T0) == ({}, [])
    ids_ = [f"t{k}" for k in range(2_500)]  # more than one slice of the Redis script
    store.keep_impressions(model, [(i, i.encode()) for i in ids_], T0, T0 + 60, 10_000)
    found, moved = store.take_impressions(model, ids_, ["pending"], "labelled", T0)
    assert moved == ids_ and [f.payload for f in found.values()] == [i.encode() for i in ids_]


def test_a_claim_of_thousands_moves_each_from_its_own_status(store: Store, model: str) -> None:
    """More ids than one slice of the Redis script (1,000), from two statuses, some
    unknown, some already where they go: each moves once, in the order given."""
    ids = [f"i{k:04d}" for k in range(2500)]
    assert store.keep_impressions(model, [(i, i.encode()) for i in ids], T0, T0 + 60,
                                  10_000) == 2500
    odd = ids[1::2]
    assert store.claim_impressions(model, odd, ["pending"], "timing_out", T0) == odd
    every_third = ids[::3]
    assert store.claim_impressions(model, every_third, ["pending"], "labelled",
                                   T0) == [i for i in every_third if i not in set(odd)]
    asked = ["nope", *reversed(ids)]
    moved = store.claim_impressions(model, asked, ["timing_out", "labelled", "pending"],
                                    "labelled", T0)
    assert moved == list(reversed(ids))
    assert store.count_impressions(model, T0) == {**ZERO, "labelled": 2500}
    assert store.due_impressions(model, ["labelled"], T0, T0, 3) == [
        (i, pending(i.encode(), T0, T0 + 60, "labelled")) for i in ids[:3]]


def test_concurrent_claims_move_each_impression_once(make_store: Callable[[], Store]) -> None:
    """Claims from two store objects on one backend (as two replicas), from threads, of
    the same ids: each impression is moved by exactly one of them."""
    one, two = make_store(), make_store()
    one.create_model("m", CONFIG)
    n = 300
    all_ids = [f"i{k}" for k in range(n)]
    assert one.keep_impressions("m", [(i, b"p") for i in all_ids], T0, T0 + 60, n) == n
    n_threads = 8
    start = threading.Barrier(n_threads)
    results: dict[int, list[list[str]]] = {t: [] for t in range(n_threads)}
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            s = (one, two)[t % 2]
            order = all_ids[:]
            random.Random(t).shuffle(order)
            start.wait()
            for k in range(0, n, 25):
                # half the threads label, half time out: a race between the two
                to = "labelled" if t < n_threads // 2 else "timing_out"
                if t % 4 == 0:  # read and claim in one step, as labels by id do
                    got, moved = s.take_impressions("m", order[k : k + 25], ["pending"], to,
                                                    T0 + 1)
                    assert set(moved) <= set(got)
                    assert all(got[i].status == "pending" for i in moved)
                    results[t].append(moved)
                else:
                    results[t].append(s.claim_impressions("m", order[k : k + 25], ["pending"],
                                                          to, T0 + 1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    moved = [i for rs in results.values() for r in rs for i in r]
    assert sorted(moved) == sorted(all_ids)  # every one moved, none twice
    by_labellers = {i for t in range(n_threads // 2) for r in results[t] for i in r}
    final = two.get_impressions("m", all_ids, T0 + 1)
    assert {i for i, imp in final.items() if imp.status == "labelled"} == by_labellers
    assert {i for i, imp in final.items() if imp.status == "timing_out"} == (
        set(all_ids) - by_labellers)
    assert one.count_impressions("m", T0 + 1) == {
        **ZERO, "labelled": len(by_labellers), "timing_out": n - len(by_labellers)}


def test_due_impressions_oldest_first(store: Store, model: str) -> None:
    for item_id, shown in (("c", 3.0), ("b", 1.0), ("a", 1.0), ("d", 5.0), ("e", 2.5)):
        store.keep_impressions(model, [(item_id, item_id.encode())], T0 + shown, T0 + 60, 100)
    due = store.due_impressions(model, ["pending"], T0 + 3, T0 + 10, 10)
    assert due == [("a", pending(b"a", T0 + 1, T0 + 60)), ("b", pending(b"b", T0 + 1, T0 + 60)),
                   ("e", pending(b"e", T0 + 2.5, T0 + 60)), ("c", pending(b"c", T0 + 3, T0 + 60))]
    # shown_before is inclusive; ties by id; at most limit
    assert [i for i, _ in store.due_impressions(model, ["pending"], T0 + 2.9, T0, 10)] == [
        "a", "b", "e"]
    assert [i for i, _ in store.due_impressions(model, ["pending"], T0 + 9, T0, 2)] == ["a", "b"]
    assert store.due_impressions(model, ["pending"], T0 + 9, T0, 0) == []
    assert store.due_impressions(model, ["pending"], T0, T0, 10) == []
    # filtered by status; several statuses merged in one order
    store.claim_impressions(model, ["b", "c"], ["pending"], "timing_out", T0 + 10)
    store.claim_impressions(model, ["e"], ["pending"], "labelled", T0 + 10)
    assert [i for i, _ in store.due_impressions(model, ["pending"], T0 + 9, T0, 10)] == ["a", "d"]
    assert store.due_impressions(model, ["timing_out"], T0 + 9, T0, 10) == [
        ("b", pending(b"b", T0 + 1, T0 + 60, "timing_out")),
        ("c", pending(b"c", T0 + 3, T0 + 60, "timing_out"))]
    assert [i for i, _ in store.due_impressions(model, ["timing_out", "pending"], T0 + 9, T0,
                                                10)] == ["a", "b", "c", "d"]
    assert [i for i, _ in store.due_impressions(model, ["timing_out", "pending"], T0 + 9, T0,
                                                3)] == ["a", "b", "c"]
    assert [i for i, _ in store.due_impressions(model, IMPRESSION_STATUSES, T0 + 9, T0,
                                                10)] == ["a", "b", "e", "c", "d"]
    assert store.due_impressions(model, ["timed_out"], T0 + 9, T0, 10) == []
    assert store.due_impressions(model, [], T0 + 9, T0, 10) == []


def test_due_impressions_skip_expired_and_page_through_many(store: Store, model: str) -> None:
    # oldest showings expire first; a few shown later expire early
    store.keep_impressions(model, [(f"old{k:04d}", b"") for k in range(1_500)], T0, T0 + 10, 10**6)
    store.keep_impressions(model, [(f"new{k:04d}", b"") for k in range(1_500)],
                           T0 + 1, T0 + 100, 10**6)
    store.keep_impressions(model, [("early", b"")], T0 + 2, T0 + 5, 10**6)
    store.keep_impressions(model, [("late", b"")], T0 + 3, T0 + 100, 10**6)
    due = store.due_impressions(model, ["pending"], T0 + 50, T0 + 20, 1_400)
    assert [i for i, _ in due] == [f"new{k:04d}" for k in range(1_400)]
    due = store.due_impressions(model, ["pending"], T0 + 50, T0 + 20, 5_000)
    assert [i for i, _ in due] == [*(f"new{k:04d}" for k in range(1_500)), "late"]
    due = store.due_impressions(model, ["pending"], T0 + 50, T0 + 3, 5_000)
    assert len(due) == 3_002 and due[1_500][0] == "new0000" and due[-2][0] == "early"
    assert store.count_impressions(model, T0 + 20) == {**ZERO, "pending": 1_501}


def test_count_impressions(store: Store, model: str) -> None:
    assert store.count_impressions(model, T0) == ZERO
    store.keep_impressions(model, [(f"i{k}", b"") for k in range(6)], T0, T0 + 10, 100)
    store.keep_impressions(model, [("j", b"")], T0, T0 + 20, 100)
    store.claim_impressions(model, ["i0", "i1"], ["pending"], "labelled", T0)
    store.claim_impressions(model, ["i2", "i3", "i4"], ["pending"], "timing_out", T0)
    store.claim_impressions(model, ["i4"], ["timing_out"], "timed_out", T0)
    assert store.count_impressions(model, T0 + 1) == {
        "pending": 2, "labelled": 2, "timing_out": 2, "timed_out": 1}
    assert store.count_impressions(model, T0 + 10) == {**ZERO, "pending": 1}
    assert store.count_impressions(model, T0 + 20) == ZERO


def test_impressions_go_with_the_model(store: Store) -> None:
    store.create_model("a", CONFIG)
    store.create_model("b", CONFIG)
    store.keep_impressions("a", [("x", b"ax"), ("y", b"ay")], T0, T0 + 60, 100)
    store.claim_impressions("a", ["y"], ["pending"], "timing_out", T0)
    assert store.keep_impressions("b", [("x", b"bx")], T0, T0 + 60, 1) == 1  # its own cap
    assert store.get_impressions("b", ["x", "y"], T0) == {"x": pending(b"bx", T0, T0 + 60)}
    store.delete_model("a")
    with pytest.raises(ModelNotFound):
        store.get_impressions("a", ["x"], T0)
    store.create_model("a", CONFIG)  # a new model: no impressions
    assert store.get_impressions("a", ["x", "y"], T0) == {}
    assert store.count_impressions("a", T0) == ZERO
    assert store.due_impressions("a", IMPRESSION_STATUSES, T0 + 60, T0, 10) == []
    assert store.claim_impressions("a", ["x", "y"], IMPRESSION_STATUSES, "timed_out", T0) == []
    assert store.keep_impressions("a", [("x", b"new"), ("y", b"new")], T0 + 1, T0 + 60, 2) == 2
    assert store.count_impressions("a", T0 + 1) == {**ZERO, "pending": 2}
    assert store.get_impressions("b", ["x"], T0) == {"x": pending(b"bx", T0, T0 + 60)}


def test_bad_impression_arguments_are_rejected(store: Store, model: str) -> None:
    bad: list[tuple[type[Exception], Callable[[], object]]] = [
        (TypeError, lambda: store.keep_impressions(model, [(3, b"p")], T0, T0 + 1, 9)),  # type: ignore[list-item]
        (TypeError, lambda: store.keep_impressions(model, [("a", "text")], T0, T0 + 1, 9)),  # type: ignore[list-item]
        (ValueError, lambda: store.keep_impressions(model, [("a", b"p")], T0, T0 + 1, -1)),
        (ValueError, lambda: store.keep_impressions(model, [("a", b"p")], T0, T0 + 1, True)),
        (ValueError, lambda: store.keep_impressions(model, [("a", b"p")], T0, T0, 9)),
        (ValueError, lambda: store.keep_impressions(model, [("a", b"p")], float("nan"), T0, 9)),
        (TypeError, lambda: store.keep_impressions(model, [("a", b"p")], "now", T0, 9)),  # type: ignore[arg-type]
        (ValueError, lambda: store.keep_impressions("", [("a", b"p")], T0, T0 + 1, 9)),
        (TypeError, lambda: store.get_impressions(model, ["a", None], T0)),  # type: ignore[list-item]
        (TypeError, lambda: store.get_impressions(model, "abc", T0)),
        (ValueError, lambda: store.get_impressions(model, ["a"], float("inf"))),
        (TypeError, lambda: store.claim_impressions(model, [b"a"], ["pending"], "labelled", T0)),  # type: ignore[list-item]
        (ValueError, lambda: store.claim_impressions(model, ["a"], ["pending"], "done", T0)),
        (ValueError, lambda: store.claim_impressions(model, ["a"], ["shown"], "labelled", T0)),
        (TypeError, lambda: store.claim_impressions(model, ["a"], "pending", "labelled", T0)),
        (ValueError, lambda: store.due_impressions(model, ["late"], T0, T0, 10)),
        (ValueError, lambda: store.due_impressions(model, ["pending"], T0, T0, -1)),
        (ValueError, lambda: store.due_impressions(model, ["pending"], T0, T0, 1.5)),  # type: ignore[arg-type]
        (TypeError, lambda: store.count_impressions(model, None)),  # type: ignore[arg-type]
    ]
    for exc, call in bad:
        with pytest.raises(exc):
            call()
    assert store.count_impressions(model, T0) == ZERO  # nothing was written
