"""Online logistic regression with normalized adaptive steps (NAG).

Not a learner of the source papers: the baseline the service's ``auto`` is measured
against is Vowpal Wabbit, whose default update is NAG (Ross, Mineiro and Langford,
"Normalized Online Learning", UAI 2013). As a candidate of ``auto`` it gives the model
VW's strength where the AUC learners of the papers fall short (e.g. a9a; see
bench/RESULTS.md), and ``auto`` serves whichever candidate ranks best.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from . import _logistic_kernels as K
from ._config import MAX_FEATURES_SPARSE
from ._validation import Batch, Options, Param
from .base import Learner, register, scale_param

__all__ = ["LogisticNAG"]


@register
class LogisticNAG(Learner):
    """Logistic regression by NAG, Algorithm 2 of Ross, Mineiro and Langford (UAI 2013),
    as Vowpal Wabbit runs it by default.

    Per event x_t with an intercept (a constant feature 1), label y_t ∈ {−1, +1}: each
    feature's scale s_i = max |x_i| seen so far (a new, larger |x_ti| first rescales
    w_i by s_i/|x_ti|); the score ŷ = wᵀx_t (served, and used prequentially);
    N ← N + Σ_i (x_ti/s_i)²; then for the logistic loss log(1 + e^{−y ŷ}) with gradient
    g_i = −y σ(−y ŷ) x_ti, the per-feature AdaGrad sums G_i ← G_i + g_i² and the step
    w_i ← w_i − η √(t/N) g_i / (s_i √G_i) — or, with ``invariant`` (the default, as in
    VW), the importance-invariant step along the same direction: the one that moves ŷ
    exactly as far as infinitely many infinitesimal gradient steps would (Karampatziakis
    and Langford, UAI 2011), never past the point where the loss flattens. Scale-free in
    each feature, and O(nnz) per event on sparse rows.

    Parameters
    ----------
    n_features : int
        Input dimension d (dense rows or sparse CSR rows; hashed features up to 2^24).
    seed : int
        Unused (NAG is deterministic); kept for a uniform API.
    eta : float in [1e-6, 1e6], default 0.5
        The step η: Vowpal Wabbit's default learning rate (``-l 0.5``).
    invariant : bool, default True
        Importance-invariant steps (VW's default, ``--invariant``); False: the paper's
        plain gradient step.

    State
    -----
    ``w_`` (d,) the weights; ``scale_`` (d,) the largest |x_i| seen (0: never non-zero);
    ``gsq_`` (d,) the AdaGrad sums G_i; ``bias_`` (2,) the intercept's weight and G;
    ``totals_`` (2,) t and N; ``n_seen_`` int64 (negatives, positives).

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> lrn = models.create("logistic_nag", n_features=30).learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.971

    Notes
    -----
    - VW's default update, in double precision: NAG with the intercept as a feature of
      value 1 (its s = 1), the rescale s_i/|x_ti| that VW applies under adaptive steps
      (its gd.cc; before 2026-11-29 this learner rescaled by s_i²/x_ti², the ratio VW
      squares only without adaptive steps), and VW's importance-invariant step, solved
      exactly here where VW approximates the Lambert W function. One difference of order,
      kept from the paper: a larger |x_ti| rescales w_i before the event is scored; VW
      scores with the old weight and rescales in its update. Where scales stop growing
      early (binary or standardised features) the two agree: on a9a every prequential
      score within 0.003 of VW's, and the same served quality on the ``bench.auto``
      streams (a9a 0.89436 both; bench/RESULTS.md). On raw features whose maxima keep
      growing they do not: svmguide1's first 3,000 rows unscaled, AUC 0.980 here, 0.545
      for VW, whose scores jump on each new maximum.
    - A step moves w_i by at most η/s_i (the invariant step is never longer than the
      gradient step, |g_i| ≤ √G_i, and t ≤ N since the intercept adds 1 to N per
      event), so the state stays finite on finite input; a row that overflows a score
      is refused as by every learner.
    - Scoring a value beyond a feature's scale uses the rescaled weight that learning it
      would use first (w_i s_i/|x|), so a prequential score equals ``score`` before the
      event.
    """

    name = "logistic_nag"
    max_features = MAX_FEATURES_SPARSE
    accepts_sparse = True
    scoring_keys = ("w_", "scale_", "bias_")
    param_table: ClassVar[dict[str, Param]] = {
        "eta": scale_param(0.5, "the step η (VW's -l)"),
        "invariant": Param(Options((True, False)), True,
                           "importance-invariant steps (VW's default)"),
    }

    def _allocate(self) -> dict[str, np.ndarray]:
        d = self.n_features
        return {"w_": np.zeros(d), "scale_": np.zeros(d), "gsq_": np.zeros(d),
                "bias_": np.zeros(2), "totals_": np.zeros(2),
                "n_seen_": np.zeros(2, np.int64)}

    def _journaled(self) -> tuple[str, ...]:
        return ("w_", "scale_", "gsq_")

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        eta, invariant = self.params["eta"], self.params["invariant"]
        if batch.dense is not None:
            K.dense_learn(self._dense_rows(batch), y, s["w_"], s["scale_"], s["gsq_"],
                          s["bias_"], s["totals_"], s["n_seen_"], eta, invariant, prior)
            return
        indptr, indices, values = self._csr_rows(batch)
        K.csr_learn(indptr, indices, values, y, s["w_"], s["scale_"], s["gsq_"],
                    s["bias_"], s["totals_"], s["n_seen_"], eta, invariant, prior)

    def _score(self, batch: Batch) -> np.ndarray:
        s = self._state
        b = s["bias_"][0]
        if batch.dense is not None:
            return K.dense_scores(self._dense_rows(batch), s["w_"], s["scale_"], b)
        indptr, indices, values = self._csr_rows(batch)
        return K.csr_scores(indptr, indices, values, s["w_"], s["scale_"], b)
