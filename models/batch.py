"""Batch pairwise squared-hinge AUC maximisation (PRSVM+), run as periodic retrains.

Linear RankSVM (Chapelle & Keerthi's PRSVM+, the dissertation's and seed 002's linear
baseline) and FBAM (dissertation Ch. 3, Algorithm 3: the same solver on random Fourier
features) minimise

    F(w) = ½‖w‖² + (C̃/(n₊n₋))·Σ_{i∈P} Σ_{j∈N} max(0, 1 − wᵀ(ψ(x_i) − ψ(x_j)))²

with one truncated Newton solver (``models._newton``). The papers fit once on a stored
training set; here a learner keeps a window of rows (per-class reservoirs or FIFO rings,
``models._buffers``) and re-solves on it at fixed event counts, warm-started from the
served w. ``fit_batch`` is the papers' one-shot fit, optionally with C̃ chosen on a
20 % holdout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from . import _newton as N
from ._buffers import FIFO, RESERVOIR, grow_sparse, sparse_width
from ._config import MAX_FEATURES_QUADRATIC, MAX_FEATURES_SPARSE
from ._features import draw_rff
from ._kernels import NO_SCORES, csr_scores, dense_scores
from ._nystrom import MAP_PARAMS, NystromLearner
from ._rng import new_state, uniform
from ._validation import Batch, Interval, Options, Param, check_labels, check_matrix
from .auc import auc
from .base import (
    Learner,
    _lookup,
    from_state,
    register,
    resolve_storage,
    scale_param,
    storage_param,
)
from .sam_kernel import fourier_features

__all__ = ["FBAM", "NBAM", "NBAUC", "RankSVM", "fit_batch"]

# Rows kept per class: the papers train on at most 80k rows (dissertation §3.4.1).
MAX_CAPACITY = 40_000
# FBAM's bandwidth from data: over the first this many events, then frozen (dissertation
# §2.3: "the average square distance between the first 80k instances and the mean").
BANDWIDTH_EVENTS = 80_000
# C̃ grid of fit_batch(tune=True) (specs README: {1 … 10^4} on a 20 % holdout).
C_GRID = (1.0, 10.0, 100.0, 1e3, 1e4)
HOLDOUT_FRACTION = 0.2


def _common_params() -> dict[str, Param]:
    return {
        "C": scale_param(1e3, "pair-normalised penalty C̃: F = ½‖w‖² + C̃/(n₊n₋)·Σ sq-hinge"),
        "capacity": Param(Interval(int, 1, MAX_CAPACITY, "both"), 1000,
                          "rows kept per class (the window is at most 2·capacity rows)"),
        "buffer": Param(Options(("reservoir", "fifo")), "reservoir",
                        "per-class reservoirs (a uniform sample) or FIFO rings (the latest)"),
        "retrain_every": Param(Interval(int, 0, 10_000_000, "both"), 0,
                               "events between solves; 0 = 2·capacity/10"),
    }


def _due_offsets(t0: int, n: int, every: int) -> list[int]:
    """Batch positions k (1..n) after which a solve is due: event t = t0 + k with
    t % every == 0, or t a power of two below ``every``."""
    due = set()
    p = 1
    while p < every:
        if t0 < p <= t0 + n:
            due.add(p - t0)
        p *= 2
    m = (t0 // every + 1) * every
    while m <= t0 + n:
        due.add(m - t0)
        m += every
    return sorted(due)


def _run_schedule(n: int, t0: int, every: int, segment: Callable[[int, int], None],
                  solve: Callable[[], None]) -> None:
    """Events t0 + 1 … t0 + n: ``segment(a, b)`` for the events between two due solves
    (score them with one w, buffer them), ``solve()`` at each due point."""
    start = 0
    for end in _due_offsets(t0, n, every):
        segment(start, end)
        solve()
        start = end
    segment(start, n)


def _solve_dense(s: dict[str, np.ndarray], name: str, C: float, Z: np.ndarray,
                 pos: np.ndarray) -> None:
    """Solve on dense rows Z from s['w_'] (in place) and record it in fit_ / obj_."""
    info = N.solve(N.dense_design(Z), pos, C, s["w_"])
    _record(s, name, info)


def _record(s: dict[str, np.ndarray], name: str, info: N.SolveInfo) -> None:
    if info.status == N.NONFINITE:
        raise FloatingPointError(f"{name}: the solve overflowed")
    s["fit_"][:] = (s["fit_"][0] + 1, info.status, info.newton_iters, info.cg_iters)
    s["obj_"][0] = info.objective


def _check_fit(name: str, fit: np.ndarray) -> None:
    if (fit < 0).any() or fit[1] > N.NO_PAIRS:
        raise ValueError(f"The {name} state array 'fit_' is out of range.")


def _solve_stats(s: dict[str, np.ndarray]) -> dict[str, Any]:
    fit = s["fit_"]
    status = {N.CONVERGED: "converged", N.MAX_ITER: "max_iter",
              N.NONFINITE: "nonfinite", N.NO_PAIRS: "no_pairs"}
    return {"solves": int(fit[0]),
            "status": status[int(fit[1])] if fit[0] else None,
            "newton_iters": int(fit[2]), "cg_iters": int(fit[3]),
            "objective": float(s["obj_"][0])}


def _rows(batch: Batch, a: int, b: int) -> Batch:
    """Rows a..b−1 of a batch (views, CSR rebased to start at 0)."""
    if batch.dense is not None:
        return Batch(n=b - a, dense=batch.dense[a:b])
    lo, hi = batch.indptr[a], batch.indptr[b]
    return Batch(n=b - a, indptr=batch.indptr[a:b + 1] - lo, indices=batch.indices[lo:hi],
                 values=batch.values[lo:hi])


class _Retrained(Learner):
    """Shared machinery: buffers of raw rows, solves at fixed event counts."""

    scoring_keys: ClassVar[tuple[str, ...]] = ("w_",)
    input_keys = frozenset({"buf_", "bval_"})
    variable_shape = frozenset({"bidx_", "bval_"})

    # ------------------------------------------------------------- hooks
    @property
    def _dim(self) -> int:
        """Length of w."""
        raise NotImplementedError

    @property
    def _sparse(self) -> bool:
        return self.params.get("storage") == "sparse"

    def _resolve_params(self) -> None:
        resolve_storage(self.params, self.n_features)
        if self.params["retrain_every"] == 0:
            self.params["retrain_every"] = max(1, 2 * self.params["capacity"] // 10)

    def _allocate(self) -> dict[str, np.ndarray]:
        cap = self.params["capacity"]
        state = {
            "w_": np.zeros(self._dim),
            "order_": np.zeros((2, cap), np.int64),
            "n_seen_": np.zeros(2, np.int64),
            "rng_": new_state(self.seed),
            "fit_": np.zeros(4, np.int64),
            "obj_": np.zeros(1),
        }
        if self._sparse:
            state["bidx_"] = np.zeros((2, cap, 1), np.int64)
            state["bval_"] = np.zeros((2, cap, 1))
            state["bnnz_"] = np.zeros((2, cap), np.int64)
        else:
            state["buf_"] = np.zeros((2, cap, self.n_features))
        return state

    # ------------------------------------------------------------- learning
    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        if self._sparse:
            batch = Batch(batch.n, None, *self._csr_rows(batch))
            longest = int(np.diff(batch.indptr).max())
            width = sparse_width(longest, s["bidx_"].shape[2])
            s["bidx_"], s["bval_"] = grow_sparse(s["bidx_"], s["bval_"], width)

        def segment(a: int, b: int) -> None:  # events a..b−1: score (one w), then buffer
            if b > a:
                if prior.shape[0]:
                    prior[a:b] = self._score(_rows(batch, a, b))
                self._admit(batch, y, a, b)

        _run_schedule(batch.n, int(s["n_seen_"].sum()), self.params["retrain_every"],
                      segment, self._retrain)

    def _admit(self, batch: Batch, y: np.ndarray, a: int, b: int) -> None:
        s = self._state
        policy = RESERVOIR if self.params["buffer"] == "reservoir" else FIFO
        if self._sparse:
            N.admit_csr(batch.indptr, batch.indices, batch.values, y, a, b, s["bidx_"],
                        s["bval_"], s["bnnz_"], s["order_"], s["n_seen_"], s["rng_"], policy)
        else:
            N.admit_dense(self._dense_rows(_rows(batch, a, b)), y[a:b], 0, b - a, s["buf_"],
                          s["order_"], s["n_seen_"], s["rng_"], policy)

    def _retrain(self, warm: np.ndarray | None = None) -> None:
        """Solve on the window from the served w (or ``warm``); needs both classes."""
        s = self._state
        if s["n_seen_"].min() == 0:
            return
        if warm is not None:
            s["w_"][:] = warm
        if self._sparse:
            indptr, local, values, pos, cols = N.window_csr(s["bidx_"], s["bval_"], s["bnnz_"],
                                                            s["order_"], s["n_seen_"])
            w = s["w_"][cols]
            info = N.solve(N.csr_design(indptr, local, values), pos, self.params["C"], w)
            if info.status != N.NONFINITE:
                self._keep_whole("w_")  # an O(d) rewrite: the journal copies w whole
                s["w_"][:] = 0.0
                s["w_"][cols] = w
            _record(s, self.name, info)
        else:
            X, pos = N.window_dense(s["buf_"], s["order_"], s["n_seen_"])
            _solve_dense(s, self.name, self.params["C"], self._design_rows(X), pos)

    def _design_rows(self, X: np.ndarray) -> np.ndarray:
        """The solver's rows for raw window rows X (the feature map, if any)."""
        return X

    # ------------------------------------------------------------- scoring
    def _score(self, batch: Batch) -> np.ndarray:
        w = self._state["w_"]
        if batch.dense is None and self._sparse:
            return csr_scores(batch.indptr, batch.indices, batch.values, w)
        return dense_scores(self._dense_rows(batch), w)

    def _journaled(self) -> tuple[str, ...]:
        return ("w_",) if self._sparse else ()

    def _journal_columns(self, batch: Batch) -> np.ndarray:
        # w changes only in a solve, which copies it whole first (``_keep_whole``).
        return np.zeros(0, np.int64)

    def _after_restore(self) -> None:
        _check_fit(self.name, self._state["fit_"])

    # ------------------------------------------------------------- fit_batch
    def _fit_all(self, batch: Batch, y: np.ndarray, warm: np.ndarray | None) -> None:
        """Buffer every row (no intermediate solves), then solve once."""
        s = self._state
        if self._sparse:
            batch = Batch(batch.n, None, *self._csr_rows(batch))
            longest = int(np.diff(batch.indptr).max()) if batch.n else 1
            width = sparse_width(longest, s["bidx_"].shape[2])
            s["bidx_"], s["bval_"] = grow_sparse(s["bidx_"], s["bval_"], width)
        self._admit(batch, y, 0, batch.n)
        self._retrain(warm)
        if not np.isfinite(s["w_"]).all() or not np.isfinite(s["obj_"]).all():
            raise FloatingPointError(f"{self.name}: the solve overflowed")

    @property
    def solve_stats(self) -> dict[str, Any]:
        """The last solve: how many solves so far, its status, Newton and CG iterations,
        and the objective F at the served w."""
        return _solve_stats(self._state)


