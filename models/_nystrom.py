"""The k-means++ Nyström feature map shared by the Nyström learners, and their base class.

Map (Khalid, Ray and Chitsaz, ECML-PKDD 2018, §3.2 and Algorithm 1; Khalid's
dissertation §2.3; specs README, second-wave table): on a warm-up window X (W rows),

- bandwidth b = mean_i ‖x_i − x̄‖², and κ(x, y) = exp(−‖x − y‖²/b);
- m landmarks u_1 … u_m: k-means++ seeding on X with the learner's own generator
  (``models._rng``), then ``KMEANS_ITERS`` = 5 Lloyd iterations;
- W_ij = κ(u_i, u_j) = U Σ Uᵀ (eigenvalues descending), keep the r eigenpairs with
  σ_i > 1e-6·σ_1 (``_config.NYSTROM_EIG_FLOOR``), and
  ψ(x) = Σ_r^{-1/2} U_rᵀ k_x with k_x = [κ(x, u_1), …, κ(x, u_m)]
  (the papers print U_r Σ_r^{-1/2} ϕᵀ(x), dimensionally wrong; specs [OCR-FIX]).
  ψ(x)ᵀψ(y) = k_xᵀ W_r⁺ k_y, the Nyström approximation of κ(x, y).

API, for every learner that uses the map (all arrays float64, C-contiguous):

- ``bandwidth(X) -> float``: mean ‖x − x̄‖² of the rows (numba).
- ``kmeanspp_landmarks(X, m, rng, iters) -> landmarks`` (m, d): k-means++ seeding then
  ``iters`` Lloyd iterations; ``rng`` (uint64[4], ``models._rng``) advances in place (numba).
- ``nystrom_projection(landmarks, bandwidth, floor) -> (proj, rank)``: proj = U_r Σ_r^{-1/2}
  (m, r), so that ψ(x) = projᵀ k_x (numpy ``eigh``: LAPACK, see below).
- ``fit_map(X, m, rng, iters=KMEANS_ITERS, floor=NYSTROM_EIG_FLOOR) ->
  (landmarks, proj, bandwidth)``: the three steps, raising ``FloatingPointError`` when the
  window's squared distances overflow (the map would not be finite).
- ``nystrom_transform(X, landmarks, proj, bandwidth) -> Z`` (n, r): ψ of each row (numba).
  ``prepare_map(landmarks, proj) -> (lt, packed)`` and ``transform_prepared(X, lt, packed,
  rank, gamma)`` are the same in two steps, for callers that keep the derived layouts.
- :class:`NystromLearner`: a ``Learner`` base class that buffers the first ``warmup``
  events raw, fits the map at the event that completes the window, freezes it and replays
  the window into the subclass's learner on ψ(x); scores are 0 until then.

Determinism. Every kernel sums in a fixed order that does not depend on how rows are
batched: a row's ψ is the same bits in any batch. k-means++ and Lloyd are deterministic
given the generator state. The one numpy step on the learning path is ``eigh`` (LAPACK's
symmetric solver), deterministic on one machine with a fixed BLAS build and thread count,
not necessarily across machines.

Speed. ψ for a batch is a matrix product (n, m) × (m, r), O(m·r) per row: at the defaults
(m = r ≈ 1600) 2.6 M multiply-adds per event, which dominates every Nyström learner. It is
blocked (rows in tiles of 4 sharing each loaded projection entry, the projection packed in
panels of ``PANEL`` columns, the landmark sum in blocks of ``J_BLOCK``) so that a block of
the projection is reused from cache across a tile; each output is still Σ_j in the same
order for every batch. The kernel rows k_x are summed over features in order, vectorised
across landmarks (landmark-major copy ``lt``, d × m).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numba import njit

from ._config import NYSTROM_EIG_FLOOR
from ._features import sqdist
from ._kernels import dense_scores
from ._rng import below, uniform
from ._validation import Batch, Interval, Param
from .base import Learner

__all__ = [
    "KMEANS_ITERS",
    "MAP_PARAMS",
    "NYSTROM_MAX_FEATURES",
    "NystromLearner",
    "bandwidth",
    "fit_map",
    "kmeanspp_landmarks",
    "nystrom_projection",
    "nystrom_transform",
    "prepare_map",
    "transform_prepared",
]

# ------------------------------------------------------------------------------------
# Named constants and tolerances of the Nyström map (models/_config.py holds the shared
# ones; the eigenvalue floor 1e-6·σ_1 is ``_config.NYSTROM_EIG_FLOOR``).
#
# Lloyd iterations after the k-means++ seeding (specs README: "k-means++ (5 iterations)";
# the INys reference code's limit).
KMEANS_ITERS = 5
# Input dimension limit of the Nyström learners: the warm-up window holds W·d floats
# (16 000 × 1024 × 8 B = 131 MB at the defaults; the cap on W, 80 000, gives 655 MB) and
# is copied by the all-or-nothing journal before each warm-up batch. Every dataset of the
# two papers fits (the largest d, protein's 357, and usps's 256).
NYSTROM_MAX_FEATURES = 1024
# Bandwidth used when the window's b is 0 or so small that 1/b overflows (all warm-up
# rows equal to within the float range): κ = exp(−‖x − y‖²/b) is then undefined.
FALLBACK_BANDWIDTH = 1.0
# The projection product's blocking (speed only; no effect on any result's bits): panels
# of PANEL output columns, the landmark sum in blocks of J_BLOCK, rows in blocks of
# ROW_BLOCK (their kernel rows, ROW_BLOCK × m, are computed together).
PANEL = 64
J_BLOCK = 256
ROW_BLOCK = 64
# Learners map and learn a long batch in chunks of this many rows (bounds the (n, r)
# mapped rows kept at once; results do not depend on it).
LEARN_CHUNK = 1024
# ------------------------------------------------------------------------------------


# ============================================================================ kernels
@njit(cache=True, nogil=True)
def bandwidth(X):
    """b = mean_i ‖x_i − x̄‖² over the rows of X (x̄ their mean), summed in row order."""
    n, d = X.shape
    mean = np.zeros(d)
    for r in range(n):
        for i in range(d):
            mean[i] += X[r, i]
    for i in range(d):
        mean[i] /= n
    total = 0.0
    for r in range(n):
        total += sqdist(X[r], mean)
    return total / n


@njit(cache=True, nogil=True)
def _seed(X, m, rng):
    """k-means++ seeding (Arthur and Vassilvitskii 2007): the first centre uniform among
    the rows, each next one row i with probability D(x_i)²/Σ D², D the distance to the
    nearest centre so far. The draw u·Σ D² (u uniform) picks the first row whose running
    sum of D² (in row order) exceeds it. If every D² is 0 (fewer distinct rows than
    centres) the row is drawn uniformly instead."""
    n, d = X.shape
    centres = np.empty((m, d))
    first = below(rng, n)
    centres[0, :] = X[first]
    d2 = np.empty(n)
    for r in range(n):
        d2[r] = sqdist(X[r], centres[0])
    for k in range(1, m):
        total = 0.0
        for r in range(n):
            total += d2[r]
        if not total < np.inf:
            raise FloatingPointError("k-means++: the squared distances overflow")
        if total > 0.0:
            u = uniform(rng) * total
            pick = n - 1
            acc = 0.0
            for r in range(n):
                acc += d2[r]
                if acc > u:
                    pick = r
                    break
        else:
            pick = below(rng, n)
        centres[k, :] = X[pick]
        c = centres[k]
        for r in range(n):
            dist = sqdist(X[r], c)
            if dist < d2[r]:
                d2[r] = dist
    return centres


@njit(cache=True, nogil=True)
def _lloyd(X, centres, iters):
    """``iters`` Lloyd iterations in place: each row to its nearest centre (the lowest
    index on a tie), then each centre to the mean of its rows, summed in row order; a
    centre left without rows keeps its position."""
    n, d = X.shape
    m = centres.shape[0]
    label = np.empty(n, np.int64)
    sums = np.empty((m, d))
    counts = np.empty(m, np.int64)
    for _ in range(iters):
        for r in range(n):
            best = 0
            bd = sqdist(X[r], centres[0])
            for k in range(1, m):
                dist = sqdist(X[r], centres[k])
                if dist < bd:
                    bd = dist
                    best = k
            label[r] = best
        sums[:, :] = 0.0
        counts[:] = 0
        for r in range(n):
            k = label[r]
            counts[k] += 1
            for i in range(d):
                sums[k, i] += X[r, i]
        for k in range(m):
            if counts[k] > 0:
                for i in range(d):
                    centres[k, i] = sums[k, i] / counts[k]


@njit(cache=True, nogil=True)
def kmeanspp_landmarks(X, m, rng, iters):
    """m landmarks: k-means++ seeding on the rows of X, then ``iters`` Lloyd iterations.
    ``rng`` advances in place (one draw per centre)."""
    centres = _seed(X, m, rng)
    _lloyd(X, centres, iters)
    return centres


@njit(cache=True, nogil=True)
def _landmark_major(landmarks):
    """lt[i, j] = landmarks[j, i] (d × m)."""
    m, d = landmarks.shape
    lt = np.empty((d, m))
    for j in range(m):
        for i in range(d):
            lt[i, j] = landmarks[j, i]
    return lt


@njit(cache=True, nogil=True)
def _pack(proj):
    """The projection (m, r) in panels of PANEL columns, (⌈r/PANEL⌉, m, PANEL), zero
    padded: a panel's rows are contiguous for the product kernel."""
    m, r = proj.shape
    npan = (r + PANEL - 1) // PANEL
    out = np.zeros((npan, m, PANEL))
    for p in range(npan):
        c0 = p * PANEL
        width = min(PANEL, r - c0)
        for j in range(m):
            for c in range(width):
                out[p, j, c] = proj[j, c0 + c]
    return out


