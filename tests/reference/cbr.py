"""Plain numpy CBR, event by event, written from the dissertation spec (ch. 4–5).

Slow on purpose: lists for buffers, one numpy expression per formula line. The numba
learners must match it. Reservoir draws reuse ``models._rng`` so both make the same
random choices (one draw j ~ U{0..N−1} per arrival once the class buffer is full).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from aucstream.models import _rng


class BufferRef:
    """Two class buffers as python lists, oldest first."""

    def __init__(self, capacity: int, policy: str, seed: int):
        self.capacity = capacity
        self.policy = policy
        self.rng = _rng.new_state(seed)
        self.rows: list[list[np.ndarray]] = [[], []]
        self.count = [0, 0]

    def add(self, c: int, x: np.ndarray) -> None:
        self.count[c] += 1
        own = self.rows[c]
        if len(own) < self.capacity:
            own.append(x.copy())
            return
        if self.policy == "fifo":
            own.pop(0)
            own.append(x.copy())
            return
        j = _rng.below(self.rng, self.count[c])  # Bernoulli(cap/N) and the victim in one
        if j < self.capacity:
            own.pop(j)
            own.append(x.copy())


class CBRRef:
    """CBR (full), CBR-diag (cov/paper/prec) and CBR on given features (FCBR)."""

    def __init__(self, d, C, eta, capacity, policy, seed=0, diag_mode=None, step_scale=1.0):
        self.C = C
        self.phi = NormalDist().inv_cdf(eta)
        self.psi = 1 + self.phi**2 / 2
        self.zeta = 1 + self.phi**2
        self.diag_mode = diag_mode
        self.step_scale = step_scale
        self.mu = np.zeros(d)
        self.sigma = np.eye(d) if diag_mode is None else None
        self.g = np.ones(d) if diag_mode is not None else None
        self.buffers = BufferRef(capacity, policy, seed)

    def _alpha(self, m, v):
        phi, psi, zeta = self.phi, self.psi, self.zeta
        a = (-m * psi + np.sqrt(m**2 * phi**4 / 4 + v * phi**2 * zeta)) / (v * zeta)
        return min(self.C, max(0.0, a))

    def _u(self, alpha, v):
        phi = self.phi
        return 0.25 * (-alpha * v * phi + np.sqrt(alpha**2 * v**2 * phi**2 + 4 * v)) ** 2

    def learn_one(self, x, y):
        y = 1.0 if y > 0 else -1.0
        c = 1 if y > 0 else 0
        self.buffers.add(c, x)
        for xb in self.buffers.rows[1 - c]:
            z = x - xb
            if self.diag_mode is None:
                self._full(z, y)
            else:
                self._diag(z, y)

    def _full(self, z, y):
        s = self.sigma @ z
        v = z @ s
        if v <= 1e-12:
            return
        alpha = self._alpha(y * (self.mu @ z), v)
        if alpha <= 0:
            return
        u = self._u(alpha, v)
        beta = alpha * self.phi / (np.sqrt(u) + v * alpha * self.phi)
        self.mu = self.mu + self.step_scale * alpha * y * s
        self.sigma = self.sigma - beta * np.outer(s, s)

    def _diag(self, z, y):
        g, C, phi = self.g, self.C, self.phi
        if self.diag_mode == "cov":
            v = np.sum(g * z * z)
        elif self.diag_mode == "paper":
            v = np.sum(z * z / (g + C))
        else:
            v = np.sum(z * z / g)
        if v <= 1e-12:
            return
        alpha = self._alpha(y * (self.mu @ z), v)
        if alpha <= 0:
            return
        u = self._u(alpha, v)
        beta = alpha * phi / (np.sqrt(u) + v * alpha * phi)
        if self.diag_mode == "cov":
            s = g * z
            self.mu = self.mu + alpha * y * s
            self.g = g - beta * s * s
        elif self.diag_mode == "paper":
            self.mu = self.mu + alpha * y * z / g
            self.g = g + beta * z * z
        else:
            self.mu = self.mu + alpha * y * z / g
            self.g = g + alpha * phi / np.sqrt(u) * z * z


def rff_sincos(X: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """FCBR's map: (1/√m)·(sin θ_1ᵀx, cos θ_1ᵀx, …) per row."""
    a = X @ theta.T
    out = np.empty((X.shape[0], 2 * theta.shape[0]))
    out[:, 0::2] = np.sin(a)
    out[:, 1::2] = np.cos(a)
    return out / np.sqrt(theta.shape[0])
