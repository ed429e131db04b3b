"""numba kernels of the rolling-window AUC: per class a sorted array with a sorted
buffer, and a ring of the window's pairs.

The Mann–Whitney statistic is kept as the integer 2U (ties count ½), so the AUC it gives
is exact. For multisets P (positive scores) and N (negative scores) write

    W2(P, N) = sum over p in P, n in N of  2·[p > n] + [p == n],

so 2U of the window is W2(P, N). W2 is bilinear in signed multisets, which is what makes a
batch cheap: if a call adds the multisets A₊, A₋ and removes R₊, R₋ (the pairs that
leave), then with D₊ = A₊ − R₊ and D₋ = A₋ − R₋

    2U(after) = 2U(before) + W2(P, D₋) + W2(D₊, N) + W2(D₊, D₋),

every term counted against the state *before* the call, by walking (or galloping) the
sorted batch through sorted arrays. Only the window's final set matters: a batch is
applied as set operations, never one pair at a time.

Each class c (0 negative, 1 positive) holds its window scores as the multiset M − T + I:
M sorted in row ``fill[c, ROW]`` of ``sorted_`` (the third row is spare), a buffer of
sorted insertions I in ``buf[c, 0]`` and of sorted deletions T in ``buf[c, 1]`` (each in
M, or cancelling an entry of I); ``fill[c, M_LEN / I_LEN / T_LEN]`` are their lengths. A
batch is merged into the buffer in O(buffer + batch); once the buffer would pass about
``sqrt(2 · m · batch)`` entries, one pass writes M − T + I into the spare row, which
becomes M. That threshold balances buffer merges (which grow with the buffer) against
flushes (~m each), so a batch of 500 at W = 10⁵ moves a few dozen floats per event, not
the W / 500 a merge per batch would, and a single event at W = 10⁶ about 2·sqrt(2 W).

``ring_s``/``ring_y`` hold the window's pairs in arrival order (the state that
``get_state`` writes); ``ring`` = (head, filled); ``counts`` = (n_neg, n_pos, 2U).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Past this ratio of lengths a sorted list is searched by galloping (a few mispredicted
# branches per entry) rather than walked (about one cheap step per element passed).
GALLOP_GAP = 32
# Lists up to this length are sorted by insertion.
SMALL_SORT = 24
# Columns of ``fill``, per class: lengths of M, I and T, and the row of ``sorted_`` that
# holds M (the third row is spare: a flush writes into it, then the two swap).
M_LEN, I_LEN, T_LEN, ROW = 0, 1, 2, 3


def buffer_capacity(window: int) -> int:
    """Entries each of a class's two buffers holds: the flush threshold sqrt(2 m b) fits
    for up to ~2000 entries of one class per batch at W = 10⁶ (larger batches flush more
    often); never more than the window."""
    return int(min(window, 64 * int(np.sqrt(window)) + 64))


@njit(cache=True, nogil=True)
def _insertion_sort(a, lo, hi):
    for i in range(lo + 1, hi):
        x = a[i]
        j = i - 1
        while j >= lo and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@njit(cache=True, nogil=True)
def _merge_sort(a, tmp):
    """Bottom-up merge sort of ``a`` in place (``tmp`` as long): O(n log n) on any data,
    for the distributions the bucket pass does not suit."""
    n = a.shape[0]
    run = 16
    for lo in range(0, n, run):
        _insertion_sort(a, lo, min(lo + run, n))
    src = a
    dst = tmp
    in_a = True
    while run < n:
        for lo in range(0, n, 2 * run):
            mid = min(lo + run, n)
            hi = min(lo + 2 * run, n)
            i = lo
            j = mid
            for k in range(lo, hi):
                if j >= hi or (i < mid and src[i] <= src[j]):
                    dst[k] = src[i]
                    i += 1
                else:
                    dst[k] = src[j]
                    j += 1
        src, dst = dst, src
        in_a = not in_a
        run *= 2
    if not in_a:
        for k in range(n):
            a[k] = tmp[k]


@njit(cache=True, nogil=True)
def sort_scores(a):
    """Sort finite float64 ``a`` in place, faster than numba's quicksort on a fresh batch
    (whose branches the predictor cannot learn): scatter into n equal-width buckets
    between min and max (a monotone map), then one insertion pass, which only has to fix
    order inside buckets. When that pass would move more than a few entries per element
    (a skewed distribution), a merge sort finishes instead."""
    n = a.shape[0]
    if n <= SMALL_SORT:
        _insertion_sort(a, 0, n)
        return
    lo = a[0]
    hi = a[0]
    for i in range(n):
        lo = min(lo, a[i])
        hi = max(hi, a[i])
    span = hi - lo
    if span == 0.0:
        return
    scale = n / span
    if not np.isfinite(scale) or scale == 0.0 or not np.isfinite(span):
        _merge_sort(a, np.empty(n))
        return
    ids = np.empty(n, np.int64)
    start = np.zeros(n + 1, np.int64)
    for i in range(n):
        b = min(int((a[i] - lo) * scale), n - 1)
        ids[i] = b
        start[b + 1] += 1
    for b in range(n):
        start[b + 1] += start[b]
    tmp = np.empty(n)
    for i in range(n):
        b = ids[i]
        tmp[start[b]] = a[i]
        start[b] += 1
    budget = 4 * n
    for i in range(n):
        x = tmp[i]
        j = i - 1
        while j >= 0 and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x
        budget -= i - 1 - j
        if budget < 0:
            for k in range(i + 1, n):
                a[k] = tmp[k]
            _merge_sort(a, tmp)
            return


@njit(cache=True, nogil=True)
def _lower(a, n, x, lo):
    """First i in [lo, n) with a[i] >= x, else n (a sorted): gallop, then bisect."""
    hi = lo
    step = 1
    while hi < n and a[hi] < x:
        lo = hi + 1
        hi = lo + step
        step <<= 1
    if hi > n:
        hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _upper(a, n, x, lo):
    """First i in [lo, n) with a[i] > x, else n (a sorted): gallop, then bisect."""
    hi = lo
    step = 1
    while hi < n and a[hi] <= x:
        lo = hi + 1
        hi = lo + step
        step <<= 1
    if hi > n:
        hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def w2(p, n_p, q, n_q):
    """W2(p[:n_p], q[:n_q]) for sorted positive scores p and negative scores q: twice the
    pairs p wins plus the ties. The shorter list is walked: from the negatives' side each
    negative's count is 2 n_p less that sum."""
    if n_p == 0 or n_q == 0:
        return 0
    if n_p <= n_q:
        return _below_sum(p, n_p, q, n_q)
    return 2 * n_p * n_q - _below_sum(q, n_q, p, n_p)


