"""numba kernels of AdaOAM (Ding, Zhao, Hoi, Ong, AAAI 2015, Algorithm 1).

Per event: update the own class's count, mean and population covariance exactly as
OPAUC does (:func:`models._opauc_kernels.update_moments`, imported, not copied), then, if
the opposite class has been seen, take the gradient g of OPAUC's mean pairwise square
loss (:func:`models._opauc_kernels.gradient`) and one diagonal AdaGrad step:
G += g ⊙ g, w −= η g ⊘ (δ + √G). Class index 0 is the negative class, 1 the positive
class. O(d²) per event.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._kernels import dense_dot
from ._opauc_kernels import gradient, update_moments

__all__ = ["ADAOAM_MAX_RIDGE", "adagrad_step", "learn"]

# ---------------------------------------------------------------- named limits (AdaOAM)
# Upper end of the ridge λ's range, as OPAUC's (the same objective λ/2‖w‖² + loss). Unlike
# OPAUC's constant step, AdaOAM's step moves each coordinate by less than η whatever λ,
# so no value in range diverges; above 100 the ridge alone decides w on unit-scale rows.
ADAOAM_MAX_RIDGE = 100.0


@njit(cache=True, nogil=True, inline="always")
def adagrad_step(w, g, gsq, eta, delta):
    """G_i += g_i²; w_i −= η g_i/(δ + √G_i): the diagonal AdaGrad step with H = δI + diag(√G).

    G includes the current gradient, so |η g_i/(δ + √G_i)| < η for every coordinate.
    """
    for i in range(w.shape[0]):
        gi = g[i]
        G = gsq[i] + gi * gi
        gsq[i] = G
        w[i] -= eta * gi / (delta + math.sqrt(G))


@njit(cache=True, nogil=True)
def learn(X, y, w, means, covs, gsq, n_seen, eta, lam, delta, prior):
    """AdaOAM over a batch; returns the number of gradient steps taken.

    ``gsq`` is G = Σ g ⊙ g over the steps taken so far. If ``prior`` is non-empty,
    ``prior[t]`` receives wᵀx_t before event t is learned.
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
            adagrad_step(w, g, gsq, eta, delta)
            steps += 1
    return steps