_DOC_PARAMS = """
    C : float in [1e-6, 1e6], default 1e3
        Pair-normalised penalty C̃: the printed objective ½‖w‖² + C·Σ (eq. 3.1) with
        C = C̃/(n₊n₋), so that one value serves any window size (specs README; Chapelle's
        ``ranksvm.m`` C is 2C). The papers tune C ∈ 2^[−15:10] unnormalised;
        ``fit_batch(..., tune=True)`` picks C̃ ∈ {1, 10, …, 10⁴} on a 20 % holdout. The
        default is the README's untuned value (at most 0.0062 AUC below the best C̃ on
        its four test sets). Multiplying the features by s is C̃·s².
    capacity : int in [1, 40000], default 1000
        Rows kept per class, so a window of at most 2·capacity rows (the papers train
        on at most 80k). A solve costs O(window·(D + log window)) per Hessian product.
    buffer : {'reservoir', 'fifo'}, default 'reservoir'
        Per-class reservoirs (Algorithm R: a uniform sample of each class so far) or
        per-class FIFO rings (each class's latest rows, for drift).
    retrain_every : int in [0, 10^7], default 0
        A solve runs after event t when t is a multiple of it, and at t = 1, 2, 4, …
        below it (so that a young model is served early), once both classes have been
        seen. 0 means 2·capacity/10: every ~10 % of a full window (specs README).
"""