@njit(cache=True, nogil=True)
def prepare_map(landmarks, proj):
    """The derived layouts the transform reads: (landmark-major landmarks, packed proj)."""
    return _landmark_major(landmarks), _pack(proj)


@njit(cache=True, nogil=True)
def _kernel_rows(X, lo, hi, lt, gamma, out):
    """out[t − lo, j] = exp(−γ‖x_t − u_j‖²) for rows lo ≤ t < hi: the squared distance
    summed over features in order, vectorised across the landmarks."""
    d, m = lt.shape
    for t in range(lo, hi):
        o = out[t - lo]
        o[:] = 0.0
        for i in range(d):
            xi = X[t, i]
            li = lt[i]
            for j in range(m):
                diff = xi - li[j]
                o[j] += diff * diff
        for j in range(m):
            o[j] = math.exp(-gamma * o[j])


@njit(cache=True, nogil=True)
def _project(K, rows, packed, r, Z, z0):
    """Z[z0 + t, :r] = K[t] @ proj for t < rows, with ``packed`` = proj in panels.

    Each output is Σ_j K[t, j]·proj[j, c] summed in order within blocks of J_BLOCK
    landmarks, the blocks added to the output in order: the same operations for every
    row, whichever tile (4 rows, or 1) it falls in."""
    m = K.shape[1]
    npan = packed.shape[0]
    acc = np.empty((4, PANEL))
    for j0 in range(0, m, J_BLOCK):
        j1 = min(j0 + J_BLOCK, m)
        for p in range(npan):
            pan = packed[p]
            c0 = p * PANEL
            width = min(PANEL, r - c0)
            t = 0
            while t + 4 <= rows:
                acc[:, :] = 0.0
                for j in range(j0, j1):
                    b0 = K[t, j]
                    b1 = K[t + 1, j]
                    b2 = K[t + 2, j]
                    b3 = K[t + 3, j]
                    for c in range(PANEL):
                        q = pan[j, c]
                        acc[0, c] += b0 * q
                        acc[1, c] += b1 * q
                        acc[2, c] += b2 * q
                        acc[3, c] += b3 * q
                for u in range(4):
                    for c in range(width):
                        Z[z0 + t + u, c0 + c] += acc[u, c]
                t += 4
            while t < rows:
                for c in range(PANEL):
                    acc[0, c] = 0.0
                for j in range(j0, j1):
                    b0 = K[t, j]
                    for c in range(PANEL):
                        acc[0, c] += b0 * pan[j, c]
                for c in range(width):
                    Z[z0 + t, c0 + c] += acc[0, c]
                t += 1


