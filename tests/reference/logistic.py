"""Plain numpy NAG logistic regression, one event at a time: Algorithm 2 of Ross, Mineiro
and Langford, "Normalized Online Learning" (UAI 2013), with the intercept as a constant
feature 1, the weight rescale and the importance-invariant step of Vowpal Wabbit's
default. Independent of the numba kernels: the intercept is column 0 of an augmented
row, every step is numpy vector arithmetic over the row's non-zeros, and the invariant
step integrates the margin's flow numerically (scipy's solve_ivp) instead of solving
its closed form."""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp


def invariant_rise(z0: float, c: float) -> float:
    """How far the margin z moves along dz/dh = c·σ(−z) for h from 0 to 1."""
    sol = solve_ivp(lambda h, z: c / (1.0 + np.exp(z)), (0.0, 1.0), [z0],
                    method="DOP853", rtol=1e-12, atol=1e-13)
    return float(sol.y[0, -1] - z0)


class NAGReference:
    def __init__(self, d: int, eta: float = 0.5, invariant: bool = True):
        self.eta = eta
        self.invariant = invariant
        self.w = np.zeros(d + 1)  # w[0] is the intercept
        self.s = np.zeros(d + 1)
        self.G = np.zeros(d + 1)
        self.t = 0
        self.N = 0.0

    def score(self, x) -> float:
        xa = np.concatenate([[1.0], np.asarray(x, float)])
        w = self.w.copy()
        grow = (np.abs(xa) > self.s) & (self.s > 0)
        w[grow] *= self.s[grow] / np.abs(xa[grow])
        return float(w @ xa)

    def learn_one(self, x, y: int) -> float:
        """Learn (x, y ∈ {0, 1} or ±1); return the score before the update."""
        xa = np.concatenate([[1.0], np.asarray(x, float)])
        nz = xa != 0
        grow = nz & (np.abs(xa) > self.s)
        old = self.s[grow]
        self.w[grow] = np.where(old > 0, self.w[grow] * old / np.abs(xa[grow]),
                                self.w[grow])
        self.s[grow] = np.abs(xa[grow])
        yhat = float(self.w @ xa)
        yy = 1.0 if y > 0 else -1.0
        self.t += 1
        self.N += float(np.sum((xa[nz] / self.s[nz]) ** 2))
        slope = -yy / (1.0 + np.exp(yy * yhat))
        g = slope * xa[nz]
        self.G[nz] += g * g
        m = np.sqrt(self.t / self.N)
        rate = np.zeros_like(g)
        ok = self.G[nz] > 0
        rate[ok] = 1.0 / (self.s[nz][ok] * np.sqrt(self.G[nz][ok]))
        u = -self.eta * slope  # the gradient step's multiplier
        if self.invariant:
            effect = m * float(np.sum(xa[nz] ** 2 * rate))  # ŷ's move per unit of u
            u = yy * invariant_rise(yy * yhat, self.eta * effect) / effect
        self.w[nz] += u * m * rate * xa[nz]
        return yhat
