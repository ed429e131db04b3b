"""Plain numpy SOLAM, one event at a time, line by line from the paper's Table 1.

Ying, Wen, Lyu, NIPS 2016; spec solam-mba §2.3–2.5 with the specs README decisions
(zero start, symmetric projections, unit-L2 rows or a running max norm κ). Independent of
the numba kernels: vector arithmetic, the paper's own recursions for p̂_t and v̄_t.
"""

from __future__ import annotations

import numpy as np


def F_hat(w: np.ndarray, a: float, b: float, alpha: float, x: np.ndarray, y: int,
          p: float) -> float:
    """F̂_t of eq. (12) for one sample (x, y) with plug-in prior p."""
    s = w @ x
    pos = 1.0 if y == 1 else 0.0
    neg = 1.0 - pos
    return ((1 - p) * (s - a) ** 2 * pos + p * (s - b) ** 2 * neg
            + 2 * (1 + alpha) * (p * s * neg - (1 - p) * s * pos)
            - p * (1 - p) * alpha ** 2)


def grad_F_hat(w: np.ndarray, a: float, b: float, alpha: float, x: np.ndarray, y: int,
               p: float) -> tuple:
    """(∂_w, ∂_a, ∂_b, ∂_α) of F̂_t, spec §2.4."""
    s = w @ x
    if y == 1:
        return (2 * (1 - p) * (s - a - 1 - alpha) * x, -2 * (1 - p) * (s - a), 0.0,
                -2 * (1 - p) * s - 2 * p * (1 - p) * alpha)
    return (2 * p * (s - b + 1 + alpha) * x, 0.0, -2 * p * (s - b),
            2 * p * s - 2 * p * (1 - p) * alpha)


class SOLAMReference:
    def __init__(self, d: int, zeta: float = 10.0, R: float = 10.0, normalize: bool = True):
        self.zeta, self.R, self.normalize = zeta, R, normalize
        # Table 1 step 2: t = 1, v_1 = 0 ∈ Ω1, α_1 = 0 ∈ Ω2, p̂_0 = 0, v̄_0 = 0, ᾱ_0 = 0, γ̄_0 = 0.
        self.t = 0
        self.w = np.zeros(d)
        self.a = self.b = self.alpha = 0.0
        self.p = 0.0
        self.wbar = np.zeros(d)
        self.abar = self.bbar = self.alphabar = 0.0
        self.gbar = 0.0
        self.kappa = 1.0 if normalize else 0.0

    def prepare(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        norm = np.sqrt(np.sum(x * x))
        if self.normalize:
            return x / norm if norm > 0 else x
        return x

    def learn_one(self, x, y: int) -> None:
        """One event; y in {−1, +1}."""
        x = np.asarray(x, dtype=np.float64)
        if not self.normalize:
            self.kappa = max(self.kappa, float(np.linalg.norm(x)))
        x = self.prepare(x)
        self.t += 1
        t = self.t
        gamma = self.zeta / np.sqrt(t)
        # step 3
        self.p = ((t - 1) * self.p + (1.0 if y == 1 else 0.0)) / t
        # steps 4 and 5, both at the old iterate (v_t, α_t)
        gw, ga, gb, galpha = grad_F_hat(self.w, self.a, self.b, self.alpha, x, y, self.p)
        w_new = self.w - gamma * gw
        a_new = self.a - gamma * ga
        b_new = self.b - gamma * gb
        alpha_new = self.alpha + gamma * galpha
        norm = np.linalg.norm(w_new)
        if norm > self.R:
            w_new = w_new * (self.R / norm)
        bound = self.R * self.kappa
        a_new = min(max(a_new, -bound), bound)
        b_new = min(max(b_new, -bound), bound)
        alpha_new = min(max(alpha_new, -2 * bound), 2 * bound)
        # steps 6 and 7: the average takes the PRE-update iterate v_t, α_t
        gbar_new = self.gbar + gamma
        self.wbar = (self.gbar * self.wbar + gamma * self.w) / gbar_new
        self.abar = (self.gbar * self.abar + gamma * self.a) / gbar_new
        self.bbar = (self.gbar * self.bbar + gamma * self.b) / gbar_new
        self.alphabar = (self.gbar * self.alphabar + gamma * self.alpha) / gbar_new
        self.gbar = gbar_new
        self.w, self.a, self.b, self.alpha = w_new, a_new, b_new, alpha_new

    def learn(self, X, y) -> SOLAMReference:
        for x, label in zip(np.asarray(X), np.asarray(y), strict=True):
            self.learn_one(x, 1 if label == 1 else -1)
        return self

    def score(self, X, average: bool = True) -> np.ndarray:
        w = self.wbar if average else self.w
        return np.array([self.prepare(x) @ w for x in np.asarray(X)])
