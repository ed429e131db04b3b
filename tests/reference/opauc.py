"""Plain numpy OPAUC, one event at a time, line by line from spec solam-mba §4.1.

Gao, Jin, Zhu, Zhou, ICML 2013 (the authors' ``OPAUC.m``). Independent of the numba
kernels: np.outer for every rank-one term, Γ @ w for the covariance product.
"""

from __future__ import annotations

import numpy as np


class OPAUCReference:
    def __init__(self, d: int, eta: float, lam: float = 1e-4):
        self.eta, self.lam = eta, lam
        self.n_pos = self.n_neg = 0
        self.c_pos = np.zeros(d)
        self.c_neg = np.zeros(d)
        self.G_pos = np.zeros((d, d))
        self.G_neg = np.zeros((d, d))
        self.w = np.zeros(d)

    def learn_one(self, x, y: int) -> None:
        """One event; y in {−1, +1}."""
        x = np.asarray(x, dtype=np.float64)
        if y == 1:
            self.n_pos += 1
            c_old = self.c_pos.copy()
            self.c_pos = self.c_pos + (x - self.c_pos) / self.n_pos
            self.G_pos = (self.G_pos
                          + (np.outer(x, x) - self.G_pos - np.outer(c_old, c_old)) / self.n_pos
                          + np.outer(c_old, c_old) - np.outer(self.c_pos, self.c_pos))
            if self.n_neg > 0:
                g = (self.lam * self.w - x + self.c_neg
                     + np.outer(x - self.c_neg, x - self.c_neg) @ self.w + self.G_neg @ self.w)
                self.w = self.w - self.eta * g
        else:
            self.n_neg += 1
            c_old = self.c_neg.copy()
            self.c_neg = self.c_neg + (x - self.c_neg) / self.n_neg
            self.G_neg = (self.G_neg
                          + (np.outer(x, x) - self.G_neg - np.outer(c_old, c_old)) / self.n_neg
                          + np.outer(c_old, c_old) - np.outer(self.c_neg, self.c_neg))
            if self.n_pos > 0:
                g = (self.lam * self.w + x - self.c_pos
                     + np.outer(x - self.c_pos, x - self.c_pos) @ self.w + self.G_pos @ self.w)
                self.w = self.w - self.eta * g

    def learn(self, X, y) -> OPAUCReference:
        for x, label in zip(np.asarray(X), np.asarray(y), strict=True):
            self.learn_one(x, 1 if label == 1 else -1)
        return self
