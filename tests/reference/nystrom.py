"""Plain numpy k-means++ Nyström map, and OAM_seq / OAM_gra on it (NOAM_seq, NOAM_gra).

Line by line from Khalid, Ray and Chitsaz (ECML-PKDD 2018, seed 002) §3.2 and Algorithm
1 with the specs' fixes (ψ(x) = Σ_r^{-1/2} U_rᵀ ϕ(x)ᵀ; W's pseudo-inverse), and the specs
README's second-wave map: k-means++ seeding then 5 Lloyd iterations on the first W events,
b = mean ‖x − x̄‖² over them, κ(x, y) = exp(−‖x − y‖²/b), eigenvalues kept above
1e-6·σ_1; frozen after the warm-up, whose events are then replayed.

Independent of the numba kernels: numpy arithmetic, one landmark or one row at a time.
Shared with the learners only: the random stream (``models._rng``), so that the k-means++
draws and the reservoirs are the same, and the OAM reference (``tests.reference.oam``).
"""

from __future__ import annotations

import math

import numpy as np

from aucstream.models._rng import below, new_state, uniform
from tests.reference.oam import OAMRef


def sqdist(a: np.ndarray, b: np.ndarray) -> float:
    diff = a - b
    return float(diff @ diff)


def kappa(x: np.ndarray, u: np.ndarray, b: float) -> float:
    """κ(x, u) = exp(−‖x − u‖²/b)."""
    return math.exp(-sqdist(x, u) / b)


def kmeanspp(X: np.ndarray, m: int, rng: np.ndarray) -> np.ndarray:
    """k-means++ seeding: the first centre uniform, each next one row i with probability
    D(x_i)²/Σ D² (the first row whose running sum of D² exceeds u·Σ D²), a uniform row if
    Σ D² = 0."""
    n = X.shape[0]
    centres = [X[int(below(rng, n))].copy()]
    D2 = ((X - centres[0]) ** 2).sum(axis=1)
    while len(centres) < m:
        running = np.cumsum(D2)
        total = running[-1]
        if total > 0:
            i = int(np.searchsorted(running, uniform(rng) * total, side="right"))
        else:
            i = int(below(rng, n))
        centres.append(X[i].copy())
        D2 = np.minimum(D2, ((X - X[i]) ** 2).sum(axis=1))
    return np.array(centres)


def lloyd(X: np.ndarray, centres: np.ndarray, iters: int) -> np.ndarray:
    """Lloyd's iterations: nearest centre (first on ties), then means; an empty cluster
    keeps its centre."""
    C = centres.copy()
    for _ in range(iters):
        D = np.stack([((X - c) ** 2).sum(axis=1) for c in C], axis=1)
        label = D.argmin(axis=1)
        for k in range(C.shape[0]):
            members = X[label == k]
            if len(members):
                C[k] = members.mean(axis=0)
    return C


class NystromMapRef:
    """The map fitted on a warm-up window X with generator ``rng``."""

    def __init__(self, X: np.ndarray, m: int, rng: np.ndarray, iters: int = 5,
                 floor: float = 1e-6):
        X = np.asarray(X, dtype=float)
        xbar = X.mean(axis=0)
        self.b = float(np.mean([sqdist(x, xbar) for x in X]))   # mean ‖x − x̄‖²
        if self.b <= 0 or not math.isfinite(1.0 / self.b):      # identical rows
            self.b = 1.0
        self.L = lloyd(X, kmeanspp(X, m, rng), iters)           # landmarks u_1..u_m
        W = np.array([[kappa(a, c, self.b) for c in self.L] for a in self.L])
        sigma, U = np.linalg.eigh(W)                            # W = U Σ Uᵀ
        order = np.argsort(sigma)[::-1]                         # descending
        sigma, U = sigma[order], U[:, order]
        r = int(np.sum(sigma > floor * sigma[0]))
        self.sigma, self.U = sigma[:r], U[:, :r].copy()
        for j in range(r):                                      # canonical sign
            if self.U[np.argmax(np.abs(self.U[:, j])), j] < 0:
                self.U[:, j] = -self.U[:, j]
        self.r = r

    @property
    def proj(self) -> np.ndarray:
        """U_r Σ_r^{-1/2} (m × r): ψ(x) = projᵀ k_x."""
        return self.U @ np.diag(self.sigma ** -0.5)

    def k(self, x: np.ndarray) -> np.ndarray:
        """ϕ(x) = [κ(x, u_1), …, κ(x, u_m)]."""
        return np.array([kappa(x, u, self.b) for u in self.L])

    def psi(self, x: np.ndarray) -> np.ndarray:
        """ψ(x) = Σ_r^{-1/2} U_rᵀ ϕ(x)ᵀ."""
        return np.diag(self.sigma ** -0.5) @ self.U.T @ self.k(x)


class WarmupRef:
    """A learner on ψ behind a warm-up window: the first W events are stored, the map
    is fitted at the W-th, and the window is replayed in order. ``learner`` is built by
    ``make(r, rng)`` (rank, generator after k-means++) and takes ``learn_one(ψ, label)``."""

    def __init__(self, d: int, *, n_components: int, warmup: int, seed: int, make):
        self.m, self.W = n_components, warmup
        self.rng = new_state(seed)
        self.make = make
        self.window: list[tuple[np.ndarray, int]] = []
        self.map: NystromMapRef | None = None
        self.learner = None

    def learn(self, X, y) -> WarmupRef:
        for x, label in zip(np.asarray(X, dtype=float), np.asarray(y), strict=True):
            self.learn_one(x, int(label == 1 or label is True))
        return self

    def learn_one(self, x: np.ndarray, label: int) -> None:
        if self.map is None:
            self.window.append((np.array(x, dtype=float), label))
            if len(self.window) == self.W:
                self.map = NystromMapRef(np.array([w for w, _ in self.window]), self.m,
                                         self.rng)
                self.learner = self.make(self.map.r, self.rng)
                for w, lab in self.window:                     # replay, in order
                    self.learner.learn_one(self.map.psi(w), lab)
            return
        self.learner.learn_one(self.map.psi(np.array(x, dtype=float)), label)

    def served(self) -> np.ndarray | None:
        if self.learner is None:
            return None
        return self.learner.served() if hasattr(self.learner, "served") else self.learner.w

    def score(self, X) -> np.ndarray:
        w = self.served()
        if w is None:
            return np.zeros(len(X))
        return np.array([w @ self.map.psi(np.array(x, dtype=float)) for x in X])


def noam_ref(d: int, *, C: float, capacity: int, n_components: int, warmup: int, seed: int,
             sequential: bool) -> WarmupRef:
    """NOAM_seq (``sequential``) or NOAM_gra: OAM on ψ behind the warm-up."""

    def make(r: int, rng: np.ndarray) -> OAMRef:
        oam = OAMRef(r, C=C, capacity=capacity, seed=seed, sequential=sequential)
        oam.res.rng = rng                                      # the generator carries on
        return oam

    return WarmupRef(d, n_components=n_components, warmup=warmup, seed=seed, make=make)
