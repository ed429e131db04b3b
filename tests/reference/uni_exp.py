"""Plain numpy online Uni-Exp, one event at a time, line by line from spec solam-mba §4.4.

Kotłowski, Dembczyński, Hüllermeier, ICML 2011 (the seeds only name it): SGD on the
class-weighted univariate exponential loss, w ← w + η_t (y_t/π̂_{y_t}) e^{−y_t wᵀx_t} x_t − η_t λ w,
with the unregularised intercept of review-second-wave §7,
b ← b + η_t (y_t/π̂_{y_t}) e^{−y_t(wᵀx_t + b)}. Independent of the numba kernels: a dense w
(whatever the input), π̂ kept as the running frequency recursion, numpy vector arithmetic.
"""

from __future__ import annotations

import numpy as np


def event_loss(w, b: float, x, y: int, pi: float, lam: float) -> float:
    """λ/2‖w‖² + (1/π̂)·exp(−y(wᵀx + b)): the per-event objective the SGD step descends."""
    return 0.5 * lam * w @ w + np.exp(-y * (w @ x + b)) / pi


def weighted_loss(w, b: float, X, y) -> float:
    """(1/n₊) Σ₊ e^{−f(x)} + (1/n₋) Σ₋ e^{f(x)}, f = Xw + b (labels in {0, 1})."""
    f = np.asarray(X) @ w + b
    y = np.asarray(y)
    return float(np.mean(np.exp(-f[y == 1])) + np.mean(np.exp(f[y == 0])))


def pairwise_loss(w, X, y) -> float:
    """mean over (positive, negative) pairs of e^{−wᵀ(x⁺ − x⁻)} (RankBoost's loss)."""
    s = np.asarray(X) @ w
    y = np.asarray(y)
    return float(np.mean(np.exp(-(s[y == 1][:, None] - s[y == 0][None, :]))))


class UniExpReference:
    def __init__(self, d: int, eta: float = 2.0**-8, lam: float = 1e-4):
        self.eta, self.lam = eta, lam
        self.w = np.zeros(d)
        self.b = 0.0
        self.t = 0
        self.p = 0.0  # π̂₊, the running frequency of positives

    def score(self, X) -> np.ndarray:
        return np.asarray(X) @ self.w + self.b

    def learn_one(self, x, y: int) -> None:
        """One event; y in {−1, +1}."""
        x = np.asarray(x, dtype=np.float64)
        self.t += 1
        self.p = ((self.t - 1) * self.p + (1.0 if y == 1 else 0.0)) / self.t
        pi = self.p if y == 1 else 1.0 - self.p
        grad_scale = (y / pi) * np.exp(-y * (self.w @ x + self.b))  # −∂loss/∂f
        w_new = self.w + self.eta * grad_scale * x - self.eta * self.lam * self.w
        self.b = self.b + self.eta * grad_scale
        self.w = w_new

    def learn(self, X, y) -> UniExpReference:
        for x, label in zip(np.asarray(X), np.asarray(y), strict=True):
            self.learn_one(x, 1 if label == 1 else -1)
        return self
