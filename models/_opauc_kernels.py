"""numba kernels of OPAUC (Gao, Jin, Zhu, Zhou, ICML 2013; the authors' ``OPAUC.m``).

Per event: update the own class's count, mean and population covariance with the
recursion of spec solam-mba §4.1, then, if the opposite class has been seen, take one
gradient step on λ/2‖w‖² + (1/n_opp) Σ_{j ∈ opp} ½(1 − y_t wᵀ(x_t − x_j))². Class index 0
is the negative class, 1 the positive class. O(d²) per event.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._kernels import dense_dot

__all__ = ["gradient", "learn", "update_moments"]


@njit(cache=True, nogil=True)
def update_moments(x, n, mean, cov, old):
    """c_old = c; c += (x − c)/n; Γ += (x xᵀ − Γ − c_old c_oldᵀ)/n + c_old c_oldᵀ − c cᵀ.

    ``n`` is the class count including x; ``old`` is scratch of length d. Every entry is
    computed from products that commute, so Γ stays exactly symmetric.
    """
    d = x.shape[0]
    for i in range(d):
        old[i] = mean[i]
        mean[i] += (x[i] - mean[i]) / n
    for i in range(d):
        xi = x[i]
        oi = old[i]
        mi = mean[i]
        for j in range(d):
            oo = oi * old[j]
            cov[i, j] += (xi * x[j] - cov[i, j] - oo) / n + oo - mi * mean[j]


@njit(cache=True, nogil=True)
def gradient(w, x, y, mean, cov, lam, z, g):
    """g = λw − y(x − c) + (x − c)(x − c)ᵀw + Γw with the opposite class's (c, Γ).

    For y = +1 this is the printed λw − x + c₋ + (x − c₋)(x − c₋)ᵀw + Γ₋w; for y = −1,
    λw + x − c₊ + … . Γw is accumulated row by row of the symmetric Γ (Γw = Σ_j w_j Γ[j]),
    so the inner loop is contiguous. ``z`` is scratch of length d; ``g`` receives g.
    """
    d = w.shape[0]
    zw = 0.0
    for i in range(d):
        zi = x[i] - mean[i]
        z[i] = zi
        zw += zi * w[i]
        g[i] = 0.0
    for j in range(d):
        wj = w[j]
        for i in range(d):
            g[i] += cov[j, i] * wj
    for i in range(d):
        g[i] += lam * w[i] - y * z[i] + z[i] * zw


@njit(cache=True, nogil=True)
def learn(X, y, w, means, covs, n_seen, eta, lam, prior):
    """OPAUC over a batch; returns the number of gradient steps taken.

    If ``prior`` is non-empty, ``prior[t]`` receives wᵀx_t before event t is learned.
    """
    n, d = X.shape
    old = np.empty(d)
    z = np.empty(d)
    g = np.empty(d)
    steps = 0
    for t in range(n):
        if prior.shape[0]:
            prior[t] = dense_dot(w, X[t])
        c = 1 if y[t] > 0 else 0
        opp = 1 - c
        n_seen[c] += 1
        update_moments(X[t], n_seen[c], means[c], covs[c], old)
        if n_seen[opp] > 0:
            gradient(w, X[t], y[t], means[opp], covs[opp], lam, z, g)
            for i in range(d):
                w[i] -= eta * g[i]
            steps += 1
    return steps