_DOC_STATE = """
    ``w_`` (D,) the served weights; the window: dense rows ``buf_`` (2, capacity, d),
    or sparse rows ``bidx_`` / ``bval_`` (2, capacity, width) and ``bnnz_`` (2, capacity)
    with width a power of two ≥ the longest row seen; ``order_`` (2, capacity) the slots
    oldest to newest; ``n_seen_`` (negatives, positives), so t = n₋ + n₊; ``rng_`` the
    generator state (reservoir draws); ``fit_`` int64 (solves so far, the last one's
    status, Newton iterations, CG iterations; see ``solve_stats``) and ``obj_`` (1,)
    F at the served w on its window."""

_DOC_NOTES = """
    Decisions where the papers leave a choice or are silent (specs README, second
    table; review-second-wave §5):

    - One solver, one convention for the family: F = ½‖w‖² + (C̃/(n₊n₋))·Σ squared
      hinge, the printed eq. 3.1 with the pair-normalised C̃ (Chapelle's C is 2C).
    - Truncated Newton as Chapelle's ``ranksvm.m`` orders it: at w, CG on H s = −g
      from s = 0 (relative residual 1e-3, at most 100 iterations; the paper says CG,
      ``ranksvm.m`` uses minres), an exact line search, w ← w + t·s, and stop after
      the step whose Newton decrement −sᵀg was below 1e-4·F(w), or after 50 steps.
      The paper's unit step w ← w + s is replaced by the line search (it is
      non-monotone at large C). The line search is a bracketed 1-D Newton on the
      piecewise-linear φ'(t), stopped when φ'²/φ'' ≤ 1e-12·F(w) (``models._newton``).
    - The loss, gradient and Hessian products are PRSVM+'s sorted sums (S0 L1204–1275),
      never the n₊n₋ pairs, with the printed factors restored (∂L/∂ŷ = 2(αŷ − β),
      Hv = v + 2C·Xᵀz). The scores are centred first (exact; it removes the expanded
      sums' cancellation under a common offset). A pair is active iff its slack is
      strictly positive (Chapelle's ``out > 0``); at a slack of exactly 0 the rounding
      of the centring may decide, which changes only the generalised Hessian (any
      choice is one), never F or ∇F.
    - Streaming (not in the papers, which fit once): the window is per-class buffers
      of raw rows; a solve runs inside ``learn`` after event t when t is a multiple of
      ``retrain_every`` or a power of two below it, once both classes are buffered, on
      the window (negatives then positives, each oldest first), warm-started from the
      served w. So the state never depends on how the stream is cut into batches or
      whether it is scored; up to ``retrain_every`` − 1 recent events wait for the next
      solve. Scores are wᵀψ(x) with the last solve's w (0 before the first).
    - Before a solve, w_j = 0 on every column that is zero in every window row: F
      separates there into ½w_j², so 0 is exact, and from the paper's w = 0 no iterate
      ever leaves it.
    - A solve that overflows (rows of scale ~1e155 and above) raises inside ``learn``,
      which refuses the batch whole (``models.NonFiniteError``). A solve that takes 50
      Newton steps serves its last iterate (``solve_stats['status'] == 'max_iter'``).
"""


