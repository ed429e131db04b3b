"""OPAUC: one-pass AUC optimisation (Gao, Jin, Zhu, Zhou, ICML 2013).

The pairwise square loss against every earlier event of the opposite class depends on
those events only through their mean and covariance, so OPAUC keeps per-class counts,
means and covariances (O(d²) memory, no buffers) and takes one exact gradient step of
the mean pairwise loss per event.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from . import _opauc_kernels as K
from ._config import MAX_FEATURES_QUADRATIC, OPAUC_MAX_RIDGE, OPAUC_MAX_STEP, OPAUC_MIN_STEP
from ._kernels import dense_scores
from ._validation import Batch, Interval, Param
from .base import Learner, register, scale_param

__all__ = ["OPAUC"]


@register
class OPAUC(Learner):
    """OPAUC, exactly the authors' ``OPAUC.m`` (spec solam-mba §4.1).

    On (x_t, y_t) of class c: n_c += 1; c_old = μ_c; μ_c += (x_t − μ_c)/n_c;
    Γ_c += (x_t x_tᵀ − Γ_c − c_old c_oldᵀ)/n_c + c_old c_oldᵀ − μ_c μ_cᵀ (the population
    covariance). Then, if the opposite class o has been seen,
    w ← w − η(λw − y_t(x_t − μ_o) + (x_t − μ_o)(x_t − μ_o)ᵀw + Γ_o w), the exact gradient
    of λ/2‖w‖² + (1/n_o) Σ_{j ∈ o} ½(1 − y_t wᵀ(x_t − x_j))². Scores are wᵀx.

    Parameters
    ----------
    n_features : int
        Input dimension d (at most 4096: two d × d covariances). Dense input only.
    seed : int
        Unused (OPAUC is deterministic); kept for a uniform API.
    eta : float in [1e-8, 1e4], default 2**-6
        Constant step η; see Notes for the default. The papers cross-validate
        η ∈ 2^[−10:10] (dissertation) or 2^[−12:10], inside the range. Values such as
        η = 1e30 overflow w within a few events on any data; see Notes on divergence.
    lam : float in [0, 100], default 1e-4
        Ridge λ (the dissertation's fixed value, specs README). The ridge part of a step
        multiplies w by 1 − ηλ, which diverges by itself when ηλ > 2; at the default η,
        every λ in range is stable.

    State
    -----
    ``w_`` (d,); ``mean_`` (2, d) and ``cov_`` (2, d, d), the class means and population
    covariances (row 0 negatives, row 1 positives); ``n_seen_`` int64 (negatives,
    positives), the class counts n₋, n₊.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.min(0)) / (X.max(0) - X.min(0))
    >>> lrn = models.create("opauc", n_features=30)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.989

    Notes
    -----
    - The update is the authors' code line for line (review-first-wave §6), with no
      departure from it: the moments are updated for every event; the gradient step
      only once the opposite class has been seen (before that the loss is undefined).
    - Default η = 2^−6, chosen from the step's stability, not by tuning on data. One
      step multiplies w by I − η H_t with H_t = λI + z zᵀ + Γ_o, z = x_t − μ_o, so a
      constant step is stable when η·(λ + ‖z‖² + λ_max(Γ_o)) < 2. For rows of unit L2
      norm that sum is ≤ 5 + λ; for d features min–max scaled to [0, 1] it is at most
      1.25·d + λ (‖z‖² ≤ d, λ_max(Γ_o) ≤ tr Γ_o ≤ d/4), and far less in practice.
      2^−6 keeps η times it below 2 up to a sum of 128: every step is stable on unit rows
      and on min–max data up to 100 features, and typically well beyond. It sits in the
      middle of the papers' grid. Rescale η by 1/s² when multiplying the features by
      s; the papers' own values come from cross-validation.
    - Γ is updated entry by entry from commuting products, so it stays exactly
      symmetric; Γ_o w is accumulated over the rows of Γ_o, a different summation order
      than Γ_o @ w (within rounding).
    - Divergence: a constant step can diverge whatever η in range, with w growing
      exponentially, on unnormalised data: the step is stable only while
      η·(λ + ‖z‖² + λ_max(Γ_o)) < 2, and ‖z‖² grows with the square of the features'
      scale (rows of scale 1e3 diverge at the default η; the papers' grid reaches 2^10,
      which diverges even on unit rows). No parameter range can prevent this. ``learn``
      is all or nothing: the batch whose event would overflow w is refused
      (``models.NonFiniteError`` names the event) and the model keeps its state. Scale
      the features (z-scores or unit rows, as the papers do) and tune η.
    """

    name = "opauc"
    scoring_keys = ("w_",)
    max_features = MAX_FEATURES_QUADRATIC
    param_table: ClassVar[dict[str, Param]] = {
        "eta": scale_param(2.0**-6, "constant step η", low=OPAUC_MIN_STEP, high=OPAUC_MAX_STEP),
        "lam": Param(Interval(float, 0, OPAUC_MAX_RIDGE, "both"), 1e-4, "ridge λ"),
    }

    def _allocate(self) -> dict[str, np.ndarray]:
        d = self.n_features
        return {
            "w_": np.zeros(d),
            "mean_": np.zeros((2, d)),
            "cov_": np.zeros((2, d, d)),
            "n_seen_": np.zeros(2, np.int64),
        }

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        K.learn(batch.dense, y, s["w_"], s["mean_"], s["cov_"], s["n_seen_"],
                self.params["eta"], self.params["lam"], prior)

    def _score(self, batch: Batch) -> np.ndarray:
        return dense_scores(batch.dense, self._state["w_"])
