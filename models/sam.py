"""Stochastic pairwise-hinge AUC maximisation: ASAM, SAM and PSAM.

M. Khalid (Alnnfiai), *Scalable Large Margin Pairwise Learning Algorithms*, PhD
dissertation, Colorado State University, 2019: Chapter 6 (ASAM, Algorithm 10, and its
non-averaging variant SAM) and Chapter 7 (PSAM, Algorithm 11 with the proximal operator
of Appendix A). All three minimise λ/2‖w‖² + mean over pairs of max(0, 1 − wᵀ(x⁺ − x⁻))
(eq. 6.1, 7.1) by stochastic steps on one positive–negative pair at a time, with the
SVMSGD2 regularisation shrink applied every r_skip pairs; ASAM and PSAM also average the
iterate every a_skip pairs and serve the average.

On a stream each event enters its own class's reservoir, then is paired with ``pairs``
uniform draws from the opposite reservoir; every pair is one iteration. O(d) per pair
with dense storage, O(nnz) with sparse storage.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from . import _sam_kernels as K
from ._buffers import grow_sparse, sparse_width
from ._config import MAX_FEATURES_SPARSE
from ._kernels import dense_scores
from ._rng import new_state
from ._sam_kernels import SAM_MIN_SCALE
from ._validation import Batch, Interval, Param
from .base import (
    Learner,
    capacity_param,
    register,
    resolve_storage,
    scale_param,
    storage_param,
)

__all__ = ["ASAM", "PSAM", "SAM", "sam_rule"]

_EMPTY = np.zeros(0)


def sam_rule(params: dict[str, Any], *, prox: bool, averaging: bool) -> tuple:
    """The kernels' ``rule`` (the fields of ``_sam_kernels.Rule``) for a learner's
    parameters: ASAM/SAM's (``lam``, ``eta_scale``: t0 = 1/(λη0), η0 calibrated) or, with
    ``prox``, PSAM's (``gamma``, a fixed ``t0``); ``averaging`` False is SAM. A plain
    tuple: cheaper for numba to dispatch on (see ``_sam_kernels``). Shared with the
    learners that run these kernels on mapped rows (``models.nsauc``, ``models.sam_kernel``)."""
    return tuple(K.Rule(
        prox=prox,
        lam=float(params["gamma"] if prox else params["lam"]),
        calibrate=not prox,
        t0=float(params.get("t0", 0.0)),
        eta_scale=float(params.get("eta_scale", 1.0)),
        r_skip=int(params["r_skip"]),
        a_skip=int(params["a_skip"]) if averaging else 0,
        pairs=int(params["pairs"]),
        min_scale=float(SAM_MIN_SCALE),
    ))


def _skip_param(default: int, doc: str) -> Param:
    return Param(Interval(int, 1, 1_000_000, "both"), default, doc)


def _pairs_param() -> Param:
    return Param(Interval(int, 1, 1000, "both"), 5, "pairs per event, drawn from the "
                 "opposite reservoir")


class _Family(Learner):
    """Shared machinery; subclasses set ``prox``, ``averaging`` and the parameter table."""

    max_features = MAX_FEATURES_SPARSE
    accepts_sparse = True
    variable_shape = frozenset({"bidx_", "bval_"})
    input_keys = frozenset({"buf_", "bval_"})
    prox: ClassVar[bool]
    averaging: ClassVar[bool]

    def _resolve_params(self) -> None:
        resolve_storage(self.params, self.n_features)
        self._rule = sam_rule(self.params, prox=self.prox, averaging=self.averaging)

    @property
    def _sparse(self) -> bool:
        return self.params["storage"] == "sparse"

    def _allocate(self) -> dict[str, np.ndarray]:
        d = self.n_features
        cap = self.params["capacity"]
        state = {
            "t_": np.zeros(1, np.int64),
            "order_": np.zeros((2, cap), np.int64),
            "n_seen_": np.zeros(2, np.int64),
            "rng_": new_state(self.seed),
        }
        if not self.prox:
            state["cal_"] = np.zeros(3)
        if self._sparse:
            state["u_"] = np.zeros(d)
            if self.averaging:
                state["atil_"] = np.zeros(d)
            state["lazy_"] = np.array([1.0, 0.0])
            state["bidx_"] = np.zeros((2, cap, 1), np.int64)
            state["bval_"] = np.zeros((2, cap, 1))
            state["bnnz_"] = np.zeros((2, cap), np.int64)
        else:
            state["w_"] = np.zeros(d)
            if self.averaging:
                state["wbar_"] = np.zeros(d)
            state["buf_"] = np.zeros((2, cap, d))
        return state

    @property
    def scoring_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        if self._sparse:
            return ("u_", "atil_", "lazy_", "t_") if self.averaging else ("u_", "lazy_")
        return ("w_", "wbar_", "t_") if self.averaging else ("w_",)

    def _journaled(self) -> tuple[str, ...]:
        if not self._sparse:
            return ()
        return ("u_", "atil_") if self.averaging else ("u_",)

    def _model(self) -> tuple:
        """The kernels' ``model`` group (fields of ``_sam_kernels.Model``)."""
        s = self._state
        if self._sparse:
            return (s["u_"], s.get("atil_", _EMPTY), s["lazy_"], s["t_"], s.get("cal_", _EMPTY))
        return (s["w_"], s.get("wbar_", _EMPTY), _EMPTY, s["t_"], s.get("cal_", _EMPTY))

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        if not self._sparse:
            bufs = (s["buf_"], s["order_"], s["n_seen_"], s["rng_"])  # K.DenseBuffers
            K.dense_learn(self._dense_rows(batch), y, self._model(), bufs, self._rule, prior)
            return
        indptr, indices, values = self._csr_rows(batch)
        longest = int(np.diff(indptr).max())
        width = sparse_width(longest, s["bidx_"].shape[2])
        s["bidx_"], s["bval_"] = grow_sparse(s["bidx_"], s["bval_"], width)
        bufs = (s["bidx_"], s["bval_"], s["bnnz_"], s["order_"], s["n_seen_"],
                s["rng_"])  # K.SparseBuffers
        model = self._model()
        row, pair, n = 0, 0, batch.n
        while row < n:
            row, pair, fold_due = K.sparse_learn(row, pair, indptr, indices, values, y, model,
                                                 bufs, self._rule, prior)
            if fold_due:  # rare: O(d), rewrites u (and Ã) whole
                self._keep_whole(*self._journaled())
                K.fold(s["u_"], s.get("atil_", _EMPTY), s["lazy_"], self.averaging)

    def _q(self) -> int:
        """Snapshots averaged so far (Algorithm 10's q): ⌊t/a_skip⌋, 0 without averaging."""
        if not self.averaging:
            return 0
        return int(self._state["t_"][0]) // self.params["a_skip"]

    def _scoring_state(self) -> dict[str, np.ndarray]:
        """With sparse storage serving an average, a snapshot keeps one vector, the
        numerator c·u − Ã of w̃, formed element by element as the score kernel forms it,
        so its scores are the same bits from one array instead of two."""
        s = self._state
        q = self._q()
        if not (self._sparse and q > 0):
            return super()._scoring_state()
        return {"num_": K.numerator(s["u_"], s["atil_"], s["lazy_"][1]),
                "t_": s["t_"].copy(), "n_seen_": s["n_seen_"].copy()}

    def _score(self, batch: Batch) -> np.ndarray:
        s = self._state
        q = self._q()
        if not self._sparse:
            w = s["wbar_"] if q > 0 else s["w_"]
            return dense_scores(self._dense_rows(batch), w)
        indptr, indices, values = self._csr_rows(batch)
        if "num_" in s:  # a snapshot (see _scoring_state)
            return K.numerator_scores(indptr, indices, values, s["num_"], q)
        lazy = s["lazy_"]
        return K.lazy_scores(indptr, indices, values, s["u_"], s.get("atil_", _EMPTY), lazy[0],
                             lazy[1], q)

    def weights(self, which: str | None = None) -> np.ndarray:
        """A dense copy of a weight vector, O(d): ``'served'`` (the default) the one that
        scores, ``'last'`` the iterate w, ``'average'`` the average w̃ (ASAM, PSAM;
        zero before the first snapshot)."""
        which = "served" if which is None else which
        allowed = ("served", "last", "average") if self.averaging else ("served", "last")
        if which not in allowed:
            raise ValueError(f"which must be one of {', '.join(allowed)}; got {which!r}.")
        s = self._state
        q = self._q()
        average = which == "average" or (which == "served" and q > 0)
        if not self._sparse:
            if average:
                return s["wbar_"].copy()
            return s["w_"].copy()
        lazy = s["lazy_"]
        return K.lazy_weights(s["u_"], s.get("atil_", _EMPTY), lazy[0], lazy[1], q, average)