@njit(cache=True, nogil=True)
def _below_sum(a, n_a, b, n_b):
    """The sum over a[:n_a] of #(b < a[i]) + #(b <= a[i]), for sorted a and b[:n_b]."""
    total = 0
    if n_b > GALLOP_GAP * n_a:
        lo = 0
        for i in range(n_a):
            lt = _lower(b, n_b, a[i], lo)
            total += lt + _upper(b, n_b, a[i], lt)
            lo = lt
        return total
    # Comparable lengths: each entry of a walks b on from where the previous stopped
    # (branches mostly predicted).
    lt = 0
    le = 0
    for i in range(n_a):
        x = a[i]
        while lt < n_b and b[lt] < x:
            lt += 1
        if le < lt:
            le = lt
        while le < n_b and b[le] <= x:
            le += 1
        total += lt + le
    return total


@njit(cache=True, nogil=True)
def _w2_pos_vs(sorted_, buf, fill, q, n_q):
    """W2(window positives, q): the positives are M − T + I of class 1."""
    return (w2(sorted_[fill[1, ROW]], fill[1, M_LEN], q, n_q)
            + w2(buf[1, 0], fill[1, I_LEN], q, n_q) - w2(buf[1, 1], fill[1, T_LEN], q, n_q))


@njit(cache=True, nogil=True)
def _w2_vs_neg(sorted_, buf, fill, p, n_p):
    """W2(p, window negatives): the negatives are M − T + I of class 0."""
    return (w2(p, n_p, sorted_[fill[0, ROW]], fill[0, M_LEN])
            + w2(p, n_p, buf[0, 0], fill[0, I_LEN]) - w2(p, n_p, buf[0, 1], fill[0, T_LEN]))


