"""numba kernels of online Uni-Exp (Kotłowski, Dembczyński, Hüllermeier, ICML 2011).

Per event (x_t, y_t), with π̂ = n_{y_t}/t the running frequency of its class (the event
included): one stochastic gradient step on λ/2‖w‖² + (1/π̂) e^{−y_t(wᵀx_t + b)}, the
class-weighted univariate exponential loss, with an unregularised intercept b:

    k = (η/π̂)·e^{−y_t(wᵀx_t + b)};  w ← (1 − ηλ)w + k·y_t·x_t;  b ← b + k·y_t.

Two layouts of the same algorithm:

- dense: w as a plain vector, O(d) per event; with ``normalize`` the kernels scale each
  row to unit L2 norm themselves (x/‖x‖, ‖x‖ summed in numpy's pairwise order) instead
  of taking a normalised copy of the batch;
- lazy (sparse rows): w = σ·u, the shrink (1 − ηλ) applied to the scalar σ and the row's
  term added to u at its non-zeros, O(nnz) per event plus a rare O(d) fold of σ into u.

Class index 0 is the negative class, 1 the positive class.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._config import MIN_ROW_NORM

__all__ = [
    "UNI_EXP_MAX_RIDGE",
    "UNI_EXP_MAX_STEP",
    "UNI_EXP_MIN_SCALE",
    "dense_learn",
    "dense_scores",
    "fold",
    "lazy_learn",
    "lazy_scores",
    "lazy_weights",
    "row_sqnorm",
]

# ------------------------------------------------- named limits and tolerances (Uni-Exp)
# Sparse layout: fold σ back into u (u ← σu, σ ← 1, O(d)) once σ falls below this. Then
# u = w/σ exceeds w by at most a factor 1e16/(1 − ηλ), so u stays finite unless |w| ≳ 1e292,
# and the lazy form rounds as the dense one does: w is a scaled copy of u, with no
# cancellation. A fold comes every ln(1e16)/(ηλ) ≈ 37/(ηλ) events: 9.4e7 at the defaults.
UNI_EXP_MIN_SCALE = 1e-16

# Upper end of the constant step η: the top of the papers' grid 2^[−10:10]. A step moves a
# unit row's score by up to η/π̂, and e^{−y·f(x)} overflows once a misranked score passes
# 709: at this η a stream of unit-scale rows already diverges within a few events
# (measured), so larger values would only be refused sooner.
UNI_EXP_MAX_STEP = 2.0**10

# Upper end of the ridge λ's range, as OPAUC's. The shrink factor 1 − ηλ must stay
# positive besides (checked with η at construction).
UNI_EXP_MAX_RIDGE = 100.0


@njit(cache=True, nogil=True, inline="always")
def _signed_step(s, y, n_own, t, eta):
    """k·y with k = (η/π̂)·e^{−y·s}, π̂ = n_own/t (the event included), s = wᵀx + b."""
    return y * (eta * (t / n_own)) * math.exp(-y * s)


# numpy's pairwise summation (``pairwise_sum`` of numpy/_core/src/umath/loops_utils.h):
# fewer than 8 terms left to right; up to PAIRWISE_BLOCK terms in eight interleaved
# partial sums; longer runs split in two halves, the first a multiple of 8, recursively.
PAIRWISE_BLOCK = 128


@njit(cache=True, nogil=True, inline="always")
def _sq_block(X, r, lo, n):
    """Σ X[r, i]² over lo ≤ i < lo + n (n ≤ PAIRWISE_BLOCK) in numpy's order."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += X[r, i] * X[r, i]
        return res
    a = X[r, lo]
    r0 = a * a
    a = X[r, lo + 1]
    r1 = a * a
    a = X[r, lo + 2]
    r2 = a * a
    a = X[r, lo + 3]
    r3 = a * a
    a = X[r, lo + 4]
    r4 = a * a
    a = X[r, lo + 5]
    r5 = a * a
    a = X[r, lo + 6]
    r6 = a * a
    a = X[r, lo + 7]
    r7 = a * a
    end = lo + n - n % 8
    for i in range(lo + 8, end, 8):
        a = X[r, i]
        r0 += a * a
        a = X[r, i + 1]
        r1 += a * a
        a = X[r, i + 2]
        r2 += a * a
        a = X[r, i + 3]
        r3 += a * a
        a = X[r, i + 4]
        r4 += a * a
        a = X[r, i + 5]
        r5 += a * a
        a = X[r, i + 6]
        r6 += a * a
        a = X[r, i + 7]
        r7 += a * a
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(end, lo + n):
        res += X[r, i] * X[r, i]
    return res


