"""ASAM and PSAM on kernel feature maps: NASAM, NPSAM (Nyström) and FASAM (Fourier).

M. Khalid (Alnnfiai), *Scalable Large Margin Pairwise Learning Algorithms*, PhD
dissertation, Colorado State University, 2019: §6.6 (NASAM: ASAM, Algorithm 10, on the
k-means Nyström map), §6.7 (FASAM: ASAM on random Fourier features) and §7.4 (NPSAM:
PSAM, Algorithm 11, on the k-means Nyström map). Each is the linear learner of
``models.sam`` run on mapped rows ψ(x): the same dense kernel
(``models._sam_kernels.dense_learn``), streaming adapter (per event: own reservoir
first, then ``pairs`` partners from the opposite one, t counting pairs) and defaults.

- The Nyström learners use the shared k-means++ map of ``models._nystrom`` (fitted on a
  warm-up window, frozen, the window replayed), through :class:`NystromSAM`, which
  ``models.nsauc`` (seed 002's Algorithm 3, the same iteration as NASAM) shares.
- FASAM maps with cos + phase random Fourier features, FBAM's map (``models.batch``):
  its draws, and its bits through :func:`fourier_features` (this module's one numba
  kernel, a faster form of FBAM's ``rff_map`` call that FBAM could share), the bandwidth
  fixed from a warm-up window or given (see :class:`FASAM`).

O(m·d + m·r) per event to map it with Nyström (m landmarks, rank r), O(m·d) with Fourier
features (m features), then O(r) or O(m) per pair.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numba import njit

from . import _sam_kernels as K
from ._features import draw_rff
from ._nystrom import (
    FALLBACK_BANDWIDTH,
    MAP_PARAMS,
    NYSTROM_MAX_FEATURES,
    MappedLearner,
    NystromLearner,
    bandwidth,
)
from ._rng import new_state, uniform
from ._validation import Batch, Interval, Param
from .base import Learner, register
from .sam import ASAM, PSAM, sam_rule

__all__ = ["FASAM", "NASAM", "NPSAM", "NystromSAM", "fourier_features"]

_EMPTY = np.zeros(0)

# ASAM's and PSAM's parameter rules and defaults, as they are (the mapped rows are dense:
# no storage choice).
_ASAM_PARAMS = {k: v for k, v in ASAM.param_table.items() if k != "storage"}
_PSAM_PARAMS = {k: v for k, v in PSAM.param_table.items() if k != "storage"}


class _OnFeatures:
    """ASAM (``prox`` False) or PSAM on mapped rows with the dense kernel: the rule, the
    learned arrays, a learn call on mapped rows and the served vector. Mixed into a
    ``Learner`` whose parameters include ASAM's or PSAM's."""

    prox: ClassVar[bool]
    params: dict[str, Any]
    _state: dict[str, np.ndarray]
    # state arrays whose last axis is the feature dimension
    model_keys: ClassVar[frozenset[str]] = frozenset({"w_", "wbar_", "buf_"})

    def _set_rule(self) -> None:
        self._rule = sam_rule(self.params, prox=self.prox, averaging=True)

    def _sam_arrays(self, dim: int, rng: np.ndarray) -> dict[str, np.ndarray]:
        """The learner's arrays for features of dimension ``dim``, all counters at 0."""
        cap = self.params["capacity"]
        out = {"w_": np.zeros(dim), "wbar_": np.zeros(dim), "t_": np.zeros(1, np.int64)}
        if not self.prox:
            out["cal_"] = np.zeros(3)
        out.update({
            "buf_": np.zeros((2, cap, dim)),
            "order_": np.zeros((2, cap), np.int64),
            "n_seen_": np.zeros(2, np.int64),
            "rng_": rng,
        })
        return out

    def _learn_mapped(self, Z: np.ndarray, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        model = (s["w_"], s["wbar_"], _EMPTY, s["t_"], s.get("cal_", _EMPTY))  # K.Model
        bufs = (s["buf_"], s["order_"], s["n_seen_"], s["rng_"])  # K.DenseBuffers
        K.dense_learn(Z, y, model, bufs, self._rule, prior)

    def _served(self, state: dict[str, np.ndarray]) -> np.ndarray:
        """w̃ once an average exists (q = ⌊t/a_skip⌋ > 0), else w."""
        q = int(state["t_"][0]) // self.params["a_skip"]
        return state["wbar_"] if q > 0 else state["w_"]

    def weights(self, which: str = "served") -> np.ndarray:
        """A copy of ``'served'`` (w̃, or w before the first average), ``'last'`` (w) or
        ``'average'`` (w̃, zero before the first snapshot), in feature space (empty for
        a Nyström learner until its map exists)."""
        if which not in ("served", "last", "average"):
            raise ValueError(f"which must be one of served, last, average; got {which!r}.")
        s = self._state
        key = {"last": "w_", "average": "wbar_"}.get(which)
        return (s[key] if key else self._served(s)).copy()


class NystromSAM(_OnFeatures, NystromLearner):
    """Base class: ASAM or PSAM (``prox``) on ψ(x) of the shared k-means++ Nyström map.

    The learners NSAUC (``models.nsauc``), NASAM and NPSAM; subclasses set ``name``,
    ``prox`` and ``param_table`` (ASAM's or PSAM's parameters and ``MAP_PARAMS``)."""

    scoring_keys = ("rank_", "bandwidth_", "landmarks_", "proj_", "w_", "wbar_", "t_")

    def _resolve_params(self) -> None:
        super()._resolve_params()
        self._set_rule()

    def _allocate_model(self, rank: int) -> dict[str, np.ndarray]:
        return self._sam_arrays(rank, new_state(self.seed))


_NYSTROM_COMMON = """
    n_features : int
        Input dimension d, up to 1024 (dense input only): mapping a row costs O(m·d + m·r)
        and the warm-up window holds W·d floats (see ``models._nystrom``).
    seed : int
        Seed of the generator that draws the k-means++ seeds, then the reservoirs and
        the pairs."""

_STREAM_PARAMS = """
    r_skip : int in [1, 1000000], default 16
        The shrink w ← (1 − r_skip/(t + t0))·w runs every r_skip pairs (not reported in
        the dissertation; SVMSGD2's dense 16, as :class:`models.sam.ASAM`).
    a_skip : int in [1, 1000000], default 10
        The average takes the iterate every a_skip pairs (not reported; specs README).
    capacity : int in [1, 100000], default 100
        Mapped rows kept per class in each reservoir (specs README: 100 per class).
    pairs : int in [1, 1000], default 5
        Pairs per event, partners drawn uniformly with replacement from the opposite
        reservoir (specs README: k = 5)."""

_ASAM_SCALE = """
    lam : float in [1e-12, 1e6], default 1e-8
        λ of eq. 6.1 (tuned over 10^[−10:−7] in the dissertation; specs README default).
        With t0 = 1/(λη0) the step is η0/(1 + λη0·t): λ is inert on that grid.
    eta_scale : float in [1e-6, 1e6], default 1.0
        c in η0 = c / mean‖ψ(x⁺) − ψ(x⁻)‖² over the first 100 pairs, then frozen, and
        t0 = 1/(λη0) (specs README; t0 is "set experimentally" and not reported)."""

_MAP_DOC = """
    n_components : int in [1, 4096], default 1600
        m, the landmarks (the dissertation's 1600; it uses 3000 on cifar10, 2800 on
        epsilon and 400 on susy).
    warmup : int in [1, 80000], default 16000
        W, the events on which the map is fitted (specs README: W ≥ 10·m, at most 80k,
        the dissertation's "first 80k instances"); must be at least n_components. With a
        shorter window, lower n_components too (the README's m = W/10)."""

_NYSTROM_STATE = """
    State
    -----
    The map (``models._nystrom.NystromLearner``): ``window_`` (W, d), ``wlabel_`` (W,),
    ``warm_`` (2,), ``rank_`` (1,), ``bandwidth_`` (1,), ``landmarks_`` (m, d), ``proj_``
    (m, r), as in :class:`models.noam_nystrom.NOAMSeq`. The learner, on ψ: ``w_`` (r,)
    the iterate, ``wbar_`` (r,) the average w̃, ``t_`` (1,) pairs learned (r_count,
    a_count and q derive from it),{cal} the reservoirs of mapped rows ``buf_``
    (2, capacity, r), ``order_`` (2, capacity) oldest to newest, ``n_seen_``
    (negatives, positives), ``rng_`` the generator state.
"""

_CAL_STATE = """ ``cal_`` (3,) = (pairs calibrated on, their
    Σ‖x_t‖², η0; η0 is 0 until defined),"""

_NYSTROM_NOTES = """
    - The map and its warm-up are those of :class:`models.noam_nystrom.NOAMSeq` (its
      Notes): k-means++ and 5 Lloyd iterations on the first W events, b = mean‖x − x̄‖²
      over them, κ(x, y) = exp(−‖x − y‖²/b), eigenvalues above 1e-6·σ_1 kept; the
      first W events are stored (scores 0), the map is fitted and frozen at the W-th,
      and the window is replayed in order. After the warm-up no finite row can break
      the learner (it sees x only through κ ∈ [0, 1]). The dissertation computes the
      embedding "separately for each algorithm"; here each learner fits its own, from
      its own seed.
    - Streaming adapter (not the dissertation's, which draws each pair uniformly from
      the stored training set for several epochs): the partners come from per-class
      reservoirs of mapped rows, one pass; more passes are more ``learn`` calls. t
      counts pairs from 1 and the shrink factor is used as printed (no guard), as in
      :class:`models.sam.ASAM`, whose Notes apply unchanged.
"""


@register
class NASAM(NystromSAM):
    __doc__ = (
        """NASAM: ASAM on the k-means++ Nyström map (dissertation §6.6, Algorithm 10 on ψ).

    Per pair x_t = ψ(x⁺) − ψ(x⁻), t = 1, 2, …: if wᵀx_t < 1, w ← w + x_t/(λ(t + t0));
    every r_skip pairs w ← w − r_skip·(t + t0)⁻¹·w; every a_skip pairs
    w̃ ← (q·w̃ + w)/(q + 1), q ← q + 1. t0 = 1/(λη0). ψ(x) = Σ_r^{-1/2}U_rᵀk_x over m
    k-means++ landmarks. Scores w̃ᵀψ(x) (wᵀψ(x) before the first average; 0 during the
    warm-up). O(m·d + m·r) per event to map it, O(r) per pair.

    Parameters
    ----------"""
        + _NYSTROM_COMMON + _ASAM_SCALE + _STREAM_PARAMS + _MAP_DOC
        + _NYSTROM_STATE.format(cal=_CAL_STATE)
        + """
    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.create("nasam", n_features=30, seed=0, n_components=20, warmup=200)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.988

    Notes
    -----
    - NASAM and NSAUC (``models.nsauc``, Khalid, Ray and Chitsaz, ECML-PKDD 2018,
      Algorithm 3) are one method under two names: Algorithm 3 is Algorithm 10 line for
      line (loss step, shrink, average, counters), both run it on the same k-means
      Nyström map (1600 landmarks, b = mean squared distance to the mean over the first
      80k instances, λ over 10^[−10:−7], t0, r_skip and a_skip not reported), and
      neither paper gives a default the other contradicts. Both learners are
      :class:`NystromSAM` with ASAM's rule, so with the same parameters and seed their
      states are equal bit for bit; NASAM takes ASAM's parameter table as is.
    - NSAM, the dissertation's non-averaging ablation (convergence figures only), is
      not registered: it is NASAM's w (``weights('last')``), which the averaging never
      feeds back into."""
        + _NYSTROM_NOTES
    )
    name = "nasam"
    prox = False
    param_table: ClassVar[dict[str, Param]] = {**_ASAM_PARAMS, **MAP_PARAMS}


@register
class NPSAM(NystromSAM):
    __doc__ = (
        """NPSAM: PSAM on the k-means++ Nyström map (dissertation §7.4, Algorithm 11 on ψ).

    Per pair x_t = ψ(x⁺) − ψ(x⁻), t = 1, 2, …: λ_t = 1/(γ(t + t0)) and
    w ← prox_{λ_t f_t}(w) = w − λ_t·g·x_t with z = (1 − wᵀx_t)/(λ_t‖x_t‖²), g = 0 if
    z ≤ 0, −1 if z ≥ 1, −z otherwise (Appendix A's closed form); every r_skip pairs
    w ← w − r_skip·(t + t0)⁻¹·w; every a_skip pairs w̃ ← (q·w̃ + w)/(q + 1). Scores
    w̃ᵀψ(x) (wᵀψ(x) before the first average; 0 during the warm-up). O(m·d + m·r) per
    event to map it, O(r) per pair.

    Parameters
    ----------"""
        + _NYSTROM_COMMON
        + """
    gamma : float in [1e-12, 1e6], default 1e-8
        γ of Algorithm 11 (the experiments call it λ and tune it over 10^[−10:−7]);
        specs README default. With t0 = 1, λ_t ≈ 1e8/t: every violated pair is projected
        onto wᵀx_t = 1, and γ is inert.
    t0 : float in [1e-6, 1e12], default 1.0
        Offset of λ_t and of the shrink (not reported; specs README: t0 = 1, as
        :class:`models.sam.PSAM`)."""
        + _STREAM_PARAMS + _MAP_DOC
        + _NYSTROM_STATE.format(cal="")
        + """
    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.create("npsam", n_features=30, seed=0, n_components=20, warmup=200)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.989

    Notes
    -----
    - PSAM's kernel (:class:`models.sam.PSAM`, whose Notes apply: the closed-form prox,
      not Appendix A's garbled case table; a pair with ‖x_t‖² = 0 skipped; t0 fixed)
      on ψ, with PSAM's parameter table as is. The dissertation's NPSAM settings are
      the map's: 1600 landmarks (400 on susy), b = mean squared distance to the mean
      over the first 80k instances; its Table 7.5 times exclude the embedding."""
        + _NYSTROM_NOTES
    )
    name = "npsam"
    prox = True
    param_table: ClassVar[dict[str, Param]] = {**_PSAM_PARAMS, **MAP_PARAMS}


# ============================================================================== FASAM
def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@njit(cache=True, nogil=True)
def fourier_features(X, theta_t, phase, scale):
    """ψ(x) = scale·cos(θx + φ) for each row of X, θ given feature-major (d × m).

    Each θ_jᵀx is summed over the features in order from 0, then φ_j added, exactly as
    ``models._features.rff_map`` sums [θ_j, φ_j]ᵀ[x, 1] (FBAM's map): the same bits, in
    any batch, but vectorised across the m features, rows in tiles of 4 sharing each
    loaded θ entry, and without the sines rff_map also forms (3.5× faster at m = 1600,
    d = 54, measured; the cosines are then most of the cost)."""
    n, d = X.shape
    m = phase.shape[0]
    out = np.empty((n, m))
    acc = np.empty((4, m))
    r = 0
    while r < n:
        k = min(4, n - r)
        acc[:, :] = 0.0
        if k == 4:
            for i in range(d):
                x0 = X[r, i]
                x1 = X[r + 1, i]
                x2 = X[r + 2, i]
                x3 = X[r + 3, i]
                ti = theta_t[i]
                for j in range(m):
                    t = ti[j]
                    acc[0, j] += x0 * t
                    acc[1, j] += x1 * t
                    acc[2, j] += x2 * t
                    acc[3, j] += x3 * t
        else:
            for u in range(k):
                for i in range(d):
                    xi = X[r + u, i]
                    ti = theta_t[i]
                    for j in range(m):
                        acc[u, j] += xi * ti[j]
        for u in range(k):
            for j in range(m):
                out[r + u, j] = scale * math.cos(acc[u, j] + phase[j])
        r += k
    return out


@register
class FASAM(_OnFeatures, MappedLearner, Learner):
    __doc__ = (
        """FASAM: ASAM on random Fourier features (dissertation §6.7, Algorithm 10 on ψ).

    ψ(x) = √(2/m)·[cos(θ_jᵀx + φ_j)]_{j=1..m} with θ_j ~ N(0, (2/b)·I) and
    φ_j ~ U[0, 2π), so ψ(x)ᵀψ(y) ≈ exp(−‖x − y‖²/b), the kernel of the Nyström learners
    (specs README). Per pair x_t = ψ(x⁺) − ψ(x⁻), t = 1, 2, …: if wᵀx_t < 1,
    w ← w + x_t/(λ(t + t0)); every r_skip pairs w ← w − r_skip·(t + t0)⁻¹·w; every
    a_skip pairs w̃ ← (q·w̃ + w)/(q + 1). t0 = 1/(λη0). Scores w̃ᵀψ(x) (wᵀψ(x) before the
    first average; 0 while b is not yet known). O(m·d) per event to map it, O(m) per
    pair.

    Parameters
    ----------
    n_features : int
        Input dimension d, up to 1024 (dense input only): θ is m × d floats and the
        warm-up window W × d.
    seed : int
        Seed of the generator that draws the frequencies and phases (the draws of FBAM
        with the same seed), then the reservoirs and the pairs."""
        + _ASAM_SCALE + _STREAM_PARAMS
        + """
    n_components : int in [1, 4096], default 1600
        m, the Fourier features (the dissertation's 1600, Table 6.6).
    bandwidth : float in [0, 1e6], default 0
        b of the kernel exp(−‖x − y‖²/b). 0: from the data, b = mean‖x − x̄‖² over the
        first ``warmup`` events, then fixed (see Notes). A positive value fixes b and
        there is no warm-up. The dissertation's "γ = 2/σ, σ ∈ {10, 20, 50, 100}" with
        θ ~ N(0, γ·I) is this map with b = σ: its grid is bandwidth ∈ {10, 20, 50, 100}.
    warmup : int in [1, 80000], default 16000
        W, the events on which b is computed when ``bandwidth`` is 0 (unused otherwise):
        the Nyström learners' default window, so that with the same W and stream the
        kernel is theirs, b to the bit.

    State
    -----
    ``freq_`` (m, d) standard normal draws (θ = freq·√(2/b)) and ``phase_`` (m,) uniform
    on [0, 2π), drawn from ``seed`` at construction, then fixed (read-only); ``bw_`` (1,)
    b (0 until known); ``window_`` (W, d) and ``wlabel_`` (W,) the raw warm-up events and
    their labels ±1 ((0, d) and (0,) once b is known, and from the start with a fixed
    bandwidth), ``warm_`` (negatives, positives) in the window. The learner, on ψ:
    ``w_`` (m,) the iterate, ``wbar_`` (m,) the average w̃, ``t_`` (1,) pairs learned,
    ``cal_`` (3,) = (pairs calibrated on, their Σ‖x_t‖², η0), the reservoirs of mapped
    rows ``buf_`` (2, capacity, m), ``order_`` (2, capacity), ``n_seen_`` (negatives,
    positives), ``rng_`` the generator state.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.create("fasam", n_features=30, seed=0, n_components=400, warmup=200)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.988
    >>> nasam = models.create("nasam", n_features=30, n_components=20, warmup=200)
    >>> bool(lrn.get_state()["bw_"][0] == nasam.learn(X[::2], y[::2]).get_state()["bandwidth_"][0])
    True

    Notes
    -----
    - The map is variant A, cos with a phase and √(2/m) (specs README, the dissertation's
      FBAM form), from FBAM's draws and to FBAM's bits (:func:`fourier_features` sums
      as ``models._features.rff_map`` does on [x, 1] and [θ, φ]): with the same seed, m
      and b, FASAM's ψ is FBAM's. θ ~ N(0, (2/b)·I) gives the Nyström learners' kernel
      exp(−‖x − y‖²/b) (review-second-wave §3; the dissertation's "γ = 2/σ" has no
      stated sampling convention). The constant √(2/m) against 1/√m hardly matters:
      η0 is calibrated on ‖x⁺ − x⁻‖², so features scaled by c give w/c and the same
      margins as λ/c² on the unscaled features, and λ is inert at its default.
    - How b is fixed (decision): b must be known before the first pair and cannot change
      afterwards. The reservoirs hold mapped rows and w, w̃ live in ψ-space; a new b moves
      every feature, and the raw rows to re-map the reservoirs are not kept (FBAM can
      follow a running b only because each solve re-maps its raw window). So b is the
      dissertation's rule (§2.3: the mean squared distance to the mean of the first
      instances) over a warm-up window, exactly as the Nyström map takes it: the first
      ``warmup`` events are stored raw (scores 0), b is computed on them by the Nyström
      map's own function (``models._nystrom.bandwidth``; 1 if the rows are all equal),
      and the window is replayed, in order, through the frozen map. The default window
      is the Nyström learners' (16 000 events) so that FASAM against NASAM compares the
      two approximations of one kernel, as Table 6.6 does. A fixed ``bandwidth`` skips
      the warm-up (the dissertation's cross-validated σ).
    - A warm-up window whose squared distances overflow has no finite b: the batch
      completing it is refused whole. After the warm-up a row is seen through cosines,
      bounded, unless θᵀx itself overflows (entries near 1e308): ψ is then NaN and the
      batch is refused if that row would reach the state or a prequential score.
    - Streaming adapter, t counting pairs, the η0 calibration and the printed shrink:
      as :class:`models.sam.ASAM` (its Notes), on ψ. The dissertation's FASAM draws
      pairs uniformly from the stored set for several epochs; here one pass.
    """
    )

    name = "fasam"
    prox = False
    max_features = NYSTROM_MAX_FEATURES
    fixed_keys = frozenset({"freq_", "phase_"})
    input_keys = frozenset({"window_", "wlabel_"})
    variable_shape = frozenset({"window_", "wlabel_"})
    scoring_keys = ("bw_", "freq_", "phase_", "w_", "wbar_", "t_")
    param_table: ClassVar[dict[str, Param]] = {
        **_ASAM_PARAMS,
        "n_components": Param(Interval(int, 1, 4096, "both"), 1600, "Fourier features m"),
        "bandwidth": Param(Interval(float, 0.0, 1e6, "both"), 0.0,
                           "kernel b of exp(−‖x − y‖²/b); 0 = from the warm-up window"),
        "warmup": Param(Interval(int, 1, 80_000, "both"), 16_000,
                        "W: events buffered raw to compute b (bandwidth 0), then replayed"),
    }

    def _resolve_params(self) -> None:
        self._set_rule()

    def _window_size(self) -> int:
        """W while b comes from the data, 0 with a fixed bandwidth."""
        return self.params["warmup"] if self.params["bandwidth"] == 0.0 else 0

    def _allocate(self) -> dict[str, np.ndarray]:
        d, m = self.n_features, self.params["n_components"]
        rng = new_state(self.seed)
        freq = draw_rff(rng, m, d, 1.0)  # FBAM's draws, in FBAM's order
        phase = np.empty(m)
        for j in range(m):
            phase[j] = 2.0 * math.pi * uniform(rng)
        W = self._window_size()
        state = {
            "freq_": _frozen(freq),
            "phase_": _frozen(phase),
            "bw_": np.array([self.params["bandwidth"]]),
            "window_": np.zeros((W, d)),
            "wlabel_": np.zeros(W),
            "warm_": np.zeros(2, np.int64),
        }
        state.update(self._sam_arrays(m, rng))
        return state

    # ------------------------------------------------------------------ learning
    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        X = batch.dense
        n = X.shape[0]
        start = 0
        if s["bw_"][0] == 0.0:  # the warm-up window is still filling
            W = self.params["warmup"]
            fill = int(s["warm_"].sum())
            start = min(n, W - fill)
            s["window_"][fill:fill + start] = X[:start]
            s["wlabel_"][fill:fill + start] = y[:start]
            pos = int(np.count_nonzero(y[:start] > 0))
            s["warm_"][1] += pos
            s["warm_"][0] += start - pos
            if fill + start == W:
                self._switch()
        if start < n:
            self._learn_rows(X[start:], y[start:], prior[start:] if prior.shape[0] else prior)

    def _switch(self) -> None:
        """b from the window (the Nyström map's rule and function), then the window
        replayed through the now fixed map."""
        s = self._state
        X, y = s["window_"], s["wlabel_"]
        b = float(bandwidth(X))
        if not math.isfinite(b):
            raise FloatingPointError("the bandwidth overflows on this warm-up window")
        if b <= 0.0 or not math.isfinite(1.0 / b):
            b = FALLBACK_BANDWIDTH
        s["bw_"][0] = b
        s["window_"] = np.zeros((0, self.n_features))
        s["wlabel_"] = np.zeros(0)
        self._learn_rows(X, y, _EMPTY)

    def _map_rows(self, X: np.ndarray, state: dict[str, np.ndarray]) -> np.ndarray:
        """ψ of the rows of X under the state's b (θ = freq·√(2/b) feature-major, derived
        once per b and kept: the draws are never written)."""
        b = float(state["bw_"][0])
        cache = getattr(self, "_theta_cache", None)
        if cache is None or cache[0] != b or cache[1] is not state["freq_"]:
            theta_t = np.ascontiguousarray((state["freq_"] * math.sqrt(2.0 / b)).T)
            cache = self._theta_cache = (b, state["freq_"], theta_t)
        m = state["phase_"].shape[0]
        return fourier_features(X, cache[2], state["phase_"], math.sqrt(2.0 / m))

    def _map_ready(self, state: dict[str, np.ndarray]) -> bool:
        return bool(state["bw_"][0] != 0.0)

    # ------------------------------------------------------------------ scoring

    def _scoring_state(self) -> dict[str, np.ndarray]:
        """Copies of the scoring arrays and counters; the fixed draws are shared."""
        s = self._state
        out = {k: s[k].copy() for k in ("bw_", "w_", "wbar_", "t_", "n_seen_", "warm_")}
        out.update({k: s[k] for k in self.fixed_keys})
        return out

    @property
    def n_seen(self) -> tuple[int, int]:
        """Events learned so far, as (negatives, positives), the warm-up window included."""
        s = self._state
        n = s["warm_"] if s["bw_"][0] == 0.0 else s["n_seen_"]
        return int(n[0]), int(n[1])

    @property
    def buffer_fill(self) -> tuple[int, int] | None:
        """Rows held in the (negative, positive) reservoirs of mapped rows (0 during the
        warm-up, whose rows are in the window)."""
        cap = self.params["capacity"]
        n = self._state["n_seen_"]
        return int(min(n[0], cap)), int(min(n[1], cap))

    # ------------------------------------------------------------------ restore
    def _after_restore(self) -> None:
        s = self._state
        for key in self.fixed_keys:
            s[key] = _frozen(s[key])
        problem = self._inconsistency()
        if problem:
            raise ValueError(f"The {self.name} state is inconsistent: {problem}.")

    def _inconsistency(self) -> str | None:
        """Why the restored warm-up arrays disagree with each other, or None."""
        s = self._state
        d, W, fixed = self.n_features, self._window_size(), self.params["bandwidth"]
        warm, bw = s["warm_"], s["bw_"]
        if warm.shape != (2,) or (warm < 0).any() or bw.shape != (1,):
            return "'warm_'/'bw_' are malformed"
        b = float(bw[0])
        if fixed > 0.0:
            if b != fixed or warm.any():
                return "with a fixed bandwidth, 'bw_' must equal it and 'warm_' be 0"
            rows = 0
        elif b == 0.0:
            if int(warm.sum()) >= W or s["n_seen_"].any() or s["t_"].any():
                return "the warm-up counters are out of range"
            rows = W
        else:
            if not math.isfinite(b) or b < 0.0 or int(warm.sum()) != W:
                return f"bw_={b} or the warm-up counters are out of range"
            if int(s["n_seen_"].sum()) < W:
                return "'n_seen_' counts fewer events than the warm-up window"
            rows = 0
        for key, shape in (("window_", (rows, d)), ("wlabel_", (rows,))):
            if s[key].shape != shape:
                return f"{key!r} must have shape {shape}, got {s[key].shape}"
        return None
