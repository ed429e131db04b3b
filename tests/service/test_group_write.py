"""GroupWriter: submissions made while a write runs are written together next, each
submitter given its own result."""

from __future__ import annotations

import asyncio
import threading

import pytest

from aucstream.service.group_write import GroupWriter


def _blocking_first(gate: threading.Event, started: threading.Event, groups: list[list[int]]):
    """A write whose first call waits for ``gate`` (so that others queue up behind it)."""

    def write(items: list[int]) -> list[int]:
        groups.append(list(items))
        if len(groups) == 1:
            started.set()
            assert gate.wait(5)
        return [10 * i for i in items]

    return write


async def _until(flag: threading.Event) -> None:
    while not flag.is_set():
        await asyncio.sleep(0.005)


def test_submissions_during_a_write_are_grouped_and_each_gets_its_result() -> None:
    gate, started, groups = threading.Event(), threading.Event(), []
    w: GroupWriter[int, int] = GroupWriter(_blocking_first(gate, started, groups))

    async def main() -> list[int]:
        first = asyncio.create_task(w.submit(0))
        await _until(started)
        rest = [asyncio.create_task(w.submit(i)) for i in range(1, 9)]
        await asyncio.sleep(0.05)  # all queued behind the first write
        gate.set()
        return await asyncio.gather(first, *rest)

    assert asyncio.run(main()) == [10 * i for i in range(9)]
    assert groups == [[0], list(range(1, 9))]  # the eight waiting: one group, in order


def test_a_failed_write_fails_its_whole_group_and_not_the_next() -> None:
    calls = []
    gate, started = threading.Event(), threading.Event()

    def write(items: list[str]) -> list[str]:
        calls.append(list(items))
        if len(calls) == 1:
            started.set()
            assert gate.wait(5)
            return list(items)
        if len(calls) == 2:
            raise OSError(f"store down for {sorted(items)}")
        return [s.upper() for s in items]

    w: GroupWriter[str, str] = GroupWriter(write)

    async def main() -> list[object]:
        first = asyncio.create_task(w.submit("first"))
        await _until(started)
        rest = [asyncio.create_task(w.submit(s)) for s in ("a", "b")]
        await asyncio.sleep(0.05)
        gate.set()
        got = await asyncio.gather(first, *rest, return_exceptions=True)
        return [*got, await w.submit("c")]

    first, a, b, c = asyncio.run(main())
    assert first == "first" and c == "C"
    assert isinstance(a, OSError) and a is b and "['a', 'b']" in str(a)


def test_a_cancelled_submitter_leaves_the_others_their_results() -> None:
    gate, started, groups = threading.Event(), threading.Event(), []
    w: GroupWriter[int, int] = GroupWriter(_blocking_first(gate, started, groups))

    async def main() -> tuple[int, int]:
        first = asyncio.create_task(w.submit(1))
        await _until(started)
        gone = asyncio.create_task(w.submit(2))  # a client that went away
        stays = asyncio.create_task(w.submit(3))
        await asyncio.sleep(0.02)
        gone.cancel()
        gate.set()
        return await first, await stays

    assert asyncio.run(main()) == (10, 30)
    assert groups == [[1], [2, 3]]  # written all the same: the store decides what it keeps


def test_a_write_must_give_one_result_per_item() -> None:
    w: GroupWriter[int, int] = GroupWriter(lambda items: [])
    with pytest.raises(RuntimeError, match="gave 0 results"):
        asyncio.run(w.submit(1))


def test_a_submission_from_another_event_loop_is_written_alone() -> None:
    groups: list[list[int]] = []
    w: GroupWriter[int, int] = GroupWriter(lambda items: groups.append(list(items)) or items)
    assert asyncio.run(w.submit(1)) == 1
    assert asyncio.run(w.submit(2)) == 2  # a second loop: its futures are not the first's
    assert groups == [[1], [2]]
