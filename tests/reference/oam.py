"""Slow, line-by-line numpy references for the OAM family, written from the specs.

One Python iteration per event (and per buffered row where the algorithm is
sequential), plain numpy arithmetic, no numba kernels. They share only the random
stream with the learners: the reservoir draws come from ``models._rng`` and FOAM's
frequencies from ``models._features.draw_rff`` on a generator seeded the same way, so
that a learner and its reference see the same buffers.

Sources: specs/foam-noam-nsauc.md §2.2–2.6 and §2.8.1–2.8.3, specs README, the paper
(seed 003) Algorithms 1–5.
"""

from __future__ import annotations

import math

import numpy as np

from aucstream.models._features import draw_rff
from aucstream.models._rng import below, new_state


class Reservoir:
    """Two per-class reservoirs (Algorithm 2) kept as lists in insertion order.

    The counter includes the new event; once a buffer is full one draw j ~ U{0..N-1}
    decides: replace iff j < capacity, the victim being the j-th oldest row, and the new
    row is appended as the newest ("delete, then B ∪ {z}").
    """

    def __init__(self, capacity: int, rng: np.ndarray) -> None:
        self.capacity = capacity
        self.rng = rng
        self.rows: list[list] = [[], []]
        self.n = [0, 0]

    def add(self, c: int, row) -> None:
        self.n[c] += 1
        if len(self.rows[c]) < self.capacity:
            self.rows[c].append(row)
            return
        j = int(below(self.rng, self.n[c]))
        if j < self.capacity:
            del self.rows[c][j]
            self.rows[c].append(row)


def _sign(label) -> tuple[int, float]:
    return (1, 1.0) if label == 1 else (0, -1.0)


def unit(x: np.ndarray) -> np.ndarray:
    """x/‖x‖ (the paper's preprocessing); zero rows stay zero."""
    norm = math.sqrt(float(x @ x))
    return x / norm if norm > 1e-300 else x


def kappa(a: np.ndarray, b: np.ndarray, sigma: float) -> float:
    """Gaussian kernel exp(−‖a − b‖²/(2σ²))."""
    diff = a - b
    return math.exp(-float(diff @ diff) / (2.0 * sigma * sigma))


# ------------------------------------------------------------------------------- OAM
class OAMRef:
    """OAM_seq / OAM_gra (specs §2.8.1–2.8.3) on dense rows."""

    def __init__(self, d: int, *, C: float, capacity: int, seed: int, sequential: bool):
        self.C = C
        self.capacity = capacity
        self.sequential = sequential
        self.w = np.zeros(d)
        self.res = Reservoir(capacity, new_state(seed))

    def learn(self, X: np.ndarray, y: np.ndarray) -> OAMRef:
        for x_t, label in zip(X, y, strict=True):
            self.learn_one(np.array(x_t, dtype=float), label)
        return self

    def learn_one(self, x_t: np.ndarray, label) -> None:
        c, y_t = _sign(label)
        self.res.add(c, x_t)                       # own buffer first
        B = self.res.rows[1 - c]                   # opposite buffer, oldest first
        if not B:
            return
        C_t = self.C * max(1.0, self.res.n[1 - c] / self.capacity)
        if self.sequential:
            for x in B:
                delta = x_t - x
                loss = max(0.0, 1.0 - y_t * (self.w @ delta))
                sq = delta @ delta
                if loss > 0.0 and sq > 1e-12:      # duplicate points are skipped
                    tau = min(C_t / 2.0, loss / sq)
                    self.w = self.w + tau * y_t * delta
        else:
            w_old = self.w.copy()
            A = [x for x in B if y_t * (w_old @ (x_t - x)) <= 1.0]
            if A:
                self.w = self.w + (C_t / 2.0) * y_t * sum(x_t - x for x in A)


# ------------------------------------------------------------------- Algorithm 3
def minibatch_ogd(w: np.ndarray, z_t: np.ndarray, y_t: float, B: list, eta: float):
    """Algorithm 3: A = {z_i : y_t w_tᵀ(z_t − z_i) < 1}; w + η/(2|B|)·y_t·Σ_A (z_t − z_i)."""
    if not B:
        return w
    A = [z for z in B if y_t * (w @ (z_t - z)) < 1.0]
    if not A:
        return w
    grad = -sum(y_t * (z_t - z) for z in A) / (2.0 * len(B))
    return w - eta * grad


