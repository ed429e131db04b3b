"""NSAUC: stochastic nonlinear AUC maximisation on the k-means++ Nyström map.

Khalid, Ray and Chitsaz, *Scalable Nonlinear AUC Maximization Methods* (ECML-PKDD 2018,
seed 002), Algorithm 3 on the embedding of Algorithm 1: SVMSGD2 on pairs of Nyström
features with scheduled regularisation and scheduled averaging. Algorithm 3 is the same
iteration as the dissertation's ASAM (Algorithm 10), so the learner is ASAM's dense
kernel (``models._sam_kernels.dense_learn``) on the mapped rows ψ(x) of the shared map
(``models._nystrom``), with ASAM's streaming adapter and the second-wave defaults: the
class is ``models.sam_kernel.NystromSAM``, shared with the dissertation's NASAM (the same
method under its other name) and NPSAM.
"""

from __future__ import annotations

from typing import ClassVar

from ._nystrom import MAP_PARAMS
from ._validation import Interval, Param
from .base import capacity_param, register, scale_param
from .sam_kernel import NystromSAM

__all__ = ["NSAUC"]


def _skip_param(default: int, doc: str) -> Param:
    return Param(Interval(int, 1, 1_000_000, "both"), default, doc)


@register
class NSAUC(NystromSAM):
    """NSAUC: Algorithm 3 of Khalid et al. (ECML-PKDD 2018) on the k-means++ Nyström map.

    Per pair x_t = ψ(x⁺) − ψ(x⁻), t = 1, 2, …: if wᵀx_t < 1, w ← w + x_t/(λ(t + t0))
    (line 5, with ℓ′ read as Bottou's dloss = −∂ℓ, see Notes); every r_skip pairs
    w ← w − r_skip·(t + t0)⁻¹·w (line 8); every a_skip pairs w̃ ← (q·w̃ + w)/(q + 1),
    q ← q + 1 (line 13); the model is w̃ (line 16). ψ(x) = Σ_r^{-1/2}U_rᵀk_x over m
    k-means++ landmarks (Algorithm 1). On a stream each event enters its own class's
    reservoir, then is paired with ``pairs`` uniform draws from the opposite one. Scores
    w̃ᵀψ(x) (wᵀψ(x) before the first average; 0 during the warm-up). O(m·d + m·r) per
    event to map it, O(r) per pair.

    Parameters
    ----------
    n_features : int
        Input dimension d, up to 1024 (dense input only): mapping a row costs O(m·d + m·r)
        and the warm-up window holds W·d floats (see ``models._nystrom``).
    seed : int
        Seed of the generator that draws the k-means++ seeds, then the reservoirs and
        the pairs.
    lam : float in [1e-12, 1e6], default 1e-8
        λ of Algorithm 3 (the paper tunes it over 10^[−10:−7]; specs README default).
        With t0 = 1/(λη0) the step is η0/(1 + λη0·t): λ is inert on the paper's grid.
    eta_scale : float in [1e-6, 1e6], default 1.0
        c in η0 = c / mean‖ψ(x⁺) − ψ(x⁻)‖² over the first 100 pairs, then frozen, and
        t0 = 1/(λη0) (specs README; the paper sets t0 "experimentally" and reports none).
    r_skip : int in [1, 1000000], default 16
        The shrink runs every r_skip pairs (rskip; not reported; SVMSGD2's dense 16).
    a_skip : int in [1, 1000000], default 10
        The average takes the iterate every a_skip pairs (askip; not reported; the
        review's 10: the spec's "askip = n" would leave one snapshot in a pass).
    capacity : int in [1, 100000], default 100
        Mapped rows kept per class in each reservoir.
    pairs : int in [1, 1000], default 5
        Pairs per event, drawn uniformly with replacement from the opposite reservoir.
    n_components : int in [1, 4096], default 1600
        m, the landmarks (the paper's v = 1600).
    warmup : int in [1, 80000], default 16000
        W, the events on which the map is fitted (specs README: W ≥ 10·m, at most 80k,
        the paper's "first 80k instances"); must be at least n_components. With a shorter
        window, lower n_components too (the README's m = W/10).

    State
    -----
    The map (``models._nystrom.NystromLearner``): ``window_`` (W, d), ``wlabel_`` (W,),
    ``warm_`` (2,), ``rank_`` (1,), ``bandwidth_`` (1,), ``landmarks_`` (m, d), ``proj_``
    (m, r), as in :class:`models.noam_nystrom.NOAMSeq`. The learner, on ψ: ``w_`` (r,)
    the iterate, ``wbar_`` (r,) the average w̃, ``t_`` (1,) pairs learned (r_count,
    a_count and q derive from it), ``cal_`` (3,) = (pairs calibrated on, their
    Σ‖x_t‖², η0; η0 is 0 until defined), the reservoirs ``buf_`` (2, capacity, r),
    ``order_`` (2, capacity), ``n_seen_`` (negatives, positives), ``rng_``.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.create("nsauc", n_features=30, seed=0, n_components=20, warmup=200)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.988

    Notes
    -----
    - Algorithm 3 is ASAM's Algorithm 10 (the same loss step, shrink and average, the
      same counters), so this is ``models.sam.ASAM``'s dense kernel on ψ: its Notes on
      t0, the η0 calibration, the printed shrink factor (no guard; t counts pairs from
      1) and the streaming adapter apply unchanged.
    - The dissertation's NASAM (§6.6, ``models.sam_kernel.NASAM``) is this method under
      its other name: both are ``models.sam_kernel.NystromSAM`` with ASAM's rule, and
      with the same parameters and seed their states are equal bit for bit.
    - Sign: the paper prints w + (1/(λ(t + t0)))·ℓ′(wᵀx_t)·x_t with ℓ′ "a subgradient of
      the hinge"; taken literally that moves w the wrong way. ℓ′ is SVMSGD2's dloss
      (−∂ℓ: 1 if wᵀx_t < 1, else 0), as the dissertation's Algorithm 10 makes explicit.
    - Streaming adapter (not the paper's): Algorithm 3 draws i_t, j_t uniformly from a
      stored set for several epochs; here the partners come from per-class reservoirs
      of mapped rows (100 each), ``pairs`` per event, one pass (specs README: "per
      event: own reservoir first, then k = 5 pairs"). More passes are more ``learn``
      calls.
    - The map and the warm-up are those of :class:`models.noam_nystrom.NOAMSeq` (its
      Notes): the first W events are stored (scores 0), the map is fitted and frozen at
      the W-th, and the window is replayed in order; eigh (LAPACK) is deterministic on
      one machine. After the warm-up no finite row can break the learner (κ ∈ [0, 1]).
    """

    name = "nsauc"
    prox = False
    param_table: ClassVar[dict[str, Param]] = {
        "lam": scale_param(1e-8, "λ of Algorithm 3", low=1e-12),
        "eta_scale": scale_param(1.0, "η0 = eta_scale / mean‖x⁺ − x⁻‖² (first 100 pairs)"),
        "r_skip": _skip_param(16, "shrink every r_skip pairs"),
        "a_skip": _skip_param(10, "average every a_skip pairs"),
        "capacity": capacity_param(100),
        "pairs": Param(Interval(int, 1, 1000, "both"), 5,
                       "pairs per event, drawn from the opposite reservoir"),
        **MAP_PARAMS,
    }