@njit(cache=True, nogil=True)
def transform_prepared(X, lt, packed, rank, gamma):
    """ψ(x) = projᵀ k_x for each row of X, from the layouts of :func:`prepare_map`;
    γ = 1/b. Returns (n, rank)."""
    n = X.shape[0]
    m = lt.shape[1]
    Z = np.zeros((n, rank))
    K = np.empty((ROW_BLOCK, m))
    for t0 in range(0, n, ROW_BLOCK):
        t1 = min(t0 + ROW_BLOCK, n)
        _kernel_rows(X, t0, t1, lt, gamma, K)
        _project(K, t1 - t0, packed, rank, Z, t0)
    return Z


@njit(cache=True, nogil=True)
def _gram(landmarks, gamma):
    """W_ij = κ(u_i, u_j) (m × m), exactly symmetric ((a − b)² = (b − a)², same order)."""
    m = landmarks.shape[0]
    W = np.empty((m, m))
    _kernel_rows(landmarks, 0, m, _landmark_major(landmarks), gamma, W)
    return W


def nystrom_transform(X: np.ndarray, landmarks: np.ndarray, proj: np.ndarray,
                      bandwidth: float) -> np.ndarray:
    """ψ(x) = Σ_r^{-1/2} U_rᵀ k_x for each row of X: (n, r) with r = proj.shape[1]."""
    lt, packed = prepare_map(landmarks, proj)
    return transform_prepared(np.ascontiguousarray(X, dtype=np.float64), lt, packed,
                              proj.shape[1], 1.0 / bandwidth)