@register
class RankSVM(_Retrained):
    __doc__ = (
        """Linear RankSVM by PRSVM+ (Chapelle & Keerthi 2010), the papers' batch baseline.

    Dissertation eq. 3.1 with ψ(x) = x (Table 3.2's "Linear RankSVM") and seed 002's
    eq. (3) with p = 2, solved by the truncated Newton of Algorithm 1 in PRSVM+'s pair-free
    form (S0 L1204–1305), on a window of the stream (see the module docstring). Dense or
    sparse (hashed) rows; scores are wᵀx.

    Parameters
    ----------
    n_features : int
        Input dimension d, up to 2^22; with sparse storage a solve works on the
        window's columns only and costs O(window nnz) per Hessian product, plus O(d)
        once per solve to write w back.
    seed : int
        Seed of the generator behind the reservoir draws."""
        + _DOC_PARAMS
        + """    storage : {'auto', 'dense', 'sparse'}, default 'auto'
        Buffer layout: dense rows, or sorted (index, value) rows. 'auto' is sparse above
        4096 features. Either accepts dense or CSR input.

    State
    -----"""
        + _DOC_STATE
        + """

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.create("rank_svm", n_features=30).learn(X[::2], y[::2])
    >>> lrn.solve_stats["status"]
    'converged'
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.984

    Notes
    -----"""
        + _DOC_NOTES
        + """    - Sparse storage solves on the window's distinct columns (the rows compressed
      to them) and writes w back with zeros elsewhere: the same algorithm as the
      dense layout (the zeroed columns are the dead ones above), with sums in a
      different order (agreement to rounding, not to the bit). Writing w back is O(d)
      per solve (about 1 ms at 2^20).
    - Speed (``/tmp``-run benchmarks, one core): a9a's 32,561 × 123 rows in one
      ``fit_batch`` solve at C̃ = 10³ take 1.4 s dense, 0.36 s as CSR; online on
      d = 54 with the defaults, about 33k events/s.
"""
    )

    name = "rank_svm"
    max_features = MAX_FEATURES_SPARSE
    accepts_sparse = True
    param_table: ClassVar[dict[str, Param]] = {**_common_params(), "storage": storage_param()}

    @property
    def _dim(self) -> int:
        return self.n_features


