"""numba kernels of online Uni-Exp (Kotłowski, Dembczyński, Hüllermeier, ICML 2011).

Per event (x_t, y_t), with π̂ = n_{y_t}/t the running frequency of its class (the event
included): one stochastic gradient step on λ/2‖w‖² + (1/π̂) e^{−y_t(wᵀx_t + b)}, the
class-weighted univariate exponential loss, with an unregularised intercept b:

    k = (η/π̂)·e^{−y_t(wᵀx_t + b)};  w ← (1 − ηλ)w + k·y_t·x_t;  b ← b + k·y_t.

Two layouts of the same algorithm:

- dense: w as a plain vector, O(d) per event;
- lazy (sparse rows): w = σ·u, the shrink (1 − ηλ) applied to the scalar σ and the row's
  term added to u at its non-zeros, O(nnz) per event plus a rare O(d) fold of σ into u.

Class index 0 is the negative class, 1 the positive class.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._kernels import dot4

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


@njit(cache=True, nogil=True)
def dense_learn(X, y, w, bias, n_seen, eta, lam, prior):
    """Uni-Exp over dense rows; ``bias`` = [b]. If ``prior`` is non-empty, ``prior[r]``
    receives wᵀx_r + b before row r is learned (with :func:`dense_scores`' arithmetic)."""
    n, d = X.shape
    shrink = 1.0 - eta * lam
    for r in range(n):
        x = X[r]
        s = dot4(x, w) + bias[0]
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
def dense_scores(X, w, b):
    """wᵀx + b per row, with the learn kernel's arithmetic to the bit."""
    n = X.shape[0]
    out = np.empty(n)
    for r in range(n):
        out[r] = dot4(X[r], w) + b
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
