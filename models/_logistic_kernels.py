"""numba kernels of NAG logistic regression (Ross, Mineiro and Langford, "Normalized
Online Learning", UAI 2013, Algorithm 2 — the update behind Vowpal Wabbit's default).

Per event x_t (a constant feature 1 included as the intercept), label y_t ∈ {−1, +1}:

    for i with x_ti ≠ 0 and |x_ti| > s_i:  w_i ← w_i·s_i²/x_ti²;  s_i ← |x_ti|
    ŷ = Σ_i w_i x_ti                                  (the prequential score)
    N ← N + Σ_i x_ti²/s_i²
    g_i = −y_t·σ(−y_t ŷ)·x_ti                           (logistic loss gradient)
    G_i ← G_i + g_i²;   w_i ← w_i − η·√(t/N)·g_i/(s_i·√G_i)

Only the row's non-zeros are touched: O(nnz) per event for CSR rows, O(d) for dense.
Each step moves w_i by at most η/s_i (|g_i| ≤ √G_i and t ≤ N, the intercept adding 1 to
N per event), so w stays finite on finite input.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["csr_learn", "csr_scores", "dense_learn", "dense_scores"]


@njit(cache=True, nogil=True, inline="always")
def _loss_slope(score, y):
    """−y·σ(−y·score), the derivative of log(1 + e^{−y·score}) in the score (stable)."""
    z = -y * score
    if z >= 0.0:
        return -y / (1.0 + math.exp(-z))
    e = math.exp(z)
    return -y * e / (1.0 + e)


@njit(cache=True, nogil=True, inline="always")
def _rescale(i, v, w, scale):
    a = abs(v)
    if a > scale[i]:
        if scale[i] > 0.0:
            r = scale[i] / a
            w[i] *= r * r
        scale[i] = a


@njit(cache=True, nogil=True, inline="always")
def _step(i, v, slope, rate, w, scale, gsq):
    g = slope * v
    if g != 0.0:
        gsq[i] += g * g
        w[i] -= rate * g / (scale[i] * math.sqrt(gsq[i]))


@njit(cache=True, nogil=True)
def csr_learn(indptr, indices, values, y, w, scale, gsq, bias, totals, n_seen, eta, prior):
    """Learn CSR rows in order. ``bias`` = (w₀, G₀) of the intercept; ``totals`` = (t, N);
    ``prior`` (when not empty) gets each row's score before its update."""
    for r in range(y.shape[0]):
        a, b = indptr[r], indptr[r + 1]
        norm = 1.0  # the intercept's (x/s)² = 1
        score = bias[0]
        for k in range(a, b):
            i = indices[k]
            v = values[k]
            if v != 0.0:
                _rescale(i, v, w, scale)
                score += w[i] * v
                q = v / scale[i]
                norm += q * q
        if prior.shape[0]:
            prior[r] = score
        yy = 1.0 if y[r] > 0 else -1.0
        totals[0] += 1.0
        totals[1] += norm
        rate = eta * math.sqrt(totals[0] / totals[1])
        slope = _loss_slope(score, yy)
        for k in range(a, b):
            v = values[k]
            if v != 0.0:
                _step(indices[k], v, slope, rate, w, scale, gsq)
        if slope != 0.0:
            bias[1] += slope * slope
            bias[0] -= rate * slope / math.sqrt(bias[1])
        n_seen[1 if y[r] > 0 else 0] += 1


@njit(cache=True, nogil=True)
def dense_learn(X, y, w, scale, gsq, bias, totals, n_seen, eta, prior):
    """:func:`csr_learn` on dense rows (zeros skipped: the same arithmetic)."""
    d = X.shape[1]
    for r in range(y.shape[0]):
        norm = 1.0
        score = bias[0]
        for i in range(d):
            v = X[r, i]
            if v != 0.0:
                _rescale(i, v, w, scale)
                score += w[i] * v
                q = v / scale[i]
                norm += q * q
        if prior.shape[0]:
            prior[r] = score
        yy = 1.0 if y[r] > 0 else -1.0
        totals[0] += 1.0
        totals[1] += norm
        rate = eta * math.sqrt(totals[0] / totals[1])
        slope = _loss_slope(score, yy)
        for i in range(d):
            v = X[r, i]
            if v != 0.0:
                _step(i, v, slope, rate, w, scale, gsq)
        if slope != 0.0:
            bias[1] += slope * slope
            bias[0] -= rate * slope / math.sqrt(bias[1])
        n_seen[1 if y[r] > 0 else 0] += 1


@njit(cache=True, nogil=True)
def csr_scores(indptr, indices, values, w, scale, b):
    """Scores of CSR rows. A value beyond a feature's scale is scored as the next learn
    would see it after rescaling: w_i·s_i²/x²·x."""
    n = indptr.shape[0] - 1
    out = np.empty(n)
    for r in range(n):
        s = b
        for k in range(indptr[r], indptr[r + 1]):
            i = indices[k]
            v = values[k]
            a = abs(v)
            if a > scale[i] and scale[i] > 0.0:
                q = scale[i] / a
                s += (w[i] * (q * q)) * v
            else:
                s += w[i] * v
        out[r] = s
    return out


@njit(cache=True, nogil=True)
def dense_scores(X, w, scale, b):
    n, d = X.shape
    out = np.empty(n)
    for r in range(n):
        s = b
        for i in range(d):
            v = X[r, i]
            if v != 0.0:
                a = abs(v)
                if a > scale[i] and scale[i] > 0.0:
                    q = scale[i] / a
                    s += (w[i] * (q * q)) * v
                else:
                    s += w[i] * v
        out[r] = s
    return out
