"""Per-class event buffers (FIFO ring and reservoir) as flat arrays, for numba kernels.

Layout shared by every buffered learner (class index 0 = negative, 1 = positive):

- ``n_seen``  int64[2]: events of each class seen so far (the reservoir's counter);
- ``order``   int64[2, cap]: slot numbers from oldest to newest insertion;
- dense rows  float64[2, cap, D], or sparse rows ``idx`` int64[2, cap, W],
  ``val`` float64[2, cap, W], ``nnz`` int64[2, cap] with zero padding after ``nnz``.

A buffer holds ``min(n_seen[c], cap)`` rows. Learners iterate it in insertion order,
oldest to newest, for FIFO and reservoir alike (specs README: "storage order" is undefined
once a ring wraps or a reservoir slot is overwritten, and sequential learners depend on it).

Reservoir sampling is Vitter's Algorithm R: the counter includes the new event; with
probability cap/N the event replaces a uniformly chosen buffered one. A single draw
j ~ U{0..N-1} decides both (replace iff j < cap; the victim is the j-th oldest), which
consumes one random number per arrival once the buffer is full.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._rng import below

__all__ = [
    "FIFO",
    "RESERVOIR",
    "admit",
    "buffer_size",
    "check_buffer_state",
    "grow_sparse",
    "sparse_diff",
    "sparse_width",
    "write_sparse_row",
]

FIFO = 0
RESERVOIR = 1


@njit(cache=True, nogil=True)
def admit(order, n_seen, c, policy, rng):
    """Count one event of class ``c``; return the slot it must be written to, or -1.

    The returned slot has been moved to the newest position of ``order``.
    """
    n_seen[c] += 1
    total = n_seen[c]
    cap = order.shape[1]
    if total <= cap:
        order[c, total - 1] = total - 1
        return total - 1
    if policy == FIFO:
        pos = 0
    else:
        pos = below(rng, total)
        if pos >= cap:
            return -1
    slot = order[c, pos]
    for i in range(pos, cap - 1):
        order[c, i] = order[c, i + 1]
    order[c, cap - 1] = slot
    return slot


@njit(cache=True, nogil=True, inline="always")
def buffer_size(n_seen, c, cap):
    return min(n_seen[c], cap)


@njit(cache=True, nogil=True)
def write_sparse_row(idx, val, nnz, c, slot, row_idx, row_val):
    """Copy a canonical sparse row into a slot, zero-padding the rest of the slot."""
    k = row_idx.shape[0]
    width = idx.shape[2]
    for j in range(k):
        idx[c, slot, j] = row_idx[j]
        val[c, slot, j] = row_val[j]
    for j in range(k, width):
        idx[c, slot, j] = 0
        val[c, slot, j] = 0.0
    nnz[c, slot] = k


@njit(cache=True, nogil=True)
def sparse_diff(ai, av, na, bi, bv, nb, out_i, out_v):
    """Write a − b (two sorted sparse rows) into ``out_i``/``out_v``; return its length.

    Indices present in either row are kept, even where the difference is exactly zero.
    """
    p = 0
    q = 0
    k = 0
    while p < na or q < nb:
        if q >= nb or (p < na and ai[p] < bi[q]):
            out_i[k] = ai[p]
            out_v[k] = av[p]
            p += 1
        elif p >= na or bi[q] < ai[p]:
            out_i[k] = bi[q]
            out_v[k] = -bv[q]
            q += 1
        else:
            out_i[k] = ai[p]
            out_v[k] = av[p] - bv[q]
            p += 1
            q += 1
        k += 1
    return k


def sparse_width(needed: int, current: int) -> int:
    """Slot width for sparse rows: the smallest power of two holding ``needed``.

    Depending only on the largest row seen keeps the saved state identical however a
    stream is split into batches.
    """
    width = max(current, 1)
    while width < needed:
        width *= 2
    return width


def grow_sparse(idx: np.ndarray, val: np.ndarray, width: int):
    """Copies of sparse slot arrays widened to ``width`` (zero padding)."""
    if idx.shape[2] >= width:
        return idx, val
    new_idx = np.zeros((*idx.shape[:2], width), np.int64)
    new_val = np.zeros((*val.shape[:2], width), np.float64)
    new_idx[:, :, : idx.shape[2]] = idx
    new_val[:, :, : val.shape[2]] = val
    return new_idx, new_val


def check_buffer_state(name: str, s: dict[str, np.ndarray], n_features: int) -> None:
    """Refuse restored buffer arrays that would send a kernel outside its arrays.

    numba does not bounds-check, so a corrupted ``order_`` or sparse slot could make a
    kernel read or write past an array; states are checked once, when restored.
    """
    order, n_seen = s["order_"], s["n_seen_"]
    cap = order.shape[1]
    if order.shape[0] != 2 or n_seen.shape != (2,) or (n_seen < 0).any():
        raise ValueError(f"The {name} state arrays 'order_'/'n_seen_' are malformed.")
    for c in (0, 1):
        size = int(min(n_seen[c], cap))
        if not np.array_equal(np.sort(order[c, :size]), np.arange(size)):
            raise ValueError(
                f"The {name} state array 'order_' must list the {size} filled slots of "
                f"class {c} once each."
            )
    if "bidx_" in s:
        idx, val, nnz = s["bidx_"], s["bval_"], s["bnnz_"]
        if idx.shape[:2] != nnz.shape or val.shape != idx.shape or nnz.shape != (2, cap):
            raise ValueError(f"The {name} sparse buffer arrays disagree in shape.")
        width = idx.shape[2]
        if width < 1 or (nnz < 0).any() or (nnz > width).any():
            raise ValueError(f"The {name} state array 'bnnz_' is out of range.")
        if (idx < 0).any() or (idx >= n_features).any():
            raise ValueError(f"The {name} state array 'bidx_' is out of range.")
