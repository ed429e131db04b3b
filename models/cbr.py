"""Confidence-weighted bipartite ranking: CBR, CBR-diag and FCBR (dissertation ch. 4–5).

The ranker is a Gaussian N(μ, Σ) over weight vectors and scores f(x) = μᵀx. Every event
is paired with each buffered event of the opposite class; for each pair, in turn, the
model moves to the closest Gaussian (in KL divergence) that ranks the pair with
confidence η — the SCW-I closed form of Proposition 1.
"""

from __future__ import annotations

import threading
from statistics import NormalDist
from typing import Any, ClassVar

import numpy as np

from . import _cbr_kernels as K
from ._buffers import FIFO, RESERVOIR, grow_sparse, sparse_width
from ._config import (
    CBR_MIN_VARIANCE,
    CBR_PRODUCT_REFRESH,
    CBR_PRODUCTS_MIN_DIM,
    MAX_FEATURES_DENSE,
    MAX_FEATURES_QUADRATIC,
    MAX_FEATURES_SPARSE,
)
from ._features import draw_rff, rff_map
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

__all__ = ["CBRFIFO", "CBRRS", "FCBRFIFO", "FCBRRS", "CBRDiagFIFO", "CBRDiagRS"]

_DIAG_MODES = {"cov": K.DIAG_COV, "paper": K.DIAG_PAPER, "prec": K.DIAG_PREC}


def _cw_constants(eta: float) -> tuple[float, float, float]:
    """φ = Φ⁻¹(η), ψ = 1 + φ²/2, ζ = 1 + φ² (Proposition 1)."""
    phi = NormalDist().inv_cdf(eta)
    return phi, 1.0 + phi * phi / 2.0, 1.0 + phi * phi


_COMMON = {
    "C": scale_param(0.1, "cap on each pair's step α"),
    "eta": Param(
        Interval(float, 0.5, 1, "neither"), 0.7, "confidence η; φ = Φ⁻¹(η) must be > 0"
    ),
    "capacity": capacity_param(50),
}


# The sparse CBR-diag kernel's workspace: two all-zero arrays of length d (the kernel
# leaves them zero). One pair per thread, shared by every learner that learns in it — one
# learn call runs at a time in a thread — instead of one pair per learner: with many
# models per replica (or an ``auto`` model's three CBR-diag candidates) it was 16 bytes
# per column of each of them, kept between batches.
_WORKSPACE = threading.local()


def _workspace(d: int) -> tuple[np.ndarray, np.ndarray]:
    """This thread's workspace, viewed at length ``d`` (reallocated, zeroed, when a
    learner of a larger dimension needs it)."""
    pair = getattr(_WORKSPACE, "pair", None)
    if pair is None or pair[0].shape[0] < d:
        pair = _WORKSPACE.pair = (np.zeros(d), np.zeros(d, np.int64))
    return pair[0][:d], pair[1][:d]

class _CBRBase(Learner):
    policy: ClassVar[int]

    def _constants(self) -> tuple[float, float, float]:
        return _cw_constants(self.params["eta"])

    def _buffers(self, dim: int) -> dict[str, np.ndarray]:
        cap = self.params["capacity"]
        return {
            "buf_": np.zeros((2, cap, dim)),
            "order_": np.zeros((2, cap), np.int64),
            "n_seen_": np.zeros(2, np.int64),
            "rng_": new_state(self.seed),
        }


class _FullCovariance(_CBRBase):
    """Full Σ. In CBR_PRODUCTS_MIN_DIM dimensions or more, the state also keeps
    ``sbuf_`` = Σb for every buffered row b (see ``K.full_learn_cached``)."""

    def _full_state(self, d: int) -> dict[str, np.ndarray]:
        state = {"mu_": np.zeros(d), "sigma_": np.eye(d), **self._buffers(d)}
        if d >= CBR_PRODUCTS_MIN_DIM:
            state["sbuf_"] = np.zeros((2, self.params["capacity"], d))
        return state

    def _full_learn(self, rows: np.ndarray, y: np.ndarray, prior: np.ndarray,
                    step_scale: float) -> None:
        s = self._state
        phi, psi, zeta = self._constants()
        C = self.params["C"]
        if "sbuf_" in s:
            K.full_learn_cached(rows, y, s["mu_"], s["sigma_"], s["buf_"], s["sbuf_"],
                                s["order_"], s["n_seen_"], s["rng_"], self.policy, C, phi,
                                psi, zeta, step_scale, CBR_MIN_VARIANCE,
                                CBR_PRODUCT_REFRESH, prior)
        else:
            K.full_learn_direct(rows, y, s["mu_"], s["sigma_"], s["buf_"], s["order_"],
                                s["n_seen_"], s["rng_"], self.policy, C, phi, psi, zeta,
                                step_scale, CBR_MIN_VARIANCE, prior)

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> Learner:
        sigma = state.get("sigma_")
        if ("sbuf_" not in state and "buf_" in state and sigma is not None
                and np.shape(sigma)[0] >= CBR_PRODUCTS_MIN_DIM):
            # A state saved before the products were kept: compute them (the restored
            # learner then differs from the original in rounding only).
            buf = np.asarray(state["buf_"], dtype=np.float64)
            state = {**state, "sbuf_": buf @ np.asarray(sigma, dtype=np.float64)}
        return super()._from_state(state)