@njit(cache=True, nogil=True)
def _merge_into(a, n, add, n_add):
    """Insert sorted add[:n_add] into sorted a[:n] in place (a has the room); returns the
    new length. Backward from the top: each entry's place is found by scanning down
    (entries dense) or galloping down (sparse), and the run above it moves in one go."""
    gallop = n > GALLOP_GAP * n_add
    end = n
    for j in range(n_add - 1, -1, -1):
        x = add[j]
        # p = first index in [0, end) with a[p] > x (a[end:] > x already).
        if gallop:
            hi = end
            probe = end - 1
            step = 1
            while probe >= 0 and a[probe] > x:
                hi = probe
                probe -= step
                step <<= 1
            p = probe + 1 if probe >= 0 else 0
            while p < hi:
                mid = (p + hi) >> 1
                if a[mid] <= x:
                    p = mid + 1
                else:
                    hi = mid
        else:
            p = end
            while p > 0 and a[p - 1] > x:
                p -= 1
        _shift_up(a, p, end, j + 1)
        a[p + j] = x
        end = p
    return n + n_add


@njit(cache=True, nogil=True)
def _shift_up(a, lo, hi, by):
    """a[lo + by:hi + by] = a[lo:hi], top first (the ranges overlap)."""
    src = a[lo:hi]
    dst = a[lo + by:hi + by]
    for q in range(hi - lo - 1, -1, -1):
        dst[q] = src[q]


@njit(cache=True, nogil=True)
def _flush_into(out, a, m, ins, n_ins, dels, n_dels):
    """out = a[:m] − dels + ins (all sorted) in one pass; returns its length, or -1 if a
    deletion is neither in a nor cancelled by an insertion (a broken invariant).

    The runs of a between consecutive entries are copied in one go; each entry's place is
    found by scanning (entries dense) or galloping (sparse). At equal values deletions go
    first, and one that a lacks cancels the next insertion."""
    gallop = m > GALLOP_GAP * (n_ins + n_dels)
    i = 0
    j = 0
    k = 0
    w = 0
    while j < n_ins or k < n_dels:
        is_del = k < n_dels and (j == n_ins or dels[k] <= ins[j])
        x = dels[k] if is_del else ins[j]
        if gallop:
            p = _lower(a, m, x, i)
        else:
            p = i
            while p < m and a[p] < x:
                p += 1
        for q in range(p - i):
            out[w + q] = a[i + q]
        w += p - i
        i = p
        if is_del:
            k += 1
            if i < m and a[i] == x:
                i += 1
            elif j < n_ins and ins[j] == x:
                j += 1
            else:
                return -1
        else:
            j += 1
            out[w] = x
            w += 1
    for q in range(m - i):
        out[w + q] = a[i + q]
    return w + m - i


@njit(cache=True, nogil=True)
def _flush(sorted_, fill, c, ins, n_ins, dels, n_dels):
    """Class c's M − dels + ins, written into the spare row, which becomes its M."""
    row = fill[c, ROW]
    spare = 3 - fill[0, ROW] - fill[1, ROW]
    m = _flush_into(sorted_[spare], sorted_[row], fill[c, M_LEN], ins, n_ins, dels, n_dels)
    fill[c, M_LEN] = m
    fill[c, ROW] = spare
    return m >= 0


@njit(cache=True, nogil=True)
def _apply(sorted_, buf, fill, c, add, rem, n_other):
    """Add sorted ``add`` to class c's multiset and remove sorted ``rem`` from it; False
    on a broken invariant. ``n_other``: entries of the other class in this batch, which
    each walk this class's buffer when counted."""
    n_a = add.shape[0]
    n_r = rem.shape[0]
    n_b = n_a + n_r
    if n_b == 0:
        return True
    m, n_i, n_t = fill[c, M_LEN], fill[c, I_LEN], fill[c, T_LEN]
    # Buffer merges cost ~ its length per batch, flushes ~ m per flush: sqrt(2 m n_b)
    # balances them. A buffer that the other class's (more numerous) entries walk is
    # kept shorter.
    thr = np.sqrt(2.0 * (m + n_i) * n_b)
    if n_other > n_b:
        thr *= np.sqrt(n_b / n_other)
    thr = min(thr, float(buf.shape[2]))
    if n_i + n_t + n_b <= thr:
        fill[c, I_LEN] = _merge_into(buf[c, 0], n_i, add, n_a)
        fill[c, T_LEN] = _merge_into(buf[c, 1], n_t, rem, n_r)
        return True
    if n_i + n_t:
        fill[c, I_LEN] = fill[c, T_LEN] = 0
        if not _flush(sorted_, fill, c, buf[c, 0], n_i, buf[c, 1], n_t):
            return False
    if n_b <= thr:
        fill[c, I_LEN] = _merge_into(buf[c, 0], 0, add, n_a)
        fill[c, T_LEN] = _merge_into(buf[c, 1], 0, rem, n_r)
        return True
    return _flush(sorted_, fill, c, add, n_a, rem, n_r)


