"""All-or-nothing learning: what a learner keeps before a batch to put itself back.

``Learner.learn`` applies a batch, then checks that the learned state (and any
prequential score) is finite; if not, or if the kernels raised, the state is restored
bit for bit from a :class:`Journal` taken before the batch. The journal must be cheap
next to the batch:

- dense layouts copy every state array whole: their state is small next to a batch's
  work (a batch of n events costs at least n times the state's size for the O(d²)
  learners, or O(|B|·d) per event against O(|B|·d) of buffers);
- sparse layouts (hashed input, d up to 2^22) have O(d) vectors, 8 MB each at 2^20,
  that a batch changes only at the columns of its own rows and of the rows buffered
  when it starts (pairs are x_t − x_b, and a buffered row evicted during the batch came
  from the batch or from the starting buffer). Those vectors are journaled at that
  column list: their values are gathered before the batch, checked after it, and
  scattered back on failure. Every other (small) array is copied whole.

The column list is made unique with a bitmap (:func:`touched_columns`): hashed rows
repeat columns, and the gather and the check then run over a quarter of the positions.
SOLAM's kernel, which touches nothing but its rows' columns, logs the values itself as it
goes instead (see :class:`Journal`). A learner about to rewrite a journaled vector whole
(SOLAM's fold) asks the journal to copy it first (:meth:`Journal.keep_whole`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = ["Journal", "Plan", "all_finite", "touched_columns"]


@njit(cache=True, nogil=True)
def all_finite(a):
    """True if every entry of the 1-D float array ``a`` is finite.

    x·0 is 0 for finite x and NaN for ±inf and NaN, so four running sums of x·0 are NaN
    exactly when an entry is not finite: no branch per entry, four independent chains.
    """
    n = a.shape[0]
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    i = 0
    while i + 4 <= n:
        s0 += a[i] * 0.0
        s1 += a[i + 1] * 0.0
        s2 += a[i + 2] * 0.0
        s3 += a[i + 3] * 0.0
        i += 4
    while i < n:
        s0 += a[i] * 0.0
        i += 1
    return (s0 + s1) + (s2 + s3) == 0.0


@njit(cache=True, nogil=True)
def _finite_at(v, cols):
    """True if ``v`` is finite at every listed column."""
    acc = 0.0
    for k in range(cols.shape[0]):
        acc += v[cols[k]] * 0.0
    return acc == 0.0


@njit(cache=True, nogil=True)
def _gather(v, cols):
    out = np.empty(cols.shape[0])
    for k in range(cols.shape[0]):
        out[k] = v[cols[k]]
    return out


@njit(cache=True, nogil=True)
def _scatter(v, cols, vals, upto):
    """``v[cols[k]] = vals[k]`` for k = upto − 1 down to 0: where a column is listed
    more than once, the value of its first listing is the one that stays."""
    for k in range(upto - 1, -1, -1):
        v[cols[k]] = vals[k]


@njit(cache=True, nogil=True, inline="always")
def _append_new(seen, out, k, i):
    """Append column i to ``out[k]`` if bit i of the bitmap ``seen`` is clear, and set
    it; return the new length. Branch-free: about a quarter of the columns are new, in
    no predictable pattern."""
    word = i >> 6
    bit = np.uint64(1) << np.uint64(i & 63)
    old = seen[word]
    seen[word] = old | bit
    out[k] = i
    return k + ((old & bit) == 0)


@njit(cache=True, nogil=True)
def touched_columns(indices, bidx, bnnz, seen):
    """Each column of ``indices`` and of the filled sparse buffer slots, once.

    ``seen`` is a bitmap of the input dimension (``uint64[ceil(d/64)]``), all zero on
    entry and on return. Hashed rows repeat columns (a batch of 500 rows of 40 columns
    has about 5 000 distinct ones), so the list is several times shorter than the
    positions, and so are the gather and the check that run over it.
    """
    total = indices.shape[0]
    for c in range(bnnz.shape[0]):
        for s in range(bnnz.shape[1]):
            total += bnnz[c, s]
    out = np.empty(total, np.int64)
    k = 0
    for j in range(indices.shape[0]):
        k = _append_new(seen, out, k, indices[j])
    for c in range(bnnz.shape[0]):
        for s in range(bnnz.shape[1]):
            for j in range(bnnz[c, s]):
                k = _append_new(seen, out, k, bidx[c, s, j])
    for j in range(k):
        seen[out[j] >> 6] = np.uint64(0)
    return out[:k]


class Plan(NamedTuple):
    """Which state arrays a learner's journal copies, checks and journals (fixed for
    the learner's life: its state keys and dtypes never change)."""

    copied: tuple[str, ...]  # copied whole before a batch
    checked: tuple[str, ...]  # float arrays among them, checked finite after it
    vectors: tuple[str, ...]  # journaled at a column list instead

    @classmethod
    def of(cls, state: dict[str, np.ndarray], fixed: frozenset[str], inputs: frozenset[str],
           vectors: tuple[str, ...]) -> Plan:
        """``fixed``: keys learning never writes (neither copied nor checked);
        ``inputs``: keys that only hold copies of (finite) input rows (copied, not
        checked); ``vectors``: the O(d) vectors of a sparse layout (journaled)."""
        copied = tuple(k for k in state if k not in fixed and k not in vectors)
        checked = tuple(k for k in copied if k not in inputs and state[k].dtype.kind == "f")
        return cls(copied, checked, tuple(vectors))


