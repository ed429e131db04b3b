"""Group writes: concurrent callers' writes made as one, by whichever caller is first.

Sixteen clients scoring a model with feedback each keep their request's impressions; on
the embedded store each keep was a transaction of its own, with its own fsync, and the
requests queued behind one another's commits. A :class:`GroupWriter` lets the caller
that finds the writer free write every request queued meanwhile in one store call (a
group commit, as databases do for their logs); the others wait for it and get their own
results. No thread of its own and no delay: a lone caller writes at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["GroupWriter"]

T = TypeVar("T")
R = TypeVar("R")


class _Job(Generic[T, R]):
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None


class GroupWriter(Generic[T, R]):
    """Submit items to ``write`` (which takes a list of items and returns one result
    per item, in order); concurrent submissions are written together.

    If ``write`` raises, every submission of that group raises the same error.

    >>> calls = []
    >>> w = GroupWriter(lambda items: calls.append(list(items)) or [len(i) for i in items])
    >>> w.submit("abc")
    3
    >>> calls
    [['abc']]
    """

    def __init__(self, write: Callable[[list[T]], Sequence[R]]) -> None:
        self._write = write
        self._queue: list[_Job[T, R]] = []
        self._queue_lock = threading.Lock()
        self._writer = threading.Lock()

    def submit(self, item: T) -> R:
        job: _Job[T, R] = _Job(item)
        with self._queue_lock:
            self._queue.append(job)
        with self._writer:
            # a writer before us may have taken our job with its group
            if not job.done:
                with self._queue_lock:
                    jobs, self._queue = self._queue, []
                self._run(jobs)
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    def _run(self, jobs: list[_Job[T, R]]) -> None:
        try:
            results = list(self._write([j.item for j in jobs]))
            if len(results) != len(jobs):
                raise RuntimeError(f"a group write of {len(jobs)} gave {len(results)} results")
        except BaseException as exc:
            for j in jobs:
                j.error, j.done = exc, True
            return
        for j, r in zip(jobs, results, strict=True):
            j.result, j.done = r, True