_COMMON_PARAMS = """
    n_features : int
        Input dimension d, up to 2^22; with sparse storage a pair costs O(nnz).
    seed : int
        Seed of the generator behind the reservoir draws and the pair draws."""

_RSKIP_PARAM = """
    r_skip : int in [1, 1000000], default 16
        The shrink runs every r_skip pairs (Algorithm 10/11's rskip; not reported in the
        dissertation; 16 is SVMSGD2's dense default, specs README). The shrinks between
        two multiples of r_skip telescope exactly (Π (1 − 1/(s + t0)) = 1 − r_skip/(t +
        t0)), so r_skip trades cost, not the regulariser. Sparse storage keeps 16: its
        shrink costs O(1) (SVMSGD2's 16·d/nnz rule only saves cost)."""

_STREAM_PARAMS = """
    capacity : int in [1, 100000], default 100
        Rows kept per class in each reservoir (specs README: 100 per class, as the
        dissertation's buffered baselines).
    pairs : int in [1, 1000], default 5
        Pairs per event: partners drawn uniformly, with replacement, from the opposite
        reservoir (specs README: k = 5; review-second-wave §2 measured k = 5 within
        0.006 AUC of k = 1 or better, +0.023 on its 20 000-event stream).
    storage : {'auto', 'dense', 'sparse'}, default 'auto'
        'dense': w (and w̃) as vectors and buffers of dense rows, O(d) per pair.
        'sparse': the lazy form w = σ·u (and q·w̃ = c·u − Ã) with sorted sparse buffer
        rows, O(nnz) per pair. 'auto' is sparse above 4096 features. Either takes dense
        or CSR input."""

