"""Online Uni-Exp: SGD on the class-weighted univariate exponential loss (Kotłowski,
Dembczyński, Hüllermeier, ICML 2011).

A pointwise ranker: each event takes one gradient step on its own exponential loss,
weighted by the inverse running frequency of its class, with an unregularised intercept.
Weighted so, the univariate loss is minimised by a scorer that also minimises the pairwise
exponential loss (RankBoost's), so a pointwise O(d) step (O(nnz) on sparse rows) stands in
for the pairs.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from . import _uni_exp_kernels as K
from ._config import MAX_FEATURES_SPARSE
from ._kernels import NO_SCORES, normalize_csr_values
from ._uni_exp_kernels import UNI_EXP_MAX_RIDGE, UNI_EXP_MAX_STEP, UNI_EXP_MIN_SCALE
from ._validation import Batch, Interval, Options, Param
from .base import Learner, register, resolve_storage, scale_param, storage_param

__all__ = ["UniExp"]


@register
class UniExp(Learner):
    """Online Uni-Exp: one SGD step per event on the weighted univariate exponential loss.

    On (x_t, y_t), with π̂ = n_{y_t}/t the running frequency of the event's class (the event
    included): the gradient, at the current (w, b), of
    λ/2‖w‖² + (1/π̂)·exp(−y_t(wᵀx_t + b)), then

        k = (η/π̂)·exp(−y_t(wᵀx_t + b)),   w ← (1 − ηλ)w + k·y_t·x_t,   b ← b + k·y_t

    (spec solam-mba §4.4 with the review's unregularised intercept b). Scores are
    f(x) = wᵀx + b.

    Parameters
    ----------
    n_features : int
        Input dimension d, up to 2^22; with sparse storage the cost per event follows
        the non-zeros of the row.
    seed : int
        Unused (Uni-Exp is deterministic); kept for a uniform API.
    eta : float in [1e-6, 1024], default 2**-8
        Constant step η. The dissertation cross-validates η ∈ 2^[−10:10] (S0 §4.5.2), the
        range's top. The default is chosen on data it was not chosen on (Notes); the specs
        README's untuned 2^−8 was meant for scaled rows. See Notes on divergence.
    lam : float in [0, 100], default 1e-4
        Ridge λ on w (not on b); the specs README's value (the seeds give none). η·λ must
        be below 1, so that the shrink factor 1 − ηλ stays positive: checked with η.
    normalize : bool, default True
        Scale every row to unit L2 norm, at learn and at score time alike (all-zero rows
        are left as they are). The default since the exponential loss's steps grow as
        e^{−margin}: raw rows diverge at the default η on standardised a9a within the
        first 200 events and on hashed binary rows within a few thousand (see Notes).
        ``False`` is the update as written, for data scaled beforehand.
    storage : {'auto', 'dense', 'sparse'}, default 'auto'
        'dense': w as a vector, O(d) per event. 'sparse': w = σ·u, O(nnz) per event.
        'auto' is sparse above 4096 features. Either accepts dense or CSR input.

    State
    -----
    Both layouts: ``bias_`` (1,) = b; ``n_seen_`` int64 (negatives, positives), so
    t = n₋ + n₊ and π̂ = n_y/t. Dense storage: ``w_`` (d,). Sparse storage: ``u_`` (d,) and
    ``scale_`` (1,) = σ with w = σ·u.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.min(0)) / (X.max(0) - X.min(0))
    >>> lrn = models.create("uni_exp", n_features=30)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.908

    Notes
    -----
    - Source of the equations. The seeds only name the method ("an online pointwise
      ranking algorithm that optimizes the weighted univariate exponential loss", S0
      L2345–2348) and its η grid. The update is spec solam-mba §4.4 (plain SGD on
      (1/π̂_y)·e^{−y·f(x)}, the loss of Kotłowski et al. whose minimiser also minimises
      the pairwise exponential loss), with the unregularised intercept that equivalence
      needs (review-second-wave §7; specs README): for a fixed w, min_b [A e^{−b} + B e^{b}]
      = 2√(AB), where A·B, with A = mean₊ e^{−wᵀx} and B = mean₋ e^{wᵀx}, is the mean
      pairwise loss mean₊₋ e^{−wᵀ(x⁺ − x⁻)}.
    - π̂_y = n_y/t counts the current event, so it is never 0 and the first event has
      weight 1 (the running frequency of spec §4.4; the review's "running class priors").
    - A step is taken from the first event on, even while only one class has been seen:
      the univariate loss of an event needs no event of the other class (unlike the
      pairwise learners); until then w and b move along that class's rows only.
    - The gradient is taken at the current (w, b) and the shrink multiplies the old w
      (one SGD step on the regularised per-event loss). λ = 1e-4 is ours (specs README);
      b is not shrunk.
    - Defaults: unit rows, η = 2^−8 (the specs README's η on rows as they come before).
      ``python -m bench.default_grid uni_exp --grid eta=2^-10…2^0 normalize=true,false``
      serves every bundled dataset and the hashed ad-click feed test-then-train, raw and
      standardised: unit rows win at every η (rows as they come diverge on most raw sets
      and on standardised a9a; mean served AUC 0.583 raw, 0.810 standardised at 2^−8).
      Among unit-row steps 2^−6 leads (0.773 / 0.865, picked in every leave-one-out
      fold) ahead of 2^−8 (0.768 / 0.858), but 2^−6 diverged after 67,000 events of
      bench.throughput's dense stream (w and b drift until e^{−y·f} of a rare positive
      overflows the step), where 2^−8 learned all 202,000: the longer-lived step is the
      default. Table in bench/RESULTS.md.
    - A constant step: spec §4.4 and the review write η_t, but the dissertation tunes one
      "learning rate" over 2^[−10:10] and the specs README gives one value, 2^−8; no
      schedule is named anywhere, so η_t = η.
    - η·λ < 1 is required (at construction): with η·λ ≥ 1 the "shrink" 1 − ηλ would zero
      w or flip its sign at every event.
    - Scores include b: it shifts every score alike and changes no ranking; prequential
      scores are the f(x_t) the step uses.
    - Divergence: the exponential loss's gradient grows as e^{−margin}, so a constant step
      can run away on unscaled rows: a row of scale 1e3 at the default η moves w by ~4
      per coordinate, and the next misranked row's e^{−y·f(x)} overflows. No range can
      prevent this (the papers' own grid tops at η = 2^10). ``learn`` is all or nothing:
      the batch whose event would overflow is refused (``models.NonFiniteError`` names
      the event) and the model keeps its state. Scale the features (the dissertation
      z-scores them) and tune η. The 1/π̂ weight makes the rare class's steps the
      large ones: on bench.throughput's hashed stream (2^20 columns, 40 binary
      non-zeros per row, 5 % positives) raw rows diverge at the default η after about
      2,500 events, while η = 2^−10 learns 100,000 events (prequential AUC 0.92), and
      so does the default η on unit-L2 rows (0.87).
    - ``normalize``: the dense layout's kernels divide each row by its norm themselves,
      the norm summed as numpy sums ``np.linalg.norm(X, axis=1)`` (pairwise), so a
      dense learner learns and scores exactly what ``normalize=False`` does on
      ``X / np.linalg.norm(X, axis=1, keepdims=True)``; the sparse layout sums a row's
      non-zeros left to right. The two agree to rounding.
    - Sparse storage is the same algorithm re-arranged, not an approximation: the shrink
      multiplies σ, the row's term is added to u as (k·y/σ)·x at the row's non-zeros, and
      when σ < 1e-16 (``UNI_EXP_MIN_SCALE`` in ``models._uni_exp_kernels``) σ is folded
      into u in O(d) (every ≈ 37/(ηλ) events: 9.4e7 at the defaults). w = σu agrees with
      the dense layout to rounding.
    - All or nothing (``Learner.learn``): the sparse layout cannot copy u per batch (8 MB
      at 2^20 dimensions), so its kernel logs u at each position of a row before changing
      it and checks what it writes; a fold returns to Python, which copies u whole (once
      per batch) before folding.
    """

    name = "uni_exp"
    max_features = MAX_FEATURES_SPARSE
    accepts_sparse = True
    logs_journal = True  # lazy_learn logs u per position (see _learn)
    param_table: ClassVar[dict[str, Param]] = {
        "eta": scale_param(2.0**-8, "constant step η", high=UNI_EXP_MAX_STEP),
        "lam": Param(Interval(float, 0, UNI_EXP_MAX_RIDGE, "both"), 1e-4,
                     "ridge λ on w; η·λ < 1"),
        "normalize": Param(Options((True, False)), True, "unit-L2 rows"),
        "storage": storage_param(),
    }

    def _csr_unit(self, batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The sparse layout's CSR rows, unit-L2 (new values) if ``normalize``. The dense
        layout's kernels scale each row themselves (``_uni_exp_kernels.dense_learn``)."""
        indptr, indices, values = self._csr_rows(batch)
        if self.params["normalize"]:
            values = normalize_csr_values(indptr, values)
        return indptr, indices, values

    def _resolve_params(self) -> None:
        p = self.params
        if p["eta"] * p["lam"] >= 1.0:
            raise ValueError(
                f"The 'lam' parameter of {self.name} must be a float in [0, 1/eta) = "
                f"[0, {1.0 / p['eta']:g}) (the shrink factor 1 − eta·lam must stay "
                f"positive); got {p['lam']!r}."
            )
        resolve_storage(p, self.n_features)

    def _allocate(self) -> dict[str, np.ndarray]:
        state = {"bias_": np.zeros(1), "n_seen_": np.zeros(2, np.int64)}
        if self._sparse:
            state.update(u_=np.zeros(self.n_features), scale_=np.ones(1))
        else:
            state["w_"] = np.zeros(self.n_features)
        return state

    @property
    def _sparse(self) -> bool:
        return self.params["storage"] == "sparse"

    @property
    def scoring_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("u_", "scale_", "bias_") if self._sparse else ("w_", "bias_")

    def _journaled(self) -> tuple[str, ...]:
        return ("u_",) if self._sparse else ()

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        p = self.params
        eta, lam = p["eta"], p["lam"]
        if not self._sparse:
            K.dense_learn(self._dense_rows(batch), y, s["w_"], s["bias_"], s["n_seen_"], eta,
                          lam, p["normalize"], prior)
            return
        indptr, indices, values = self._csr_unit(batch)
        journal = self._journal
        if journal is not None and journal.values:
            log_u, done = journal.values["u_"], journal.done
        else:
            log_u, done = NO_SCORES, np.zeros(1, np.int64)
        row, n, finite = 0, batch.n, True
        while row < n:
            row, fold_due, ok = K.lazy_learn(row, indptr, indices, values, y, s["u_"],
                                             s["scale_"], s["bias_"], s["n_seen_"], eta, lam,
                                             UNI_EXP_MIN_SCALE, prior, log_u, done)
            finite = finite and ok
            if fold_due:  # rare: O(d), rewrites u whole
                self._keep_whole("u_")
                K.fold(s["u_"], s["scale_"])
        if journal is not None and journal.values:
            journal.vouch(finite)

    def _score(self, batch: Batch) -> np.ndarray:
        s = self._state
        b = s["bias_"][0]
        if not self._sparse:
            return K.dense_scores(self._dense_rows(batch), s["w_"], b, self.params["normalize"])
        indptr, indices, values = self._csr_unit(batch)
        return K.lazy_scores(indptr, indices, values, s["u_"], s["scale_"][0], b)

    def weights(self) -> np.ndarray:
        """w as a dense copy (O(d)); the intercept b is ``get_state()['bias_'][0]``."""
        s = self._state
        if not self._sparse:
            return s["w_"].copy()
        return K.lazy_weights(s["u_"], s["scale_"][0])
