"""Compact feature indices for hashed models: memory that grows with what a model learned.

A hashed model's learner sees 2^bits columns, but a stream touches few of them: a learner
sized 2^20 holds 8 MB per weight vector whatever it learned. A :class:`FeatureIndex`
gives each hashed column a compact slot the first time a *learned* event carries it
(slots 0, 1, 2, … in log order, so every replica and every replay assigns the same), and
the learner is sized to the slots in use, grown by doubling (``Learner.resize``: new
slots start as a fresh learner's features do, exactly what an unseen column is to a
learner sized 2^bits). Learner column 0 is never assigned (slot s is column s + 1): it
stays as fresh as an unseen column. Scoring maps columns without assigning, and every
column without a slot goes to column 0, summed in quadrature (one entry of value
√Σv²): a fresh weight makes it contribute nothing to a linear score, and a learner that
scales rows to unit L2 norm sees the row's full norm, as a learner sized 2^bits would.

The table is open addressing (linear probing) on int32 keys in numba (hashed columns are
below 2^22), at most half full; a snapshot for scoring copies it (while slots were
added since the last copy), so that learning may insert meanwhile.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["INITIAL_SLOTS", "FeatureIndex", "FrozenIndex", "next_size"]

INITIAL_SLOTS = 1024  # a compact learner's first size (it doubles as slots fill)
_EMPTY = -1
_SHORT_ROW = 64  # rows up to this long are sorted by rank
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / φ


@njit(cache=True, nogil=True, inline="always")
def _home(key, mask):
    # Fibonacci hashing of the column (hashed columns are already spread, but a
    # multiplicative mix keeps dense runs of small columns from clustering)
    return np.int64((np.uint64(key) * _GOLDEN) >> np.uint64(32)) & mask


@njit(cache=True, nogil=True)
def _insert_all(keys, slots, order, count, columns):
    """Assign slots to unseen ``columns`` (in order); returns the new count. The table
    must have room (used to rebuild a table)."""
    mask = keys.shape[0] - 1
    n = count
    for c in columns:
        h = _home(c, mask)
        while True:
            k = keys[h]
            if k == c:
                break
            if k == _EMPTY:
                slots[h] = n
                keys[h] = c
                order[n] = c
                n += 1
                break
            h = (h + 1) & mask
    return n


@njit(cache=True, nogil=True)
def _any_present(keys, columns):
    """Whether any of ``columns`` has a slot."""
    mask = keys.shape[0] - 1
    for c in columns:
        h = _home(c, mask)
        while True:
            k = keys[h]
            if k == c:
                return True
            if k == _EMPTY:
                break
            h = (h + 1) & mask
    return False


@njit(cache=True, nogil=True)
def _map_csr(keys, slots, order, count, limit, assign, indptr, indices, values):
    """Each row's columns on learner columns (slot + 1), each row sorted (canonical CSR
    again, repeats adjacent).

    ``assign``: unseen columns get the next slots, in batch order, while fewer than
    ``limit`` are in use; if the table reaches ``limit`` the mapping stops and returns
    count = -1 (the caller grows the table and maps again: what was assigned stays).
    Else (scoring) columns without a slot, or whose learner column is ``limit`` or
    more, go to column 0 as one entry √Σv² per row."""
    mask = keys.shape[0] - 1
    n = indptr.shape[0] - 1
    out_ptr = np.zeros(n + 1, np.int64)
    out_idx = np.empty(indices.shape[0], np.int64)
    out_val = np.empty(indices.shape[0])
    # the short-row sort's scratch, allocated once: arrays allocated per row (in a call
    # per row, which counted its array arguments up and down) made the sort ~2x slower
    keys_ = np.empty(_SHORT_ROW, np.int64)
    vals_ = np.empty(_SHORT_ROW)
    p = 0
    for r in range(n):
        start = p
        dropped = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            c = indices[k]
            h = _home(c, mask)
            s = -1
            while True:
                kk = keys[h]
                if kk == c:
                    s = slots[h]
                    break
                if kk == _EMPTY:
                    if assign:
                        if count >= limit:
                            return out_ptr, out_idx, out_val, -1
                        s = count
                        slots[h] = s
                        keys[h] = c
                        order[s] = c
                        count += 1
                    break
                h = (h + 1) & mask
            if s < 0 or (not assign and s + 1 >= limit):
                dropped += values[k] * values[k]
                continue
            out_idx[p] = s + 1
            out_val[p] = values[k]
            p += 1
        if dropped > 0.0:
            out_idx[p] = 0
            out_val[p] = math.sqrt(dropped)
            p += 1
        if p - start <= _SHORT_ROW:
            _sort_short(out_idx, out_val, start, p, keys_, vals_)
        else:
            _sort_long(out_idx, out_val, start, p)
        out_ptr[r + 1] = p
    return out_ptr, out_idx[:p], out_val[:p], count


@njit(cache=True, nogil=True, inline="always")
def _sort_short(idx, val, a, b, keys, vals):
    """Sort idx[a:b] (at most ``_SHORT_ROW`` entries) with val alongside, stably (equal
    keys, from columns a row holds twice, stay in order and adjacent: the learner's
    canonical form sums them), by rank: each entry's place is the count of smaller
    keys, comparisons with no dependency between them, which vectorise. A key carries
    its position in its low 6 bits, so keys are distinct and ties need no test
    (columns are below 2^57)."""
    m = b - a
    if m < 2:
        return
    for i in range(m):
        keys[i] = (idx[a + i] << 6) | i
        vals[i] = val[a + i]
    for i in range(m):
        ki = keys[i]
        rank = 0
        for j in range(m):
            rank += keys[j] < ki
        idx[a + rank] = ki >> 6
        val[a + rank] = vals[i]


@njit(cache=True, nogil=True)
def _sort_long(idx, val, a, b):
    """Sort idx[a:b] with val alongside, stably, by a stable argsort (long rows)."""
    order = np.argsort(idx[a:b], kind="mergesort")
    keys = idx[a:b][order]
    vals = val[a:b][order]
    idx[a:b] = keys
    val[a:b] = vals


class FeatureIndex:
    """Hashed column → compact slot, append-only."""

    def __init__(self, order: np.ndarray | None = None) -> None:
        order = _checked(np.zeros(0, np.int32) if order is None else order)
        self.count = int(order.shape[0])
        size = 1024
        while size < 2 * max(self.count, 1):
            size *= 2
        self._keys = np.full(size, _EMPTY, np.int32)
        self._slots = np.full(size, -1, np.int32)
        self._order = np.zeros(max(size // 2, 1), np.int32)
        if self.count:
            n = _insert_all(self._keys, self._slots, self._order, 0, order)
            if n != self.count:
                raise ValueError("malformed feature index: a column is listed twice")

    # ------------------------------------------------------------------ learning
    def assign(self, csr: tuple[np.ndarray, np.ndarray, np.ndarray]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The batch on learner columns, giving unseen columns the next slots (in batch
        order); the learner needs ``count + 1`` columns."""
        indptr, indices, values = csr
        while True:  # the table is kept at most half full
            ptr, idx, val, count = _map_csr(self._keys, self._slots, self._order, self.count,
                                            self._keys.shape[0] // 2, True, indptr, indices,
                                            values)
            if count >= 0:
                self.count = count
                return ptr, idx, val
            self.count = self._keys.shape[0] // 2
            self._grow(self.count + 1)

    def extend_to(self, order: np.ndarray) -> bool:
        """If this index's columns are the first of ``order`` (a later state of it, as a
        follower loads one), give the rest their slots and say True; else False, the index
        unchanged. Building the index again from all its columns would hash every one of
        them, on each load. Raises ValueError (unchanged) if ``order`` is malformed."""
        order = _checked(order)
        n = self.count
        if order.shape[0] < n or not np.array_equal(order[:n], self._order[:n]):
            return False
        tail = order[n:]
        if tail.size == 0:
            return True
        if np.unique(tail).size != tail.size or _any_present(self._keys, tail):
            raise ValueError("malformed feature index: a column is listed twice")
        if n + tail.size > self._keys.shape[0] // 2:
            self._grow(n + tail.size)
        self.count = _insert_all(self._keys, self._slots, self._order, n, tail)
        return True

    def _grow(self, need: int) -> None:
        order = self._order[:self.count].copy()
        size = self._keys.shape[0]
        while size < 2 * need:
            size *= 2
        keys = np.full(size, _EMPTY, np.int32)
        slots = np.full(size, -1, np.int32)
        grown = np.zeros(size // 2, np.int32)
        _insert_all(keys, slots, grown, 0, order)
        self._keys, self._slots, self._order = keys, slots, grown

    # ------------------------------------------------------------------ scoring
    def frozen(self) -> FrozenIndex:
        """A copy for a scoring snapshot (the last one again while no slot was added)."""
        last = getattr(self, "_last_frozen", None)
        if last is None or last.count != self.count:
            last = self._last_frozen = FrozenIndex(self._keys.copy(), self._slots.copy(),
                                                   self.count)
        return last

    # ------------------------------------------------------------------ state
    def columns(self) -> np.ndarray:
        """The column of each slot, in slot order (what a checkpoint keeps)."""
        return self._order[:self.count].astype(np.int64)

    def nbytes(self) -> int:
        return self._keys.nbytes + self._slots.nbytes + self._order.nbytes


def _checked(order: np.ndarray) -> np.ndarray:
    """Columns in slot order, as int32, checked in range."""
    order = np.asarray(order)
    if order.ndim != 1 or (order.size and not (order.min() >= 0 and order.max() < 2**31)):
        raise ValueError("malformed feature index: columns must be 0 .. 2^31 - 1")
    return order.astype(np.int32)


class FrozenIndex:
    """An immutable copy of a :class:`FeatureIndex`, for scoring."""

    def __init__(self, keys: np.ndarray, slots: np.ndarray, count: int) -> None:
        self._keys, self._slots, self.count = keys, slots, count

    def lookup(self, csr: tuple[np.ndarray, np.ndarray, np.ndarray], limit: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The batch on learner columns below ``limit`` (the scorer's size); the other
        columns to column 0, in quadrature."""
        indptr, indices, values = csr
        order = np.zeros(0, np.int32)
        ptr, idx, val, _ = _map_csr(self._keys, self._slots, order, self.count, limit, False,
                                    indptr, indices, values)
        return ptr, idx, val

    def nbytes(self) -> int:
        return self._keys.nbytes + self._slots.nbytes


def next_size(count: int, current: int) -> int:
    """The learner size that holds ``count`` slots: ``current`` doubled until it does."""
    size = max(current, 1)
    while size < count:
        size *= 2
    return size
