"""numba kernels of the CBR family (dissertation ch. 4–5, Algorithms 4–9).

Each ``*_learn`` call applies a whole batch of events in order: own-class buffer update
first, then one closed-form SCW step per row of the opposite buffer, oldest to newest.
Kernels take arrays and numbers only and update the state arrays in place; they return
the number of pair updates that changed the model.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._buffers import admit, write_sparse_row
from ._kernels import dense_dot, sparse_dot

DIAG_COV = 0
DIAG_PAPER = 1
DIAG_PREC = 2


@njit(cache=True, nogil=True, inline="always")
def scw_alpha(m, v, C, phi, psi, zeta):
    """α of Proposition 1 for margin m = y·μᵀz and confidence v = zᵀΣz (v > 0)."""
    phi2 = phi * phi
    num = -m * psi + math.sqrt(m * m * phi2 * phi2 / 4.0 + v * phi2 * zeta)
    alpha = num / (v * zeta)
    if alpha < 0.0:
        return 0.0
    return alpha if alpha < C else C


@njit(cache=True, nogil=True, inline="always")
def scw_sqrt_u(alpha, v, phi):
    """√u of Proposition 1, u = ¼(−αvφ + √(α²v²φ² + 4v))²."""
    t = -alpha * v * phi + math.sqrt(alpha * alpha * v * v * phi * phi + 4.0 * v)
    return math.sqrt(0.25 * t * t)


@njit(cache=True, nogil=True)
def _sigma_times(sigma, x, out):
    """out = Σx, column by column: Σ is exactly symmetric, so row j is column j, and
    the inner loop runs along a row and vectorises where a dot product per row could
    not. Each out_i still sums Σ_ij x_j for j = 0, 1, … in order."""
    d = x.shape[0]
    for i in range(d):
        out[i] = 0.0
    for j in range(d):
        xj = x[j]
        for i in range(d):
            out[i] += sigma[j, i] * xj


@njit(cache=True, nogil=True)
def _refresh_products(sigma, buf, sbuf, order, n_seen):
    """Σb afresh for every buffered row b (bounds the rounding the updates accumulate)."""
    cap = buf.shape[1]
    for c in range(2):
        for k in range(min(n_seen[c], cap)):
            b = order[c, k]
            _sigma_times(sigma, buf[c, b], sbuf[c, b])


@njit(cache=True, nogil=True)
def _full_step(mu, sigma, z, s, y, C, phi, psi, zeta, step_scale, min_var):
    d = z.shape[0]
    _sigma_times(sigma, z, s)
    v = 0.0
    m = 0.0
    for i in range(d):
        v += z[i] * s[i]
        m += mu[i] * z[i]
    if v <= min_var:
        return 0
    alpha = scw_alpha(y * m, v, C, phi, psi, zeta)
    if alpha <= 0.0:
        return 0
    beta = alpha * phi / (scw_sqrt_u(alpha, v, phi) + v * alpha * phi)
    a = step_scale * alpha * y
    for i in range(d):
        mu[i] += a * s[i]
    # s_i·s_j == s_j·s_i exactly, so updating every entry keeps Σ exactly symmetric
    # while the inner loop stays contiguous.
    for i in range(d):
        si = s[i]
        for j in range(d):
            sigma[i, j] -= beta * (si * s[j])
    return 1


@njit(cache=True, nogil=True)
def full_learn_direct(X, y, mu, sigma, buf, order, n_seen, rng, policy, C, phi, psi, zeta,
                      step_scale, min_var, prior):
    """Full-covariance CBR (Prop. 1; Prop. 3 with ``step_scale`` = ½) over a batch,
    forming Σz from Σ for every pair: O(|B|·d²) per event. Cheaper than
    :func:`full_learn_cached` at small d, where many pairs update and keeping the
    buffered products costs more than it saves.

    If ``prior`` is non-empty, ``prior[t]`` receives μᵀx_t before event t is learned.
    """
    n, d = X.shape
    cap = buf.shape[1]
    z = np.empty(d)
    s = np.empty(d)
    updates = 0
    for t in range(n):
        if prior.shape[0]:
            prior[t] = dense_dot(mu, X[t])
        c = 1 if y[t] > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            buf[c, slot, :] = X[t]
        size = min(n_seen[opp], cap)
        for k in range(size):
            b = order[opp, k]
            for i in range(d):
                z[i] = X[t, i] - buf[opp, b, i]
            updates += _full_step(mu, sigma, z, s, y[t], C, phi, psi, zeta, step_scale,
                                  min_var)
    return updates


@njit(cache=True, nogil=True)
def _apply_updates(sigma, ps, count, x, sx, fuse):
    """Σ ← Σ − r_k r_kᵀ for k = 0 … count−1 (r_k = √β_k·s_k), in one pass over Σ.

    Each entry takes the updates in order, exactly as one pass per update would;
    r_i·r_j == r_j·r_i keeps Σ exactly symmetric. With ``fuse``, ``sx`` = Σx of the
    updated Σ from the same pass (summed in _sigma_times's order).
    """
    d = sigma.shape[0]
    if fuse:
        for j in range(d):
            sx[j] = 0.0
    for i in range(d):
        row = sigma[i]
        for k in range(count):
            ri = ps[k, i]
            rk = ps[k]
            for j in range(d):
                row[j] -= ri * rk[j]
        if fuse:
            xi = x[i]
            for j in range(d):
                sx[j] += row[j] * xi


@njit(cache=True, nogil=True)
def full_learn_cached(X, y, mu, sigma, buf, sbuf, order, n_seen, rng, policy, C, phi, psi,
                      zeta, step_scale, min_var, refresh, prior):
    """Full-covariance CBR (Prop. 1; Prop. 3 with ``step_scale`` = ½) over a batch.

    A pair needs s = Σz with z = x_t − b. Most pairs change nothing, so Σz is not formed
    from Σ (O(d²) per pair): ``sbuf`` holds Σb for every buffered row b, s = Σx_t − Σb
    costs O(d), and each update Σ ← Σ − β s sᵀ also updates Σx_t and every Σb by
    −β s (sᵀb), O(|B|·d). Equal to the direct products in exact arithmetic; every
    ``refresh`` events (counted over the stream, so any split of it refreshes at the
    same events) the products are recomputed from Σ. Σ itself is not read during an
    event's pair loop, so its rank-one updates are applied together in one pass, fused
    with the next event's Σx_t.

    If ``prior`` is non-empty, ``prior[t]`` receives μᵀx_t before event t is learned.
    """
    n, d = X.shape
    cap = buf.shape[1]
    s = np.empty(d)
    st = np.empty(d)  # Σx_t under the current Σ
    ps = np.empty((cap, d))  # this event's √β·s, applied to Σ at the next event
    pending = 0
    updates = 0
    for t in range(n):
        if prior.shape[0]:
            prior[t] = dense_dot(mu, X[t])
        x = X[t]
        if pending:
            _apply_updates(sigma, ps, pending, x, st, True)
            pending = 0
        else:
            _sigma_times(sigma, x, st)
        seen = n_seen[0] + n_seen[1]
        if seen > 0 and seen % refresh == 0:
            _refresh_products(sigma, buf, sbuf, order, n_seen)
        c = 1 if y[t] > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            buf[c, slot, :] = x
            sbuf[c, slot, :] = st
        size = min(n_seen[opp], cap)
        for k in range(size):
            b = order[opp, k]
            v = 0.0
            m = 0.0
            for i in range(d):
                zi = x[i] - buf[opp, b, i]
                v += zi * (st[i] - sbuf[opp, b, i])
                m += mu[i] * zi
            if v <= min_var:
                continue
            alpha = scw_alpha(y[t] * m, v, C, phi, psi, zeta)
            if alpha <= 0.0:
                continue  # most pairs: s = Σz is formed only for the few that update
            beta = alpha * phi / (scw_sqrt_u(alpha, v, phi) + v * alpha * phi)
            a = step_scale * alpha * y[t]
            root = math.sqrt(beta)
            for i in range(d):
                s[i] = st[i] - sbuf[opp, b, i]
                mu[i] += a * s[i]
                ps[pending, i] = root * s[i]
            pending += 1
            _rank_one_products(s, beta, x, st)
            for cc in range(2):
                for kk in range(min(n_seen[cc], cap)):
                    bb = order[cc, kk]
                    _rank_one_products(s, beta, buf[cc, bb], sbuf[cc, bb])
            updates += 1
    if pending:
        _apply_updates(sigma, ps, pending, st, st, False)
    return updates


@njit(cache=True, nogil=True, inline="always")
def _rank_one_products(s, beta, x, sx):
    """Σx after Σ ← Σ − β s sᵀ: sx ← sx − β (sᵀx) s."""
    dot = 0.0
    for i in range(x.shape[0]):
        dot += s[i] * x[i]
    f = beta * dot
    if f != 0.0:
        for i in range(x.shape[0]):
            sx[i] -= f * s[i]


@njit(cache=True, nogil=True)
def _diag_step(mu, G, zi, zv, nz, y, C, phi, psi, zeta, mode, min_var):
    """One diagonal SCW step on the sparse difference (zi, zv)[:nz]; see cbr.py Notes."""
    v = 0.0
    m = 0.0
    for k in range(nz):
        i = zi[k]
        zk = zv[k]
        m += mu[i] * zk
        if mode == DIAG_COV:
            v += G[i] * zk * zk
        elif mode == DIAG_PAPER:
            v += zk * zk / (G[i] + C)
        else:
            v += zk * zk / G[i]
    if v <= min_var:
        return 0
    alpha = scw_alpha(y * m, v, C, phi, psi, zeta)
    if alpha <= 0.0:
        return 0
    sqrt_u = scw_sqrt_u(alpha, v, phi)
    a = alpha * y
    if mode == DIAG_COV:
        beta = alpha * phi / (sqrt_u + v * alpha * phi)
        for k in range(nz):
            i = zi[k]
            si = G[i] * zv[k]
            mu[i] += a * si
            G[i] -= beta * si * si
    elif mode == DIAG_PAPER:
        beta = alpha * phi / (sqrt_u + v * alpha * phi)
        for k in range(nz):
            i = zi[k]
            mu[i] += a * zv[k] / G[i]
            G[i] += beta * zv[k] * zv[k]
    else:
        inc = alpha * phi / sqrt_u
        for k in range(nz):
            i = zi[k]
            mu[i] += a * zv[k] / G[i]
            G[i] += inc * zv[k] * zv[k]
    return 1


@njit(cache=True, nogil=True)
def diag_learn_dense(X, y, mu, G, buf, order, n_seen, rng, policy, C, phi, psi, zeta,
                     mode, min_var, prior):
    """Diagonal CBR over a dense batch with dense buffers (``prior`` as in full_learn)."""
    n, d = X.shape
    cap = buf.shape[1]
    zi = np.arange(d)
    zv = np.empty(d)
    updates = 0
    for t in range(n):
        if prior.shape[0]:
            prior[t] = dense_dot(mu, X[t])
        c = 1 if y[t] > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            buf[c, slot, :] = X[t]
        size = min(n_seen[opp], cap)
        for k in range(size):
            b = order[opp, k]
            for i in range(d):
                zv[i] = X[t, i] - buf[opp, b, i]
            updates += _diag_step(mu, G, zi, zv, d, y[t], C, phi, psi, zeta, mode, min_var)
    return updates


@njit(cache=True, nogil=True, inline="always")
def _diag_weight(g, C, mode):
    """The weight of z_i² in υ: G_i (cov), 1/(G_i + C) (paper), 1/G_i (prec)."""
    if mode == DIAG_COV:
        return g
    if mode == DIAG_PAPER:
        return 1.0 / (g + C)
    return 1.0 / g


@njit(cache=True, nogil=True, inline="always")
def _diag_update(mu, G, i, z, a, coef, mode):
    """The update of coordinate i for z_i (coef = β, or αφ/√u in 'prec' mode)."""
    if mode == DIAG_COV:
        si = G[i] * z
        mu[i] += a * si
        G[i] -= coef * si * si
    else:
        mu[i] += a * z / G[i]
        G[i] += coef * z * z


@njit(cache=True, nogil=True)
def _row_terms(mu, G, indices, values, lo, hi, C, mode):
    """(μᵀx, Σ w_i x_i²) for the CSR row values[lo:hi]."""
    a = 0.0
    q = 0.0
    for k in range(lo, hi):
        i = indices[k]
        v = values[k]
        a += mu[i] * v
        q += _diag_weight(G[i], C, mode) * v * v
    return a, q


@njit(cache=True, nogil=True)
def diag_learn_sparse(indptr, indices, values, y, mu, G, bidx, bval, bnnz, order, n_seen,
                      rng, policy, C, phi, psi, zeta, mode, min_var, prior, xt, mark):
    """Diagonal CBR over canonical CSR rows with sparse buffers: O(nnz) per pair.

    Most pairs change nothing (the pair is ranked with confidence already), so a pair is
    first tested without forming z = x_t − x_b: with x_t scattered into the workspace
    ``xt`` (length d, zero outside x_t), m = y(μᵀx_t − μᵀx_b) and
    υ = Σ_t w x_t² + Σ_b w x_b² − 2 Σ_b w x_t x_b, w the mode's weight — one pass over x_b.
    Only a pair that moves the model visits the union of both rows (``mark``, also
    length d, flags x_b's columns). Both workspaces are left all zero.
    """
    n = indptr.shape[0] - 1
    cap = bidx.shape[1]
    # A 32-kbit filter of x_t's columns (4 kB, stays in L1): most of x_b's columns are
    # not in x_t, and the filter spares each of them a lookup in the d-long ``xt``
    # (a cache miss at d = 2^20). Skipped terms are w·0·v, so sums are unchanged.
    seen = np.zeros(512, np.uint64)
    updates = 0
    for t in range(n):
        lo, hi = indptr[t], indptr[t + 1]
        if prior.shape[0]:
            prior[t] = sparse_dot(mu, indices, values, lo, hi)
        yt = y[t]
        c = 1 if yt > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            write_sparse_row(bidx, bval, bnnz, c, slot, indices[lo:hi], values[lo:hi])
        size = min(n_seen[opp], cap)
        if size == 0:
            continue
        for k in range(lo, hi):
            i = indices[k]
            xt[i] = values[k]
            seen[(i >> 6) & 511] |= np.uint64(1) << np.uint64(i & 63)
        a_t, q_t = _row_terms(mu, G, indices, values, lo, hi, C, mode)
        for kb in range(size):
            b = order[opp, kb]
            nb = bnnz[opp, b]
            bi = bidx[opp, b]
            bv = bval[opp, b]
            a_b = 0.0
            q_b = 0.0
            cross = 0.0
            for j in range(nb):
                i = bi[j]
                v = bv[j]
                w = _diag_weight(G[i], C, mode)
                a_b += mu[i] * v
                q_b += w * v * v
                if (seen[(i >> 6) & 511] >> np.uint64(i & 63)) & np.uint64(1):
                    cross += w * xt[i] * v
            v_pair = (q_t + q_b) - 2.0 * cross
            if v_pair <= min_var:
                continue
            alpha = scw_alpha(yt * (a_t - a_b), v_pair, C, phi, psi, zeta)
            if alpha <= 0.0:
                continue
            sqrt_u = scw_sqrt_u(alpha, v_pair, phi)
            if mode == DIAG_PREC:
                coef = alpha * phi / sqrt_u
            else:
                coef = alpha * phi / (sqrt_u + v_pair * alpha * phi)
            a = alpha * yt
            for j in range(nb):
                i = bi[j]
                _diag_update(mu, G, i, xt[i] - bv[j], a, coef, mode)
                mark[i] = 1
            for k in range(lo, hi):
                i = indices[k]
                if mark[i] == 0:
                    _diag_update(mu, G, i, values[k], a, coef, mode)
            for j in range(nb):
                mark[bi[j]] = 0
            a_t, q_t = _row_terms(mu, G, indices, values, lo, hi, C, mode)
            updates += 1
        for k in range(lo, hi):
            xt[indices[k]] = 0.0
            seen[(indices[k] >> 6) & 511] = np.uint64(0)
    return updates