class _CBRFull(_FullCovariance):
    max_features = MAX_FEATURES_QUADRATIC
    scoring_keys = ("mu_",)
    input_keys = frozenset({"buf_"})
    param_table: ClassVar[dict[str, Param]] = dict(_COMMON)

    def _allocate(self) -> dict[str, np.ndarray]:
        return self._full_state(self.n_features)

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        self._full_learn(self._dense_rows(batch), y, prior, 1.0)

    def _score(self, batch: Batch) -> np.ndarray:
        return dense_scores(self._dense_rows(batch), self._state["mu_"])


@register
class CBRFIFO(_CBRFull):
    """CBR with first-in-first-out buffers (dissertation Algorithms 4 and 6).

    Full covariance Σ (d × d), one Proposition 1 step per buffered pair: O(|B|·d²) per
    event below 128 dimensions; from 128 on, O(d² + |B|·d) per event plus O(d² + |B|·d)
    per pair that updates (most pairs do not; see Notes). The default choice of the
    family for d up to a few hundred.

    Parameters
    ----------
    n_features : int
        Input dimension d (at most 4096: Σ is d × d).
    seed : int
        Seed of the generator (unused by FIFO buffers, kept for a uniform API).
    C : float in [1e-6, 1e6], default 0.1
        Aggressiveness: cap on each pair's step α (SCW-I). The paper tunes it over
        2^[−10:10]; the spec review found the best C at 2^−10…2^−6 on every set it swept
        (features scaled to about unit range), so the default leans small. Multiplying
        every feature by c is the same as using c·C. The range keeps the paper's grid
        (and the bench's 2^−16) well inside; CBR-diag's ``'prec'`` mode overflows G from
        C ≈ 1e16 on rows of scale 1e12 (measured; no other form broke at any C > 0).
    eta : float in (½, 1), default 0.7
        Confidence η; the margin is φ·√(zᵀΣz) with φ = Φ⁻¹(η). Every float of the open
        interval is safe: φ stays below 8.3, and none overflowed on rows up to 1e12.
    capacity : int, default 50
        Rows kept per class.

    State
    -----
    ``mu_`` (d,), ``sigma_`` (d, d); buffers ``buf_`` (2, capacity, d) (with, from 128
    dimensions on, their products ``sbuf_`` = Σb, same shape), ``order_``
    (oldest to newest) and the per-class counts ``n_seen_`` (negatives, positives);
    ``rng_`` the generator state.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.min(0)) / (X.max(0) - X.min(0))
    >>> lrn = models.create("cbr_fifo", n_features=30, seed=0)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.989

    Notes
    -----
    Departures from the dissertation, as decided in ``shared/specs/README.md``:

    - The buffer loop visits rows in insertion order, oldest to newest (the text says
      ``for x ∈ B``; storage order is undefined once a ring wraps).
    - A pair with zᵀΣz ≤ 1e-12 (a duplicate of a buffered row) is skipped: α is 0/0.
    - Σ stays exactly symmetric: each update subtracts a term whose (i, j) and (j, i)
      entries are the same floating-point product.
    - Evaluation order, not the equations, from ``models._config.CBR_PRODUCTS_MIN_DIM``
      (128) dimensions on: each pair needs Σz, z = x_t − b, which the text forms from Σ
      (O(d²) per pair). Only a few pairs in fifty change the model, so the learner keeps
      Σb for every buffered row b (``sbuf_``), forms Σz = Σx_t − Σb in O(d), and after
      each update Σ ← Σ − β Σz zᵀΣ updates Σx_t and every Σb by the same rank-one term;
      an event's updates reach Σ in one pass, fused with the next event's Σx_t. The
      products equal the direct ones up to rounding, are recomputed from Σ every
      ``CBR_PRODUCT_REFRESH`` events of the stream, and are part of the state, so a
      restored learner continues bit for bit. 2–4x faster on FCBR's 300 features; at
      d = 54, where a fifth of the pairs may update, keeping 100 products current cost
      twice what it saved, so small d forms Σz directly.
    """

    name = "cbr_fifo"
    policy = FIFO


