"""An appender's copy of a model's dedup window, for the Redis store's ``log`` layout.

In that layout Redis keeps the window as a stream of the ids' digests (one entry per
append) and a version, ``dver``, that every change of the window moves: an append that
records ids, a release, a trim that raises the floor. Each appender keeps the window here,
decides the duplicates itself, and sends the version its decision was made on; the append
script writes only if the version is still current, so a decision is never made on a
stale window (a stale appender reads what it missed and decides again). Redis then does
no per-event work for deduplication, which was ~2/3 of the append script's time.

The rule is the store's (:meth:`Store.append`): an event whose id has a live record
(position above the floor, not in a released range) or repeats an id earlier in its batch
is a duplicate. A digest's latest record decides: a record, once forgotten, never comes
back, and a digest is recorded again only when its earlier records are forgotten.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["IdWindow"]

_EMPTY = -1


@njit(cache=True, nogil=True, inline="always")
def _slot(keys, pos, d):
    """The slot of digest ``d`` in the open-addressing table, or the free slot where it
    would go (digests are uniform already: their low bits index the table)."""
    mask = keys.shape[0] - 1
    s = np.int64(d & np.uint64(mask))
    while pos[s] != _EMPTY and keys[s] != d:
        s = (s + 1) & mask
    return s


@njit(cache=True, nogil=True, inline="always")
def _live(p, floor, rel):
    if p <= floor:
        return False
    for t in range(rel.shape[0]):  # noqa: SIM110 (numba compiles no generators)
        if rel[t, 0] < p <= rel[t, 1]:
            return False
    return True


@njit(cache=True, nogil=True)
def _decide(keys, pos, floor, rel, digs):
    """Which of the batch's digests are new: no live record, no earlier one in the batch."""
    n = digs.shape[0]
    keep = np.empty(n, np.bool_)
    size = 16
    while size < 2 * n:
        size *= 2
    seen = np.empty(size, np.uint64)
    used = np.zeros(size, np.bool_)
    for j in range(n):
        d = digs[j]
        s = _slot(keys, pos, d)
        if pos[s] != _EMPTY and _live(pos[s], floor, rel):
            keep[j] = False
            continue
        t = np.int64(d & np.uint64(size - 1))
        again = False
        while used[t]:
            if seen[t] == d:
                again = True
                break
            t = (t + 1) & (size - 1)
        if again:
            keep[j] = False
            continue
        used[t] = True
        seen[t] = d
        keep[j] = True
    return keep


@njit(cache=True, nogil=True)
def _insert(keys, pos, digs, at):
    """Record digs[j] at position at[j] (later positions replace earlier ones); returns how
    many slots were taken."""
    taken = 0
    for j in range(digs.shape[0]):
        s = _slot(keys, pos, digs[j])
        if pos[s] == _EMPTY:
            taken += 1
            keys[s] = digs[j]
        pos[s] = at[j]
    return taken


@njit(cache=True, nogil=True)
def _live_records(keys, pos, floor, rel):
    n = 0
    for s in range(keys.shape[0]):
        if pos[s] != _EMPTY and _live(pos[s], floor, rel):
            n += 1
    out_k = np.empty(n, np.uint64)
    out_p = np.empty(n, np.int64)
    n = 0
    for s in range(keys.shape[0]):
        if pos[s] != _EMPTY and _live(pos[s], floor, rel):
            out_k[n] = keys[s]
            out_p[n] = pos[s]
            n += 1
    return out_k, out_p


# Linear probing stays short up to ~70 % full (~2 probes a hit, ~6 a miss). A rebuild,
# which drops the forgotten records, leaves the table 22-45 % full (powers of two): 16
# bytes a slot make 36-71 bytes per remembered id, ~4 MB at a window of 100,000.
_MAX_LOAD = 0.7
_REBUILT_LOAD = 0.45


def _size_for(n: int) -> int:
    size = 1024
    while size * _REBUILT_LOAD < n:
        size *= 2
    return size


class IdWindow:
    """The records (digest, position) of one model's window, as of version ``dver`` of
    generation ``gen`` (a model made again under the same name has another), with the
    forgetting in force: ``floor`` and the released ranges ``rel``.

    ``seen`` is the log end of the last window entry read or written, ``tag`` that entry's
    start and last digest: a sync reads the entries after it if it is still there as
    read (versions are unique strings, so a store that lost history and moved on is
    never taken for the copy's). The table keeps at most 70 % of its slots taken;
    forgotten records go when it is rebuilt.

    >>> import numpy as np
    >>> w = IdWindow()
    >>> w.keep(np.array([7, 8, 7], np.uint64)).tolist()
    [True, True, False]
    >>> w.record(np.array([7, 8], np.uint64), np.array([1, 2]))
    >>> w.keep(np.array([8, 9], np.uint64)).tolist()
    [False, True]
    >>> w.forget(floor=1, rel=[])
    >>> w.keep(np.array([7], np.uint64)).tolist()
    [True]
    """

    def __init__(self) -> None:
        self.gen = b""
        self.dver = b""  # no version: the first append syncs
        self.seen = 0
        self.tag = b""
        self.floor = 0
        self.rel = np.zeros((0, 2), np.int64)
        self._keys = np.zeros(1024, np.uint64)
        self._pos = np.full(1024, _EMPTY, np.int64)
        self._taken = 0

    def reset(self, gen: bytes) -> None:
        """Forget everything: a new generation (or a window read from its start)."""
        self.__init__()  # type: ignore[misc]
        self.gen = gen

    def forget(self, floor: int, rel: list[tuple[int, int]]) -> None:
        self.floor = int(floor)
        self.rel = np.array(rel, np.int64).reshape(-1, 2)

    def keep(self, digests: np.ndarray) -> np.ndarray:
        """For each digest (in batch order): True if its event is not a duplicate."""
        return _decide(self._keys, self._pos, self.floor, self.rel, digests)

    def record(self, digests: np.ndarray, positions: np.ndarray) -> None:
        """Remember ``digests`` at ``positions`` (increasing)."""
        if self._taken + digests.shape[0] > _MAX_LOAD * self._keys.shape[0]:
            keys, pos = _live_records(self._keys, self._pos, self.floor, self.rel)
            size = _size_for(keys.shape[0] + digests.shape[0])
            self._keys = np.zeros(size, np.uint64)
            self._pos = np.full(size, _EMPTY, np.int64)
            self._taken = _insert(self._keys, self._pos, keys, pos)
        self._taken += _insert(self._keys, self._pos, digests,
                               np.asarray(positions, np.int64))

    def read_entry(self, start: int, digests: bytes, mask: bytes) -> None:
        """Take in a window entry: the digests of the ids of an append at ``start``, and
        ``mask``, one byte per learned event ("1": has an id), or empty if all have."""
        digs = np.frombuffer(digests, "<u8")
        if mask:
            has = np.frombuffer(mask, np.uint8) == 49
            positions = start + 1 + np.flatnonzero(has)
        else:
            positions = start + 1 + np.arange(digs.shape[0])
        self.record(digs, positions)