@njit(cache=True, nogil=True)
def _sq_split(X, r):
    """:func:`row_sqnorm` above PAIRWISE_BLOCK features: numpy's recursion on halves,
    evaluated on an explicit stack (a recursive njit function cannot be cached)."""
    lo_s = np.empty(64, np.int64)  # depth ≤ log2(d/64) + 1: 17 at 2^22 features
    n_s = np.empty(64, np.int64)
    stage = np.empty(64, np.int64)  # 0: go left, 1: left done, go right, 2: add
    left = np.empty(64)
    top = 0
    lo_s[0] = 0
    n_s[0] = X.shape[1]
    stage[0] = 0
    ret = 0.0  # the value of the frame popped last
    while top >= 0:
        lo = lo_s[top]
        n = n_s[top]
        if n <= PAIRWISE_BLOCK:
            ret = _sq_block(X, r, lo, n)
            top -= 1
            continue
        half = n // 2
        half -= half % 8
        if stage[top] == 0:
            stage[top] = 1
            top += 1
            lo_s[top] = lo
            n_s[top] = half
            stage[top] = 0
        elif stage[top] == 1:
            left[top] = ret
            stage[top] = 2
            top += 1
            lo_s[top] = lo + half
            n_s[top] = n - half
            stage[top] = 0
        else:
            ret = left[top] + ret
            top -= 1
    return ret


@njit(cache=True, nogil=True)
def row_sqnorm(X, r):
    """‖X[r]‖² summed in numpy's pairwise order: ``np.sqrt`` of it is
    ``np.linalg.norm(X, axis=1)[r]`` to the bit (numpy reduces x·x along the row so)."""
    if X.shape[1] <= PAIRWISE_BLOCK:
        return _sq_block(X, r, 0, X.shape[1])
    return _sq_split(X, r)


# The kernels below write their loops out in the row loop instead of calling helpers that
# take their arrays (``row_sqnorm``, ``dot4``, one filling the unit row): called there,
# those left numba's reference counting up to four atomic increments and decrements per
# row, a sixth of the learn kernel's time at d = 54 (measured).
@njit(cache=True, nogil=True)
def dense_learn(X, y, w, bias, n_seen, eta, lam, normalize, prior):
    """Uni-Exp over dense rows; ``bias`` = [b]; rows scaled to unit norm if ``normalize``
    (exactly as ``X / np.linalg.norm(X, axis=1, keepdims=True)``, all-zero rows kept). If
    ``prior`` is non-empty, ``prior[r]`` receives wᵀx_r + b before row r is learned (with
    :func:`dense_scores`' arithmetic)."""
    n, d = X.shape
    shrink = 1.0 - eta * lam
    x = np.empty(d)  # the row being learned, unit if normalize
    for r in range(n):
        norm = 0.0  # ‖x‖ as numpy's np.linalg.norm(X, axis=1) sums it (row_sqnorm)
        if normalize:
            norm = math.sqrt(_sq_block(X, r, 0, d) if d <= PAIRWISE_BLOCK else _sq_split(X, r))
        if norm > MIN_ROW_NORM:
            for i in range(d):
                x[i] = X[r, i] / norm
        else:
            for i in range(d):
                x[i] = X[r, i]
        s0 = 0.0  # wᵀx in four interleaved partial sums (_kernels.dot4's order)
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        i = 0
        while i + 4 <= d:
            s0 += x[i] * w[i]
            s1 += x[i + 1] * w[i + 1]
            s2 += x[i + 2] * w[i + 2]
            s3 += x[i + 3] * w[i + 3]
            i += 4
        while i < d:
            s0 += x[i] * w[i]
            i += 1
        s = (s0 + s1) + (s2 + s3) + bias[0]
        if prior.shape[0]:
            prior[r] = s
        c = 1 if y[r] > 0 else 0
        n_seen[c] += 1
        ky = _signed_step(s, y[r], n_seen[c], n_seen[0] + n_seen[1], eta)
        if shrink == 1.0:
            for i in range(d):
                w[i] += ky * x[i]
        else:
            for i in range(d):
                w[i] = shrink * w[i] + ky * x[i]
        bias[0] += ky


