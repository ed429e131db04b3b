"""A hash table from 16-byte id digests to int64 values, in numba: the embedded store's
index of kept impressions (service/store/sqlite_impressions.py).

Open addressing with linear probing over three flat arrays (the digest's two words and
the value; an empty slot holds -1), at most half full: ~48 bytes per id, against ~160 in
a dict of the id strings. Keys are BLAKE2b-128 digests, so two distinct ids share a key
with odds of about n^2 / 2^129 (1e-27 for a million ids): the table treats equal digests
as equal ids. Entries are overwritten, never deleted; the owner rebuilds the table to
forget.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["DigestTable"]

_EMPTY = -1


@njit(cache=True, nogil=True, inline="always")
def _slot(k0, k1, val, a, b):
    """The slot of digest (a, b), or the empty slot where it would go (digests are
    uniform already: the low bits of a index the table)."""
    mask = k0.shape[0] - 1
    s = np.int64(a & np.uint64(mask))
    while val[s] != _EMPTY and (k0[s] != a or k1[s] != b):
        s = (s + 1) & mask
    return s


@njit(cache=True, nogil=True)
def _put(k0, k1, val, digs, values):
    """Set each digest's value (a later one of equal digests wins); new keys added."""
    added = 0
    for i in range(digs.shape[0]):
        s = _slot(k0, k1, val, digs[i, 0], digs[i, 1])
        if val[s] == _EMPTY:
            k0[s] = digs[i, 0]
            k1[s] = digs[i, 1]
            added += 1
        val[s] = values[i]
    return added


@njit(cache=True, nogil=True)
def _get(k0, k1, val, digs):
    out = np.empty(digs.shape[0], np.int64)
    for i in range(digs.shape[0]):
        out[i] = val[_slot(k0, k1, val, digs[i, 0], digs[i, 1])]
    return out


@njit(cache=True, nogil=True)
def _rehash(k0, k1, val, size):
    n0 = np.zeros(size, np.uint64)
    n1 = np.zeros(size, np.uint64)
    nv = np.full(size, _EMPTY, np.int64)
    for s in range(k0.shape[0]):
        if val[s] != _EMPTY:
            t = _slot(n0, n1, nv, k0[s], k1[s])
            n0[t] = k0[s]
            n1[t] = k1[s]
            nv[t] = val[s]
    return n0, n1, nv


class DigestTable:
    """digest (two uint64 words) -> int64 value >= 0; -1 for a digest not in the table.

    >>> import numpy as np
    >>> t = DigestTable()
    >>> d = np.array([[1, 2], [3, 4]], np.uint64)
    >>> t.put(d, np.array([10, 20]))
    >>> t.get(np.array([[3, 4], [1, 2], [1, 3]], np.uint64)).tolist()
    [20, 10, -1]
    >>> len(t)
    2
    """

    __slots__ = ("_k0", "_k1", "_n", "_val")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._k0 = np.zeros(16, np.uint64)
        self._k1 = np.zeros(16, np.uint64)
        self._val = np.full(16, _EMPTY, np.int64)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        return int(self._k0.nbytes + self._k1.nbytes + self._val.nbytes)

    def put(self, digests: np.ndarray, values: np.ndarray) -> None:
        """Set the value of each row of ``digests`` (an (n, 2) uint64 array)."""
        digs = np.ascontiguousarray(digests, np.uint64).reshape(-1, 2)
        vals = np.ascontiguousarray(values, np.int64)
        if vals.shape != (digs.shape[0],) or (vals.size and vals.min() < 0):
            raise ValueError("values must be one int >= 0 per digest")
        self.reserve(self._n + digs.shape[0])
        self._n += int(_put(self._k0, self._k1, self._val, digs, vals))

    def reserve(self, n: int) -> None:
        """Make room for ``n`` ids in all, so that puts up to there do not grow the table
        (growing copies every entry: 86 ms at a million)."""
        size = self._k0.shape[0]
        while 2 * n > size:
            size *= 2
        if size != self._k0.shape[0]:
            self._k0, self._k1, self._val = _rehash(self._k0, self._k1, self._val, size)

    def get(self, digests: np.ndarray) -> np.ndarray:
        """The value of each row of ``digests``, -1 where absent."""
        digs = np.ascontiguousarray(digests, np.uint64).reshape(-1, 2)
        return _get(self._k0, self._k1, self._val, digs)