@register
class CBRRS(_CBRFull):
    """CBR with reservoir-sampling buffers (dissertation Algorithms 4, 5 and 6).

    As :class:`CBRFIFO`, but each class buffer is a uniform sample of the class
    history (Vitter's Algorithm R; the counter includes the new event).

    Examples
    --------
    >>> import numpy as np
    >>> from aucstream import models
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 5)); y = (X[:, 0] + 0.3 * rng.normal(size=400) > 1)
    >>> lrn = models.create("cbr_rs", n_features=5, seed=1, C=0.1).learn(X[:300], y[:300])
    >>> bool(models.auc(y[300:], lrn.score(X[300:])) > 0.9)
    True

    Notes
    -----
    The reservoir's random choices come from the learner's own generator (``rng_``):
    one draw per event once the class buffer is full. Otherwise as :class:`CBRFIFO`.
    """

    name = "cbr_rs"
    policy = RESERVOIR


class _CBRDiag(_CBRBase):
    max_features = MAX_FEATURES_SPARSE
    scoring_keys = ("mu_",)
    accepts_sparse = True
    variable_shape = frozenset({"bidx_", "bval_"})
    input_keys = frozenset({"buf_", "bval_"})
    param_table: ClassVar[dict[str, Param]] = {
        **_COMMON,
        "diag_mode": Param(Options(("cov", "paper", "prec")), "cov", "diagonal update rule"),
        "storage": storage_param(),
    }

    def _resolve_params(self) -> None:
        resolve_storage(self.params, self.n_features)

    def _journaled(self) -> tuple[str, ...]:
        return ("mu_", "g_") if self.params["storage"] == "sparse" else ()

    def _allocate(self) -> dict[str, np.ndarray]:
        d = self.n_features
        state = {"mu_": np.zeros(d), "g_": np.ones(d)}
        if self.params["storage"] == "dense":
            state.update(self._buffers(d))
            return state
        cap = self.params["capacity"]
        state.update(self._buffers(0))
        del state["buf_"]
        state.update(
            bidx_=np.zeros((2, cap, 1), np.int64),
            bval_=np.zeros((2, cap, 1)),
            bnnz_=np.zeros((2, cap), np.int64),
        )
        return state

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        phi, psi, zeta = self._constants()
        C = self.params["C"]
        mode = _DIAG_MODES[self.params["diag_mode"]]
        if self.params["storage"] == "dense":
            K.diag_learn_dense(self._dense_rows(batch), y, s["mu_"], s["g_"], s["buf_"],
                               s["order_"], s["n_seen_"], s["rng_"], self.policy, C, phi,
                               psi, zeta, mode, CBR_MIN_VARIANCE, prior)
            return
        indptr, indices, values = self._csr_rows(batch)
        longest = int(np.diff(indptr).max())
        width = sparse_width(longest, s["bidx_"].shape[2])
        s["bidx_"], s["bval_"] = grow_sparse(s["bidx_"], s["bval_"], width)
        xt, mark = _workspace(self.n_features)
        try:
            K.diag_learn_sparse(indptr, indices, values, y, s["mu_"], s["g_"], s["bidx_"],
                                s["bval_"], s["bnnz_"], s["order_"], s["n_seen_"], s["rng_"],
                                self.policy, C, phi, psi, zeta, mode, CBR_MIN_VARIANCE,
                                prior, xt, mark)
        except BaseException:
            _WORKSPACE.pair = None  # a kernel stopped mid-pair may leave it dirty
            raise

    def _score(self, batch: Batch) -> np.ndarray:
        if batch.dense is not None:
            return dense_scores(batch.dense, self._state["mu_"])
        return csr_scores(batch.indptr, batch.indices, batch.values, self._state["mu_"])