@njit(cache=True, nogil=True)
def dense_scores(X, w, b, normalize):
    """wᵀx + b per row (unit rows if ``normalize``), with :func:`dense_learn`'s
    arithmetic to the bit."""
    n, d = X.shape
    out = np.empty(n)
    x = np.empty(d)
    for r in range(n):
        norm = 0.0
        if normalize:
            norm = math.sqrt(_sq_block(X, r, 0, d) if d <= PAIRWISE_BLOCK else _sq_split(X, r))
        if norm > MIN_ROW_NORM:
            for i in range(d):
                x[i] = X[r, i] / norm
        else:
            for i in range(d):
                x[i] = X[r, i]
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        i = 0
        while i + 4 <= d:
            s0 += x[i] * w[i]
            s1 += x[i + 1] * w[i + 1]
            s2 += x[i + 2] * w[i + 2]
            s3 += x[i + 3] * w[i + 3]
            i += 4
        while i < d:
            s0 += x[i] * w[i]
            i += 1
        out[r] = (s0 + s1) + (s2 + s3) + b
    return out


@njit(cache=True, nogil=True)
def fold(u, scale):
    """Fold σ into u: u ← σu, σ ← 1 (``scale`` = [σ]); w = σu is unchanged up to rounding."""
    sigma = scale[0]
    for i in range(u.shape[0]):
        u[i] *= sigma
    scale[0] = 1.0


@njit(cache=True, nogil=True)
def lazy_learn(first, indptr, indices, values, y, u, scale, bias, n_seen, eta, lam,
               min_scale, prior, log_u, logged):
    """Uni-Exp over canonical CSR rows ``first``, ``first`` + 1, … in O(nnz) per event.

    w = σ·u with ``scale`` = [σ]: the shrink is σ ← (1 − ηλ)σ, and the row's term k·y·x is
    added to u as (k·y/σ)·x at its non-zeros. Returns ``(resume, fold_due, finite)``: after
    a row that leaves σ < ``min_scale`` the kernel stops with ``resume`` = that row + 1 and
    ``fold_due``; the caller runs :func:`fold` (O(d)) and calls again from ``resume``;
    otherwise ``resume`` is the batch length. ``finite`` says whether every value this call
    wrote into ``u`` is finite.

    Journal for an all-or-nothing batch (``models._atomic``), when ``log_u`` is non-empty
    (as long as the batch's CSR values): ``log_u[j]`` receives ``u[indices[j]]`` just
    before its row changes it, and ``logged[0]`` the end of the positions logged.
    """
    n = indptr.shape[0] - 1
    shrink = 1.0 - eta * lam
    journal = log_u.shape[0] > 0
    finite = True
    for r in range(first, n):
        lo, hi = indptr[r], indptr[r + 1]
        sigma = scale[0]
        acc = 0.0
        for j in range(lo, hi):
            acc += u[indices[j]] * values[j]
        s = sigma * acc + bias[0]
        if prior.shape[0]:
            prior[r] = s
        c = 1 if y[r] > 0 else 0
        n_seen[c] += 1
        ky = _signed_step(s, y[r], n_seen[c], n_seen[0] + n_seen[1], eta)
        sigma = sigma * shrink
        scale[0] = sigma
        coef = ky / sigma
        # x·0 is NaN for x = ±inf or NaN, else 0: ``chk`` says whether all are finite.
        chk = 0.0
        if journal:
            for j in range(lo, hi):
                i = indices[j]
                u0 = u[i]
                log_u[j] = u0
                ui = u0 + coef * values[j]
                u[i] = ui
                chk += ui * 0.0
            logged[0] = hi
        else:
            for j in range(lo, hi):
                i = indices[j]
                ui = u[i] + coef * values[j]
                u[i] = ui
                chk += ui * 0.0
        if chk != 0.0:
            finite = False
        bias[0] += ky
        if sigma < min_scale:
            return r + 1, True, finite
    return n, False, finite


@njit(cache=True, nogil=True)
def lazy_scores(indptr, indices, values, u, sigma, b):
    """σ·uᵀx + b per canonical CSR row, with :func:`lazy_learn`'s arithmetic to the bit."""
    n = indptr.shape[0] - 1
    out = np.empty(n)
    for r in range(n):
        acc = 0.0
        for j in range(indptr[r], indptr[r + 1]):
            acc += u[indices[j]] * values[j]
        out[r] = sigma * acc + b
    return out


@njit(cache=True, nogil=True)
def lazy_weights(u, sigma):
    """Dense w = σ·u of the lazy layout (O(d))."""
    out = np.empty(u.shape[0])
    for i in range(u.shape[0]):
        out[i] = sigma * u[i]
    return out
