"""Plain numpy AdaOAM, one event at a time, line by line from Algorithm 1 as the specs give it.

Ding, Zhao, Hoi, Ong, AAAI 2015 (dissertation spec §7, solam-mba spec §4.9, foam-noam
spec §2.8.5): OPAUC's class statistics and gradient (Gao et al., ICML 2013, the authors'
``OPAUC.m``), then the diagonal AdaGrad step s_{t,i} = ‖g_{1:t,i}‖₂, H_t = δI + diag(s_t),
w_t = w_{t−1} − η H_t⁻¹ g_t. Independent of the numba kernels: np.outer for every rank-one
term, Γ @ w for the covariance product, the gradient history kept as a running sum of
squares per coordinate (‖g_{1:t,i}‖₂² = Σ_τ g_{τ,i}²), H_t⁻¹ g_t as g_t over H_t's diagonal.
"""

from __future__ import annotations

import numpy as np


def pairwise_objective(w, x, y: int, opposite_rows, lam: float) -> float:
    """L_t(w) = λ/2‖w‖² + mean_j ½(1 − y wᵀ(x − x_j))² over the opposite-class rows."""
    margins = 1.0 - y * ((np.asarray(x) - np.asarray(opposite_rows)) @ w)
    return 0.5 * lam * w @ w + np.mean(0.5 * margins**2)


class AdaOAMReference:
    def __init__(self, d: int, eta: float, delta: float = 0.5, lam: float = 1e-4):
        self.eta, self.delta, self.lam = eta, delta, lam
        self.T_pos = self.T_neg = 0
        self.c_pos = np.zeros(d)
        self.c_neg = np.zeros(d)
        self.G_pos = np.zeros((d, d))
        self.G_neg = np.zeros((d, d))
        self.sumsq = np.zeros(d)  # Σ_τ g_τ ⊙ g_τ, so s_t = √sumsq
        self.w = np.zeros(d)

    @staticmethod
    def _moments(x, T, c, G):
        """T ← T + 1; c ← c + (x − c)/T; Γ ← Γ + (xxᵀ − Γ − c_old c_oldᵀ)/T + c_old c_oldᵀ − ccᵀ."""
        T += 1
        c_old = c.copy()
        c = c + (x - c) / T
        G = (G + (np.outer(x, x) - G - np.outer(c_old, c_old)) / T
             + np.outer(c_old, c_old) - np.outer(c, c))
        return T, c, G

    def gradient(self, x, y: int) -> np.ndarray:
        """∇L_t(w): λw − x + c₋ + ((x − c₋)(x − c₋)ᵀ + Γ₋)w for y = +1; λw + x − c₊ + … for −1."""
        if y == 1:
            z = x - self.c_neg
            return (self.lam * self.w - x + self.c_neg + np.outer(z, z) @ self.w
                    + self.G_neg @ self.w)
        z = x - self.c_pos
        return self.lam * self.w + x - self.c_pos + np.outer(z, z) @ self.w + self.G_pos @ self.w

    def learn_one(self, x, y: int) -> None:
        """One event; y in {−1, +1}."""
        x = np.asarray(x, dtype=np.float64)
        if y == 1:
            self.T_pos, self.c_pos, self.G_pos = self._moments(x, self.T_pos, self.c_pos,
                                                               self.G_pos)
            if self.T_neg == 0:
                return
        else:
            self.T_neg, self.c_neg, self.G_neg = self._moments(x, self.T_neg, self.c_neg,
                                                               self.G_neg)
            if self.T_pos == 0:
                return
        g = self.gradient(x, y)
        self.sumsq = self.sumsq + g * g
        s = np.sqrt(self.sumsq)
        h = self.delta + s  # the diagonal of H_t = δI + diag(s_t)
        self.w = self.w - self.eta * (g / h)

    def learn(self, X, y) -> AdaOAMReference:
        for x, label in zip(np.asarray(X), np.asarray(y), strict=True):
            self.learn_one(x, 1 if label == 1 else -1)
        return self