# ========================================================================= the map fit
def nystrom_projection(landmarks: np.ndarray, bandwidth: float,
                       floor: float = NYSTROM_EIG_FLOOR) -> tuple[np.ndarray, int]:
    """proj = U_r Σ_r^{-1/2} (m, r) from W = κ(landmarks, landmarks) = U Σ Uᵀ, keeping the
    r eigenpairs with σ_i > floor·σ_1 (descending). Each eigenvector's largest-magnitude
    entry is made positive (a canonical sign: ψ's coordinates flip with it, the model
    does not change)."""
    W = _gram(landmarks, 1.0 / bandwidth)
    lam, U = np.linalg.eigh(W)
    lam, U = lam[::-1], U[:, ::-1]
    rank = int(np.count_nonzero(lam > floor * lam[0]))
    lam, U = lam[:rank], U[:, :rank]
    pivot = np.argmax(np.abs(U), axis=0)
    U = U * np.where(U[pivot, np.arange(rank)] < 0, -1.0, 1.0)
    return np.ascontiguousarray(U / np.sqrt(lam)), rank


def fit_map(X: np.ndarray, m: int, rng: np.ndarray, iters: int = KMEANS_ITERS,
            floor: float = NYSTROM_EIG_FLOOR) -> tuple[np.ndarray, np.ndarray, float]:
    """(landmarks, proj, bandwidth) of the k-means++ Nyström map fitted on the rows of X.

    Raises ``FloatingPointError`` if the rows' squared distances overflow (b, or a
    k-means distance, not finite): no finite map exists for such a window."""
    b = float(bandwidth(X))
    if not math.isfinite(b):
        raise FloatingPointError("the Nyström bandwidth overflows on this warm-up window")
    if b <= 0.0 or not math.isfinite(1.0 / b):
        b = FALLBACK_BANDWIDTH
    landmarks = kmeanspp_landmarks(X, m, rng, iters)
    if not np.isfinite(landmarks).all():
        raise FloatingPointError("k-means does not stay finite on this warm-up window")
    proj, _ = nystrom_projection(landmarks, b, floor)
    if not np.isfinite(proj).all():
        raise FloatingPointError("the Nyström projection is not finite")
    return landmarks, proj, b


