"""numba kernels of the OAM family: OAM_seq, OAM_gra (Zhao et al. 2011), FOAM and NOAM
(Ding et al. 2017, Algorithms 1–5).

Each ``*_learn`` call applies a whole batch of events in order: the own-class buffer is
updated first (reservoir counter includes the new event), then the model is updated
against the opposite buffer, visited in insertion order, oldest to newest. Kernels take
arrays and numbers only, update the state arrays in place and return a counter.

OAM_gra and the mini-batch OGD of FOAM/NOAM score every buffered row with the same w
before changing it. On dense buffers those |B| margins dominate the cost, and a row-wise
wᵀx reduces along d, which numba cannot vectorise without reassociating the sum. For a
batch of at least ``FEATURE_MAJOR_MIN_EVENTS`` events the kernel therefore first copies
both buffers to a feature-major scratch ``bt[c, i, slot] = buf[c, slot, i]`` (kept in
step with ``buf`` as rows are admitted; ``buf`` stays the state) and forms all margins at
once, vectorised across slots, with the four partial sums of ``_dot`` in ``_dot``'s
order: the same bits as the row-wise path, so a learner's state does not depend on how
the stream is cut into batches. The copy costs about two margin passes, hence the
threshold.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._buffers import admit, write_sparse_row
from ._features import rbf
from ._kernels import dense_dot, sparse_dot
from ._kernels import dot4 as _dot

# Shortest batch for which the dense margin kernels build the feature-major buffer copy.
FEATURE_MAJOR_MIN_EVENTS = 8


@njit(cache=True, nogil=True, inline="always")
def oam_c_t(C, n_opp, cap):
    """C_t = C·max(1, N_opp/capacity): a buffered row stands for N_opp/capacity events."""
    ratio = n_opp / cap
    return C * ratio if ratio > 1.0 else C


@njit(cache=True, nogil=True)
def _feature_major(buf, n_seen, n_events):
    """``bt[c, i, j] = buf[c, j, i]`` over the filled slots, or an empty (2, 0, 0) array
    when the batch is too short for the copy to pay off."""
    _, cap, d = buf.shape
    if n_events < FEATURE_MAJOR_MIN_EVENTS:
        return np.empty((2, 0, 0))
    bt = np.empty((2, d, cap))
    for c in range(2):
        for j in range(min(n_seen[c], cap)):
            for i in range(d):
                bt[c, i, j] = buf[c, j, i]
    return bt


@njit(cache=True, nogil=True, inline="always")
def _admit_row(buf, bt, c, slot, x):
    """Write an admitted row into the buffer and, if present, the feature-major copy."""
    buf[c, slot, :] = x
    if bt.shape[1]:
        for i in range(x.shape[0]):
            bt[c, i, slot] = x[i]


@njit(cache=True, nogil=True)
def _slot_margins(w, buf, bt, c, size, part, out):
    """``out[j] = _dot(w, buf[c, j])`` for the filled slots j < ``size``, bit for bit.

    With the feature-major copy ``bt`` the loop runs across slots (vectorised) for eight
    features at a time; partial sum k still takes features i ≡ k (mod 4) in increasing
    order and the remainder goes to the first, then ``(p0 + p1) + (p2 + p3)``: exactly
    ``_dot``'s additions, in ``_dot``'s order. ``part`` is (4, capacity) scratch.
    """
    if not bt.shape[1]:
        for j in range(size):
            out[j] = _dot(w, buf[c, j])
        return
    rows = bt[c]
    d = rows.shape[0]
    p0 = part[0]
    p1 = part[1]
    p2 = part[2]
    p3 = part[3]
    for j in range(size):
        p0[j] = 0.0
        p1[j] = 0.0
        p2[j] = 0.0
        p3[j] = 0.0
    i = 0
    while i + 8 <= d:
        w0, w1, w2, w3 = w[i], w[i + 1], w[i + 2], w[i + 3]
        w4, w5, w6, w7 = w[i + 4], w[i + 5], w[i + 6], w[i + 7]
        r0, r1, r2, r3 = rows[i], rows[i + 1], rows[i + 2], rows[i + 3]
        r4, r5, r6, r7 = rows[i + 4], rows[i + 5], rows[i + 6], rows[i + 7]
        for j in range(size):
            p0[j] = (p0[j] + w0 * r0[j]) + w4 * r4[j]
            p1[j] = (p1[j] + w1 * r1[j]) + w5 * r5[j]
            p2[j] = (p2[j] + w2 * r2[j]) + w6 * r6[j]
            p3[j] = (p3[j] + w3 * r3[j]) + w7 * r7[j]
        i += 8
    if i + 4 <= d:
        w0, w1, w2, w3 = w[i], w[i + 1], w[i + 2], w[i + 3]
        r0, r1, r2, r3 = rows[i], rows[i + 1], rows[i + 2], rows[i + 3]
        for j in range(size):
            p0[j] += w0 * r0[j]
            p1[j] += w1 * r1[j]
            p2[j] += w2 * r2[j]
            p3[j] += w3 * r3[j]
        i += 4
    while i < d:
        wi = w[i]
        r0 = rows[i]
        for j in range(size):
            p0[j] += wi * r0[j]
        i += 1
    for j in range(size):
        out[j] = (p0[j] + p1[j]) + (p2[j] + p3[j])


# ------------------------------------------------------------------------ OAM_seq
@njit(cache=True, nogil=True, inline="always")
def _diff_sq(x, z, delta):
    """δ = x − z into ``delta``; return ‖δ‖² (four partial sums)."""
    n = x.shape[0]
    q0 = 0.0
    q1 = 0.0
    q2 = 0.0
    q3 = 0.0
    i = 0
    while i + 4 <= n:
        d0 = x[i] - z[i]
        d1 = x[i + 1] - z[i + 1]
        d2 = x[i + 2] - z[i + 2]
        d3 = x[i + 3] - z[i + 3]
        delta[i] = d0
        delta[i + 1] = d1
        delta[i + 2] = d2
        delta[i + 3] = d3
        q0 += d0 * d0
        q1 += d1 * d1
        q2 += d2 * d2
        q3 += d3 * d3
        i += 4
    while i < n:
        d0 = x[i] - z[i]
        delta[i] = d0
        q0 += d0 * d0
        i += 1
    return (q0 + q1) + (q2 + q3)


@njit(cache=True, nogil=True)
def seq_learn_dense(X, y, w, buf, order, n_seen, rng, policy, C, min_sq, prior):
    """OAM_seq over a dense batch with dense buffers; returns the number of PA steps.

    For each buffered x (oldest first): δ = x_t − x, ℓ = max(0, 1 − y·wᵀδ); if ℓ > 0 and
    ‖δ‖² > ``min_sq``: τ = min(C_t/2, ℓ/‖δ‖²), w ← w + τ·y·δ. wᵀδ is formed as
    wᵀx_t − wᵀx (wᵀx_t refreshed after each step), and δ only for an active hinge.
    """
    n, d = X.shape
    cap = buf.shape[1]
    delta = np.empty(d)
    steps = 0
    for t in range(n):
        if prior.shape[0]:
            prior[t] = dense_dot(w, X[t])
        c = 1 if y[t] > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            buf[c, slot, :] = X[t]
        size = min(n_seen[opp], cap)
        if size == 0:
            continue
        half = 0.5 * oam_c_t(C, n_seen[opp], cap)
        s_t = _dot(w, X[t])
        for k in range(size):
            row = buf[opp, order[opp, k]]
            loss = 1.0 - y[t] * (s_t - _dot(w, row))
            if loss <= 0.0:
                continue
            sq = _diff_sq(X[t], row, delta)
            if sq <= min_sq:
                continue
            tau = loss / sq
            if tau > half:
                tau = half
            a = tau * y[t]
            for i in range(d):
                w[i] += a * delta[i]
            s_t = _dot(w, X[t])
            steps += 1
    return steps


@njit(cache=True, nogil=True, inline="always")
def _gather(w, idx, val, nnz):
    """wᵀv for a sparse row (idx, val)[:nnz]."""
    acc = 0.0
    for j in range(nnz):
        acc += w[idx[j]] * val[j]
    return acc


@njit(cache=True, nogil=True, inline="always")
def _sparse_cross(ai, av, na, bi, bv, nb):
    """aᵀb for two sorted sparse rows, summed in index order (a merge whose only branch
    is the match; the pointer steps compile to selects)."""
    p = 0
    q = 0
    acc = 0.0
    while p < na and q < nb:
        ia = ai[p]
        ib = bi[q]
        if ia == ib:
            acc += av[p] * bv[q]
        p += 1 if ia <= ib else 0
        q += 1 if ib <= ia else 0
    return acc


@njit(cache=True, nogil=True)
def seq_learn_sparse(indptr, indices, values, y, w, bidx, bval, bnnz, order, n_seen, rng,
                     policy, C, min_sq, prior):
    """OAM_seq over canonical CSR rows with sparse buffers: O(nnz) per pair.

    The pair is never merged into a difference row: wᵀδ = wᵀx_t − wᵀx, and only when
    the hinge is active, ‖δ‖² = ‖x_t‖² + ‖x‖² − 2·x_tᵀx; the step is
    w ← w + τy·x_t − τy·x. Every sum runs over the rows' columns in index order, so an
    exact duplicate gives ‖δ‖² = 0 exactly.
    """
    n = indptr.shape[0] - 1
    cap = bidx.shape[1]
    steps = 0
    for t in range(n):
        a0, e0 = indptr[t], indptr[t + 1]
        xi = indices[a0:e0]
        xv = values[a0:e0]
        nt = e0 - a0
        if prior.shape[0]:
            prior[t] = sparse_dot(w, indices, values, a0, e0)
        c = 1 if y[t] > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            write_sparse_row(bidx, bval, bnnz, c, slot, xi, xv)
        size = min(n_seen[opp], cap)
        if size == 0:
            continue
        half = 0.5 * oam_c_t(C, n_seen[opp], cap)
        sq_t = 0.0
        for j in range(nt):
            sq_t += xv[j] * xv[j]
        s_t = _gather(w, xi, xv, nt)
        for k in range(size):
            b = order[opp, k]
            nb = bnnz[opp, b]
            bi = bidx[opp, b]
            bv = bval[opp, b]
            loss = 1.0 - y[t] * (s_t - _gather(w, bi, bv, nb))
            if loss <= 0.0:
                continue
            sq_b = 0.0
            for j in range(nb):
                sq_b += bv[j] * bv[j]
            sq = (sq_t + sq_b) - 2.0 * _sparse_cross(xi, xv, nt, bi, bv, nb)
            if sq <= min_sq:
                continue
            tau = loss / sq
            if tau > half:
                tau = half
            a = tau * y[t]
            for j in range(nt):
                w[xi[j]] += a * xv[j]
            for j in range(nb):
                w[bi[j]] -= a * bv[j]
            s_t = _gather(w, xi, xv, nt)
            steps += 1
    return steps


# ------------------------------------------- OAM_gra and mini-batch OGD (Alg. 3)
@njit(cache=True, nogil=True)
def minibatch_learn(X, y, w, buf, order, n_seen, rng, policy, rate, oam_rule, prior):
    """Frozen-w mini-batch step against the opposite buffer: OAM_gra or Algorithm 3.

    The violators A are found with w frozen (all margins at once, see
    ``_slot_margins``), then w ← w + a·y·(|A|·x_t − Σ_A x), applied as −a·y·x per
    violator followed by +a·y·|A|·x_t. ``oam_rule``: OAM_gra, violators
    y·wᵀ(x_t − x) ≤ 1 and a = C_t/2 with C_t = rate·max(1, N_opp/capacity); otherwise
    Algorithm 3 (FOAM, NOAM), violators < 1 and a = η/(2|B|) with η = rate and |B| the
    opposite buffer's fill. Returns |A| summed over the batch.
    """
    n, d = X.shape
    cap = buf.shape[1]
    viol = np.empty(cap, np.int64)  # slots of the violators, oldest first
    bt = _feature_major(buf, n_seen, n)
    part = np.empty((4, cap))
    s_b = np.empty(cap)
    total = 0
    for t in range(n):
        if prior.shape[0]:
            prior[t] = dense_dot(w, X[t])
        c = 1 if y[t] > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            _admit_row(buf, bt, c, slot, X[t])
        size = min(n_seen[opp], cap)
        if size == 0:
            continue
        s_t = _dot(w, X[t])
        _slot_margins(w, buf, bt, opp, size, part, s_b)
        count = 0
        for k in range(size):
            b = order[opp, k]
            margin = y[t] * (s_t - s_b[b])
            if margin <= 1.0 if oam_rule else margin < 1.0:
                viol[count] = b
                count += 1
        if count == 0:
            continue
        step = 0.5 * oam_c_t(rate, n_seen[opp], cap) if oam_rule else rate / (2.0 * size)
        a = step * y[t]
        for q in range(count):
            b = viol[q]
            for i in range(d):
                w[i] -= a * buf[opp, b, i]
        ac = a * count
        for i in range(d):
            w[i] += ac * X[t, i]
        total += count
    return total


@njit(cache=True, nogil=True)
def gra_learn_sparse(indptr, indices, values, y, w, bidx, bval, bnnz, order, n_seen, rng,
                     policy, C, prior):
    """OAM_gra over canonical CSR rows with sparse buffers: O(nnz) per pair."""
    n = indptr.shape[0] - 1
    cap = bidx.shape[1]
    viol = np.zeros(cap, np.bool_)
    total = 0
    for t in range(n):
        a0, e0 = indptr[t], indptr[t + 1]
        if prior.shape[0]:
            prior[t] = sparse_dot(w, indices, values, a0, e0)
        c = 1 if y[t] > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            write_sparse_row(bidx, bval, bnnz, c, slot, indices[a0:e0], values[a0:e0])
        size = min(n_seen[opp], cap)
        if size == 0:
            continue
        s_t = _gather(w, indices[a0:e0], values[a0:e0], e0 - a0)
        count = 0
        for k in range(size):
            b = order[opp, k]
            s_b = _gather(w, bidx[opp, b], bval[opp, b], bnnz[opp, b])
            viol[k] = y[t] * (s_t - s_b) <= 1.0
            if viol[k]:
                count += 1
        if count == 0:
            continue
        a = 0.5 * oam_c_t(C, n_seen[opp], cap) * y[t]
        for k in range(size):
            if viol[k]:
                b = order[opp, k]
                for j in range(bnnz[opp, b]):
                    w[bidx[opp, b, j]] -= a * bval[opp, b, j]
        ac = a * count
        for j in range(a0, e0):
            w[indices[j]] += ac * values[j]
        total += count
    return total


# ------------------------------------------------------------ NOAM phase 1 (Alg. 5)
@njit(cache=True, nogil=True, inline="always")
def _expansion(x, sv_x, sv_alpha, n_sv, gamma):
    """f(x) = Σ_j α_j κ(x̂_j, x), summed in SV order."""
    acc = 0.0
    for j in range(n_sv):
        acc += rbf(x, sv_x[j], gamma) * sv_alpha[j]
    return acc


@njit(cache=True, nogil=True)
def expansion_scores(X, sv_x, sv_alpha, n_sv, sigma):
    """Scores of the kernel expansion over the first ``n_sv`` support vectors."""
    gamma = 0.5 / (sigma * sigma)
    out = np.empty(X.shape[0])
    for r in range(X.shape[0]):
        out[r] = _expansion(X[r], sv_x, sv_alpha, n_sv, gamma)
    return out


@njit(cache=True, nogil=True)
def noam_kernel_learn(X, y, sv_x, sv_alpha, sv_id, n_sv, rbuf, rbuf_id, order, n_seen,
                      rng, policy, eta, sigma, budget, prior):
    """NOAM phase 1: Alg. 3 in the RKHS of κ, with raw reservoir buffers.

    Events get stream ids 0, 1, 2, … (their position in the whole stream). For an event
    with a non-empty opposite buffer B, every score uses the pre-update expansion f;
    A = {x_i ∈ B : y(f(x_t) − f(x_i)) < 1}; with c = η/(2|B|): x_t becomes an SV with
    α = c·y·|A|, then each violator (oldest first) gets α −= c·y, joining S at the end
    if it is not an SV yet. Returns the index of the first row not processed: the row
    after the one that brought |S| to ``budget`` (the caller switches to phase 2), or
    the batch length.
    """
    n = X.shape[0]
    cap = rbuf.shape[1]
    gamma = 0.5 / (sigma * sigma)
    f_buf = np.empty(cap)
    viol = np.zeros(cap, np.bool_)
    for t in range(n):
        if prior.shape[0]:
            prior[t] = _expansion(X[t], sv_x, sv_alpha, n_sv[0], gamma)
        sid = n_seen[0] + n_seen[1]
        c = 1 if y[t] > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            rbuf[c, slot, :] = X[t]
            rbuf_id[c, slot] = sid
        size = min(n_seen[opp], cap)
        if size == 0:
            continue
        ns = n_sv[0]
        f_t = _expansion(X[t], sv_x, sv_alpha, ns, gamma)
        for k in range(size):
            f_buf[k] = _expansion(rbuf[opp, order[opp, k]], sv_x, sv_alpha, ns, gamma)
        count = 0
        for k in range(size):
            viol[k] = y[t] * (f_t - f_buf[k]) < 1.0
            if viol[k]:
                count += 1
        if count == 0:
            continue
        step = eta / (2.0 * size) * y[t]
        sv_x[ns, :] = X[t]
        sv_alpha[ns] = step * count
        sv_id[ns] = sid
        ns += 1
        for k in range(size):
            if not viol[k]:
                continue
            b = order[opp, k]
            rid = rbuf_id[opp, b]
            j = ns - 1
            while j >= 0 and sv_id[j] != rid:
                j -= 1
            if j >= 0:
                sv_alpha[j] -= step
            else:
                sv_x[ns, :] = rbuf[opp, b]
                sv_alpha[ns] = -step
                sv_id[ns] = rid
                ns += 1
        n_sv[0] = ns
        if ns >= budget:
            return t + 1
    return n