@register
class FBAM(_Retrained):
    __doc__ = (
        """FBAM: batch AUC maximisation on random Fourier features (dissertation Ch. 3,
    Algorithm 3).

    ψ(x) = √(2/m)·[cos(θ_jᵀx + φ_j)]_{j=1..m} with θ_j ~ N(0, (2/b)·I) and
    φ_j ~ U[0, 2π) (variant A, §1.4), so ψ(x)ᵀψ(y) ≈ exp(−‖x − y‖²/b), the kernel of
    the Nyström learners (specs README); then PRSVM+ on ψ (eq. 3.1), solved by the
    truncated Newton of Algorithm 1 on a window of the stream. Scores are wᵀψ(x).

    Parameters
    ----------
    n_features : int
        Input dimension d (at most 4096: θ is stored, m × d floats).
    seed : int
        Seed of the generator that draws the frequencies and phases, then drives the
        reservoirs."""
        + _DOC_PARAMS
        + """    n_components : int in [1, 4096], default 1600
        Fourier features m (the dissertation's 1600).
    bandwidth : float in [0, 1e6], default 0
        b of the kernel exp(−‖x − y‖²/b). 0: from the data, b = mean‖x − x̄‖² over the
        first 80 000 events (the dissertation's rule; see Notes), as it stands at each
        solve. A positive value fixes b.

    State
    -----
    ``w_`` (m,) the served weights; ``freq_`` (m, d) standard normal draws
    (θ = freq·√(2/b)) and ``phase_`` (m,) uniform on [0, 2π), drawn from ``seed`` at
    construction, then fixed; ``bw_`` (1,) the b of the served w (0 before the first
    solve unless ``bandwidth`` is set); ``moments_`` (2, d) the running mean and sums of
    squared deviations of the first 80 000 events (Welford; unused with a fixed
    ``bandwidth``); the window of raw rows ``buf_``
    (2, capacity, d) with ``order_`` (2, capacity) the slots oldest to newest;
    ``n_seen_``, ``rng_``, ``fit_`` and ``obj_`` as for ``rank_svm``.

    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.create("fbam", n_features=30, n_components=400).learn(X[::2], y[::2])
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.989

    Notes
    -----"""
        + _DOC_NOTES
        + """    - The map is variant A, cos with a phase and √(2/m) (specs README), built with
      ``models._features.rff_map`` on [x, 1] and [θ, φ] (its cosine columns). θ is
      N(0, (2/b)·I): the same Gaussian kernel as the Nyström map, whose bandwidth is
      b = mean squared distance to the mean (dissertation §2.3; the "γ ∈ {1, 10, 100}"
      of Table 3.2 has no stated parametrisation, review-second-wave §3). FBAM's
      √(2/m) against 1/√m is a factor 2 in C̃.
    - b from data, the dissertation's rule (§2.3, "the average square distance between
      the first 80k instances and the mean, which is computed over these instances"):
      exact running moments (Welford) of every event up to the 80 000th, not only of
      the window (a class-balanced sample), so b is the population's; each solve uses b
      as it stands then, and stores it with the w it serves (``bw_``); from event
      80 000 on it is frozen, as the Nyström map's is (specs README: the same kernel).
      θ keeps its draws and only rescales, so a warm start across a change of b is
      still a good start. b = 0 (every event so far equal) keeps the previous b (1
      before any); an overflowing moment refuses the batch like any overflow.
    - Cost: every solve maps the whole window (O(window·m·d)), then solves in
      dimension m: with the defaults (2000 rows, m = 1600, d = 54) about 0.3 s per
      solve, every 200 events (~440 events/s).
    - d is capped at 4096 (θ is m × d floats, 52 MB at the cap with m = 1600).
"""
    )

    name = "fbam"
    max_features = MAX_FEATURES_QUADRATIC
    scoring_keys = ("w_", "freq_", "phase_", "bw_")
    fixed_keys = frozenset({"freq_", "phase_"})
    param_table: ClassVar[dict[str, Param]] = {
        **_common_params(),
        "n_components": Param(Interval(int, 1, 4096, "both"), 1600, "Fourier features m"),
        "bandwidth": Param(Interval(float, 0.0, 1e6, "both"), 0.0,
                           "kernel b of exp(−‖x − y‖²/b); 0 = from the first 80 000 events"),
    }

    @property
    def _dim(self) -> int:
        return self.params["n_components"]

    def _allocate(self) -> dict[str, np.ndarray]:
        state = super()._allocate()
        m = self.params["n_components"]
        rng = state["rng_"]
        freq = draw_rff(rng, m, self.n_features, 1.0)
        phase = np.empty(m)
        for j in range(m):
            phase[j] = 2.0 * math.pi * uniform(rng)
        state.update(freq_=freq, phase_=phase, bw_=np.array([self.params["bandwidth"]]),
                     moments_=np.zeros((2, self.n_features)))
        return state

    def _features(self, X: np.ndarray, b: float) -> np.ndarray:
        """ψ of the rows under b: the cosine columns of ``rff_map`` on [x, 1] and [θ, φ],
        bit for bit, by FASAM's kernel (no sines formed; θ feature-major, kept per b)."""
        s = self._state
        m = self.params["n_components"]
        cache = getattr(self, "_theta_cache", None)
        if cache is None or cache[0] != b or cache[1] is not s["freq_"]:
            theta_t = np.ascontiguousarray((s["freq_"] * math.sqrt(2.0 / b)).T)
            cache = self._theta_cache = (b, s["freq_"], theta_t)
        return fourier_features(np.ascontiguousarray(X), cache[2], s["phase_"],
                                math.sqrt(2.0 / m))

    def _admit(self, batch: Batch, y: np.ndarray, a: int, b: int) -> None:
        s = self._state
        t0 = int(s["n_seen_"].sum())
        if self.params["bandwidth"] == 0.0 and t0 < BANDWIDTH_EVENTS:
            N.spread_moments(self._dense_rows(_rows(batch, a, b)), t0, BANDWIDTH_EVENTS,
                             s["moments_"])
        super()._admit(batch, y, a, b)

    def _design_rows(self, X: np.ndarray) -> np.ndarray:
        s = self._state
        b = self.params["bandwidth"]
        if b == 0.0:
            n = min(int(s["n_seen_"].sum()), BANDWIDTH_EVENTS)
            with np.errstate(over="ignore"):  # each column finite, their sum may not be
                b = float(s["moments_"][1].sum()) / n
            if not math.isfinite(b):
                raise FloatingPointError(f"{self.name}: the bandwidth overflowed")
            if b == 0.0:
                b = s["bw_"][0] if s["bw_"][0] > 0.0 else 1.0
        s["bw_"][0] = b
        return self._features(X, b)

    def _score(self, batch: Batch) -> np.ndarray:
        s = self._state
        b = s["bw_"][0]
        if b == 0.0:  # before the first solve (w = 0)
            return np.zeros(batch.n)
        return dense_scores(self._features(self._dense_rows(batch), b), s["w_"])


