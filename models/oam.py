"""Buffer-based online AUC maximisation: OAM_seq, OAM_gra, FOAM and NOAM.

All four keep one reservoir buffer per class (Vitter's Algorithm R) and, for each event,
update a linear model against the opposite buffer with the pairwise hinge loss
ℓ(u) = max(0, 1 − u). OAM_seq and OAM_gra (Zhao, Hoi, Jin and Yang, ICML 2011) work on
the raw features; FOAM and NOAM (Ding, Liu, Zhao and Hoi, ICDM 2017) work on random
Fourier features and on a Nyström map built from the first support vectors.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from . import _oam_kernels as K
from ._buffers import RESERVOIR, grow_sparse, sparse_width
from ._config import (
    MAX_FEATURES_DENSE,
    MAX_FEATURES_SPARSE,
    NYSTROM_EIG_FLOOR,
    OAM_MIN_SQNORM,
)
from ._features import draw_rff, gaussian_gram, nystrom_map, rff_map
from ._kernels import csr_scores, dense_scores, normalize_rows
from ._rng import new_state
from ._validation import Batch, Interval, Options, Param
from .base import (
    Learner,
    capacity_param,
    register,
    resolve_storage,
    scale_param,
    storage_param,
)

__all__ = ["FOAM", "NOAM", "OAMGra", "OAMSeq"]


def _unit_rows(X: np.ndarray, normalize: bool) -> np.ndarray:
    return normalize_rows(X) if normalize else X


# =============================================================================== OAM
class _OAM(Learner):
    max_features = MAX_FEATURES_SPARSE
    scoring_keys = ("w_",)
    accepts_sparse = True
    variable_shape = frozenset({"bidx_", "bval_"})
    input_keys = frozenset({"buf_", "bval_"})
    param_table: ClassVar[dict[str, Param]] = {
        "C": scale_param(2.0**-5, "penalty C; C_t = C·max(1, N_opp/cap)"),
        "capacity": capacity_param(100),
        "storage": storage_param(),
    }
    sequential: ClassVar[bool]

    def _resolve_params(self) -> None:
        resolve_storage(self.params, self.n_features)

    def _journaled(self) -> tuple[str, ...]:
        return ("w_",) if self.params["storage"] == "sparse" else ()

    def _allocate(self) -> dict[str, np.ndarray]:
        cap = self.params["capacity"]
        state = {
            "w_": np.zeros(self.n_features),
            "order_": np.zeros((2, cap), np.int64),
            "n_seen_": np.zeros(2, np.int64),
            "rng_": new_state(self.seed),
        }
        if self.params["storage"] == "dense":
            state["buf_"] = np.zeros((2, cap, self.n_features))
        else:
            state["bidx_"] = np.zeros((2, cap, 1), np.int64)
            state["bval_"] = np.zeros((2, cap, 1))
            state["bnnz_"] = np.zeros((2, cap), np.int64)
        return state

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        C = self.params["C"]
        if self.params["storage"] == "dense":
            X = self._dense_rows(batch)
            if self.sequential:
                K.seq_learn_dense(X, y, s["w_"], s["buf_"], s["order_"], s["n_seen_"],
                                  s["rng_"], RESERVOIR, C, OAM_MIN_SQNORM, prior)
            else:
                K.minibatch_learn(X, y, s["w_"], s["buf_"], s["order_"], s["n_seen_"],
                                  s["rng_"], RESERVOIR, C, True, prior)
            return
        indptr, indices, values = self._csr_rows(batch)
        longest = int(np.diff(indptr).max())
        width = sparse_width(longest, s["bidx_"].shape[2])
        s["bidx_"], s["bval_"] = grow_sparse(s["bidx_"], s["bval_"], width)
        args = (indptr, indices, values, y, s["w_"], s["bidx_"], s["bval_"], s["bnnz_"],
                s["order_"], s["n_seen_"], s["rng_"], RESERVOIR, C)
        if self.sequential:
            K.seq_learn_sparse(*args, OAM_MIN_SQNORM, prior)
        else:
            K.gra_learn_sparse(*args, prior)

    def _score(self, batch: Batch) -> np.ndarray:
        if batch.dense is not None:
            return dense_scores(batch.dense, self._state["w_"])
        return csr_scores(batch.indptr, batch.indices, batch.values, self._state["w_"])


_OAM_DOC_TAIL = """
    Parameters
    ----------
    n_features : int
        Input dimension d, up to 2^22; with sparse storage the cost per pair follows the
        non-zeros.
    seed : int
        Seed of the generator behind the reservoir draws.
    C : float in [1e-6, 1e6], default 2^-5
        Penalty C; the step cap grows as C_t = C·max(1, N_opp/capacity), N_opp the number
        of opposite-class events seen so far. The paper tunes C over 2^[−10:10]; the
        default is set by scale, not tuned, see Notes. Multiplying every feature by s is
        the same model as C/s² (scores scaled by s). The range keeps the grid well
        inside; OAM_gra's w grows in proportion to C, and C from about 1e284 overflows w
        or its scores on rows of scale 1e3–1e12 (measured).
    capacity : int, default 100
        Rows kept per class (the papers use 100).
    storage : {'auto', 'dense', 'sparse'}, default 'auto'
        Buffer layout: dense rows, or sorted (index, value) rows whose cost follows the
        non-zeros. 'auto' is sparse above 4096 features. Either accepts dense or CSR input.

    State
    -----
    ``w_`` (d,); dense buffers ``buf_`` (2, capacity, d), or sparse buffers ``bidx_`` /
    ``bval_`` (2, capacity, width) and ``bnnz_`` (2, capacity) with width a power of two
    ≥ the longest row seen; ``order_`` (2, capacity) the slots from oldest to newest;
    ``n_seen_`` (negatives, positives); ``rng_`` the generator state.