_DIAG_DOC_TAIL = """
    Parameters
    ----------
    n_features : int
        Input dimension d, up to 2^22; the cost per pair follows the non-zeros.
    C, eta, capacity
        As :class:`CBRFIFO`.
    diag_mode : {'cov', 'paper', 'prec'}, default 'cov'
        How the diagonal G is updated, see Notes.
    storage : {'auto', 'dense', 'sparse'}, default 'auto'
        Buffer layout: dense rows, or sorted (index, value) rows whose cost follows the
        non-zeros. 'auto' is sparse above 4096 features. Either accepts dense or CSR input.

    State
    -----
    ``mu_`` (d,), ``g_`` (d,) the diagonal; dense buffers ``buf_`` or sparse buffers
    ``bidx_``/``bval_``/``bnnz_`` (slot width: a power of two ≥ the longest row seen),
    ``order_``, ``n_seen_``, ``rng_``.

    Notes
    -----
    The dissertation's Proposition 2 (μ ← μ + αy z/G, G ← G + βz², υ = Σ z²/(G + C)) is
    internally inconsistent: G behaves as a precision while the text calls it diag(Σ),
    and the "+C" in υ makes the model degrade from C ≈ 4 and collapse at large C
    (review-first-wave §2). Following the specs README the default is ``'cov'``, the
    diagonal of the full Proposition 1 update: s = G⊙z, υ = Σ G z², μ ← μ + αy s,
    G ← G − β s⊙s, which keeps G > 0 with no clamp and equals full CBR while Σ is
    diagonal. ``'paper'`` is the printed formulas (reproduce the dissertation's tables
    with C cross-validated); ``'prec'`` is the minimal fix of the printed formulas
    (υ = Σ z²/G, G ← G + (αφ/√u) z²). Buffers are visited oldest to newest; pairs with
    υ ≤ 1e-12 are skipped.
"""


@register
class CBRDiagFIFO(_CBRDiag):
    __doc__ = (
        """CBR-diag with FIFO buffers: diagonal covariance for high-dimensional input.

    O(|B|·nnz) per event instead of O(|B|·d²) (dissertation Eq. 4.6, Proposition 2).

    Examples
    --------
    >>> import numpy as np
    >>> from aucstream import models
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 20)); y = X[:, :3].sum(1) > 0.5
    >>> lrn = models.create("cbr_diag_fifo", n_features=20, C=0.1).learn(X[:300], y[:300])
    >>> bool(models.auc(y[300:], lrn.score(X[300:])) > 0.9)
    True
"""
        + _DIAG_DOC_TAIL
    )
    name = "cbr_diag_fifo"
    policy = FIFO


@register
class CBRDiagRS(_CBRDiag):
    __doc__ = (
        """CBR-diag with reservoir buffers (the dissertation implies it but never runs it).

    Examples
    --------
    >>> import numpy as np
    >>> from aucstream import models
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 20)); y = X[:, :3].sum(1) > 0.5
    >>> lrn = models.create("cbr_diag_rs", n_features=20, C=0.1).learn(X[:300], y[:300])
    >>> bool(models.auc(y[300:], lrn.score(X[300:])) > 0.9)
    True
"""
        + _DIAG_DOC_TAIL
    )
    name = "cbr_diag_rs"
    policy = RESERVOIR


class _FCBR(_FullCovariance):
    max_features = MAX_FEATURES_DENSE
    scoring_keys = ("theta_", "mu_")
    fixed_keys = frozenset({"theta_"})
    param_table: ClassVar[dict[str, Param]] = {
        **_COMMON,
        "n_components": Param(
            Interval(int, 1, 4096, "both"), 150, "random Fourier components m (2m features)"
        ),
        "sigma": scale_param(1.0, "Gaussian kernel width σ"),
        "mean_step_scale": Param(
            Interval(float, 0, 1, "right"), 1.0, "factor on the μ step (Prop. 3 prints ½)"
        ),
        "normalize": Param(Options((True, False)), True,
                           "unit-L2 rows before the Fourier map (as FOAM and NOAM)"),
    }

    def _allocate(self) -> dict[str, np.ndarray]:
        m = self.params["n_components"]
        state = self._full_state(2 * m)
        state["theta_"] = draw_rff(state["rng_"], m, self.n_features, self.params["sigma"])
        return state

    def _features(self, X: np.ndarray) -> np.ndarray:
        m = self.params["n_components"]
        if self.params["normalize"]:
            X = normalize_rows(X)
        return rff_map(X, self._state["theta_"], 1.0 / np.sqrt(m), True)

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        self._full_learn(self._features(self._dense_rows(batch)), y, prior,
                         self.params["mean_step_scale"])

    def _score(self, batch: Batch) -> np.ndarray:
        return dense_scores(self._features(self._dense_rows(batch)), self._state["mu_"])