class Journal:
    """A learner's state as it was before a batch, enough to restore it bit for bit.

    ``plan.copied`` arrays are copied whole. ``plan.vectors`` are journaled at the
    column list ``cols``, either

    - gathered here, before the batch (``log`` is None): every listing of a column
      holds its pre-batch value; or
    - logged by the learner's kernel as it goes (SOLAM) into ``log`` (an array per
      vector, at least as long as ``cols`` and reused from batch to batch: fresh ones
      would cost a page fault every 4 kB). ``cols`` are then the batch's CSR indices;
      before a row changes anything, the kernel writes the values at each of its
      positions into ``values[key]`` and the end of the positions logged so far into
      ``done[0]``. The first listing of a column holds its pre-batch value. Such a
      kernel checks the values it writes and reports it with :meth:`vouch`.

    Either way ``cols[:done[0]]`` lists every column where a journaled vector may have
    changed (unless the vector was copied whole, see :meth:`keep_whole`), and
    restoring writes the listings back last to first, so a column's first listing wins.
    """

    __slots__ = ("arrays", "cols", "copies", "done", "limit", "plan", "values", "vouched",
                 "whole")

    def __init__(self, state: dict[str, np.ndarray], plan: Plan,
                 cols: np.ndarray | None = None,
                 log: dict[str, np.ndarray] | None = None) -> None:
        self.plan = plan
        # The array objects themselves: a learner may replace one during the batch
        # (``grow_sparse`` widens the sparse buffers); restoring puts these back.
        self.arrays = dict(state)
        self.copies = [state[k].copy() for k in plan.copied]
        self.cols = cols
        if not plan.vectors:
            self.values = {}
            self.done = _NONE_DONE
        elif log is not None:
            self.values = {k: log[k][:cols.shape[0]] for k in plan.vectors}
            self.done = np.zeros(1, np.int64)
        else:
            self.values = {k: _gather(state[k], cols) for k in plan.vectors}
            self.done = np.full(1, cols.shape[0], np.int64)
        self.limit = -1  # positions to restore, fixed when the vectors are copied whole
        self.whole: dict[str, np.ndarray] = {}
        self.vouched: bool | None = None

    def keep_whole(self, state: dict[str, np.ndarray], keys: tuple[str, ...]) -> None:
        """Copy journaled vectors whole before an O(d) rewrite of them.

        Taken mid-batch, the copy holds the batch's changes so far, all at listed
        columns: restoring the copy, then the listings, gives the pre-batch vector. A
        kernel's log from then on holds post-rewrite values, so only the positions
        logged so far are restored."""
        for k in keys:
            if k not in self.whole:
                self.whole[k] = state[k].copy()
        if self.limit < 0:
            self.limit = int(self.done[0])

    def vouch(self, finite: bool) -> None:
        """The learner checked every value it wrote into the journaled vectors."""
        self.vouched = finite if self.vouched is None else self.vouched and finite

    def finite(self, state: dict[str, np.ndarray]) -> bool:
        """Is the state finite? Journaled vectors are checked at their columns only
        (or taken on the learner's word), unless copied whole: then anywhere may have
        changed."""
        for k in self.plan.checked:
            if not all_finite(state[k].reshape(-1)):
                return False
        for k in self.values:
            v = state[k]
            if k in self.whole:
                ok = all_finite(v)
            elif self.vouched is not None:
                ok = self.vouched
            else:
                ok = _finite_at(v, self.cols[:self.done[0]])
            if not ok:
                return False
        return True

    def restore(self, state: dict[str, np.ndarray]) -> None:
        """Put the state back as it was when the journal was taken."""
        state.update(self.arrays)
        for k, a in zip(self.plan.copied, self.copies, strict=True):
            np.copyto(state[k], a)
        for k, a in self.whole.items():
            np.copyto(state[k], a)
        upto = int(self.done[0]) if self.limit < 0 else self.limit
        for k, vals in self.values.items():
            _scatter(state[k], self.cols, vals, upto)


_NONE_DONE = np.zeros(1, np.int64)  # read-only use: dense layouts log nothing