_AVERAGE_PARAM = """
    a_skip : int in [1, 1000000], default 10
        The average takes the iterate every a_skip pairs (Algorithm 10/11's askip; not
        reported; specs README default 10, the review found 1 … 1000 equivalent)."""

_SAM_SCALE_PARAMS = """
    lam : float in [1e-12, 1e6], default 1e-8
        λ of eq. 6.1. The dissertation tunes it over 10^[−10:−7] (benchmark data) and
        {1, 10, …, 100} (high-dimensional data); the default is the specs README's. With
        t0 = 1/(λη0) the step is η_t = η0/(1 + λη0·t), so on the benchmark grid λ is
        inert (constant step η0, shrink ≈ 1) and eta_scale is the knob; from λ ≈ 1/(η0·t)
        on it becomes the Pegasos-like 1/(λt) schedule.
    eta_scale : float in [1e-6, 1e6], default 1.0
        c in η0 = c / mean‖x⁺ − x⁻‖² over the first 100 pairs, then frozen, and
        t0 = 1/(λη0). The dissertation sets t0 "experimentally" and reports none; c = 1
        is the specs README's rule (Bottou's scaling, no trial runs), best or tied among
        the t0 rules the review tried; on its 20 000-event stream c = 10 gained 0.003
        AUC and c = 0.1 lost 0.024. The range keeps the steps finite on rows up to 1e3
        (checked at both ends)."""

_STATE_COMMON = """
    ``t_`` (1,) int64: pairs learned, t (Algorithm 10/11's r_count, a_count and q are
    r_skip − (t mod r_skip), a_skip − (t mod a_skip) and ⌊t/a_skip⌋); reservoirs
    ``order_`` (2, capacity) slots oldest to newest, ``n_seen_`` (negatives, positives),
    ``rng_`` the generator state; dense buffers ``buf_`` (2, capacity, d), or sparse
    ``bidx_`` / ``bval_`` (2, capacity, width) and ``bnnz_`` (2, capacity), width a power
    of two ≥ the longest row seen."""

