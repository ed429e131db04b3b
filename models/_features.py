"""Feature maps shared by the kernel learners: random Fourier features (RFF).

For the Gaussian kernel κ(x, y) = exp(−‖x − y‖² / (2σ²)), Bochner's theorem gives
κ(x, y) = E_θ[cos θᵀ(x − y)] with θ ~ N(0, σ⁻² I), so pairs of sin/cos features
approximate it: Σ_j [sin θ_jᵀx sin θ_jᵀy + cos θ_jᵀx cos θ_jᵀy] / m ≈ κ(x, y).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._rng import normals

__all__ = ["draw_rff", "rff_map"]


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