_FCBR_DOC_TAIL = """
    Parameters
    ----------
    n_features : int
        Input dimension d.
    C, eta, capacity
        As :class:`CBRFIFO` (capacity 50 per class, as in the dissertation).
    n_components : int, default 150
        Random Fourier components m; the model lives in 2m = 300 dimensions.
    sigma : float in [1e-6, 1e6], default 1.0
        Width σ of the Gaussian kernel exp(−‖x − y‖²/(2σ²)); θ ~ N(0, σ⁻² I). The
        dissertation uses σ = 100 on z-scored data and notes that tuning it may help.
        Below about 1e-296 the frequencies θ = N(0, 1)/σ are infinite (NaN features).
    mean_step_scale : float in (0, 1], default 1.0
        Factor on the μ step. Proposition 3 prints α/2; 1 is Proposition 1.
    normalize : bool, default True
        Scale each row to unit L2 norm before the Fourier map, as FOAM and NOAM do, so
        that σ = 1 suits rows of any scale. On the project's eight datasets of 2,000 rows
        or more, fed raw, σ = 1 on raw rows ranked at chance (served AUC 0.49-0.70) and on
        unit rows at 0.72-0.99 (bench/RESULTS.md, "Single-learner defaults"). The price: a
        row's norm is lost, and a ranking that depends only on it (a disc around the
        origin) falls to chance. ``normalize=False`` is the dissertation's setting (with
        σ = 100 on z-scored data); the bench's reproduction of its table keeps it.

    State
    -----
    ``theta_`` (m, d) the frequencies (drawn from ``seed`` with the learner's own
    generator), ``mu_`` (2m,), ``sigma_`` (2m, 2m), buffers of mapped rows ``buf_``
    (2, capacity, 2m) with their products ``sbuf_`` = Σψ(b), ``order_``, ``n_seen_``,
    ``rng_``.

    Notes
    -----
    - ψ(x) = (1/√m)·(sin θ_1ᵀx, cos θ_1ᵀx, …, sin θ_mᵀx, cos θ_mᵀx). Eq. 5.2 prints
      √(2/m) and Algorithm 8 no constant; the unbiased 1/√m is used (√(2/m) is the same
      model with C·√2).
    - The μ step is Proposition 1's α, not Proposition 3's α/2: the ½ leaves the per-pair
      problem (5.1) unsolved (review-first-wave §3). ``mean_step_scale=0.5`` reproduces
      the printed form.
    - The text sizes μ as m; the model has 2m entries, one per feature.
    - Buffers hold mapped rows ψ(x) and are visited oldest to newest.
"""


@register
class FCBRFIFO(_FCBR):
    __doc__ = (
        """FCBR with FIFO buffers: CBR on random Fourier features (dissertation ch. 5).

    A nonlinear (Gaussian-kernel) ranker at O(m·d + (2m)² + |B|·m) per event, plus
    O((2m)² + |B|·m) per pair that updates (see :class:`CBRFIFO`'s Notes).

    Examples
    --------
    >>> import numpy as np
    >>> from aucstream import models
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 2)); y = X[:, 0] * X[:, 1] > 0  # not linear
    >>> lrn = models.create("fcbr_fifo", n_features=2, n_components=50, C=0.5)
    >>> lrn = lrn.learn(X[:400], y[:400])
    >>> bool(models.auc(y[400:], lrn.score(X[400:])) > 0.9)
    True
"""
        + _FCBR_DOC_TAIL
    )
    name = "fcbr_fifo"
    policy = FIFO


@register
class FCBRRS(_FCBR):
    __doc__ = (
        """FCBR with reservoir buffers (dissertation Algorithms 7–9).

    Examples
    --------
    >>> import numpy as np
    >>> from aucstream import models
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 2)); y = X[:, 0] * X[:, 1] > 0  # not linear
    >>> lrn = models.create("fcbr_rs", n_features=2, n_components=50, C=0.5)
    >>> lrn = lrn.learn(X[:400], y[:400])
    >>> bool(models.auc(y[400:], lrn.score(X[400:])) > 0.9)
    True
"""
        + _FCBR_DOC_TAIL
    )
    name = "fcbr_rs"
    policy = RESERVOIR
