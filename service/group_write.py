"""Group writes: requests that arrive while one write is under way are written together next.

Sixteen clients scoring a model with feedback each keep their request's impressions; on
the embedded store each keep was a transaction of its own, with its own fsync, and the
requests queued behind one another's commits. A :class:`GroupWriter` writes every
request queued meanwhile in one call (a group commit, as databases do for their logs),
and each request gets its own result.

It lives on the event loop: a submission is a future, and a group costs one hop to a
worker thread, where the write runs. (It used to be a lock that each request's worker
thread took in turn: one thread hop per request, and every waiting thread woke to pass
the lock on, each taking the GIL back from the busy loop.) No thread of its own and no
delay: a lone request is written at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from fastapi.concurrency import run_in_threadpool

__all__ = ["GroupWriter"]

T = TypeVar("T")
R = TypeVar("R")


class GroupWriter(Generic[T, R]):
    """``await submit(item)``: ``write`` (a blocking function of a list of items that
    returns one result per item, in order) runs in a worker thread on the items
    submitted while the previous write ran, together.

    If ``write`` raises, every submission of that group raises the same error; the next
    group is written all the same. Groups form on the event loop of the first
    submission; one from another loop is written alone.

    >>> import asyncio
    >>> calls = []
    >>> w = GroupWriter(lambda items: calls.append(list(items)) or [len(i) for i in items])
    >>> asyncio.run(w.submit("abc"))
    3
    >>> calls
    [['abc']]
    """

    def __init__(self, write: Callable[[list[T]], Sequence[R]]) -> None:
        self._write = write
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._writing: asyncio.Task[None] | None = None  # (a reference keeps it alive)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:  # futures belong to one loop
            return (await run_in_threadpool(self._write, [item]))[0]
        done: asyncio.Future[R] = loop.create_future()
        self._queue.append((item, done))
        if self._writing is None:
            self._writing = asyncio.create_task(self._drain())
        return await done

    async def _drain(self) -> None:
        try:
            while self._queue:
                jobs, self._queue = self._queue, []
                try:
                    results = list(await run_in_threadpool(self._write,
                                                            [item for item, _ in jobs]))
                    if len(results) != len(jobs):
                        raise RuntimeError(f"a group write of {len(jobs)} gave "
                                           f"{len(results)} results")
                except asyncio.CancelledError:  # the loop is closing: no one gets an answer
                    for _, done in jobs + self._queue:
                        done.cancel()
                    raise
                except Exception as exc:
                    for _, done in jobs:
                        if not done.done():  # (a request cancelled meanwhile: no one waits)
                            done.set_exception(exc)
                    continue
                for (_, done), result in zip(jobs, results, strict=True):
                    if not done.done():
                        done.set_result(result)
        finally:
            self._writing = None
