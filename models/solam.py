"""SOLAM: stochastic online AUC maximisation (Ying, Wen, Lyu, NIPS 2016).

The pairwise square loss E[(1 − wᵀ(x − x'))² | y = +1, y' = −1] is rewritten as a
saddle-point problem over (w, a, b) and a dual scalar α (Theorem 1, eq. 6), which needs
no pairs and no buffers: each event takes one projected primal-descent / dual-ascent
step in O(d), or in O(nnz) on sparse rows, and the served model is the γ-weighted
average of the iterates.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from . import _solam_kernels as K
from ._config import MAX_FEATURES_SPARSE, SOLAM_MAX_RADIUS, SOLAM_MIN_SCALE
from ._kernels import NO_SCORES
from ._validation import Batch, Options, Param
from .base import Learner, register, resolve_storage, scale_param, storage_param

__all__ = ["SOLAM"]


@register
class SOLAM(Learner):
    """SOLAM, the paper's Table 1 with γ_t = ζ/√t (Corollary 1).

    Per event z_t = (x_t, y_t), with t counting every event learned so far (a global
    counter) and p̂_t = n₊/t including y_t (eq. 12): compute the gradient of F̂_t (eq. 12)
    at the current (w, a, b, α); add γ_t·(w, a, b, α) to the weighted averages (step 7,
    the pre-update iterate); descend on (w, a, b) and ascend on α, both from the old
    iterate (steps 4–5); project w onto ‖w‖ ≤ R, a and b onto [−Rκ, Rκ], α onto
    [−2Rκ, 2Rκ] (eq. 14). Scores are w̄ᵀx (or wᵀx with ``serve='last'``).

    Parameters
    ----------
    n_features : int
        Input dimension d, up to 2^22; with sparse storage the cost per event follows
        the non-zeros of the row.
    seed : int
        Unused (SOLAM is deterministic); kept for a uniform API.
    zeta : float in [1e-6, 1e6], default 1.0
        Step constant ζ of γ_t = ζ/√t. The paper cross-validates ζ ∈ {1, 10, …, 100};
        a stream has nothing to cross-validate on, so the default is the grid point that
        does best on data it was not chosen on (see Notes): 1, the paper's smallest.
        Sparse storage overflows u from ζ ≈ 1e152 (the step enters ‖w‖² squared); the
        range keeps the grid well inside.
    R : float in [1e-6, 1e8], default 10.0
        Radius of the w-ball; also scales the boxes of a, b (Rκ) and α (2Rκ). The paper
        cross-validates R ∈ 10^[−1:5], inside the range; with ``normalize=False`` R from
        about 1e144 overflows the state on rows of scale 1e12 (measured). At ζ = 1 on
        unit rows the ball rarely binds: R = 10, 100 and 1e5 serve identical scores on
        every bundled dataset.
    normalize : bool, default True
        Scale every row to unit L2 norm, at learn and at score time alike (all-zero rows
        are left as they are), so that κ = sup‖x‖ = 1, as in the authors' code. With
        ``False``, κ is the largest row norm seen so far (it never shrinks).
    serve : {'average', 'last'}, default 'average'
        Score with the γ-weighted average w̄ (the paper's output) or with the last
        iterate w (follows drift faster; not in the paper). Learning is the same.
    storage : {'auto', 'dense', 'sparse'}, default 'auto'
        'dense': w and w̄ as vectors, O(d) per event. 'sparse': the lazy O(nnz) form of
        spec solam-mba §2.11. 'auto' is sparse above 4096 features. Either accepts dense
        or CSR input.

    State
    -----
    Both layouts: ``n_seen_`` int64 (negatives, positives), so t = n₋ + n₊;
    ``aba_`` (3,) = (a, b, α); ``aba_bar_`` (3,) = (ā, b̄, ᾱ); ``gsum_`` (1,) = Γ = Σ γ_j;
    ``kappa_`` (1,) = κ. Dense storage: ``w_`` (d,) and ``wbar_`` (d,) = w̄. Sparse storage:
    ``u_`` (d,), ``atil_`` (d,) = Ã and ``lazy_`` (3,) = (σ, ‖w‖², c) with w = σ·u and
    Γ·w̄ = c·u − Ã.

    Examples
    --------
    >>> import numpy as np
    >>> from aucstream import models
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> order = np.random.default_rng(0).permutation(len(y))  # i.i.d. arrival, see Notes
    >>> X, y = X[order], y[order]
    >>> lrn = models.create("solam", n_features=30).learn(X[:400], y[:400])
    >>> print(round(models.auc(y[400:], lrn.score(X[400:])), 3))
    0.967

    Notes
    -----
    Decisions where the paper leaves a choice (specs README, review-first-wave §9):

    - Zero initialisation v_1 = 0, α_1 = 0 (Table 1 allows any point of Ω1 × Ω2; the
      authors' corner start w = (R/√d)·1, a = b = R, α = 2R inverted the ranking in
      one pass on a real set).
    - Symmetric projections clip(·, −Rκ, Rκ) for a and b (the authors' code clips them
      from above only).
    - Unit-L2 rows and κ = 1 by default (the authors' preprocessing; the paper does not
      say). With ``normalize=False``, κ_t = max(κ_{t−1}, ‖x_t‖) is updated with the
      current row before its step, so Ω1, Ω2 always contain the optimum for the rows
      seen; κ starts at 0.
    - t and p̂_t are derived from ``n_seen_`` (t = n₋ + n₊, p̂_t = n₊/t), identical to
      the paper's recursion p̂_t = ((t−1)p̂_{t−1} + 1[y_t = 1])/t. No learning happens
      until both classes have been seen: p̂_t ∈ {0, 1} makes every gradient exactly 0,
      while Γ keeps growing, so w̄ keeps the weight of those zero iterates (as in the
      paper; no prior on p is added).
    - Before the first event, w̄ = v̄_0 = 0 and every score is 0.
    - Sparse storage is the same algorithm re-arranged (w = σ·u, incremental ‖w‖², lazy
      weighted sum A = c·u − Ã), not an approximation of it: w agrees with the dense
      form to rounding (≤ 1e-13 relative). w̄ does not quite: c·u and Ã exceed A by up
      to 1/σ, so their rounding is amplified by up to 1/``SOLAM_MIN_SCALE`` (1e-4).
      Measured against the dense form on the test streams: 7e-13 … 3e-11 relative at
      1e-4 (1e-8 … 1e-7 with a threshold of 1e-8, 2e-14 at 1e-2). When
      σ < ``SOLAM_MIN_SCALE``, σ is folded into u in O(d) (c restarts at 0 with Ã = −A,
      and ‖w‖² is recomputed exactly). How often depends on how hard the projection
      shrinks σ: on a hashed stream of 2^20 dimensions and 40 non-zeros with ζ = R = 10,
      measured with a threshold of 1e-8, 1 fold in 200 000 events on unit rows and 24 on
      raw binary rows (‖x‖ ≈ 6) — twice as many at 1e-4; with ζ = 100 (2^16 dimensions)
      one fold every ~130 events on unit rows and every ~20 on raw rows (1e-8), so the
      amortised cost per event then grows with d.
    - SOLAM assumes i.i.d. arrival and the average weighs early iterates most
      (γ_t ∝ t^−1/2). Order matters at an untuned ζ: breast-cancer rows in file order
      (a run of 19 negatives first, raw features) give AUC 0.04 with ζ = 10 and 0.95
      with ζ = 1 (the default). Shuffle replays; the paper cross-validates ζ.
    - Default ζ = 1, R = 10 (the specs README's untuned ζ = R = 10 replaced, issue 11).
      ``python -m bench.default_grid solam --grid zeta=0.1,0.3,1,3,10,30,100
      R=1,10,100,1e5`` serves every bundled dataset and the hashed ad-click feed
      test-then-train, raw and standardised: ζ = 1, R = 10 has the best mean served
      AUC on raw rows (0.769 against 0.722 for ζ = 10) and is picked in 18 of 19
      leave-one-stream-out folds; standardised, ζ = 3, R = 1 leads by 0.003 (0.860 vs
      0.857; ζ = 10 gives 0.798) but falls 0.18 behind on one raw set. ζ = 10 was more
      than 0.03 below the best grid point on 11 of 19 streams. Table in
      bench/RESULTS.md. The price: on 1M events of the hashed ad-click feed ζ = 10
      serves better (0.685 / 0.696 against 0.663 / 0.656 for two seeds; the 200k-event
      grid did not separate them), so set ``zeta=10`` for long hashed click streams, or
      use ``auto``.
    - One pass; repeated passes are repeated ``learn`` calls with t still global.
    - All or nothing (``Learner.learn``): the sparse layout cannot copy its two O(d)
      vectors per batch (8 MB each at 2^20 dimensions), so its kernel logs u and Ã at
      each position of a row before changing them and checks what it writes; a fold
      returns to Python, which copies both vectors whole (once per batch, O(d) like the
      fold) before folding. A refused batch is undone from those copies and the log.
    """

    name = "solam"
    max_features = MAX_FEATURES_SPARSE
    accepts_sparse = True
    logs_journal = True  # lazy_learn logs u and Ã per position (see _learn)
    param_table: ClassVar[dict[str, Param]] = {
        "zeta": scale_param(1.0, "step constant ζ, γ_t = ζ/√t"),
        "R": scale_param(10.0, "radius of the w-ball", high=SOLAM_MAX_RADIUS),
        "normalize": Param(Options((True, False)), True, "unit-L2 rows (κ = 1)"),
        "serve": Param(Options(("average", "last")), "average", "score with w̄ or with w"),
        "storage": storage_param(),
    }

    def _resolve_params(self) -> None:
        resolve_storage(self.params, self.n_features)

    def _allocate(self) -> dict[str, np.ndarray]:
        d = self.n_features
        state = {
            "n_seen_": np.zeros(2, np.int64),
            "aba_": np.zeros(3),
            "aba_bar_": np.zeros(3),
            "gsum_": np.zeros(1),
            "kappa_": np.array([1.0 if self.params["normalize"] else 0.0]),
        }
        if self.params["storage"] == "dense":
            state.update(w_=np.zeros(d), wbar_=np.zeros(d))
        else:
            state.update(u_=np.zeros(d), atil_=np.zeros(d), lazy_=np.array([1.0, 0.0, 0.0]))
        return state

    @property
    def scoring_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        if self._sparse:
            return ("u_", "atil_", "lazy_", "gsum_")
        return ("w_", "wbar_")

    @property
    def _sparse(self) -> bool:
        return self.params["storage"] == "sparse"

    def _learn(self, batch: Batch, y: np.ndarray, prior: np.ndarray) -> None:
        s = self._state
        p = self.params
        average = p["serve"] == "average"
        if not self._sparse:
            K.dense_learn(self._dense_rows(batch), y, s["w_"], s["wbar_"], s["aba_"],
                          s["aba_bar_"], s["gsum_"], s["kappa_"], s["n_seen_"], p["zeta"],
                          p["R"], p["normalize"], average, prior)
            return
        indptr, indices, values = self._csr_rows(batch)
        journal = self._journal
        if journal is not None and journal.values:
            log_u, log_a, done = journal.values["u_"], journal.values["atil_"], journal.done
        else:
            log_u, log_a, done = NO_SCORES, NO_SCORES, np.zeros(1, np.int64)
        row, n, finite = 0, batch.n, True
        while row < n:
            row, fold_due, ok = K.lazy_learn(row, indptr, indices, values, y, s["u_"],
                                             s["atil_"], s["lazy_"], s["aba_"],
                                             s["aba_bar_"], s["gsum_"], s["kappa_"],
                                             s["n_seen_"], p["zeta"], p["R"], p["normalize"],
                                             SOLAM_MIN_SCALE, average, prior, log_u, log_a,
                                             done)
            finite = finite and ok
            if fold_due:  # rare: O(d), rewrites u and Ã whole
                self._keep_whole("u_", "atil_")
                K.fold(s["u_"], s["atil_"], s["lazy_"])
        if journal is not None and journal.values:
            journal.vouch(finite)

    def _journaled(self) -> tuple[str, ...]:
        return ("u_", "atil_") if self._sparse else ()

    def _scoring_state(self) -> dict[str, np.ndarray]:
        """With sparse storage serving w̄, a snapshot keeps one vector, the numerator
        c·u − Ã of w̄ = (c·u − Ã)/Γ, formed element by element as the score kernel forms
        it, so its scores are the same bits. Scoring a hashed row then reads one array
        instead of two; over 2^20 dimensions each read is a likely cache miss."""
        if not (self._sparse and self.params["serve"] == "average"):
            return super()._scoring_state()
        s = self._state
        return {"num_": K.lazy_numerator(s["u_"], s["atil_"], s["lazy_"][2]),
                "gsum_": s["gsum_"].copy(), "n_seen_": s["n_seen_"].copy()}

    def _score(self, batch: Batch) -> np.ndarray:
        s = self._state
        average = self.params["serve"] == "average"
        normalize = self.params["normalize"]
        if "num_" in s:  # a snapshot (see :meth:`_scoring_state`)
            indptr, indices, values = self._csr_rows(batch)
            return K.numerator_scores(indptr, indices, values, s["num_"], s["gsum_"][0],
                                      normalize)
        if not self._sparse:
            w = s["wbar_"] if average else s["w_"]
            return K.dense_scores(self._dense_rows(batch), w, normalize)
        indptr, indices, values = self._csr_rows(batch)
        lazy = s["lazy_"]
        return K.lazy_scores(indptr, indices, values, s["u_"], s["atil_"], lazy[0], lazy[2],
                             s["gsum_"][0], average, normalize)

    def weights(self, which: str | None = None) -> np.ndarray:
        """The weight vector as a dense copy: w̄ for ``'average'``, w for ``'last'``.

        ``which`` defaults to the ``serve`` parameter. O(d).
        """
        which = self.params["serve"] if which is None else which
        if which not in ("average", "last"):
            raise ValueError(f"which must be 'average' or 'last'; got {which!r}.")
        s = self._state
        if not self._sparse:
            return (s["wbar_"] if which == "average" else s["w_"]).copy()
        lazy = s["lazy_"]
        return K.lazy_weights(s["u_"], s["atil_"], lazy[0], lazy[2], s["gsum_"][0],
                              which == "average")
