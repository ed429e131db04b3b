"""Plain numpy ASAM, SAM and PSAM, one pair at a time, line by line from the dissertation.

Khalid (2019), Algorithm 10 (ASAM; SAM is it without the averaging block) and Algorithm
11 (PSAM) with Appendix A's closed-form prox, plus the specs README's streaming adapter
and defaults (t0 = 1/(λη0) with η0 = 1/mean‖x⁺ − x⁻‖² over the first 100 pairs for
ASAM/SAM; t0 fixed for PSAM; t counts pairs from 1). The counters r_count, a_count and q
are kept as the algorithms print them. Independent of the numba kernels: dense vectors,
numpy arithmetic; only the random stream is shared (``models._rng`` through the OAM
reference's reservoir), so that a learner and its reference draw the same pairs.
"""

from __future__ import annotations

import numpy as np

from aucstream.models._rng import below, new_state
from tests.reference.oam import Reservoir

ETA0_PAIRS = 100


def prox_hinge(w: np.ndarray, x: np.ndarray, lam: float) -> np.ndarray:
    """argmin_v λ·max(0, 1 − vᵀx) + ½‖v − w‖², Appendix A: prox(w) = w − λ·g·x with
    z = (1 − wᵀx)/(λ‖x‖²) and g = 0 (z ≤ 0), −1 (z ≥ 1), −z (0 < z < 1)."""
    z = (1.0 - w @ x) / (lam * (x @ x))
    if z <= 0:
        g = 0.0
    elif z >= 1:
        g = -1.0
    else:
        g = -z
    return w - lam * g * x


class SAMRef:
    """ASAM (``variant='asam'``), SAM (``'sam'``) or PSAM (``'psam'``) on a stream.

    ``learn_one(x, label)``: the event enters its own class's reservoir, then ``pairs``
    partners are drawn (uniform, with replacement) from the opposite one, oldest-first
    index j ~ U{0..size−1}; each pair is one iteration of the algorithm.
    """

    def __init__(self, d: int, *, variant: str, lam: float = 1e-8, eta_scale: float = 1.0,
                 gamma: float = 1e-8, t0: float = 1.0, r_skip: int = 16, a_skip: int = 10,
                 capacity: int = 100, pairs: int = 5, seed: int = 0):
        assert variant in ("asam", "sam", "psam")
        self.variant = variant
        self.averaging = variant != "sam"
        self.lam, self.eta_scale, self.gamma, self.t0_fixed = lam, eta_scale, gamma, t0
        self.r_skip, self.a_skip, self.pairs = r_skip, a_skip, pairs
        self.rng = new_state(seed)
        self.res = Reservoir(capacity, self.rng)
        # Algorithm 10/11: r_count = r_skip, a_count = a_skip, q = 0, w_1 = 0, w̃_0 = 0.
        self.r_count, self.a_count, self.q = r_skip, a_skip, 0
        self.w = np.zeros(d)
        self.wbar = np.zeros(d)
        self.t = 0
        # η0 calibration (ASAM/SAM): pairs counted, Σ‖x_t‖², η0 (None until defined)
        self.cal_n, self.cal_sum, self.eta0 = 0, 0.0, None
        self.snapshots: list[np.ndarray] = []  # every w averaged, for property tests

    # ------------------------------------------------------------------ the stream
    def learn(self, X, y) -> SAMRef:
        for x, label in zip(np.asarray(X, dtype=float), np.asarray(y), strict=True):
            self.learn_one(x, label)
        return self

    def learn_one(self, x, label) -> None:
        x = np.array(x, dtype=float)
        c = 1 if label == 1 else 0
        self.res.add(c, x)                               # own reservoir first
        B = self.res.rows[1 - c]
        if not B:
            return
        for _ in range(self.pairs):
            other = B[int(below(self.rng, len(B)))]
            x_pos, x_neg = (x, other) if c == 1 else (other, x)
            self.iterate(x_pos - x_neg)

    # ------------------------------------------------------------- one iteration
    def iterate(self, x_t: np.ndarray) -> None:
        self.t += 1
        t = self.t
        defined = True
        if self.variant == "psam":
            t0 = self.t0_fixed
            lam_t = 1.0 / (self.gamma * (t + t0))
            if x_t @ x_t > 0:                            # ‖x_t‖² = 0: skip (prox = identity)
                self.w = prox_hinge(self.w, x_t, lam_t)  # w_{t+1} = prox_{λ_t f_t}(w_t)
        else:
            if self.cal_n < ETA0_PAIRS or self.cal_sum == 0.0:
                self.cal_n += 1
                self.cal_sum += x_t @ x_t
                if self.cal_sum > 0:
                    self.eta0 = self.eta_scale * self.cal_n / self.cal_sum
            defined = self.eta0 is not None              # else every x_t so far was 0: w = 0
            if defined:
                t0 = 1.0 / (self.lam * self.eta0)
                lprime = -1.0 if self.w @ x_t < 1 else 0.0
                self.w = self.w - (1.0 / (self.lam * (t + t0))) * lprime * x_t
        self.r_count -= 1
        if self.r_count <= 0:
            if defined:
                self.w = self.w - self.r_skip * (t + t0) ** -1 * self.w
            self.r_count = self.r_skip
        if self.averaging:
            self.a_count -= 1
            if self.a_count <= 0:
                self.wbar = (self.q * self.wbar + self.w) / (self.q + 1)
                self.q += 1
                self.a_count = self.a_skip
                self.snapshots.append(self.w.copy())

    # -------------------------------------------------------------------- serving
    def served(self) -> np.ndarray:
        """w̃ once an average exists (ASAM, PSAM), else w."""
        return self.wbar if self.averaging and self.q > 0 else self.w

    def score(self, X) -> np.ndarray:
        return np.asarray(X, dtype=float) @ self.served()
