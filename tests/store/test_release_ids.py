"""``release_ids``: the ids of a refused entry are forgotten, and only those."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aucstream.service.store import ModelNotFound, Store


def test_release_ids_forgets_exactly_the_entrys_positions(make_store: Callable[[], Store]):
    store = make_store()
    store.create_model("m", {})
    store.append("m", b"one", ["a", "b"])  # positions 1, 2
    refused = store.append("m", b"two", ["c", "a", None, "d"])  # "a" a duplicate; 3, 4, 5
    assert refused.entry is not None and refused.entry.skip == (1,)
    store.append("m", b"three", ["e"])  # position 6
    store.release_ids("m", refused.entry.start, refused.entry.end)
    # "c" and "d" are free again; "a" (position 1, before the entry) and "e" (after) are not
    again = store.append("m", b"four", ["a", "c", "d", "e"])
    assert again.duplicates == (0, 3)
    assert again.entry is not None and (again.entry.start, again.entry.end) == (6, 8)
    # the log itself is untouched: the refused entry stays (the applier skips it)
    assert [e.end for e in store.read_log("m", 0)] == [2, 5, 6, 8]


def test_release_ids_of_a_missing_model(make_store: Callable[[], Store]):
    store = make_store()
    with pytest.raises(ModelNotFound):
        store.release_ids("nope", 0, 1)
    store.create_model("m", {})
    with pytest.raises(ValueError):
        store.release_ids("m", -1, 1)
