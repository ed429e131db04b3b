"""Plain numpy NASAM, NPSAM and FASAM: ASAM / PSAM on the kernel feature maps.

Khalid (2019) §6.6 (NASAM), §6.7 (FASAM) and §7.4 (NPSAM): Algorithm 10 or 11, line by
line as ``tests.reference.sam.SAMRef`` keeps them (counters as printed, the specs
README's streaming adapter and defaults), run on ψ(x):

- Nyström: the k-means++ map of ``tests.reference.nystrom.NystromMapRef`` fitted on the
  first W events, ψ(x) = Σ_r^{-1/2} U_rᵀ k_x with k_x = [exp(−‖x − u_j‖²/b)]_j;
- Fourier (variant A): ψ(x) = √(2/m)·cos(θx + φ), θ = freq·√(2/b), freq ~ N(0, I) and
  φ ~ U[0, 2π) drawn at construction; b = mean‖x − x̄‖² over the first W events
  (``bandwidth`` 0) or given.

Behind the warm-up window (as the learners): the first W events are only kept; at the
W-th the map is fitted (or b computed) and the window replayed in order; W = 0 (FASAM with
a fixed b) learns from the first event. Independent of the numba kernels; shared with
the learners only: the random stream (``models._rng``, ``models._features.draw_rff``),
so that k-means++, the Fourier draws, the reservoirs and the pairs are the same.

:func:`transplant` builds the reference in a learner's current state (map, weights,
counters, reservoirs, generator): a throughput oracle can time it from a warm learner
without fitting k-means in numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from aucstream.models._features import draw_rff
from aucstream.models._rng import new_state, uniform
from tests.reference.nystrom import NystromMapRef
from tests.reference.sam import SAMRef

Psi = Callable[[np.ndarray], np.ndarray]


def nystrom_psi(landmarks: np.ndarray, proj: np.ndarray, b: float) -> Psi:
    """ψ(x) = projᵀ k_x, k_x = [exp(−‖x − u_j‖²/b)]_j, proj = U_r Σ_r^{-1/2}."""
    L = np.array(landmarks, dtype=float)
    P = np.array(proj, dtype=float)

    def psi(x: np.ndarray) -> np.ndarray:
        diff = L - x
        return P.T @ np.exp(-np.einsum("ij,ij->i", diff, diff) / b)

    return psi


def fourier_psi(freq: np.ndarray, phase: np.ndarray, b: float) -> Psi:
    """ψ(x) = √(2/m)·cos(θx + φ) with θ = freq·√(2/b) (so ψ(x)ᵀψ(y) ≈ exp(−‖x − y‖²/b))."""
    theta = np.asarray(freq, dtype=float) * math.sqrt(2.0 / b)
    phase = np.asarray(phase, dtype=float)
    scale = math.sqrt(2.0 / theta.shape[0])

    def psi(x: np.ndarray) -> np.ndarray:
        return scale * np.cos(theta @ x + phase)

    return psi


def mean_sqdist(X: np.ndarray) -> float:
    """b = mean_i ‖x_i − x̄‖² (1 when every row is the same, as the learners)."""
    X = np.asarray(X, dtype=float)
    b = float(np.mean(np.sum((X - X.mean(axis=0)) ** 2, axis=1)))
    return b if b > 0 and math.isfinite(1.0 / b) else 1.0


class KernelSAMRef:
    """ASAM or PSAM (``variant``) on ψ behind a warm-up window of ``warmup`` events:
    ``fit(window) -> ψ`` at the last of them (``warmup`` 0: ``psi`` given)."""

    def __init__(self, *, variant: str, rng: np.ndarray, warmup: int,
                 fit: Callable[[np.ndarray], tuple[Psi, int]] | None = None,
                 psi: Psi | None = None, dim: int | None = None, **params) -> None:
        self.variant, self.rng, self.W, self.fit, self.params = variant, rng, warmup, fit, params
        self.window: list[tuple[np.ndarray, int]] = []
        self.psi: Psi | None = None
        self.learner: SAMRef | None = None
        if psi is not None:
            self._start(psi, dim)

    def _start(self, psi: Psi, dim: int) -> None:
        self.psi = psi
        self.learner = SAMRef(dim, variant=self.variant, **self.params)
        self.learner.rng = self.learner.res.rng = self.rng     # the generator carries on

    def learn(self, X, y) -> KernelSAMRef:
        for x, label in zip(np.asarray(X, dtype=float), np.asarray(y), strict=True):
            self.learn_one(x, label)
        return self

    def learn_one(self, x: np.ndarray, label) -> None:
        label = 1 if label == 1 else 0                          # {0, 1}, {−1, +1}, bool
        x = np.array(x, dtype=float)
        if self.psi is None:
            self.window.append((x, label))
            if len(self.window) == self.W:                      # fit, then replay in order
                psi, dim = self.fit(np.array([w for w, _ in self.window]))
                self._start(psi, dim)
                for w, lab in self.window:
                    self.learner.learn_one(psi(w), lab)
                self.window = []
            return
        self.learner.learn_one(self.psi(x), label)

    def served(self) -> np.ndarray | None:
        return None if self.learner is None else self.learner.served()

    def score(self, X) -> np.ndarray:
        w = self.served()
        if w is None:
            return np.zeros(len(X))
        return np.array([w @ self.psi(np.array(x, dtype=float)) for x in X])


def _sam_params(variant: str, params: dict) -> dict:
    keys = ("gamma", "t0") if variant == "psam" else ("lam", "eta_scale")
    return {k: v for k, v in params.items()
            if k in (*keys, "r_skip", "a_skip", "capacity", "pairs")}


def nystrom_sam_ref(d: int, *, variant: str, n_components: int, warmup: int, seed: int,
                    **params) -> KernelSAMRef:
    """NASAM (``variant='asam'``; NSAUC is the same) or NPSAM (``'psam'``)."""
    rng = new_state(seed)

    def fit(X: np.ndarray) -> tuple[Psi, int]:
        m = NystromMapRef(X, n_components, rng)                # k-means++ draws from rng
        return nystrom_psi(m.L, m.proj, m.b), m.r

    return KernelSAMRef(variant=variant, rng=rng, warmup=warmup, fit=fit,
                        **_sam_params(variant, params))


def fasam_ref(d: int, *, n_components: int, seed: int, bandwidth: float = 0.0,
              warmup: int = 16_000, **params) -> KernelSAMRef:
    """FASAM: the frequencies and phases drawn first (FBAM's draws), then b from the first
    ``warmup`` events (``bandwidth`` 0) or ``bandwidth`` from the start."""
    rng = new_state(seed)
    freq = draw_rff(rng, n_components, d, 1.0)
    phase = np.array([2.0 * math.pi * uniform(rng) for _ in range(n_components)])
    sam = _sam_params("asam", params)
    if bandwidth > 0:
        return KernelSAMRef(variant="asam", rng=rng, warmup=0, dim=n_components,
                            psi=fourier_psi(freq, phase, bandwidth), **sam)
    ref = KernelSAMRef(variant="asam", rng=rng, warmup=warmup,
                       fit=lambda X: (fourier_psi(freq, phase, mean_sqdist(X)), n_components),
                       **sam)
    ref.freq, ref.phase = freq, phase
    return ref


# ----------------------------------------------------------------- warm-state oracle
def transplant(lrn) -> KernelSAMRef:
    """The reference in ``lrn``'s current state (``nasam``, ``npsam``, ``nsauc`` with its
    map fitted, or ``fasam`` with b known): ψ from the learner's map arrays, SAMRef with
    its weights, counters, η0 calibration, reservoirs (oldest first) and generator."""
    s = lrn.get_state()
    p = lrn.params
    variant = "psam" if lrn.name == "npsam" else "asam"
    if lrn.name == "fasam":
        ready = s["bw_"][0] > 0
        dim = p["n_components"]
        psi = fourier_psi(s["freq_"], s["phase_"], float(s["bw_"][0])) if ready else None
    else:
        dim = int(s["rank_"][0])
        ready = dim > 0
        psi = nystrom_psi(s["landmarks_"], s["proj_"], float(s["bandwidth_"][0])) if ready \
            else None
    if not ready:
        raise ValueError(f"{lrn.name}: the map is not fixed yet (still in its warm-up)")
    ref = KernelSAMRef(variant=variant, rng=s["rng_"].copy(), warmup=0, psi=psi, dim=dim,
                       **_sam_params(variant, p))
    sam = ref.learner
    t = int(s["t_"][0])
    sam.t, sam.w, sam.wbar = t, s["w_"].copy(), s["wbar_"].copy()
    sam.r_count = p["r_skip"] - t % p["r_skip"]
    sam.q, sam.a_count = t // p["a_skip"], p["a_skip"] - t % p["a_skip"]
    if "cal_" in s:
        sam.cal_n, sam.cal_sum = int(s["cal_"][0]), float(s["cal_"][1])
        sam.eta0 = float(s["cal_"][2]) if s["cal_"][2] > 0 else None
    cap = s["order_"].shape[1]
    sam.res.rows = [[s["buf_"][c, slot].copy()
                     for slot in s["order_"][c, :min(int(s["n_seen_"][c]), cap)]]
                    for c in (0, 1)]
    sam.res.n = [int(v) for v in s["n_seen_"]]
    return ref