_NOTES_STREAM = """
    - Streaming adapter (specs §9.2, README): the dissertation draws each pair
      uniformly from a stored training set, for several epochs. Here an event first
      enters its own class's reservoir (Vitter's Algorithm R, the counter including
      it), then ``pairs`` partners are drawn uniformly with replacement (the j-th
      oldest row, j ~ U{0..size−1}) from the opposite reservoir, and each pair is one
      iteration. An event whose opposite reservoir is empty only fills its own. One
      pass; more passes are more ``learn`` calls.
    - t counts pairs, from 1, across events and calls (review-second-wave §2: an
      event-counted t makes the shrink factors negative and the regulariser ``pairs``
      times too strong). The printed shrink factor 1 − r_skip/(t + t0) is used as is,
      with no clamp and no pow guard: with 1-based t it is ≥ t0/(r_skip + t0) > 0
      (specs README; the spec's "may go negative" warning is wrong).
    - The pair vector is always x⁺ − x⁻ (the event's label only says which side it
      is); where a step or ‖x_t‖² needs it, it is formed coordinate by coordinate over
      the union of the two rows' columns, dense and sparse alike. The margin wᵀx_t is
      formed as ±(wᵀx − wᵀx_b): dense storage draws an event's partners first and sums
      wᵀx and every wᵀx_b in one pass over the features (again after a loss step; a
      shrink scales them with w), sparse storage takes one sparse dot product per row.
      That is one product per pair instead of a pass that also builds x_t, which only
      the violated pairs (2–4 % of them on the bench's covertype-like stream) need. Same
      algebra; the margin's rounding differs from a literal wᵀ(x⁺ − x⁻) at the
      1e-16·Σ|w_i x_i| level (relevant only for a margin within that of 1). The draws
      are the same either way: nothing else draws between an event's partners.
    - Rows of any scale: a single huge row (1e200) is learned, not refused: w takes a
      huge but finite step (a literal implementation does the same), and later margins
      that overflow are ±inf (a step, or none) or NaN (no step). What overflows the
      state (or a prequential score) makes ``learn`` refuse the batch whole.
    - Sparse storage is the same algorithm rearranged, not an approximation: w = σ·u
      (the shrink multiplies σ; a step adds coef/σ·x_t to u), and with averaging
      q·w̃ = c·u − Ã (a snapshot adds σ to c; a step δ on u adds c·δ to Ã). When σ falls
      below 1e-4 (``_sam_kernels.SAM_MIN_SCALE``) it is folded into u in O(d) (c
      restarts at 0, Ã ← Ã − c·u), which only happens when the shrink is strong (large
      λ or γ, or a small t0); at the defaults of ASAM and SAM σ stays ≈ 1. w agrees
      with the dense form to rounding; w̃'s c·u and Ã exceed q·w̃ by up to 1/σ, so their
      rounding is amplified by up to 1e4 (as SOLAM's lazy average).
    - All or nothing (``Learner.learn``): dense storage copies its state; sparse
      storage journals u (and Ã) at the batch's columns and those of the rows buffered
      when it starts (a pair touches only the columns of its two rows), and copies them
      whole before a fold."""

_NOTES_AVERAGE = """
    - The served model is the average w̃ (specs README); until the first snapshot
      (t < a_skip) the iterate w is served instead, and before any pair every score is 0.
      ``weights('last')`` gives w, ``weights('average')`` w̃."""


