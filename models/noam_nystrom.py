"""OAM on k-means++ Nyström features: NOAM_seq and NOAM_gra (Khalid's "NOAM").

Khalid, Ray and Chitsaz (ECML-PKDD 2018, seed 002) compare with "NOAM": the sequential
OAM of Zhao, Hoi, Jin and Yang (ICML 2011) trained on the k-means Nyström feature space;
Khalid's dissertation (seed 000, §6.5) runs both OAM variants on it, as NOAM_seq and
NOAM_gra. Neither is Ding et al.'s two-phase NOAM (``models.oam.NOAM``, Algorithm 5 of
seed 003), whose landmarks are the first support vectors of a kernel learner.

Here the map is the shared one of ``models._nystrom`` (k-means++ on a warm-up window of
``warmup`` events, frozen), and the learners are ``models.oam``'s OAM_seq and OAM_gra
kernels (``models._oam_kernels``) run on the mapped rows ψ(x).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from . import _oam_kernels as K
from ._buffers import RESERVOIR
from ._config import OAM_MIN_SQNORM
from ._nystrom import MAP_PARAMS, NystromLearner
from ._rng import new_state
from ._validation import Param
from .base import capacity_param, register, scale_param

__all__ = ["NOAMGra", "NOAMSeq"]


class _NystromOAM(NystromLearner):
    model_keys = frozenset({"w_", "buf_"})
    scoring_keys = ("rank_", "bandwidth_", "landmarks_", "proj_", "w_")
    param_table: ClassVar[dict[str, Param]] = {
        "C": scale_param(2.0**-5, "penalty C; C_t = C·max(1, N_opp/cap)"),
        "capacity": capacity_param(100),
        **MAP_PARAMS,
    }
    sequential: ClassVar[bool]

    def _allocate_model(self, rank: int) -> dict[str, np.ndarray]:
        cap = self.params["capacity"]
        return {
            "w_": np.zeros(rank),
            "buf_": np.zeros((2, cap, rank)),
            "order_": np.zeros((2, cap), np.int64),
            "n_seen_": np.zeros(2, np.int64),
            "rng_": new_state(self.seed),
        }

    def _learn_mapped(self, Z: np.ndarray, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        if self.sequential:
            K.seq_learn_dense(Z, y, s["w_"], s["buf_"], s["order_"], s["n_seen_"], s["rng_"],
                              RESERVOIR, self.params["C"], OAM_MIN_SQNORM, prior)
        else:
            K.minibatch_learn(Z, y, s["w_"], s["buf_"], s["order_"], s["n_seen_"], s["rng_"],
                              RESERVOIR, self.params["C"], True, prior)

    def _served(self, state: dict[str, np.ndarray]) -> np.ndarray:
        return state["w_"]


_DOC_TAIL = """
    Parameters
    ----------
    n_features : int
        Input dimension d, up to 1024 (dense input only): mapping a row costs O(m·d + m·r)
        and the warm-up window holds W·d floats (see ``models._nystrom``).
    seed : int
        Seed of the generator that draws the k-means++ seeds, then drives the reservoirs.
    C : float in [1e-6, 1e6], default 2^-5
        Penalty C of OAM, C_t = C·max(1, N_opp/capacity): OAM's first-wave default
        (specs README: "first-wave OAM defaults on the frozen Nyström map"); it carries
        over because ‖ψ(x)‖² = k_xᵀW⁺k_x ≤ κ(x, x) = 1, rows of about unit norm as OAM's
        default assumes. The papers tune C over 2^[−10:10].
    capacity : int in [1, 100000], default 100
        Mapped rows kept per class (the papers' 100).
    n_components : int in [1, 4096], default 1600
        m, the landmarks (the papers' 1600).
    warmup : int in [1, 80000], default 16000
        W, the events on which the map is fitted (specs README: W ≥ 10·m, at most 80k);
        must be at least n_components. With a shorter window, lower n_components too
        (the README's m = W/10).

    State
    -----
    The map (``models._nystrom.NystromLearner``): ``window_`` (W, d) and ``wlabel_`` (W,)
    the raw warm-up events and their labels ±1 (shape (0, d) and (0,) once the map is
    fitted), ``warm_`` (negatives, positives) in the window, ``rank_`` (1,) r (0 before
    the map), ``bandwidth_`` (1,) b, ``landmarks_`` (m, d) and ``proj_`` (m, r) the frozen
    map (read-only; (0, d) and (0, 0) before it). The learner, on ψ: ``w_`` (r,), the
    reservoirs of mapped rows ``buf_`` (2, capacity, r), ``order_`` (2, capacity) oldest
    to newest, ``n_seen_`` (negatives, positives) replayed events included, ``rng_`` the
    generator state.
"""

_NOTES = """
    - The map (specs README, second-wave table): k-means++ seeding then 5 Lloyd
      iterations on the first W events, b = mean‖x − x̄‖² over them, κ(x, y) =
      exp(−‖x − y‖²/b), eigenvalues kept above 1e-6·σ_1, ψ(x) = Σ_r^{-1/2}U_rᵀk_x (the
      papers' U_rΣ_r^{-1/2}ϕᵀ(x) transposed). Decisions of ``models._nystrom``:
      plain k-means++ (one candidate per centre, no greedy trials), a k-means centre
      left without rows keeps its position (the papers do not say; the INys code drops
      it, which would make m data-dependent), each eigenvector's largest entry made
      positive. Inputs are used as given: the papers z-score features with training-set
      statistics, here left to the caller (``models.preprocessing.StandardScaler``),
      since b adapts to the overall scale but not to per-feature scales.
    - Warm-up: the first W events are only stored; their scores are 0 (no map yet).
      The event that completes the window fits the map, which is then frozen, and the
      window is replayed, in its order, into OAM as if it arrived then: the learn call
      that completes it does that whole work (at the defaults, d = 54: k-means and the
      1600 × 1600 eigendecomposition, a few seconds, then 16 000 mapped events).
      ``eigh`` (LAPACK) is the one numpy step on the learning path: deterministic on
      one machine with a fixed BLAS thread count.
    - No finite row can break the learner after the warm-up (it sees x only through
      κ ∈ [0, 1]); a warm-up window whose squared distances overflow (rows of about
      1e154 and more) has no finite map, and the batch completing it is refused.
    - OAM on ψ is models.oam's kernel, unchanged: reservoirs with the own-class buffer
      updated first, the opposite buffer visited oldest to newest (specs README).
"""


@register
class NOAMSeq(_NystromOAM):
    __doc__ = (
        """NOAM_seq: OAM with sequential updating on the k-means++ Nyström map.

    Khalid et al. 2018 (seed 002, Table 4's "NOAM") and Khalid's dissertation (§6.5):
    OAM_seq (Zhao et al. 2011) on ψ(x) = Σ_r^{-1/2}U_rᵀk_x. For each event and each
    buffered ψ of the other class in turn: δ = ψ_t − ψ, ℓ = max(0, 1 − y_t·wᵀδ),
    τ = min(C_t/2, ℓ/‖δ‖²), w ← w + τ·y_t·δ. Scores f(x) = wᵀψ(x) (0 during the warm-up).
    O(m·d + m·r + |B|·r) per event.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.create("noam_seq", n_features=30, seed=0, n_components=20, warmup=200)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> lrn.rank
    20
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.989
"""
        + _DOC_TAIL
        + """
    Notes
    -----
    - A pair with ‖δ‖² ≤ 1e-12 is skipped (OAM_seq's duplicate guard)."""
        + _NOTES
    )
    name = "noam_seq"
    sequential = True


@register
class NOAMGra(_NystromOAM):
    __doc__ = (
        """NOAM_gra: OAM with online gradient updating on the k-means++ Nyström map.

    Khalid's dissertation (§6.5): OAM_gra (Zhao et al. 2011) on ψ(x) = Σ_r^{-1/2}U_rᵀk_x.
    For each event, the buffered ψ of the other class with y_t·wᵀ(ψ_t − ψ) ≤ 1 at the
    current w give one step w ← w + (C_t/2)·y_t·Σ_A (ψ_t − ψ). Scores f(x) = wᵀψ(x) (0
    during the warm-up). O(m·d + m·r + |B|·r) per event.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.create("noam_gra", n_features=30, seed=0, n_components=20, warmup=200)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.989
"""
        + _DOC_TAIL
        + """
    Notes
    -----
    - The violator test is ``≤ 1``, as OAM_gra's."""
        + _NOTES
    )
    name = "noam_gra"
    sequential = False