# ================================================================= NBAM / NBAUC
_NBAM_DOC = """
    ψ(x) = Σ_r^{-1/2} U_rᵀ k_x over m k-means++ landmarks (the shared map,
    ``models._nystrom``: b = mean‖x − x̄‖² over the warm-up window, κ = exp(−‖x − y‖²/b),
    eigenvalues above 1e-6·σ_1), then PRSVM+ on ψ (eq. 3.1), solved by the truncated
    Newton of Algorithm 1 on a window of mapped rows. Scores are wᵀψ(x) (0 during the
    warm-up).

    Parameters
    ----------
    n_features : int
        Input dimension d, up to 1024 (dense input only; see ``models._nystrom``).
    seed : int
        Seed of the generator that draws the k-means++ seeds, then the reservoirs."""

_NBAM_TAIL = """    n_components : int in [1, 4096], default 1600
        m, the landmarks (the papers' 1600).
    warmup : int in [1, 80000], default 16000
        W, the events on which the map is fitted (specs README: W ≥ 10·m, at most 80k,
        the papers' "first 80k instances"); at least n_components. ``fit_batch`` fits the
        map on all its rows (up to 80k) and m = min(1600, W/10) unless given.

    State
    -----
    The map (``models._nystrom.NystromLearner``): ``window_`` (W, d), ``wlabel_`` (W,),
    ``warm_`` (2,), ``rank_`` (1,), ``bandwidth_`` (1,), ``landmarks_`` (m, d), ``proj_``
    (m, r). The learner, on ψ: ``w_`` (r,), the window of mapped rows ``buf_``
    (2, capacity, r) with ``order_`` (2, capacity) oldest to newest, ``n_seen_``
    (negatives, positives; 0 until the warm-up is replayed), ``rng_`` (k-means++, then
    the reservoirs), ``fit_`` and ``obj_`` as for ``rank_svm``.
"""

_NBAM_NOTES = """
    - The map, the warm-up and its replay are the shared ones (``models._nystrom``,
      specs README): the first W events are kept raw (scores 0), the map is fitted and
      frozen at the W-th, and the window is replayed in order into the buffers; the
      replay admits its rows without the scheduled solves, then one solve runs on the
      window it leaves (the papers' batch fit; only the last of the replay's solves
      would have been served). The schedule then goes on from t = W.
    - The window holds mapped rows (r floats each: 2·capacity·r·8 B, 26 MB at the
      defaults), so a solve never re-maps (mapping costs O(m·d + m·r) per row).
"""


