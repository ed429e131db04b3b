"""Plain numpy NAG logistic regression, one event at a time: Algorithm 2 of Ross, Mineiro
and Langford, "Normalized Online Learning" (UAI 2013), with the intercept as a constant
feature 1. Independent of the numba kernels: the intercept is column 0 of an augmented
row, and every step is numpy vector arithmetic over the row's non-zeros."""

from __future__ import annotations

import numpy as np


class NAGReference:
    def __init__(self, d: int, eta: float = 0.5):
        self.eta = eta
        self.w = np.zeros(d + 1)  # w[0] is the intercept
        self.s = np.zeros(d + 1)
        self.G = np.zeros(d + 1)
        self.t = 0
        self.N = 0.0

    def score(self, x) -> float:
        xa = np.concatenate([[1.0], np.asarray(x, float)])
        w = self.w.copy()
        grow = (np.abs(xa) > self.s) & (self.s > 0)
        w[grow] *= (self.s[grow] / np.abs(xa[grow])) ** 2
        return float(w @ xa)

    def learn_one(self, x, y: int) -> float:
        """Learn (x, y ∈ {0, 1} or ±1); return the score before the update."""
        xa = np.concatenate([[1.0], np.asarray(x, float)])
        nz = xa != 0
        grow = nz & (np.abs(xa) > self.s)
        old = self.s[grow]
        self.w[grow] = np.where(old > 0, self.w[grow] * (old / np.abs(xa[grow])) ** 2,
                                self.w[grow])
        self.s[grow] = np.abs(xa[grow])
        yhat = float(self.w @ xa)
        yy = 1.0 if y > 0 else -1.0
        self.t += 1
        self.N += float(np.sum((xa[nz] / self.s[nz]) ** 2))
        g = -yy / (1.0 + np.exp(yy * yhat)) * xa[nz]
        self.G[nz] += g * g
        step = np.zeros_like(g)
        ok = g != 0
        step[ok] = self.eta * np.sqrt(self.t / self.N) * g[ok] / (
            self.s[nz][ok] * np.sqrt(self.G[nz][ok]))
        self.w[nz] -= step
        return yhat