@njit(cache=True, nogil=True)
def _refill(scores, labels, ring_s, ring_y, ring, counts, sorted_, fill):
    """The window becomes exactly these w pairs (a batch of at least w replaces it)."""
    w = ring_s.shape[0]
    n_pos = 0
    n_neg = 0
    for t in range(w):
        s = scores[t]
        if labels[t] > 0:
            sorted_[1, n_pos] = s
            n_pos += 1
            ring_y[t] = 1
        else:
            sorted_[0, n_neg] = s
            n_neg += 1
            ring_y[t] = 0
        ring_s[t] = s
    sort_scores(sorted_[0, :n_neg])
    sort_scores(sorted_[1, :n_pos])
    fill[:] = 0
    fill[0, M_LEN] = n_neg
    fill[1, M_LEN] = n_pos
    fill[0, ROW] = 0
    fill[1, ROW] = 1
    ring[0] = 0
    ring[1] = w
    counts[0] = n_neg
    counts[1] = n_pos
    counts[2] = w2(sorted_[1], n_pos, sorted_[0], n_neg)


@njit(cache=True, nogil=True)
def rolling_update(scores, labels, ring_s, ring_y, ring, counts, sorted_, buf, fill):
    """Push (score, label) pairs in order, the oldest leaving once the window is full;
    returns False if the sorted arrays were found inconsistent (a bug, never data)."""
    w = ring_s.shape[0]
    b = scores.shape[0]
    if b == 0:
        return True
    if b >= w:
        _refill(scores[b - w:], labels[b - w:], ring_s, ring_y, ring, counts, sorted_, fill)
        return True
    head, filled = ring[0], ring[1]
    k = max(filled + b - w, 0)  # pairs that leave: the k oldest
    # scratch: added positives, added negatives, then removed positives and (filled from
    # the back) removed negatives; each part is sorted in place.
    scratch = np.empty(b + k)
    a_pos = 0
    for t in range(b):
        if labels[t] > 0:
            scratch[a_pos] = scores[t]
            a_pos += 1
    a_neg = a_pos
    for t in range(b):
        if labels[t] <= 0:
            scratch[a_neg] = scores[t]
            a_neg += 1
    oldest = head - filled
    if oldest < 0:
        oldest += w
    r_pos = b
    r_neg = b + k
    for t in range(k):
        j = oldest + t
        if j >= w:
            j -= w
        if ring_y[j] > 0:
            scratch[r_pos] = ring_s[j]
            r_pos += 1
        else:
            r_neg -= 1
            scratch[r_neg] = ring_s[j]
    add_p = scratch[:a_pos]
    add_n = scratch[a_pos:b]
    rem_p = scratch[b:r_pos]
    rem_n = scratch[r_pos:b + k]
    sort_scores(add_p)
    sort_scores(add_n)
    sort_scores(rem_p)
    sort_scores(rem_n)
    n_ap, n_an, n_rp, n_rn = add_p.shape[0], add_n.shape[0], rem_p.shape[0], rem_n.shape[0]

    # 2U(after) − 2U(before) = W2(P, D₋) + W2(D₊, N) + W2(D₊, D₋), all against the
    # state before this call.
    d = (_w2_pos_vs(sorted_, buf, fill, add_n, n_an) - _w2_pos_vs(sorted_, buf, fill, rem_n, n_rn)
         + _w2_vs_neg(sorted_, buf, fill, add_p, n_ap)
         - _w2_vs_neg(sorted_, buf, fill, rem_p, n_rp)
         + w2(add_p, n_ap, add_n, n_an) - w2(add_p, n_ap, rem_n, n_rn)
         - w2(rem_p, n_rp, add_n, n_an) + w2(rem_p, n_rp, rem_n, n_rn))

    ok = _apply(sorted_, buf, fill, 0, add_n, rem_n, n_ap + n_rp)
    ok = _apply(sorted_, buf, fill, 1, add_p, rem_p, n_an + n_rn) and ok
    counts[0] += n_an - n_rn
    counts[1] += n_ap - n_rp
    counts[2] += d
    for t in range(b):
        j = head + t
        if j >= w:
            j -= w
        ring_s[j] = scores[t]
        ring_y[j] = 1 if labels[t] > 0 else 0
    ring[0] = (head + b) % w
    ring[1] = min(filled + b, w)
    return ok
