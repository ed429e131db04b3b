"""The store contract (service/store/base.py), one suite run against both stores."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aucstream.service.store import (
    AppendResult,
    LogEntry,
    ModelExists,
    ModelNotFound,
    Store,
)

CONFIG = {"learner": "cbr_fifo", "params": {"C": 0.5, "buffer": 100}, "dim": 8}


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
        lambda: store.trim("nope", 0, 0),
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
    store.save_checkpoint(model, 4, b"s")
    store.delete_model(model)
    assert store.list_models() == []
    store.create_model(model, {"new": True})
    assert store.get_config(model) == {"new": True}
    assert store.log_bounds(model) == (0, 0, 0)
    assert store.load_checkpoint(model) is None
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