# ------------------------------------------------------------------------------ FOAM
class FOAMRef:
    """FOAM, Algorithm 4 (Algorithms 1–3 on (cos, sin) random Fourier features)."""

    def __init__(self, d: int, *, eta: float, sigma: float, n_components: int, capacity: int,
                 seed: int, normalize: bool, rff_scale: str):
        rng = new_state(seed)
        self.theta = draw_rff(rng, n_components, d, sigma)    # u_j ~ N(0, σ⁻² I)
        self.scale = 1.0 if rff_scale == "none" else 1.0 / math.sqrt(n_components)
        self.eta = eta
        self.normalize = normalize
        self.w = np.zeros(2 * n_components)
        self.res = Reservoir(capacity, rng)

    def z(self, x: np.ndarray) -> np.ndarray:
        if self.normalize:
            x = unit(x)
        out = []
        for u in self.theta:
            a = u @ x
            out += [math.cos(a), math.sin(a)]
        return self.scale * np.array(out)

    def learn(self, X: np.ndarray, y: np.ndarray) -> FOAMRef:
        for x_t, label in zip(X, y, strict=True):
            c, y_t = _sign(label)
            z_t = self.z(np.array(x_t, dtype=float))
            self.res.add(c, z_t)
            self.w = minibatch_ogd(self.w, z_t, y_t, self.res.rows[1 - c], self.eta)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        return np.array([self.w @ self.z(x) for x in X])


# ------------------------------------------------------------------------------ NOAM
class NOAMRef:
    """NOAM, Algorithm 5 as reconstructed in specs §2.6, with the README's w at the switch."""

    def __init__(self, d: int, *, eta: float, sigma: float, budget: int, rank_fraction: float,
                 capacity: int, seed: int, normalize: bool, eig_floor: float = 1e-6):
        self.eta = eta
        self.sigma = sigma
        self.Q = budget
        self.k = min(max(round(rank_fraction * budget), 1), budget + capacity)
        self.normalize = normalize
        self.eig_floor = eig_floor
        self.res = Reservoir(capacity, new_state(seed))
        self.S: dict[int, list] = {}       # stream id -> [x, α], in insertion order
        self.phase = 1
        self.t = 0
        self.switched_at: int | None = None

    # phase 1: f(x) = Σ α_j κ(x_j, x)
    def f(self, x: np.ndarray) -> float:
        return sum(a * kappa(xs, x, self.sigma) for xs, a in self.S.values())

    def c(self, x: np.ndarray) -> np.ndarray:
        return np.array([kappa(lm, x, self.sigma) for lm in self.L])

    def z(self, x: np.ndarray) -> np.ndarray:
        return self.P.T @ self.c(x)

    def learn(self, X: np.ndarray, y: np.ndarray) -> NOAMRef:
        for x_t, label in zip(X, y, strict=True):
            x_t = np.array(x_t, dtype=float)
            if self.normalize:
                x_t = unit(x_t)
            self.learn_one(x_t, label)
        return self

    def learn_one(self, x_t: np.ndarray, label) -> None:
        c, y_t = _sign(label)
        sid = self.t
        self.t += 1
        if self.phase == 2:
            z_t = self.z(x_t)
            self.res.add(c, z_t)
            self.w = minibatch_ogd(self.w, z_t, y_t, self.res.rows[1 - c], self.eta)
            return
        self.res.add(c, (sid, x_t))
        B = self.res.rows[1 - c]
        if B:
            f_t = self.f(x_t)
            f_B = [self.f(xb) for _, xb in B]                  # all with the pre-update f
            A = [(i, xb) for (i, xb), fb in zip(B, f_B, strict=True) if y_t * (f_t - fb) < 1]
            if A:
                step = self.eta / (2.0 * len(B))
                self.S[sid] = [x_t, step * y_t * len(A)]
                for i, xb in A:
                    if i in self.S:
                        self.S[i][1] -= step * y_t
                    else:
                        self.S[i] = [xb, -step * y_t]
        if len(self.S) >= self.Q:
            self.switch()

    def switch(self) -> None:
        self.L = [xs for xs, _ in self.S.values()]
        alpha = np.array([a for _, a in self.S.values()])
        q = len(self.L)
        W = np.array([[kappa(a, b, self.sigma) for b in self.L] for a in self.L])
        lam, V = np.linalg.eigh(W)
        idx = np.argsort(lam)[::-1]
        lam, V = lam[idx], V[:, idx]
        k = min(self.k, q, int(np.sum(lam > self.eig_floor * lam[0])))
        lam, V = lam[:k], V[:, :k]
        for j in range(k):                                     # canonical eigenvector sign
            if V[np.argmax(np.abs(V[:, j])), j] < 0:
                V[:, j] = -V[:, j]
        self.P = V @ np.diag(lam ** -0.5)                      # z(x) = D^{-1/2} Vᵀ c(x)
        self.w = np.diag(lam ** 0.5) @ V.T @ alpha             # w = D^{1/2} Vᵀ α
        self.alpha = alpha
        for cls in (0, 1):                                     # convert, do not drop
            self.res.rows[cls] = [self.z(xb) for _, xb in self.res.rows[cls]]
        self.phase = 2
        self.switched_at = self.t

    def score(self, X: np.ndarray) -> np.ndarray:
        rows = [unit(np.array(x, float)) if self.normalize else np.array(x, float) for x in X]
        if self.phase == 1:
            return np.array([self.f(x) for x in rows])
        return np.array([self.w @ self.z(x) for x in rows])