"""

_OAM_NOTES_COMMON = """
    - Buffers are reservoirs (the OAM paper's RS variant, the one FOAM's paper compares
      with): the own-class buffer is updated first, its counter including the event,
      and the opposite buffer is visited in insertion order, oldest to newest (specs
      README; the paper's "for x ∈ B" has no order).
    - Default C = 2^-5, from scale alone: for rows of about unit norm (‖δ‖² ≈ 1) the
      first full-buffer step (C/2)·Σ δ over |B| = 100 violators moves a typical pair's
      margin by about (C/2)·|B|·‖δ‖²/2 ≈ 1, the hinge's own scale; C_t then grows with
      the stream. Nothing was tuned on test data; tune C over 2^[−10:10] as the paper
      does when labels allow.
    - The OAM equations come from the specs ([EXTERNAL]: the seeds only cite Zhao et al.
      2011), cross-checked there against a public re-implementation.
    - Arithmetic: margins are formed as wᵀx_t − wᵀx, and δ and ‖δ‖² only for pairs
      that need them; sparse storage never forms δ (‖δ‖² = ‖x_t‖² + ‖x‖² − 2·x_tᵀx, the
      step applied as +τy·x_t, −τy·x). The algebra is the paper's; rounding differs
      from a literal wᵀ(x_t − x) at the 1e-16 relative level, and an exact duplicate
      still gives ‖δ‖² = 0 exactly.
"""


@register
class OAMSeq(_OAM):
    __doc__ = (
        """OAM with sequential updating (OAM_seq; Zhao et al., ICML 2011).

    For each event (x_t, y_t) and each buffered x of the other class in turn, a
    passive-aggressive step on the pair: δ = x_t − x, ℓ = max(0, 1 − y_t·wᵀδ),
    τ = min(C_t/2, ℓ/‖δ‖²), w ← w + τ·y_t·δ. O(|B|·nnz) per event; scores f(x) = wᵀx.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.min(0)) / (X.max(0) - X.min(0))
    >>> lrn = models.create("oam_seq", n_features=30, seed=0)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.991
