"""numba kernels of NAG logistic regression (Ross, Mineiro and Langford, "Normalized
Online Learning", UAI 2013, Algorithm 2) with Vowpal Wabbit's default update
(``--adaptive --normalized --invariant``); the rescale comes before the score, as in the
paper (VW scores first).

Per event x_t (a constant feature 1 included as the intercept), label y_t ∈ {−1, +1}:

    for i with x_ti ≠ 0 and |x_ti| > s_i:  w_i ← w_i·s_i/|x_ti|;  s_i ← |x_ti|
    ŷ = Σ_i w_i x_ti                                  (the prequential score)
    N ← N + Σ_i x_ti²/s_i²;   m = √(t/N)
    ℓ′ = −y_t·σ(−y_t ŷ)                                (logistic loss slope in ŷ)
    G_i ← G_i + ℓ′²x_ti²;   r_i = 1/(s_i·√G_i);   p = m·Σ_i x_ti² r_i
    u = −η·ℓ′                       (plain gradient step), or with ``invariant``:
    u = the importance-invariant step: ŷ moves to the end of the flow dŷ/dh = −η·p·ℓ′(ŷ)
        for h ∈ [0, 1] (Karampatziakis and Langford, "Online Importance Weight Aware
        Updates", UAI 2011), solved exactly for the logistic loss; u = Δŷ / p
    w_i ← w_i + u·m·r_i·x_ti

Only the row's non-zeros are touched: O(nnz) per event for CSR rows, O(d) for dense.
The invariant step is never longer than the gradient step, and the gradient step moves
w_i by at most η/s_i (|ℓ′x_ti| ≤ √G_i and t ≤ N, the intercept adding 1 to N per
event), so w stays finite on finite input.
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
    """A larger |x_i| than seen: w_i as if that had been the scale all along (linear in
    the ratio under adaptive steps, as VW's gd.cc rescales)."""
    a = abs(v)
    if a > scale[i]:
        if scale[i] > 0.0:
            w[i] *= scale[i] / a
        scale[i] = a


@njit(cache=True, nogil=True, inline="always")
def _rate(i, scale, gsq):
    """r_i = 1/(s_i·√G_i); 0 while G_i is 0 (a gradient that underflowed)."""
    g = gsq[i]
    return 1.0 / (scale[i] * math.sqrt(g)) if g > 0.0 else 0.0


@njit(cache=True, nogil=True, inline="always")
def _accumulate(i, v, slope, scale, gsq):
    """G_i ← G_i + (ℓ′x_i)²; returns x_i²·r_i, the row's share of the step's effect on ŷ."""
    g = slope * v
    gsq[i] += g * g
    return v * v * _rate(i, scale, gsq)


@njit(cache=True, nogil=True)
def invariant_rise(z0, c):
    """δ ≥ 0 with δ + e^{z0}·(e^δ − 1) = c: how far the margin z = yŷ moves along
    dz/dh = c·σ(−z) over h ∈ [0, 1] (its exact solution). Safeguarded Newton from the
    first-order step c·σ(−z0), which is never below the root (the left side is convex in
    δ); for z0 > 0 the equation is divided by e^{z0} so that nothing overflows."""
    if c <= 0.0:
        return 0.0
    if z0 > 0.0:
        a = math.exp(-z0)  # solve a·δ + (e^δ − 1) = a·c
        rhs = a * c
        delta = min(rhs / (1.0 + a), math.log1p(rhs))
        for _ in range(60):
            f = a * delta + math.expm1(delta) - rhs
            step = f / (a + math.exp(delta))
            delta -= step
            if step <= 1e-15 * delta:
                break
    else:
        e0 = math.exp(z0)  # solve δ + e^{z0}·(e^δ − 1) = c
        # the root has e^{z0}·(e^δ − 1) ≤ c, so z0 + δ ≤ log(e^{z0} + c): e^{z0+δ} is finite
        delta = min(c / (1.0 + e0), math.log(e0 + c) - z0)
        for _ in range(60):
            grown = e0 * math.expm1(delta) if delta < 1.0 else math.exp(z0 + delta) - e0
            f = delta + grown - c
            step = f / (1.0 + math.exp(z0 + delta))
            delta -= step
            if step <= 1e-15 * delta:
                break
    return max(delta, 0.0)


@njit(cache=True, nogil=True, inline="always")
def _update(score, yy, slope, eta, effect, invariant):
    """u of the module docstring; ``effect`` = p, how far a unit u moves ŷ."""
    if not invariant or effect <= 0.0:
        return -eta * slope
    return yy * invariant_rise(yy * score, eta * effect) / effect


@njit(cache=True, nogil=True)
def csr_learn(indptr, indices, values, y, w, scale, gsq, bias, totals, n_seen, eta,
              invariant, prior):
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
        slope = _loss_slope(score, yy)
        if slope != 0.0:
            m = math.sqrt(totals[0] / totals[1])
            bias[1] += slope * slope
            effect = 1.0 / math.sqrt(bias[1])
            for k in range(a, b):
                v = values[k]
                if v != 0.0:
                    effect += _accumulate(indices[k], v, slope, scale, gsq)
            step = m * _update(score, yy, slope, eta, m * effect, invariant)
            for k in range(a, b):
                i = indices[k]
                v = values[k]
                if v != 0.0:
                    w[i] += step * v * _rate(i, scale, gsq)
            bias[0] += step / math.sqrt(bias[1])
        n_seen[1 if y[r] > 0 else 0] += 1


@njit(cache=True, nogil=True)
def dense_learn(X, y, w, scale, gsq, bias, totals, n_seen, eta, invariant, prior):
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
        slope = _loss_slope(score, yy)
        if slope != 0.0:
            m = math.sqrt(totals[0] / totals[1])
            bias[1] += slope * slope
            effect = 1.0 / math.sqrt(bias[1])
            for i in range(d):
                v = X[r, i]
                if v != 0.0:
                    effect += _accumulate(i, v, slope, scale, gsq)
            step = m * _update(score, yy, slope, eta, m * effect, invariant)
            for i in range(d):
                v = X[r, i]
                if v != 0.0:
                    w[i] += step * v * _rate(i, scale, gsq)
            bias[0] += step / math.sqrt(bias[1])
        n_seen[1 if y[r] > 0 else 0] += 1


@njit(cache=True, nogil=True)
def csr_scores(indptr, indices, values, w, scale, b):
    """Scores of CSR rows. A value beyond a feature's scale is scored as the next learn
    would see it after rescaling: w_i·s_i/|x|·x."""
    n = indptr.shape[0] - 1
    out = np.empty(n)
    for r in range(n):
        s = b
        for k in range(indptr[r], indptr[r + 1]):
            i = indices[k]
            v = values[k]
            a = abs(v)
            if a > scale[i] and scale[i] > 0.0:
                s += (w[i] * (scale[i] / a)) * v
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
                    s += (w[i] * (scale[i] / a)) * v
                else:
                    s += w[i] * v
        out[r] = s
    return out
