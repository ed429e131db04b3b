"""GroupWriter: concurrent submissions written together, each caller given its own result."""

from __future__ import annotations

import threading
import time

import pytest

from aucstream.service.group_write import GroupWriter


def test_concurrent_submissions_are_grouped_and_each_gets_its_result() -> None:
    groups: list[list[int]] = []
    first = threading.Event()

    def write(items: list[int]) -> list[int]:
        groups.append(list(items))
        if len(groups) == 1:
            first.set()
            time.sleep(0.2)  # the others arrive while the first group is written
        return [10 * i for i in items]

    w: GroupWriter[int, int] = GroupWriter(write)
    results: dict[int, int] = {}

    def submit(i: int) -> None:
        results[i] = w.submit(i)

    threads = [threading.Thread(target=submit, args=(0,))]
    threads[0].start()
    assert first.wait(5)
    threads += [threading.Thread(target=submit, args=(i,)) for i in range(1, 9)]
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: 10 * i for i in range(9)}
    assert groups[0] == [0]
    assert sorted(i for g in groups[1:] for i in g) == list(range(1, 9))
    assert len(groups) == 2  # the eight waiting were written as one group


def test_a_failed_write_fails_its_whole_group_and_not_the_next() -> None:
    calls = 0
    gate = threading.Event()

    def write(items: list[str]) -> list[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            gate.wait(5)
            return list(items)
        if calls == 2:
            raise OSError(f"store down for {sorted(items)}")
        return [s.upper() for s in items]

    w: GroupWriter[str, str] = GroupWriter(write)
    errors: dict[str, BaseException] = {}

    def submit(s: str) -> None:
        try:
            w.submit(s)
        except OSError as exc:
            errors[s] = exc

    t0 = threading.Thread(target=submit, args=("first",))
    t0.start()
    while calls == 0:
        time.sleep(0.01)
    rest = [threading.Thread(target=submit, args=(s,)) for s in ("a", "b")]
    for t in rest:
        t.start()
    time.sleep(0.2)  # both queued behind the first write
    gate.set()
    for t in (t0, *rest):
        t.join()
    assert set(errors) == {"a", "b"} and "['a', 'b']" in str(errors["a"])
    assert w.submit("c") == "C"


def test_a_write_must_give_one_result_per_item() -> None:
    w: GroupWriter[int, int] = GroupWriter(lambda items: [])
    with pytest.raises(RuntimeError, match="gave 0 results"):
        w.submit(1)