"""
        + _OAM_DOC_TAIL
        + """
    Notes
    -----
    - A pair with ‖δ‖² ≤ 1e-12 (a duplicate of a buffered row) is skipped: τ = ℓ/‖δ‖²
      would divide by zero (the public re-implementation's ``tau == ct/2`` bug).
"""
        + _OAM_NOTES_COMMON
    )
    name = "oam_seq"
    sequential = True


@register
class OAMGra(_OAM):
    __doc__ = (
        """OAM with online gradient updating (OAM_gra; Zhao et al., ICML 2011).

    For each event, the pairs that violate the margin at the current w,
    A = {x ∈ B : y_t·wᵀ(x_t − x) ≤ 1}, all evaluated before any change, give one step
    w ← w + (C_t/2)·y_t·Σ_A (x_t − x). O(|B|·nnz) per event; scores f(x) = wᵀx.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.min(0)) / (X.max(0) - X.min(0))
    >>> lrn = models.create("oam_gra", n_features=30, seed=0)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.991
"""
        + _OAM_DOC_TAIL
        + """
    Notes
    -----
    - The violator test is ``≤ 1`` (margin exactly 1 counts), as in the specs; the
      step is applied as −(C_t/2)·y·x per violator, then +(C_t/2)·y·|A|·x_t, which is
      Σ_A (x_t − x) up to rounding.
    - Speed, dense storage: a ``learn`` call of 8 or more events first copies both
      buffers to a feature-major scratch (d, capacity) per class, kept in step as rows
      are admitted, and forms the |B| margins wᵀx across buffer rows at once (about 2×
      the events/s at d = 54). It is scratch, not state: ``buf_`` keeps its
      (2, capacity, d) layout and nothing is rebuilt on restore. Each margin is summed
      with the same additions in the same order as the row-wise path, so the state
      does not depend on how the stream is cut into batches.
