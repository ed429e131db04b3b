"""numba kernels of SOLAM (Ying, Wen, Lyu, NIPS 2016, Table 1).

Each ``*_learn`` call applies a whole batch of events in order and updates the state
arrays in place. Two layouts of the same algorithm:

- dense: ``w`` and the paper's averaged ``wbar`` as plain vectors, O(d) per event;
- lazy (sparse rows): w = σ·u with ‖w‖² tracked incrementally and the γ-weighted sum
  A = Σ_j γ_j w_j = Γ·w̄ kept as A = c·u − Ã (spec solam-mba §2.11), O(nnz) per event
  plus a rare O(d) fold of σ back into u.

Class index 0 is the negative class, 1 the positive class. ``dense_learn`` returns the
number of events whose primal step was non-zero (0 while only one class has been seen);
``lazy_learn`` returns to its caller for each fold (see there).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._config import MIN_ROW_NORM
from ._kernels import dot4

__all__ = [
    "dense_learn",
    "dense_scores",
    "fold",
    "gradients",
    "lazy_learn",
    "lazy_scores",
    "lazy_weights",
]


@njit(cache=True, nogil=True, inline="always")
def gradients(s, y, p, a, b, alpha):
    """Partial derivatives of F̂_t (eq. 12) at s = wᵀx: (g_w, g_a, g_b, g_α).

    ∂_w F̂ = g_w·x. ``p`` is p̂_t (the current label included). Spec solam-mba §2.4.
    """
    if y > 0:
        q = 1.0 - p
        g_w = 2.0 * q * (s - a - 1.0 - alpha)
        g_a = -2.0 * q * (s - a)
        g_b = 0.0
        g_alpha = -2.0 * q * s - 2.0 * p * q * alpha
    else:
        g_w = 2.0 * p * (s - b + 1.0 + alpha)
        g_a = 0.0
        g_b = -2.0 * p * (s - b)
        g_alpha = 2.0 * p * s - 2.0 * p * (1.0 - p) * alpha
    return g_w, g_a, g_b, g_alpha


@njit(cache=True, nogil=True, inline="always")
def _clip(v, bound):
    if v > bound:
        return bound
    if v < -bound:
        return -bound
    return v


@njit(cache=True, nogil=True, inline="always")
def _scalar_step(aba, aba_bar, f0, f1, gamma, g_a, g_b, g_alpha, bound):
    """Average the pre-update (a, b, α), then step and clip them (Table 1 steps 4, 5, 7)."""
    for k in range(3):
        aba_bar[k] = f0 * aba_bar[k] + f1 * aba[k]
    aba[0] = _clip(aba[0] - gamma * g_a, bound)
    aba[1] = _clip(aba[1] - gamma * g_b, bound)
    aba[2] = _clip(aba[2] + gamma * g_alpha, 2.0 * bound)


@njit(cache=True, nogil=True, inline="always")
def _unit_row(row, xs, normalize, kappa):
    """The row the model sees: x/‖x‖ in ``xs`` when normalising (zero rows as they are);
    otherwise the row itself, raising κ to its norm if ``kappa`` is non-empty."""
    nrm = math.sqrt(dot4(row, row))
    if normalize:
        if nrm > MIN_ROW_NORM:
            inv = 1.0 / nrm  # one division per row, not one per feature
            for i in range(row.shape[0]):
                xs[i] = row[i] * inv
            return xs
        return row
    if kappa.shape[0] and nrm > kappa[0]:
        kappa[0] = nrm
    return row


@njit(cache=True, nogil=True)
def dense_learn(X, y, w, wbar, aba, aba_bar, gsum, kappa, n_seen, zeta, R, normalize,
                average, prior):
    """SOLAM over dense rows: w, w̄ as vectors; (a, b, α) and their averages in ``aba``,
    ``aba_bar``; ``gsum`` = [Γ]; ``kappa`` = [κ]. If ``prior`` is non-empty, ``prior[r]``
    receives the served score (w̄ᵀx̃ if ``average`` else wᵀx̃) before row r is learned."""
    n, d = X.shape
    xs = np.empty(d)
    R2 = R * R
    steps = 0
    # Reductions use dot4's four partial sums (the same as dense_scores), which keeps
    # the add chains short: with one accumulator they bounded the whole kernel.
    for r in range(n):
        x = _unit_row(X[r], xs, normalize, kappa)
        c = 1 if y[r] > 0 else 0
        n_seen[c] += 1
        t = n_seen[0] + n_seen[1]
        p = n_seen[1] / t
        gamma = zeta / math.sqrt(t)
        s = dot4(x, w)
        if prior.shape[0]:
            prior[r] = dot4(x, wbar) if average else s
        g_w, g_a, g_b, g_alpha = gradients(s, y[r], p, aba[0], aba[1], aba[2])
        g0 = gsum[0]
        g1 = g0 + gamma
        gsum[0] = g1
        f0 = g0 / g1
        f1 = gamma / g1
        step = gamma * g_w
        for i in range(d):
            wi = w[i]
            wbar[i] = f0 * wbar[i] + f1 * wi
            w[i] = wi - step * x[i]
        nsq = dot4(w, w)
        if nsq > R2:
            shrink = R / math.sqrt(nsq)
            for i in range(d):
                w[i] *= shrink
        if step != 0.0:
            steps += 1
        _scalar_step(aba, aba_bar, f0, f1, gamma, g_a, g_b, g_alpha, R * kappa[0])
    return steps


@njit(cache=True, nogil=True)
def fold(u, atil, lazy):
    """Fold σ into u: u ← σu, σ ← 1, and restart c at 0 with Ã ← −A (A = c·u − Ã)."""
    scale = lazy[0]
    c = lazy[2]
    sq = 0.0
    for i in range(u.shape[0]):
        atil[i] = atil[i] - c * u[i]
        ui = u[i] * scale
        u[i] = ui
        sq += ui * ui
    lazy[0] = 1.0
    lazy[1] = sq
    lazy[2] = 0.0


@njit(cache=True, nogil=True)
def lazy_learn(first, indptr, indices, values, y, u, atil, lazy, aba, aba_bar, gsum, kappa,
               n_seen, zeta, R, normalize, min_scale, average, prior, log_u, log_a, logged):
    """SOLAM over canonical CSR rows ``first``, ``first`` + 1, … in O(nnz) per event
    (spec solam-mba §2.11).

    ``lazy`` = [σ, ‖w‖², c] with w = σ·u, c = Σ_j γ_j σ_j since the last fold, and
    Γ·w̄ = c·u − Ã (``atil`` = Ã).

    Returns ``(resume, fold_due, finite)``. After a row whose step leaves σ <
    ``min_scale`` the kernel stops with ``resume`` = that row + 1 and ``fold_due``; the
    caller runs :func:`fold` (O(d)) and calls again from ``resume``; otherwise
    ``resume`` is the batch length. (The fold used to run inside the row, before its
    (a, b, α) step; the two touch disjoint arrays, so the order changes no bit.)
    ``finite`` says whether every value this call wrote into ``u`` and ``atil`` is
    finite.

    Journal for an all-or-nothing batch (``models._atomic``), when ``log_u`` is
    non-empty (as long as the batch's CSR values): for each position j of a row,
    ``log_u[j]`` and ``log_a[j]`` receive ``u`` and ``atil`` at ``indices[j]`` just before
    the row changes them, and ``logged[0]`` the end of the positions logged so far.
    """
    n = indptr.shape[0] - 1
    max_row = 0
    for r in range(first, n):
        max_row = max(max_row, indptr[r + 1] - indptr[r])
    xs = np.empty(max_row)
    R2 = R * R
    journal = log_u.shape[0] > 0
    finite = True
    for r in range(first, n):
        lo, hi = indptr[r], indptr[r + 1]
        m = hi - lo
        sq = 0.0
        for k in range(m):
            sq += values[lo + k] * values[lo + k]
        nrm = math.sqrt(sq)
        xsq = sq
        if normalize and nrm > MIN_ROW_NORM:
            xsq = 0.0
            for k in range(m):
                v = values[lo + k] / nrm
                xs[k] = v
                xsq += v * v
        else:
            for k in range(m):
                xs[k] = values[lo + k]
            if not normalize and nrm > kappa[0]:
                kappa[0] = nrm
        c = 1 if y[r] > 0 else 0
        n_seen[c] += 1
        t = n_seen[0] + n_seen[1]
        p = n_seen[1] / t
        gamma = zeta / math.sqrt(t)
        scale = lazy[0]
        us = 0.0
        for k in range(m):
            us += u[indices[lo + k]] * xs[k]
        s = scale * us
        if prior.shape[0]:
            # the served score before this row, with lazy_scores' arithmetic
            if not average:
                prior[r] = s
            elif gsum[0] == 0.0:
                prior[r] = 0.0
            else:
                acc = 0.0
                for k in range(m):
                    i = indices[lo + k]
                    acc += (lazy[2] * u[i] - atil[i]) * xs[k]
                prior[r] = acc / gsum[0]
        g_w, g_a, g_b, g_alpha = gradients(s, y[r], p, aba[0], aba[1], aba[2])
        # Step 7 (average of the pre-update iterate): A += γ·w = γσ·u, i.e. c += γσ.
        g0 = gsum[0]
        g1 = g0 + gamma
        gsum[0] = g1
        csum = lazy[2] + gamma * scale
        lazy[2] = csum
        # Step 4: w ← w − γ g_w x, i.e. u ← u + δ with δ = −(γ g_w / σ) x; Ã += c·δ keeps
        # c·u − Ã unchanged.
        step = gamma * g_w
        fold_due = False
        if step != 0.0:
            coef = -step / scale
            ccoef = csum * coef
            # x·0 is NaN for x = ±inf or NaN, else 0: ``chk`` says whether all are finite.
            chk = 0.0
            if journal:
                for k in range(m):
                    i = indices[lo + k]
                    u0 = u[i]
                    a0 = atil[i]
                    log_u[lo + k] = u0
                    log_a[lo + k] = a0
                    ui = u0 + coef * xs[k]
                    ai = a0 + ccoef * xs[k]
                    u[i] = ui
                    atil[i] = ai
                    chk += ui * 0.0 + ai * 0.0
            else:
                for k in range(m):
                    i = indices[lo + k]
                    ui = u[i] + coef * xs[k]
                    ai = atil[i] + ccoef * xs[k]
                    u[i] = ui
                    atil[i] = ai
                    chk += ui * 0.0 + ai * 0.0
            if chk != 0.0:
                finite = False
            wsq = lazy[1] - 2.0 * step * s + step * step * xsq
            if wsq < 0.0:
                wsq = 0.0
            if wsq > R2:
                lazy[0] = scale * (R / math.sqrt(wsq))
                wsq = R2
            lazy[1] = wsq
            fold_due = lazy[0] < min_scale
        elif journal:  # nothing changes; the positions are logged all the same
            for k in range(m):
                log_u[lo + k] = u[indices[lo + k]]
                log_a[lo + k] = atil[indices[lo + k]]
        if journal:
            logged[0] = hi
        _scalar_step(aba, aba_bar, g0 / g1, gamma / g1, gamma, g_a, g_b, g_alpha,
                     R * kappa[0])
        if fold_due:
            return r + 1, True, finite
    return n, False, finite


@njit(cache=True, nogil=True, inline="always")
def _row_norm(values, lo, hi, normalize):
    """The divisor of a row: ‖x‖ if it is normalised (norm > MIN_ROW_NORM), else 1."""
    if not normalize:
        return 1.0
    sq = 0.0
    for j in range(lo, hi):
        sq += values[j] * values[j]
    nrm = math.sqrt(sq)
    return nrm if nrm > MIN_ROW_NORM else 1.0


@njit(cache=True, nogil=True)
def dense_scores(X, w, normalize):
    """wᵀx̃ per row, x̃ = x/‖x‖, with the learn kernel's arithmetic to the bit."""
    n, d = X.shape
    out = np.empty(n)
    xs = np.empty(d)
    no_kappa = np.zeros(0)
    for r in range(n):
        out[r] = dot4(_unit_row(X[r], xs, normalize, no_kappa), w)
    return out


@njit(cache=True, nogil=True)
def lazy_scores(indptr, indices, values, u, atil, scale, csum, gsum, average, normalize):
    """Scores of canonical CSR rows: w̄ᵀx̃ = Σ (c·u_i − Ã_i)·x̃_i / Γ, or wᵀx̃ = σ·uᵀx̃.

    O(nnz) per row; with Γ = 0 (nothing learned yet) w̄ is the paper's v̄_0 = 0.
    """
    n = indptr.shape[0] - 1
    out = np.zeros(n)
    if average and gsum == 0.0:
        return out
    for r in range(n):
        lo, hi = indptr[r], indptr[r + 1]
        nrm = _row_norm(values, lo, hi, normalize)
        acc = 0.0
        for j in range(lo, hi):
            i = indices[j]
            v = values[j] / nrm if nrm != 1.0 else values[j]
            if average:
                acc += (csum * u[i] - atil[i]) * v
            else:
                acc += u[i] * v
        out[r] = acc / gsum if average else scale * acc
    return out


@njit(cache=True, nogil=True)
def lazy_numerator(u, atil, csum):
    """c·u − Ã element by element, rounded exactly as :func:`lazy_scores` forms it."""
    out = np.empty(u.shape[0])
    for i in range(u.shape[0]):
        out[i] = csum * u[i] - atil[i]
    return out


@njit(cache=True, nogil=True)
def numerator_scores(indptr, indices, values, num, gsum, normalize):
    """:func:`lazy_scores` serving w̄ from a precomputed numerator c·u − Ã: the same
    products summed in the same order, so the same bits, from one array instead of two."""
    n = indptr.shape[0] - 1
    out = np.zeros(n)
    if gsum == 0.0:
        return out
    for r in range(n):
        lo, hi = indptr[r], indptr[r + 1]
        nrm = _row_norm(values, lo, hi, normalize)
        acc = 0.0
        for j in range(lo, hi):
            v = values[j] / nrm if nrm != 1.0 else values[j]
            acc += num[indices[j]] * v
        out[r] = acc / gsum
    return out


@njit(cache=True, nogil=True)
def lazy_weights(u, atil, scale, csum, gsum, average):
    """Dense w̄ = (c·u − Ã)/Γ or w = σ·u of the lazy layout (O(d))."""
    d = u.shape[0]
    out = np.zeros(d)
    if average:
        if gsum == 0.0:
            return out
        for i in range(d):
            out[i] = (csum * u[i] - atil[i]) / gsum
    else:
        for i in range(d):
            out[i] = scale * u[i]
    return out
