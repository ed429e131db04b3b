"""numba kernels of the rolling-window AUC: two counting treaps and a ring of pairs.

Each class keeps a treap (a binary search tree with random heap priorities) of the
window's scores; every node holds a distinct score with its multiplicity and the total
multiplicity of its subtree, so "how many scores are below s" costs O(log W) expected.
The Mann–Whitney statistic is kept as the integer 2U (ties count ½), so the AUC it
gives is exact.

Tree arrays: ``keys`` float64[cap]; ``nodes`` int64[5, cap] rows CNT, SIZE, LEFT, RIGHT,
PRIO; ``meta`` int64[3] = root, number of free nodes, priority generator state;
``free`` int64[cap] a stack of unused node ids.

The kernels allocate nothing, so they are compiled without numba's reference counting
(``_nrt=False``): with it, every call of a tree helper counted its array arguments up and
down (atomic operations), which perf showed as ~30 % of an update.
"""

from __future__ import annotations

import numpy as np
from numba import njit

CNT, SIZE, LEFT, RIGHT, PRIO = 0, 1, 2, 3, 4
NIL = -1


def new_tree(cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    keys = np.zeros(cap)
    nodes = np.zeros((5, cap), np.int64)
    free = np.arange(cap - 1, -1, -1, dtype=np.int64)
    meta = np.array([NIL, cap, 0x2545F4914F6CDD1D], np.int64)
    return keys, nodes, free, meta


@njit(cache=True, nogil=True, inline="always")
def _size(nodes, v):
    return 0 if v == NIL else nodes[SIZE, v]


@njit(cache=True, nogil=True, inline="always")
def _pull(nodes, v):
    nodes[SIZE, v] = nodes[CNT, v] + _size(nodes, nodes[LEFT, v]) + _size(nodes, nodes[RIGHT, v])


@njit(cache=True, nogil=True, _nrt=False)
def _next_prio(meta):
    # xorshift64 on the signed state; the priority only needs to look random.
    x = meta[2]
    x ^= x << 13
    x ^= (x >> 7) & 0x01FFFFFFFFFFFFFF
    x ^= x << 17
    meta[2] = x
    return x


@njit(cache=True, nogil=True, _nrt=False)
def _split(keys, nodes, v, key):
    """Split subtree v into (keys < key, keys > key); key must not be present."""
    if v == NIL:
        return NIL, NIL
    if keys[v] < key:
        a, b = _split(keys, nodes, nodes[RIGHT, v], key)
        nodes[RIGHT, v] = a
        _pull(nodes, v)
        return v, b
    a, b = _split(keys, nodes, nodes[LEFT, v], key)
    nodes[LEFT, v] = b
    _pull(nodes, v)
    return a, v


@njit(cache=True, nogil=True, _nrt=False)
def _merge(nodes, a, b):
    """Merge two subtrees where every key of a is below every key of b."""
    if a == NIL:
        return b
    if b == NIL:
        return a
    if nodes[PRIO, a] > nodes[PRIO, b]:
        nodes[RIGHT, a] = _merge(nodes, nodes[RIGHT, a], b)
        _pull(nodes, a)
        return a
    nodes[LEFT, b] = _merge(nodes, a, nodes[LEFT, b])
    _pull(nodes, b)
    return b


@njit(cache=True, nogil=True, _nrt=False)
def _insert_node(keys, nodes, v, new):
    if v == NIL:
        return new
    if nodes[PRIO, new] > nodes[PRIO, v]:
        a, b = _split(keys, nodes, v, keys[new])
        nodes[LEFT, new] = a
        nodes[RIGHT, new] = b
        _pull(nodes, new)
        return new
    if keys[new] < keys[v]:
        nodes[LEFT, v] = _insert_node(keys, nodes, nodes[LEFT, v], new)
    else:
        nodes[RIGHT, v] = _insert_node(keys, nodes, nodes[RIGHT, v], new)
    _pull(nodes, v)
    return v


@njit(cache=True, nogil=True, _nrt=False)
def _find(keys, nodes, root, key):
    v = root
    while v != NIL:
        if key < keys[v]:
            v = nodes[LEFT, v]
        elif key > keys[v]:
            v = nodes[RIGHT, v]
        else:
            return v
    return NIL


@njit(cache=True, nogil=True, _nrt=False)
def _add_on_path(keys, nodes, root, key, delta):
    v = root
    while v != NIL:
        nodes[SIZE, v] += delta
        if key < keys[v]:
            v = nodes[LEFT, v]
        elif key > keys[v]:
            v = nodes[RIGHT, v]
        else:
            nodes[CNT, v] += delta
            return


@njit(cache=True, nogil=True, _nrt=False)
def tree_insert(keys, nodes, free, meta, key):
    root = meta[0]
    if _find(keys, nodes, root, key) != NIL:
        _add_on_path(keys, nodes, root, key, 1)
        return
    meta[1] -= 1
    new = free[meta[1]]
    keys[new] = key
    nodes[CNT, new] = 1
    nodes[SIZE, new] = 1
    nodes[LEFT, new] = NIL
    nodes[RIGHT, new] = NIL
    nodes[PRIO, new] = _next_prio(meta)
    meta[0] = _insert_node(keys, nodes, root, new)


@njit(cache=True, nogil=True, _nrt=False)
def _erase(keys, nodes, free, meta, v, key):
    if keys[v] == key:
        free[meta[1]] = v
        meta[1] += 1
        return _merge(nodes, nodes[LEFT, v], nodes[RIGHT, v])
    if key < keys[v]:
        nodes[LEFT, v] = _erase(keys, nodes, free, meta, nodes[LEFT, v], key)
    else:
        nodes[RIGHT, v] = _erase(keys, nodes, free, meta, nodes[RIGHT, v], key)
    _pull(nodes, v)
    return v


@njit(cache=True, nogil=True, _nrt=False)
def tree_remove(keys, nodes, free, meta, key):
    """Remove one occurrence of key (which must be present)."""
    v = _find(keys, nodes, meta[0], key)
    if nodes[CNT, v] > 1:
        _add_on_path(keys, nodes, meta[0], key, -1)
    else:
        meta[0] = _erase(keys, nodes, free, meta, meta[0], key)


@njit(cache=True, nogil=True, _nrt=False)
def count_less_equal(keys, nodes, meta, key):
    """(number of keys < key, number of keys == key)."""
    v = meta[0]
    less = 0
    while v != NIL:
        if key < keys[v]:
            v = nodes[LEFT, v]
        elif key > keys[v]:
            less += _size(nodes, nodes[LEFT, v]) + nodes[CNT, v]
            v = nodes[RIGHT, v]
        else:
            return less + _size(nodes, nodes[LEFT, v]), nodes[CNT, v]
    return less, 0


@njit(cache=True, nogil=True, _nrt=False)
def _pairs2(pk, pn, pf, pm, nk, nn, nf, nm, s, positive):
    """2 × (pairs this item wins + ½ ties) against the other class in the window."""
    if positive:
        less, eq = count_less_equal(nk, nn, nm, s)
        return 2 * less + eq
    less, eq = count_less_equal(pk, pn, pm, s)
    total = _size(pn, pm[0])
    return 2 * (total - less - eq) + eq


@njit(cache=True, nogil=True, _nrt=False)
def rolling_update(scores, labels, ring_s, ring_y, ring, counts,
                   pk, pn, pf, pm, nk, nn, nf, nm):
    """Push (score, label) pairs; ``ring`` = [head, filled]; ``counts`` = [n_neg, n_pos, 2U]."""
    w = ring_s.shape[0]
    for t in range(scores.shape[0]):
        head = ring[0]
        if ring[1] == w:
            old = ring_s[head]
            pos = ring_y[head] > 0
            if pos:
                tree_remove(pk, pn, pf, pm, old)
                counts[1] -= 1
            else:
                tree_remove(nk, nn, nf, nm, old)
                counts[0] -= 1
            counts[2] -= _pairs2(pk, pn, pf, pm, nk, nn, nf, nm, old, pos)
        else:
            ring[1] += 1
        s = scores[t]
        pos = labels[t] > 0
        counts[2] += _pairs2(pk, pn, pf, pm, nk, nn, nf, nm, s, pos)
        if pos:
            tree_insert(pk, pn, pf, pm, s)
            counts[1] += 1
        else:
            tree_insert(nk, nn, nf, nm, s)
            counts[0] += 1
        ring_s[head] = s
        ring_y[head] = 1 if pos else 0
        ring[0] = (head + 1) % w