"""
        + _OAM_NOTES_COMMON
    )
    name = "oam_gra"
    sequential = False


# ============================================================================== FOAM
_ETA_DOC = "learning rate η of Algorithm 3"


@register
class FOAM(Learner):
    """FOAM: online AUC maximisation on random Fourier features (Ding et al., ICDM 2017).

    Algorithm 4: z(x) = (cos θ_1ᵀx, sin θ_1ᵀx, …, cos θ_mᵀx, sin θ_mᵀx) with
    θ_j ~ N(0, σ⁻² I), so zᵀz/m ≈ κ(x, y) = exp(−‖x − y‖²/(2σ²)); reservoir buffers of
    mapped rows (Algorithms 1–2); and Algorithm 3's mini-batch OGD against the whole
    opposite buffer B: A = {z_i ∈ B : y_t·w_tᵀ(z_t − z_i) < 1} at the same w_t, then
    w ← w + (η/(2|B|))·y_t·(|A|·z_t − Σ_A z_i). Scores are w_tᵀz(x), the last iterate.
    O(m·d + |B|·m) per event.

    Parameters
    ----------
    n_features : int
        Input dimension d.
    seed : int
        Seed of the generator that draws θ and then drives the reservoirs.
    eta : float in [1e-6, 1e6], default 0.01
        Learning rate η (the paper tunes it over 2^[−10:10], well inside the range; η
        near 1e308 overflows the scores). See Notes for the default.
    sigma : float in [1e-6, 1e6], default 1.0
        Width σ of the Gaussian kernel; θ ~ N(0, σ⁻² I). 1 suits unit-norm rows
        (‖x − y‖² ∈ [0, 4]). Below about 1e-296 the frequencies are infinite.
    n_components : int, default 200
        Random Fourier components m; the model has 2m = 400 weights.
    capacity : int, default 100
        Mapped rows kept per class (the paper's 100).
    normalize : bool, default True
        Scale each row to unit L2 norm before mapping, at learn and at score (the paper's
        preprocessing x ← x/‖x‖). All-zero rows are left as they are.
    rff_scale : {'none', 'sqrt_m'}, default 'none'
        'none' is the paper's unscaled map (zᵀz ≈ m·κ), so its η grid carries over;
        'sqrt_m' divides z by √m (zᵀz ≈ κ) and is the same model as 'none' with η/m.

    State
    -----
    ``theta_`` (m, d) the frequencies, drawn from ``seed`` with the learner's own
    generator; ``w_`` (2m,); buffers of mapped rows ``buf_`` (2, capacity, 2m) with
    ``order_`` (oldest to newest) and the counts ``n_seen_`` (negatives, positives);
    ``rng_`` the generator state.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.min(0)) / (X.max(0) - X.min(0))
    >>> lrn = models.create("foam", n_features=30, seed=0)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.968

    Notes
    -----
    - Algorithm 3 exactly: the /2 and the 1/|B| normaliser (|B| the opposite buffer's
      current fill, not |A|) are kept, and every margin uses the same w_t (formed as
      w_tᵀz_t − w_tᵀz_i). An event whose opposite buffer is empty only fills its own
      buffer (the paper's 1/|B| is undefined there).
    - No regulariser: the ½‖w‖² of the paper's eq. (1) never appears in its update.
    - m: the paper sets "m in FOAM to Q in NOAM" and later calls FOAM's dimension "Q";
      the parameter statement is taken literally, m = Q = 200 components (400
      features). n_components=100 is the other reading (Q = 200 features).
    - Feature scale: the paper's z has no 1/√m (``rff_scale='none'``, the default by
      the specs README); Theorem 1 assumes zᵀz ≈ κ, which is ``'sqrt_m'``. Either
      choice is the other with η rescaled by m.
    - Default η = 0.01, from scale alone, not tuned: with unscaled features
      ‖z_t − z_i‖² = 2m·(1 − κ) ≈ m for a typical κ ≈ ½, and η·‖δ‖²/2 ≈ 1 (a step
      moves a violated pair's margin by about the hinge's unit) gives η ≈ 2/m = 0.01.
    - The buffers and the violator order follow the specs README: own buffer first
      (reservoir counter includes the event), opposite buffer oldest to newest.
    - The |B| margins are formed as in :class:`OAMGra` (a feature-major scratch copy
      of the buffers per ``learn`` call of 8+ events; the same bits as row by row).
    """

    name = "foam"
    max_features = MAX_FEATURES_DENSE
    scoring_keys = ("theta_", "w_")
    fixed_keys = frozenset({"theta_"})
    param_table: ClassVar[dict[str, Param]] = {
        "eta": scale_param(0.01, _ETA_DOC),
        "sigma": scale_param(1.0, "Gaussian kernel width σ"),
        "n_components": Param(
            Interval(int, 1, 4096, "both"), 200, "random Fourier components m (2m features)"
        ),
        "capacity": capacity_param(100),
        "normalize": Param(Options((True, False)), True, "unit-L2 rows before mapping"),
        "rff_scale": Param(
            Options(("none", "sqrt_m")), "none", "feature scale: 1 (paper) or 1/√m"
        ),
    }

    def _allocate(self) -> dict[str, np.ndarray]:
        m = self.params["n_components"]
        cap = self.params["capacity"]
        rng = new_state(self.seed)
        theta = draw_rff(rng, m, self.n_features, self.params["sigma"])
        return {
            "theta_": theta,
            "w_": np.zeros(2 * m),
            "buf_": np.zeros((2, cap, 2 * m)),
            "order_": np.zeros((2, cap), np.int64),
            "n_seen_": np.zeros(2, np.int64),
            "rng_": rng,
        }

    def _features(self, X: np.ndarray) -> np.ndarray:
        m = self.params["n_components"]
        scale = 1.0 if self.params["rff_scale"] == "none" else 1.0 / math.sqrt(m)
        return rff_map(_unit_rows(X, self.params["normalize"]), self._state["theta_"], scale,
                       False)

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        K.minibatch_learn(self._features(self._dense_rows(batch)), y, s["w_"], s["buf_"],
                          s["order_"], s["n_seen_"], s["rng_"], RESERVOIR, self.params["eta"],
                          False, prior)

    def _score(self, batch: Batch) -> np.ndarray:
        return dense_scores(self._features(self._dense_rows(batch)), self._state["w_"])


# ============================================================================== NOAM
@register
class NOAM(Learner):
    """NOAM: online AUC maximisation with a Nyström map from the first support vectors
    (Ding et al., ICDM 2017, Algorithm 5).

    Phase 1 (kernel mode) runs Algorithm 3 in the RKHS of κ(x, y) = exp(−‖x − y‖²/(2σ²))
    with raw reservoir buffers: f(x) = Σ_{j∈S} α_j κ(x̂_j, x); for an event with opposite
    buffer B, A = {x_i ∈ B : y_t(f(x_t) − f(x_i)) < 1} (all with the pre-update f) and,
    with c = η/(2|B|), x_t joins S with α = c·y_t·|A| and each violator's α decreases
    by c·y_t. Once |S| ≥ Q the learner switches, once: W = κ(L, L) over all Q_eff SVs,
    W = V D Vᵀ (descending), keep the top k = round(rank_fraction·Q) eigenpairs with
    λ > 1e-6·λ₁, P = V_k D_k^{-1/2}, w = D_k^{1/2} V_kᵀ α, and both buffers are mapped
    to z = Pᵀc(x), c(x) = [κ(x̂_1, x), …, κ(x̂_{Q_eff}, x)]. Phase 2 is FOAM's loop
    (Algorithm 3) on z with frozen landmarks and P. Scores: f(x) before the switch,
    wᵀz(x) after.

    Parameters
    ----------
    n_features : int
        Input dimension d.
    seed : int
        Seed of the generator behind the reservoir draws.
    eta : float in [1e-6, 1e6], default 2.0
        Learning rate η, used in both phases (the paper tunes it over 2^[−10:10]; the
        range keeps it well inside, as for FOAM).
    sigma : float in [1e-6, 1e6], default 1.0
        Width σ of the Gaussian kernel, the same convention as FOAM. γ = 1/(2σ²) is
        infinite below σ ≈ 1e-154 (the σ = 1e-300 that broke NOAM before the range).
    budget : int, default 200
        Q: the number of support vectors that triggers the switch to the Nyström map.
    rank_fraction : float in (0, 100], default 0.4
        The rank is k = round(rank_fraction·Q) (the paper's 0.4Q), capped at Q + capacity
        and, at the switch, at Q_eff and at the eigenvalues above the floor.
    capacity : int, default 100
        Rows kept per class (the paper's 100).
    normalize : bool, default True
        Scale each row to unit L2 norm, at learn and at score (the paper's x ← x/‖x‖).

    State
    -----
    Shapes are fixed at construction (R = Q + capacity bounds |S|, k as above):
    ``phase_`` (1,) 0 in kernel mode, 1 after the switch; ``n_sv_`` (1,) |S| (Q_eff after
    the switch); ``rank_`` (1,) the kept rank (0 before the switch); ``sv_x_`` (R, d) the
    SVs, which become the landmarks; ``sv_alpha_`` (R,) their α; ``sv_id_`` (R,) their
    stream ids (0-based event positions); ``rbuf_`` (2, capacity, d) and ``rbuf_id_``
    (2, capacity) the raw buffers and their stream ids (phase 1; cleared at the switch);
    ``proj_`` (R, k) P, zero-padded; ``w_`` (k,) zero-padded; ``buf_`` (2, capacity, k)
    the mapped buffers (phase 2); ``order_``, ``n_seen_`` (negatives, positives),
    ``rng_``.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.min(0)) / (X.max(0) - X.min(0))
    >>> lrn = models.create("noam", n_features=30, seed=0)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> int(lrn.get_state()["phase_"][0])
    1
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.97

    Notes
    -----
    - Algorithm 5's printed initial weight (α₁…α_Q)(D^{-1/2}Vᵀ)^{-1} is a pseudo-inverse;
      w = D_k^{1/2} V_kᵀ α is its value (specs README). With k = Q_eff the scores are
      unchanged by the switch; with k < Q_eff they become αᵀV_kV_kᵀc(x) (a visible jump).
    - Overshoot: one update can add x_t and up to |B| violators, so |S| may pass Q. All
      Q_eff SVs become landmarks (the spec's option (a)); k comes from the configured Q.
    - Within an update x_t enters S first, then the violators that are not SVs yet, in
      buffer order (oldest first). SVs are identified by stream id, so a buffered event
      that is already an SV only has its α changed.
    - Each eigenvector's largest-magnitude entry is made positive. This does not change
      the model (P's column and w's entry flip together) but makes the state canonical.
    - The switch runs once, in numpy (eigh), between two events; the buffers are
      converted, not dropped, and the counters carry over (paper: "we should not drop
      old B̂₊ and B̂₋"). Landmarks and P stay frozen afterwards; the paper has no refresh.
    - If the stream ends before the switch, scores use the kernel expansion.
    - Default η = 2, from scale alone, not tuned: both phases have kernel-scale
      features (‖φ(x_t) − φ(x_i)‖² = 2(1 − κ) ≈ 1 for κ ≈ ½), and η·‖δ‖²/2 ≈ 1 gives
      η ≈ 2. (FOAM's unscaled features are m times larger, hence its η ≈ 2/m.)
    - Default Q = 200 (the specs' recommendation; the paper varies 100–200 and does not
      report its table's value).
    """

    name = "noam"
    max_features = MAX_FEATURES_DENSE
    input_keys = frozenset({"sv_x_", "rbuf_"})  # rows, unit-scaled or as they came
    scoring_keys = ("phase_", "n_sv_", "sv_x_", "sv_alpha_", "proj_", "w_")
    param_table: ClassVar[dict[str, Param]] = {
        "eta": scale_param(2.0, _ETA_DOC),
        "sigma": scale_param(1.0, "Gaussian kernel width σ"),
        "budget": Param(Interval(int, 1, 4096, "both"), 200, "Q: SVs before the switch"),
        "rank_fraction": Param(
            Interval(float, 0, 100, "right"), 0.4, "rank k = round(rank_fraction·Q)"
        ),
        "capacity": capacity_param(100),
        "normalize": Param(Options((True, False)), True, "unit-L2 rows"),
    }

    @property
    def _rows_cap(self) -> int:
        return self.params["budget"] + self.params["capacity"]

    @property
    def _rank_cap(self) -> int:
        k = math.floor(self.params["rank_fraction"] * self.params["budget"] + 0.5)
        return int(min(max(k, 1), self._rows_cap))

    def _allocate(self) -> dict[str, np.ndarray]:
        d = self.n_features
        cap = self.params["capacity"]
        R = self._rows_cap
        k = self._rank_cap
        return {
            "phase_": np.zeros(1, np.int64),
            "n_sv_": np.zeros(1, np.int64),
            "rank_": np.zeros(1, np.int64),
            "sv_x_": np.zeros((R, d)),
            "sv_alpha_": np.zeros(R),
            "sv_id_": np.full(R, -1, np.int64),
            "rbuf_": np.zeros((2, cap, d)),
            "rbuf_id_": np.full((2, cap), -1, np.int64),
            "proj_": np.zeros((R, k)),
            "w_": np.zeros(k),
            "buf_": np.zeros((2, cap, k)),
            "order_": np.zeros((2, cap), np.int64),
            "n_seen_": np.zeros(2, np.int64),
            "rng_": new_state(self.seed),
        }

    def _after_restore(self) -> None:
        s = self._state
        phase, n_sv, rank = int(s["phase_"][0]), int(s["n_sv_"][0]), int(s["rank_"][0])
        ok = phase in (0, 1) and 0 <= n_sv <= self._rows_cap
        ok = ok and (0 <= rank <= min(n_sv, self._rank_cap) if phase else rank == 0)
        ok = ok and (phase == 1 or n_sv < self.params["budget"])
        if not ok:
            raise ValueError(
                f"The {self.name} state counters phase_={phase}, n_sv_={n_sv}, "
                f"rank_={rank} are inconsistent."
            )

    def _rows(self, batch: Batch) -> np.ndarray:
        return _unit_rows(self._dense_rows(batch), self.params["normalize"])

    def _nystrom(self, X: np.ndarray) -> np.ndarray:
        s = self._state
        q = int(s["n_sv_"][0])
        return nystrom_map(X, s["sv_x_"][:q], s["proj_"][:q], self.params["sigma"])

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        X = self._rows(batch)
        eta = self.params["eta"]
        start = 0
        if s["phase_"][0] == 0:
            start = K.noam_kernel_learn(X, y, s["sv_x_"], s["sv_alpha_"], s["sv_id_"],
                                        s["n_sv_"], s["rbuf_"], s["rbuf_id_"], s["order_"],
                                        s["n_seen_"], s["rng_"], RESERVOIR, eta,
                                        self.params["sigma"], self.params["budget"], prior)
            if s["n_sv_"][0] >= self.params["budget"]:
                self._switch()
        if start < X.shape[0]:
            K.minibatch_learn(self._nystrom(X[start:]), y[start:], s["w_"], s["buf_"],
                              s["order_"], s["n_seen_"], s["rng_"], RESERVOIR, eta, False,
                              prior[start:] if prior.shape[0] else prior)

    def _switch(self) -> None:
        """Build the Nyström map from all SVs, move w and the buffers to it (once)."""
        s = self._state
        q = int(s["n_sv_"][0])
        landmarks = s["sv_x_"][:q]
        lam, V = np.linalg.eigh(gaussian_gram(landmarks, landmarks, self.params["sigma"]))
        lam, V = lam[::-1], V[:, ::-1]
        above = int(np.count_nonzero(lam > NYSTROM_EIG_FLOOR * lam[0]))
        k = min(self._rank_cap, q, above)
        lam, V = lam[:k], V[:, :k].copy()
        pivot = np.argmax(np.abs(V), axis=0)
        V *= np.where(V[pivot, np.arange(k)] < 0, -1.0, 1.0)
        root = np.sqrt(lam)
        s["proj_"][:] = 0.0
        s["proj_"][:q, :k] = V / root
        s["w_"][:] = 0.0
        s["w_"][:k] = root * (V.T @ s["sv_alpha_"][:q])
        s["rank_"][0] = k
        s["phase_"][0] = 1
        cap = self.params["capacity"]
        for c in (0, 1):
            size = int(min(s["n_seen_"][c], cap))
            if size:
                s["buf_"][c, :size] = self._nystrom(s["rbuf_"][c, :size])
        s["rbuf_"][:] = 0.0
        s["rbuf_id_"][:] = -1

    def _score(self, batch: Batch) -> np.ndarray:
        s = self._state
        X = self._rows(batch)
        if s["phase_"][0] == 0:
            return K.expansion_scores(X, s["sv_x_"], s["sv_alpha_"], s["n_sv_"][0],
                                      self.params["sigma"])
        return dense_scores(self._nystrom(X), s["w_"])
