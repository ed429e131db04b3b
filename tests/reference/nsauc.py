"""Plain numpy NSAUC: Algorithm 3 of Khalid, Ray and Chitsaz (ECML-PKDD 2018), line by line.

Algorithm 3 with its counters as printed (rcount, acount, q), on the k-means++ Nyström
map of ``tests.reference.nystrom``, with the specs README's streaming adapter and
defaults: each event enters its own class's reservoir (Algorithm R), then ``pairs``
partners are drawn uniformly from the opposite one, each pair one iteration; t counts
pairs from 1; t0 = 1/(λη0) with η0 = eta_scale / mean‖x_t‖² over the first 100 pairs
(until a pair with x_t ≠ 0). ℓ′ is SVMSGD2's dloss: 1 if wᵀx_t < 1, else 0 (the sign
that makes line 5 a descent step). Independent of the numba kernels; shares only the
random stream and the reservoir of ``tests.reference.oam``.
"""

from __future__ import annotations

import numpy as np

from aucstream.models._rng import below
from tests.reference.nystrom import WarmupRef
from tests.reference.oam import Reservoir

ETA0_PAIRS = 100


class Algorithm3:
    """NSAUC's iteration on mapped rows, fed one event at a time."""

    def __init__(self, r: int, rng: np.ndarray, *, lam: float, eta_scale: float, r_skip: int,
                 a_skip: int, capacity: int, pairs: int):
        self.lam, self.eta_scale, self.r_skip, self.a_skip = lam, eta_scale, r_skip, a_skip
        self.pairs = pairs
        self.rng = rng
        self.res = Reservoir(capacity, rng)
        # w_1 ← 0, w̃_0 ← 0, rcount = rskip, acount = askip, q = 0
        self.w, self.wbar = np.zeros(r), np.zeros(r)
        self.rcount, self.acount, self.q = r_skip, a_skip, 0
        self.t = 0
        self.cal_n, self.cal_sum, self.eta0 = 0, 0.0, None

    def learn_one(self, z: np.ndarray, label: int) -> None:
        c = 1 if label == 1 else 0
        self.res.add(c, z)
        B = self.res.rows[1 - c]
        if not B:
            return
        for _ in range(self.pairs):
            other = B[int(below(self.rng, len(B)))]
            x_t = z - other if c == 1 else other - z            # line 4: x̃_i − x̃_j
            self.iterate(x_t)

    def iterate(self, x_t: np.ndarray) -> None:
        self.t += 1
        t = self.t
        if self.cal_n < ETA0_PAIRS or self.cal_sum == 0.0:      # η0, then t0 = 1/(λη0)
            self.cal_n += 1
            self.cal_sum += float(x_t @ x_t)
            if self.cal_sum > 0:
                self.eta0 = self.eta_scale * self.cal_n / self.cal_sum
        if self.eta0 is None:                                   # every x_t so far is 0
            t0 = None
        else:
            t0 = 1.0 / (self.lam * self.eta0)
            dloss = 1.0 if self.w @ x_t < 1 else 0.0
            self.w = self.w + 1.0 / (self.lam * (t + t0)) * dloss * x_t        # line 5
        self.rcount -= 1                                                       # line 6
        if self.rcount <= 0:                                                   # line 7
            if t0 is not None:
                self.w = self.w - self.r_skip * (t + t0) ** -1 * self.w        # line 8
            self.rcount = self.r_skip                                          # line 9
        self.acount -= 1                                                       # line 11
        if self.acount <= 0:                                                   # line 12
            self.wbar = (self.q * self.wbar + self.w) / (self.q + 1)           # line 13
            self.q += 1                                                        # line 14
            self.acount = self.a_skip                                          # line 15

    def served(self) -> np.ndarray:
        """Line 16: w = w̃_q (w itself before the first average)."""
        return self.wbar if self.q > 0 else self.w


def nsauc_ref(d: int, *, lam: float = 1e-8, eta_scale: float = 1.0, r_skip: int = 16,
              a_skip: int = 10, capacity: int = 100, pairs: int = 5, n_components: int,
              warmup: int, seed: int) -> WarmupRef:
    """NSAUC behind the warm-up window (the map fitted on it, then replayed)."""

    def make(r: int, rng: np.ndarray) -> Algorithm3:
        return Algorithm3(r, rng, lam=lam, eta_scale=eta_scale, r_skip=r_skip, a_skip=a_skip,
                          capacity=capacity, pairs=pairs)

    return WarmupRef(d, n_components=n_components, warmup=warmup, seed=seed, make=make)