@register
class ASAM(_Family):
    __doc__ = (
        """ASAM: accelerated stochastic AUC maximisation (dissertation §6.3, Algorithm 10).

    Per pair x_t = x⁺ − x⁻, t = 1, 2, …: if wᵀx_t < 1, w ← w + x_t/(λ(t + t0)) (the hinge
    subgradient step with η_t = 1/(λ(t + t0)), i.e. §6.3's SGD with M = λ⁻¹I); every r_skip
    pairs the scheduled regularisation w ← w − r_skip·(t + t0)⁻¹·w (SVMSGD2); every
    a_skip pairs the scheduled average w̃ ← (q·w̃ + w)/(q + 1), q ← q + 1. Scores are
    w̃ᵀx. t0 = 1/(λη0), η0 = eta_scale / mean‖x⁺ − x⁻‖² over the first 100 pairs.

    Parameters
    ----------"""
        + _COMMON_PARAMS + _SAM_SCALE_PARAMS + _RSKIP_PARAM + _AVERAGE_PARAM + _STREAM_PARAMS
        + """

    State
    -----
    Dense storage: ``w_`` (d,) the iterate w, ``wbar_`` (d,) the average w̃. Sparse
    storage: ``u_`` (d,), ``atil_`` (d,) = Ã and ``lazy_`` (2,) = (σ, c) with w = σ·u and
    q·w̃ = c·u − Ã. Both: ``cal_`` (3,) = (pairs calibrated on, their Σ‖x⁺ − x⁻‖², η0; η0
    is 0 until defined);"""
        + _STATE_COMMON
        + """

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.min(0)) / (X.max(0) - X.min(0))
    >>> lrn = models.create("asam", n_features=30, seed=0)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.992

    Notes
    -----
    - ASAM against SAM: both are SVMSGD2 on pairs (the hinge step and the scheduled
      shrink, "an averaging variant of the SVMSGD2 method"); ASAM's acceleration is the
      scheduled averaging added on top of that scheduled regularisation, and serving
      the average. The averaging never feeds back: ASAM's w equals SAM's w bit for bit.
    - t0 (not reported in the dissertation, "set experimentally") follows the specs
      README: t0 = 1/(λη0) with η0 = eta_scale / mean‖x⁺ − x⁻‖² over the first 100 pairs,
      then frozen. During those pairs η0 is the running estimate, the current pair
      included, so t0 and the step change with it; t0 is recomputed from the stored η0
      at every pair, literally as 1/(λη0), and η_t as 1/(λ(t + t0)).
    - While every pair so far had x⁺ = x⁻ (Σ‖x⁺ − x⁻‖² = 0) η0 is undefined: such
      pairs leave w = 0 as the algorithm would (x_t = 0), the shrink is skipped (w is 0)
      and the calibration stays open past 100 pairs until a pair with x⁺ ≠ x⁻ arrives.
      A pair whose ‖x⁺ − x⁻‖² underflows to 0 (entries below ~1e-162) counts as x⁺ = x⁻."""
        + _NOTES_AVERAGE + _NOTES_STREAM
    )
    name = "asam"
    prox = False
    averaging = True
    param_table: ClassVar[dict[str, Param]] = {
        "lam": scale_param(1e-8, "λ of eq. 6.1", low=1e-12),
        "eta_scale": scale_param(1.0, "η0 = eta_scale / mean‖x⁺ − x⁻‖² (first 100 pairs)"),
        "r_skip": _skip_param(16, "shrink every r_skip pairs"),
        "a_skip": _skip_param(10, "average every a_skip pairs"),
        "capacity": capacity_param(100),
        "pairs": _pairs_param(),
        "storage": storage_param(),
    }


@register
class SAM(_Family):
    __doc__ = (
        """SAM: stochastic AUC maximisation by SVMSGD2 on pairs (dissertation §6.5.5).

    ASAM (Algorithm 10) without the averaging block, serving the last iterate: per pair
    x_t = x⁺ − x⁻, t = 1, 2, …: if wᵀx_t < 1, w ← w + x_t/(λ(t + t0)); every r_skip pairs
    w ← w − r_skip·(t + t0)⁻¹·w. Scores are wᵀx. t0 = 1/(λη0) as in :class:`ASAM`.

    Parameters
    ----------"""
        + _COMMON_PARAMS + _SAM_SCALE_PARAMS + _RSKIP_PARAM + _STREAM_PARAMS
        + """

    State
    -----
    Dense storage: ``w_`` (d,). Sparse storage: ``u_`` (d,) and ``lazy_`` (2,) = (σ, c)
    with w = σ·u (c is unused, 0). Both: ``cal_`` (3,) = (pairs calibrated on, their
    Σ‖x⁺ − x⁻‖², η0; η0 is 0 until defined);"""
        + _STATE_COMMON
        + """

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.min(0)) / (X.max(0) - X.min(0))
    >>> lrn = models.create("sam", n_features=30, seed=0)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.991

    Notes
    -----
    - What SAM is: the dissertation names it only in its convergence study, as the
      algorithm "that minimizes the pairwise hinge loss function using SVMSGD2 [92] …
      analogous to the proposed algorithm ASAM but without the averaging technique".
      SVMSGD2 is the skipped (scheduled) regularisation, so SAM keeps r_skip and drops
      a_skip: Algorithm 10 without its averaging block, returning w. With the same
      parameters and seed its w equals ASAM's w bit for bit.
    - t0, η0 and the undefined-η0 rule exactly as :class:`ASAM` (its Notes)."""
        + _NOTES_STREAM
    )
    name = "sam"
    prox = False
    averaging = False
    param_table: ClassVar[dict[str, Param]] = {
        "lam": scale_param(1e-8, "λ of eq. 6.1", low=1e-12),
        "eta_scale": scale_param(1.0, "η0 = eta_scale / mean‖x⁺ − x⁻‖² (first 100 pairs)"),
        "r_skip": _skip_param(16, "shrink every r_skip pairs"),
        "capacity": capacity_param(100),
        "pairs": _pairs_param(),
        "storage": storage_param(),
    }