@register
class NBAM(NystromLearner):
    __doc__ = (
        """NBAM: batch AUC maximisation on the k-means Nyström map (dissertation Ch. 3,
    Algorithm 2).
"""
        + _NBAM_DOC
        + _DOC_PARAMS
        + _NBAM_TAIL
        + """
    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.create("nbam", n_features=30, n_components=20, warmup=200)
    >>> lrn = lrn.learn(X[::2], y[::2])
    >>> lrn.rank, lrn.solve_stats["solves"]  # the map at event 200, then one solve
    (20, 1)
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.988

    Notes
    -----"""
        + _DOC_NOTES
        + _NBAM_NOTES
    )

    name = "nbam"
    model_keys = frozenset({"w_", "buf_"})
    input_keys = NystromLearner.input_keys | {"buf_"}  # rows of a finite, bounded map
    scoring_keys = ("rank_", "bandwidth_", "landmarks_", "proj_", "w_")
    param_table: ClassVar[dict[str, Param]] = {**_common_params(), **MAP_PARAMS}
    _replaying = False  # True while the warm-up window is replayed (no solves)

    def _resolve_params(self) -> None:
        super()._resolve_params()
        if self.params["retrain_every"] == 0:
            self.params["retrain_every"] = max(1, 2 * self.params["capacity"] // 10)

    def _allocate_model(self, rank: int) -> dict[str, np.ndarray]:
        cap = self.params["capacity"]
        return {
            "w_": np.zeros(rank),
            "buf_": np.zeros((2, cap, rank)),
            "order_": np.zeros((2, cap), np.int64),
            "n_seen_": np.zeros(2, np.int64),
            "rng_": new_state(self.seed),
            "fit_": np.zeros(4, np.int64),
            "obj_": np.zeros(1),
        }

    def _policy(self) -> int:
        return RESERVOIR if self.params["buffer"] == "reservoir" else FIFO

    def _learn_mapped(self, Z: np.ndarray, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        if self._replaying:
            N.admit_dense(Z, y, 0, Z.shape[0], s["buf_"], s["order_"], s["n_seen_"],
                          s["rng_"], self._policy())
            return

        def segment(a: int, b: int) -> None:
            if b > a:
                if prior.shape[0]:
                    prior[a:b] = dense_scores(Z[a:b], s["w_"])
                N.admit_dense(Z, y, a, b, s["buf_"], s["order_"], s["n_seen_"], s["rng_"],
                              self._policy())

        _run_schedule(Z.shape[0], int(s["n_seen_"].sum()), self.params["retrain_every"],
                      segment, self._retrain)

    def _switch(self) -> None:
        self._replaying = True
        try:
            super()._switch()
        finally:
            self._replaying = False
        self._retrain()

    def _retrain(self, warm: np.ndarray | None = None) -> None:
        s = self._state
        if s["rank_"][0] == 0 or s["n_seen_"].min() == 0:
            return
        if warm is not None:
            s["w_"][:] = warm
        Z, pos = N.window_dense(s["buf_"], s["order_"], s["n_seen_"])
        _solve_dense(s, self.name, self.params["C"], Z, pos)

    def _served(self, state: dict[str, np.ndarray]) -> np.ndarray:
        return state["w_"]

    def _after_restore(self) -> None:
        super()._after_restore()
        _check_fit(self.name, self._state["fit_"])

    def _fit_all(self, batch: Batch, y: np.ndarray, warm: np.ndarray | None) -> None:
        """The first W rows through the warm-up (map, replay, one solve); the rest, if
        any, buffered without solves; then one solve."""
        W = self.params["warmup"]
        if batch.n < W:
            raise ValueError(f"fit_batch: {self.name} fits its map on the first warmup = {W} "
                             f"rows; got {batch.n}.")
        X = batch.dense
        self._learn(Batch(n=min(W, batch.n), dense=X[:W]), y[:W], NO_SCORES)
        if batch.n > W:
            self._replaying = True
            try:
                self._learn_rows(X[W:], y[W:], NO_SCORES)
            finally:
                self._replaying = False
            self._retrain(warm)
        elif warm is not None:
            self._retrain(warm)

    @property
    def solve_stats(self) -> dict[str, Any]:
        """As :attr:`RankSVM.solve_stats`."""
        return _solve_stats(self._state)


@register
class NBAUC(NBAM):
    __doc__ = (
        """NBAUC: batch nonlinear AUC maximisation on k-means Nyström features (Khalid,
    Ray and Chitsaz, ECML-PKDD 2018, Algorithms 1 and 2).

    The same method as NBAM (review-second-wave §5: "NBAM and NBAUC are the same
    method"), under seed 002's name, so that each paper's tables name their learner:
    eq. (5) with p = 2 on Algorithm 1's embedding, solved by Algorithm 2 (truncated
    Newton; the paper's unit step replaced by an exact line search). The paper prints
    Chapelle's gradient w − C·X̃ᵀAᵀD, the (C/2) convention; C̃ here is pair-normalised
    in the printed objective's convention (Chapelle's C = 2C̃/(n₊n₋)).
"""
        + _NBAM_DOC
        + _DOC_PARAMS
        + _NBAM_TAIL
        + """
    Examples
    --------
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.fit_batch("nbauc", X[::2], y[::2])
    >>> lrn.params["n_components"], lrn.rank
    (28, 28)
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.99

    Notes
    -----"""
        + _DOC_NOTES
        + _NBAM_NOTES
    )

    name = "nbauc"


# ====================================================================== fit_batch
def fit_batch(name: str, X: Any, y: Any, *, seed: int = 0, tune: bool = False,
              n_features: int | None = None, **params: Any) -> Learner:
    """Fit a batch learner (``rank_svm``, ``fbam``, ``nbam``, ``nbauc``) on (X, y) in one
    solve: the papers' batch fit, returned as an ordinary learner that scores, saves, and
    goes on learning online.

    Every row goes into the learner's buffers (``capacity`` defaults to the larger
    class, at most 40 000: beyond that each class is a reservoir sample, the papers'
    "at most 80k instances, randomly selected"), then one truncated Newton solve runs
    from w = 0. ``retrain_every`` defaults to a tenth of the rows held. The Nyström
    learners fit their map on the first min(n, 80 000) rows (``warmup``), with
    m = min(1600, warmup/10) landmarks unless ``n_components`` is given (specs README).
    ``n_features`` is taken from ``X.shape`` unless given (CSR triples have no shape).

    With ``tune=True`` (and no ``C``), C̃ is chosen from {1, 10, 100, 10³, 10⁴} by the
    AUC on a stratified 20 % holdout (drawn with ``seed``): the other 80 % are fitted
    once (one map, one window), each C̃ re-solved on them warm-started from the previous
    one, ties going to the smaller C̃; then all rows are fitted with the chosen C̃
    (from its solution, where the feature space is the same: not across two Nyström
    maps) (specs README).

    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> lrn = models.fit_batch("rank_svm", X[::2], y[::2], tune=True)
    >>> lrn.params["C"], lrn.solve_stats["status"]
    (1.0, 'converged')
    >>> print(round(models.auc(y[1::2], lrn.score(X[1::2])), 3))
    0.991
    """
    cls = _lookup(name)
    if not issubclass(cls, _Retrained | NBAM):
        raise ValueError(f"fit_batch fits the batch learners (rank_svm, fbam, nbam, nbauc); "
                         f"got {name!r}.")
    if not isinstance(tune, bool):
        raise ValueError(f"fit_batch: tune must be a bool; got {tune!r}.")
    if tune and "C" in params:
        raise ValueError("fit_batch: pass either C or tune=True, not both.")
    if n_features is None:
        shape = getattr(X, "shape", None)
        if shape is None or len(shape) != 2:
            raise ValueError("fit_batch: X must be 2-D (or pass n_features with a CSR "
                             "triple).")
        n_features = int(shape[1])
    if hasattr(X, "shape"):
        rows = X.shape[0]
    else:  # a CSR triple (indptr, indices, values), or a list of rows
        rows = len(X[0]) - 1 if isinstance(X, tuple) and len(X) == 3 else len(X)
    # parameter errors before data errors
    cls(n_features=n_features, seed=seed, **_map_defaults(cls, max(int(rows), 1), params))
    batch = check_matrix(name, X, n_features, cls.accepts_sparse)
    labels = check_labels(name, y, batch.n)
    n_pos = int((labels > 0).sum())
    n_neg = batch.n - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"fit_batch: {name} needs both classes; got {n_pos} positive and "
                         f"{n_neg} negative rows.")
    params = dict(params)
    params.setdefault("capacity", min(max(n_pos, n_neg), MAX_CAPACITY))
    held = min(n_pos, params["capacity"]) + min(n_neg, params["capacity"])
    params.setdefault("retrain_every", max(1, held // 10))
    warm = None
    if tune:
        params["C"], warm = _tune_C(cls, n_features, batch, labels, seed, params)
    lrn = cls(n_features=n_features, seed=seed, **_map_defaults(cls, batch.n, params))
    lrn._fit_all(batch, labels, None if issubclass(cls, NBAM) else warm)
    return lrn


def _map_defaults(cls: type[Learner], n: int, params: dict[str, Any]) -> dict[str, Any]:
    """The Nyström learners' warm-up (all rows, at most 80k) and landmarks for n rows."""
    if not issubclass(cls, NBAM):
        return params
    out = dict(params)
    out.setdefault("warmup", min(n, MAP_PARAMS["warmup"].rule.high))
    out.setdefault("n_components", min(MAP_PARAMS["n_components"].default,
                                       max(1, out["warmup"] // 10)))
    return out


def _take(batch: Batch, rows: np.ndarray) -> Batch:
    if batch.dense is not None:
        return Batch(n=rows.shape[0], dense=np.ascontiguousarray(batch.dense[rows]))
    lengths = np.diff(batch.indptr)[rows]
    indptr = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    pick = np.concatenate([np.arange(batch.indptr[r], batch.indptr[r + 1], dtype=np.int64)
                           for r in rows])
    return Batch(n=rows.shape[0], indptr=indptr, indices=batch.indices[pick],
                 values=batch.values[pick])


def _tune_C(cls: type[Learner], n_features: int, batch: Batch, y: np.ndarray, seed: int,
            params: dict[str, Any]) -> tuple[float, np.ndarray]:
    """C̃ by holdout AUC over C_GRID: one fit of the training part, then each C̃
    re-solved on its window, ascending, each from the previous solution."""
    rng = np.random.default_rng(seed)
    hold = np.zeros(batch.n, np.bool_)
    for c in (-1.0, 1.0):
        idx = np.flatnonzero(y == c)
        k = round(HOLDOUT_FRACTION * idx.shape[0])
        if k < 1 or k >= idx.shape[0]:
            raise ValueError("fit_batch: tune=True needs at least 2 rows of each class.")
        hold[rng.permutation(idx)[:k]] = True
    train, test = np.flatnonzero(~hold), np.flatnonzero(hold)
    tr, te = _take(batch, train), _take(batch, test)
    truth = (y[test] > 0).astype(np.int64)
    lrn = cls(n_features=n_features, seed=seed,
              **_map_defaults(cls, train.shape[0], {**params, "C": C_GRID[0]}))
    lrn._fit_all(tr, y[train], None)
    best: tuple[float, float, np.ndarray] = (-1.0, C_GRID[0], lrn._state["w_"].copy())
    for k, C in enumerate(C_GRID):
        if k:
            lrn = from_state({**lrn.get_state(), "C": C})
            lrn._retrain()
        score = auc(truth, lrn._score(te))
        if score > best[0]:
            best = (score, C, lrn._state["w_"].copy())
    return best[1], best[2]
