"""Feature maps shared by the kernel learners: random Fourier features (RFF), Nyström.

For the Gaussian kernel κ(x, y) = exp(−‖x − y‖² / (2σ²)), Bochner's theorem gives
κ(x, y) = E_θ[cos θᵀ(x − y)] with θ ~ N(0, σ⁻² I), so pairs of sin/cos features
approximate it: Σ_j [sin θ_jᵀx sin θ_jᵀy + cos θ_jᵀx cos θ_jᵀy] / m ≈ κ(x, y).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._rng import normals

__all__ = ["draw_rff", "gaussian_gram", "nystrom_map", "rbf", "rff_map", "sqdist"]


def draw_rff(rng: np.ndarray, n_components: int, n_features: int, sigma: float) -> np.ndarray:
    """Frequencies θ (n_components × n_features) ~ N(0, σ⁻² I), drawn from ``rng``."""
    theta = np.empty((n_components, n_features))
    normals(rng, theta)
    theta /= sigma
    return theta


@njit(cache=True, nogil=True)
def rff_map(X, theta, scale, sin_first):
    """Map rows of X to 2m features: scale·(f(θ_1ᵀx), g(θ_1ᵀx), …, f(θ_mᵀx), g(θ_mᵀx)).

    ``sin_first`` gives (sin, cos) pairs (the dissertation's FCBR, Eq. 5.2), otherwise
    (cos, sin) pairs (Ding et al.'s FOAM, Algorithm 4).
    """
    n, d = X.shape
    m = theta.shape[0]
    out = np.empty((n, 2 * m))
    for r in range(n):
        for j in range(m):
            a = 0.0
            for i in range(d):
                a += theta[j, i] * X[r, i]
            if sin_first:
                out[r, 2 * j] = scale * math.sin(a)
                out[r, 2 * j + 1] = scale * math.cos(a)
            else:
                out[r, 2 * j] = scale * math.cos(a)
                out[r, 2 * j + 1] = scale * math.sin(a)
    return out


# ---------------------------------------------------------------- Gaussian kernel, Nyström
# NOAM (Ding et al. 2017, eq. 4) maps x to z(x) = Pᵀ c(x) with c(x) = [κ(x̂_1, x), …,
# κ(x̂_Q, x)] over frozen landmarks x̂ and a projection P = V_k D_k^{-1/2}. The kernel is
# the same κ as above, written with γ = 1/(2σ²). Every sum runs in a fixed order, so a
# row's value never depends on the batch it arrives in.


@njit(cache=True, nogil=True, inline="always")
def sqdist(a, b):
    """‖a − b‖² of two 1-D rows, summed in four interleaved partial sums: a fixed order,
    so the same bits on every call, with independent chains the CPU can overlap."""
    n = a.shape[0]
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    i = 0
    while i + 4 <= n:
        d0 = a[i] - b[i]
        d1 = a[i + 1] - b[i + 1]
        d2 = a[i + 2] - b[i + 2]
        d3 = a[i + 3] - b[i + 3]
        s0 += d0 * d0
        s1 += d1 * d1
        s2 += d2 * d2
        s3 += d3 * d3
        i += 4
    while i < n:
        d0 = a[i] - b[i]
        s0 += d0 * d0
        i += 1
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, nogil=True, inline="always")
def rbf(a, b, gamma):
    """κ(a, b) = exp(−γ‖a − b‖²) for two 1-D rows (γ = 1/(2σ²)), ‖a − b‖² by
    :func:`sqdist`."""
    return math.exp(-gamma * sqdist(a, b))


@njit(cache=True, nogil=True)
def gaussian_gram(A, B, sigma):
    """Matrix of κ(A_i, B_j) = exp(−‖A_i − B_j‖²/(2σ²))."""
    gamma = 0.5 / (sigma * sigma)
    out = np.empty((A.shape[0], B.shape[0]))
    for i in range(A.shape[0]):
        for j in range(B.shape[0]):
            out[i, j] = rbf(A[i], B[j], gamma)
    return out


@njit(cache=True, nogil=True)
def nystrom_map(X, landmarks, proj, sigma):
    """Rows z(x) = projᵀ c(x), c(x)_j = κ(landmarks_j, x); ``proj`` is (q, k)."""
    n = X.shape[0]
    q, k = proj.shape
    gamma = 0.5 / (sigma * sigma)
    out = np.zeros((n, k))
    c = np.empty(q)
    for r in range(n):
        for j in range(q):
            c[j] = rbf(X[r], landmarks[j], gamma)
        for j in range(q):
            cj = c[j]
            for i in range(k):
                out[r, i] += proj[j, i] * cj
    return out