@register
class PSAM(_Family):
    __doc__ = (
        """PSAM: proximal stochastic AUC maximisation (dissertation §7.3, Algorithm 11).

    Per pair x_t = x⁺ − x⁻, t = 1, 2, …: λ_t = 1/(γ(t + t0)) and w ← prox_{λ_t f_t}(w),
    the proximal map of the pair's hinge f_t(v) = max(0, 1 − vᵀx_t) (eq. 7.2) in the
    closed form of Appendix A: z = (1 − wᵀx_t)/(λ_t‖x_t‖²), g = 0 if z ≤ 0, −1 if z ≥ 1,
    −z otherwise, w ← w − λ_t·g·x_t (PA-I with C = λ_t); every r_skip pairs
    w ← w − r_skip·(t + t0)⁻¹·w; every a_skip pairs w̃ ← (q·w̃ + w)/(q + 1). Scores are
    w̃ᵀx.

    Parameters
    ----------"""
        + _COMMON_PARAMS
        + """
    gamma : float in [1e-12, 1e6], default 1e-8
        γ of Algorithm 11 (the experiments call it λ and tune it over ASAM's grids,
        10^[−10:−7] and {1, …, 100}); the shrink every pair would be 1 − γλ_t, an L2 term
        of weight γ. Default from the specs README. At 1e-8 with t0 = 1, λ_t ≈ 1e8/t
        and every violated pair is projected onto wᵀx_t = 1 (z ≪ 1): γ is then inert.
    t0 : float in [1e-6, 1e12], default 1.0
        Offset of λ_t and of the shrink (not reported in the dissertation). The specs
        README fixes t0 = 1: PSAM is far less sensitive to it than ASAM, and t0 = 1 was
        within 0.001 AUC of ASAM's calibrated default on three of the review's four
        streams and better on the fourth. t0 = 1/(γη0) makes λ_t ≈ η0 (PA-I with
        C = η0); it also works."""
        + _RSKIP_PARAM + _AVERAGE_PARAM + _STREAM_PARAMS
        + """

    State
    -----
    Dense storage: ``w_`` (d,) the iterate w, ``wbar_`` (d,) the average w̃. Sparse
    storage: ``u_`` (d,), ``atil_`` (d,) = Ã and ``lazy_`` (2,) = (σ, c) with w = σ·u and
    q·w̃ = c·u − Ã. Both:"""
        + _STATE_COMMON
        + """

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.min(0)) / (X.max(0) - X.min(0))
    >>> lrn = models.create("psam", n_features=30, seed=0)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.991

    Notes
    -----
    - The prox is the closed form through z (Appendix A's last display), not the
      appendix's case table for f′, which is garbled and gives a different step in 843
      of 2000 cases (review-second-wave §4; specs [TYPO-FIXED]). The update is
      Algorithm 11's w ← prox_{λ_t f_t}(w), not §7.3's text formula
      w − (1/(t + t0))·M·prox(w), which contradicts it.
    - A pair with ‖x_t‖² = 0 (x⁺ = x⁻, or a difference whose square underflows) is
      skipped: z would divide by zero, and for x_t = 0 the prox is the identity anyway
      (f_t is constant). The pair still counts as an iteration (t, shrink, average).
      ‖x_t‖² is only formed for a violated pair: with wᵀx_t ≥ 1, z ≤ 0 and g = 0.
    - t0 is fixed (no η0 calibration); the shrink factor is used as printed (see
      below)."""
        + _NOTES_AVERAGE + _NOTES_STREAM
    )
    name = "psam"
    prox = True
    averaging = True
    param_table: ClassVar[dict[str, Param]] = {
        "gamma": scale_param(1e-8, "γ of Algorithm 11, λ_t = 1/(γ(t + t0))", low=1e-12),
        "t0": scale_param(1.0, "offset t0 of λ_t and of the shrink", high=1e12),
        "r_skip": _skip_param(16, "shrink every r_skip pairs"),
        "a_skip": _skip_param(10, "average every a_skip pairs"),
        "capacity": capacity_param(100),
        "pairs": _pairs_param(),
        "storage": storage_param(),
    }