# ====================================================================== learner base
MAP_PARAMS: dict[str, Param] = {
    "n_components": Param(
        Interval(int, 1, 4096, "both"), 1600,
        "m: landmarks (k-means++ centres) of the Nyström map",
    ),
    "warmup": Param(
        Interval(int, 1, 80_000, "both"), 16_000,
        "W: events buffered raw, on which the map is fitted before they are replayed",
    ),
}

_MAP_KEYS = ("window_", "wlabel_", "warm_", "rank_", "bandwidth_", "landmarks_", "proj_")


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class MappedLearner:
    """Learning and scoring through a feature map ψ, ``LEARN_CHUNK`` rows at a time (a
    large batch's mapped block would not fit in memory at once). Mixed into a
    ``Learner`` that implements ``_map_rows(X, state)`` (ψ of the rows), ``_map_ready(state)``
    (is there a map yet: until then every score is 0), ``_learn_mapped(Z, y, prior)`` and
    ``_served(state)`` (the weight vector that scores ψ)."""

    _state: dict[str, np.ndarray]

    def _map_rows(self, X: np.ndarray, state: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def _map_ready(self, state: dict[str, np.ndarray]) -> bool:
        raise NotImplementedError

    def _learn_mapped(self, Z: np.ndarray, y: np.ndarray, prior: np.ndarray) -> None:
        raise NotImplementedError

    def _served(self, state: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def _learn_rows(self, X: np.ndarray, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        for a in range(0, X.shape[0], LEARN_CHUNK):
            b = min(a + LEARN_CHUNK, X.shape[0])
            self._learn_mapped(self._map_rows(X[a:b], s), y[a:b],
                               prior[a:b] if prior.shape[0] else prior)

    def _score(self, batch: Batch) -> np.ndarray:
        s = self._state
        X = batch.dense
        if not self._map_ready(s):
            return np.zeros(X.shape[0])
        w = self._served(s)
        out = np.empty(X.shape[0])
        for a in range(0, X.shape[0], LEARN_CHUNK):
            b = min(a + LEARN_CHUNK, X.shape[0])
            out[a:b] = dense_scores(self._map_rows(X[a:b], s), w)
        return out


class NystromLearner(MappedLearner, Learner):
    """Base class: a learner on ψ(x), the k-means++ Nyström map fitted on a warm-up window.

    The first ``warmup`` events are kept raw (``window_``, ``wlabel_``); the event that
    completes the window triggers :func:`fit_map` (the learner's generator ``rng_`` draws
    the k-means++ seeds), then the window is replayed, in order, into the subclass's
    learner on ψ, and the window is dropped. The map's arrays are frozen from then on:
    they are replaced once at the switch and never written (``fixed_keys``; read-only), so
    a batch neither copies nor checks them and a snapshot shares them. Until the switch
    every score is 0.

    Subclasses: add ``MAP_PARAMS`` to their ``param_table``; set ``model_keys`` (their
    state arrays whose last axis is the map's rank r) and ``scoring_keys``; implement
    ``_allocate_model(r)`` (their arrays for rank r; r = 0 before the switch, with all
    their counters at zero), ``_learn_mapped(Z, y, prior)`` (learn mapped rows, writing
    prequential scores as ``Learner._learn`` does) and ``_served(state)`` (the weight
    vector that scores ψ, from a state or snapshot dict). ``n_seen_`` must be the
    subclass's per-class event counter: it stays 0 during the warm-up and the replay
    brings it to the window's counts (``n_seen`` reports the window's counts until then).
    """

    max_features = NYSTROM_MAX_FEATURES
    fixed_keys = frozenset({"landmarks_", "proj_", "bandwidth_"})
    input_keys = frozenset({"window_", "wlabel_"})
    model_keys: ClassVar[frozenset[str]] = frozenset()
    _map_variable = frozenset({"window_", "wlabel_", "landmarks_", "proj_"})

    # ------------------------------------------------------------ subclass hooks
    def _allocate_model(self, rank: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _learn_mapped(self, Z: np.ndarray, y: np.ndarray, prior: np.ndarray) -> None:
        raise NotImplementedError

    def _served(self, state: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    # ------------------------------------------------------------ contract
    def _resolve_params(self) -> None:
        p = self.params
        if p["warmup"] < p["n_components"]:
            raise ValueError(
                f"The 'warmup' parameter of {self.name} must be at least n_components "
                f"({p['n_components']}): k-means needs as many warm-up events as "
                f"landmarks; got {p['warmup']!r}."
            )

    def _variable_keys(self) -> frozenset[str]:
        return self.variable_shape | self._map_variable | self.model_keys

    def _allocate(self) -> dict[str, np.ndarray]:
        d = self.n_features
        W = self.params["warmup"]
        state = {
            "window_": np.zeros((W, d)),
            "wlabel_": np.zeros(W),
            "warm_": np.zeros(2, np.int64),
            "rank_": np.zeros(1, np.int64),
            "bandwidth_": _frozen(np.zeros(1)),
            "landmarks_": _frozen(np.zeros((0, d))),
            "proj_": _frozen(np.zeros((0, 0))),
        }
        state.update(self._allocate_model(0))
        return state

    @property
    def n_seen(self) -> tuple[int, int]:
        """Events learned so far, as (negatives, positives), the warm-up window included."""
        s = self._state
        n = s["n_seen_"] if s["rank_"][0] > 0 else s["warm_"]
        return int(n[0]), int(n[1])

    @property
    def buffer_fill(self) -> tuple[int, int] | None:
        """Rows held in the (negative, positive) reservoirs of mapped rows (0 during the
        warm-up, whose rows are in the window)."""
        cap = self.params.get("capacity")
        if cap is None:
            return None
        n = self._state["n_seen_"]
        return int(min(n[0], cap)), int(min(n[1], cap))

    @property
    def rank(self) -> int:
        """The map's rank r (ψ's dimension); 0 until the warm-up is complete."""
        return int(self._state["rank_"][0])

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        X = batch.dense
        n = X.shape[0]
        start = 0
        if s["rank_"][0] == 0:
            fill = int(s["warm_"].sum())
            start = min(n, self.params["warmup"] - fill)
            s["window_"][fill:fill + start] = X[:start]
            s["wlabel_"][fill:fill + start] = y[:start]
            pos = int(np.count_nonzero(y[:start] > 0))
            s["warm_"][1] += pos
            s["warm_"][0] += start - pos
            if fill + start == self.params["warmup"]:
                self._switch()
        if start < n:
            self._learn_rows(X[start:], y[start:], prior[start:] if prior.shape[0] else prior)

    def _switch(self) -> None:
        """Fit and freeze the map on the window, then replay the window into the learner."""
        s = self._state
        X, y = s["window_"], s["wlabel_"]
        landmarks, proj, b = fit_map(X, self.params["n_components"], s["rng_"])
        rank = proj.shape[1]
        s["landmarks_"] = _frozen(landmarks)
        s["proj_"] = _frozen(proj)
        s["bandwidth_"] = _frozen(np.array([b]))
        s["rank_"][0] = rank
        s["window_"] = np.zeros((0, self.n_features))
        s["wlabel_"] = np.zeros(0)
        fresh = self._allocate_model(rank)
        for key in ("n_seen_", "rng_"):  # counters restart for the replay; rng carries on
            fresh.pop(key, None)
        s.update(fresh)
        s["n_seen_"][:] = 0
        self._learn_rows(X, y, np.zeros(0))

    def _prepared(self, state: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(lt, packed) of the frozen map, derived once and kept while it is the same
        map (the arrays are only ever replaced, never written)."""
        cache = getattr(self, "_map_cache", None)
        if cache is None or cache[0] is not state["landmarks_"] or cache[1] is not state["proj_"]:
            lt, packed = prepare_map(state["landmarks_"], state["proj_"])
            cache = self._map_cache = (state["landmarks_"], state["proj_"], lt, packed)
        return cache[2], cache[3]

    def _map_rows(self, X: np.ndarray, state: dict[str, np.ndarray]) -> np.ndarray:
        lt, packed = self._prepared(state)
        return transform_prepared(X, lt, packed, int(state["rank_"][0]),
                                  1.0 / float(state["bandwidth_"][0]))

    def _map_ready(self, state: dict[str, np.ndarray]) -> bool:
        return bool(state["rank_"][0] > 0)

    def _scoring_state(self) -> dict[str, np.ndarray]:
        """Copies of the model's scoring arrays and counters; the frozen map is shared."""
        s = self._state
        out = {k: s[k].copy() for k in (*self.scoring_keys, "n_seen_", "warm_", "rank_")
               if k not in self.fixed_keys}
        out.update({k: s[k] for k in self.fixed_keys})
        return out

    def _after_restore(self) -> None:
        s = self._state
        for key in self.fixed_keys:
            s[key] = _frozen(s[key])
        problem = self._inconsistency()
        if problem:
            raise ValueError(f"The {self.name} state is inconsistent: {problem}.")

    def _inconsistency(self) -> str | None:
        """Why the restored map arrays disagree with each other, or None."""
        s = self._state
        p = self.params
        d, W, m = self.n_features, p["warmup"], p["n_components"]
        warm = s["warm_"]
        if s["rank_"].shape != (1,) or warm.shape != (2,) or (warm < 0).any():
            return "'rank_'/'warm_' are malformed"
        if s["bandwidth_"].shape != (1,):
            return "'bandwidth_' must have shape (1,)"
        rank, b = int(s["rank_"][0]), float(s["bandwidth_"][0])
        if rank == 0:
            if int(warm.sum()) >= W or s["n_seen_"].any():
                return "the warm-up counters are out of range"
            want: dict[str, Any] = {"window_": (W, d), "wlabel_": (W,), "landmarks_": (0, d),
                                    "proj_": (0, 0)}
            if b != 0.0:
                return "'bandwidth_' must be 0 before the map is fitted"
        else:
            if not 1 <= rank <= m or int(warm.sum()) != W:
                return f"rank_={rank} or the warm-up counters are out of range"
            if int(s["n_seen_"].sum()) < W:
                return "'n_seen_' counts fewer events than the warm-up window"
            want = {"window_": (0, d), "wlabel_": (0,), "landmarks_": (m, d),
                    "proj_": (m, rank)}
            if not (math.isfinite(b) and b > 0.0):
                return "'bandwidth_' must be positive and finite"
        want.update({k: v.shape for k, v in self._allocate_model(rank).items()
                     if k in self.model_keys})
        for key, shape in want.items():
            if s[key].shape != shape:
                return f"{key!r} must have shape {shape}, got {s[key].shape}"
        return None
