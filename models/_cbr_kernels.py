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

from ._buffers import admit, sparse_diff, write_sparse_row
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
def _full_step(mu, sigma, z, s, y, C, phi, psi, zeta, step_scale, min_var):
    d = z.shape[0]
    # s = Σz column by column (Σ is exactly symmetric, so row j is column j): each s_i
    # still sums Σ_ij z_j for j = 0, 1, … in order, but the inner loop runs along a row
    # and vectorises, where a dot product per row could not.
    for i in range(d):
        s[i] = 0.0
    for j in range(d):
        zj = z[j]
        for i in range(d):
            s[i] += sigma[j, i] * zj
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
def full_learn(X, y, mu, sigma, buf, order, n_seen, rng, policy, C, phi, psi, zeta,
               step_scale, min_var, prior):
    """Full-covariance CBR (Prop. 1; Prop. 3 with ``step_scale`` = ½) over a batch.

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


@njit(cache=True, nogil=True)
def diag_learn_sparse(indptr, indices, values, y, mu, G, bidx, bval, bnnz, order, n_seen,
                      rng, policy, C, phi, psi, zeta, mode, min_var, prior):
    """Diagonal CBR over canonical CSR rows with sparse buffers: O(nnz) per pair."""
    n = indptr.shape[0] - 1
    cap = bidx.shape[1]
    width = bidx.shape[2]
    max_row = 0
    for t in range(n):
        max_row = max(max_row, indptr[t + 1] - indptr[t])
    zi = np.empty(max_row + width, np.int64)
    zv = np.empty(max_row + width)
    updates = 0
    for t in range(n):
        a, e = indptr[t], indptr[t + 1]
        if prior.shape[0]:
            prior[t] = sparse_dot(mu, indices, values, a, e)
        c = 1 if y[t] > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            write_sparse_row(bidx, bval, bnnz, c, slot, indices[a:e], values[a:e])
        size = min(n_seen[opp], cap)
        for k in range(size):
            b = order[opp, k]
            nz = sparse_diff(indices[a:e], values[a:e], e - a, bidx[opp, b], bval[opp, b],
                             bnnz[opp, b], zi, zv)
            updates += _diag_step(mu, G, zi, zv, nz, y[t], C, phi, psi, zeta, mode, min_var)
    return updates
