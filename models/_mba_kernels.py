"""numba kernels of MBA (Gultekin, Saha, Ratnaparkhi, Paisley, "MBA: Mini-Batch AUC
Optimization"; spec solam-mba §3, review-second-wave §1, specs README second table).

Two ways to build the pairwise moments μ = E[x⁺ − x⁻], Σ = E[(x⁺ − x⁻)(x⁺ − x⁻)ᵀ]
(eq. 9 / eq. 13), then one solver for line 12 of Algorithm 1,
w = argmin ½wᵀΣw − wᵀμ + λ1‖w‖₁ + (λ2/2)‖w‖²:

- exact: per-class weighted Welford moments (count W_c, mean m_c, centred scatter M2_c),
  one rank-one update per event; μ_N = m₊ − m₋, Σ_N = M2₊/W₊ + M2₋/W₋ + (m₊ − m₋)(m₊ − m₋)ᵀ,
  the all-pairs U-statistic of eq. (9) exactly (spec §3.5.6).
- sampled: Algorithm 1 one event at a time: the event enters its own class's reservoir,
  then B uniform draws from the opposite reservoir give B pairs whose differences are
  summed into (Σ d, Σ ddᵀ, number of pairs), as lines 9–10 normalised by the pair count.

Forgetting (optional): at every event all earlier weights are multiplied by
ρ = 2^(−1/h), h the half-life in events. The exact moments apply it lazily: a class's
normalised mean and covariance do not change when all its weights are scaled alike, so
the arriving class is decayed by ρ^(t − stamp_c) (stamp_c its last update) just before
its own update; the other class is left alone until its next event.

Class index 0 is the negative class, 1 the positive class. Global event count t is
n₋ + n₊ including the event being learned.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from ._buffers import RESERVOIR, admit
from ._kernels import dense_dot
from ._rng import below

__all__ = [
    "ELASTICNET",
    "L1",
    "L2",
    "MBA_CD_MAX_SWEEPS",
    "MBA_CD_TOL",
    "MBA_KKT_SLACK",
    "MBA_PIVOT_TOL",
    "Moments",
    "Pairs",
    "Solver",
    "cholesky_solve",
    "coordinate_descent",
    "elastic_net",
    "exact_learn",
    "exact_problem",
    "penalties",
    "polish",
    "sampled_learn",
    "sampled_problem",
    "solve",
    "solve_point",
]

# ------------------------------------------------------------------ named tolerances
# (models/_config.py is shared and not edited by this family; these are MBA's own.)

# Cholesky of Σ + λ2·I: a pivot (the Schur complement of a coordinate given the ones
# before it) at or below this fraction of its diagonal entry marks the coordinate as
# linearly dependent on earlier ones (a constant feature, a duplicated column, d larger
# than the number of events with λ2 = 0); its weight is set to 0 and the system is
# solved on the other coordinates. Rounding leaves pivots of order d·eps·A_jj ≈ 1e-14 on
# exactly dependent columns, so 1e-10 separates them with a margin; with the default
# λ2 = 1e-3·tr(Σ)/d every pivot is ≥ λ2 and the guard never fires on realistic scales.
MBA_PIVOT_TOL = 1e-10

# Coordinate descent (lasso, elastic net): stop after the first full sweep in which no
# weight moved by more than this fraction of the largest |w_j| (or none moved at all).
MBA_CD_TOL = 1e-12

# ... or after this many sweeps (each O(d²)); well-conditioned problems warm-started
# from the previous solution need a handful.
MBA_CD_MAX_SWEEPS = 1000

# Polish (see ``elastic_net``): the solution on the support and signs coordinate descent
# found is accepted if every coordinate off the support satisfies its KKT condition
# |(Σw)_j − μ_j| ≤ λ1 within this fraction of λ1 + max|μ| (rounding of Σw), and keeps
# every sign on the support.
MBA_KKT_SLACK = 1e-10

# Penalty codes (the ``penalty`` parameter).
L2 = 0  # MBA-ℓ2: λ1 = 0, λ2 = λ
L1 = 1  # MBA-ℓ1: λ1 = λ, λ2 = 0
ELASTICNET = 2  # MBA-EL: λ1 = λ2 = λ/2 (P4 Fig. 7 caption, specs README)


class Moments(NamedTuple):
    """Exact mode's state: per-class weighted Welford moments."""

    n_seen: np.ndarray  # int64[2] events per class
    wsum: np.ndarray  # float64[2] W_c, the class's weight as of its last update
    stamp: np.ndarray  # int64[2] global event count at the class's last update
    mean: np.ndarray  # float64[2, d] m_c
    scatter: np.ndarray  # float64[2, d, d] M2_c = Σ_i a_i (x_i − m_c)(x_i − m_c)ᵀ


class Pairs(NamedTuple):
    """Sampled mode's state: reservoirs and the sums of the sampled pair differences."""

    n_seen: np.ndarray  # int64[2] events per class (the reservoir counters)
    order: np.ndarray  # int64[2, cap] slots oldest to newest
    buf: np.ndarray  # float64[2, cap, d] reservoir rows
    rng: np.ndarray  # uint64[4] generator state
    weight: np.ndarray  # float64[1] number of pairs (decayed)
    musum: np.ndarray  # float64[d] Σ d
    sigsum: np.ndarray  # float64[d, d] Σ d dᵀ


class Solver(NamedTuple):
    """How line 12 is solved and when."""

    penalty: int  # L2, L1 or ELASTICNET
    lam: float  # λ (absolute, or the factor c of λ = c·tr(Σ)/d)
    trace_scaled: bool  # λ = lam·tr(Σ)/d when True
    every: int  # solve after every this many events (and at powers of two below it)
    half_life: float  # h in events; 0 = no forgetting


# ------------------------------------------------------------------------- schedule
@njit(cache=True, nogil=True)
def solve_point(t, every):
    """True if the model is re-solved after global event t (1-based): every ``every``
    events, and at t = 1, 2, 4, … below ``every`` so that a young stream is served."""
    if t % every == 0:
        return True
    return t < every and (t & (t - 1)) == 0


@njit(cache=True, nogil=True)
def penalties(penalty, lam, trace_scaled, sigma):
    """(λ1, λ2) for the penalty code; λ = lam·tr(Σ)/d if ``trace_scaled``."""
    if trace_scaled:
        d = sigma.shape[0]
        tr = 0.0
        for i in range(d):
            tr += sigma[i, i]
        lam = lam * tr / d
    if penalty == L2:
        return 0.0, lam
    if penalty == L1:
        return lam, 0.0
    return 0.5 * lam, 0.5 * lam


# -------------------------------------------------------------------------- solvers
@njit(cache=True, nogil=True)
def cholesky_solve(A, b, w, diag):
    """w = A⁻¹b for symmetric positive semi-definite A, by Cholesky A = LLᵀ.

    A's lower triangle is overwritten by L (its upper triangle is neither read nor
    written); ``diag`` is scratch of length d. A coordinate whose pivot is at most
    ``MBA_PIVOT_TOL`` times its diagonal entry (or not positive, or NaN) gets a zero
    column in L and w_j = 0: the system is then solved on the remaining coordinates,
    which for consistent systems (b in the range of A, as μ is for Σ) is a minimiser of
    ½wᵀAw − bᵀw. Returns the number of coordinates so dropped. Fixed loop order: the
    same inputs give the same bits.
    """
    d = A.shape[0]
    dropped = 0
    for j in range(d):
        diag[j] = A[j, j]
    for j in range(d):
        s = A[j, j]
        for k in range(j):
            s -= A[j, k] * A[j, k]
        if s > MBA_PIVOT_TOL * diag[j]:
            pivot = math.sqrt(s)
            A[j, j] = pivot
            for i in range(j + 1, d):
                v = A[i, j]
                for k in range(j):
                    v -= A[i, k] * A[j, k]
                A[i, j] = v / pivot
        else:
            dropped += 1
            for i in range(j, d):
                A[i, j] = 0.0
    # forward: L z = b (z kept in w); dropped coordinates are 0
    for i in range(d):
        if A[i, i] == 0.0:
            w[i] = 0.0
            continue
        v = b[i]
        for k in range(i):
            v -= A[i, k] * w[k]
        w[i] = v / A[i, i]
    # backward: Lᵀ w = z
    for i in range(d - 1, -1, -1):
        if A[i, i] == 0.0:
            w[i] = 0.0
            continue
        v = w[i]
        for k in range(i + 1, d):
            v -= A[k, i] * w[k]
        w[i] = v / A[i, i]
    return dropped


@njit(cache=True, nogil=True)
def coordinate_descent(S, mu, l1, l2, w, g, max_sweeps):
    """Cyclic coordinate descent on ½wᵀSw − wᵀμ + λ1‖w‖₁ + (λ2/2)‖w‖², from w as given
    (the warm start) to w in place (spec solam-mba §3.4).

    Coordinate j: r = μ_j − (Sw)_j + S_jj·w_j, w_j = soft(r, λ1)/(S_jj + λ2), with
    w_j = 0 when S_jj + λ2 = 0 (a coordinate that never varies; μ_j is then 0 too).
    g = Sw is formed once, then kept by rank-one corrections. Stops after the first sweep
    in which max_j |Δw_j| ≤ MBA_CD_TOL·max_j |w_j| (then returns −sweeps), or after
    ``max_sweeps`` sweeps (returns sweeps). ``g`` is scratch of length d.
    """
    d = S.shape[0]
    for i in range(d):
        g[i] = dense_dot(S[i], w)
    sweeps = 0
    while sweeps < max_sweeps:
        sweeps += 1
        big = 0.0
        moved = 0.0
        for j in range(d):
            den = S[j, j] + l2
            old = w[j]
            if den > 0.0:
                r = mu[j] - g[j] + S[j, j] * old
                if r > l1:
                    new = (r - l1) / den
                elif r < -l1:
                    new = (r + l1) / den
                else:
                    new = 0.0
            else:
                new = 0.0
            step = new - old
            if step != 0.0:
                row = S[j]
                for i in range(d):
                    g[i] += step * row[i]
                w[j] = new
                moved = max(moved, abs(step))
            big = max(big, abs(new))
        if moved <= MBA_CD_TOL * big:
            return -sweeps
    return sweeps


@njit(cache=True, nogil=True)
def polish(S, mu, l1, l2, w, F, idx, v, b, diag):
    """Solve the KKT equations on the support and signs of w exactly; keep the result
    if it is the minimiser.

    With A = {j : w_j ≠ 0} and s = sign(w_A), the minimiser with that support and those
    signs solves (S_AA + λ2·I) v_A = μ_A − λ1·s (a Cholesky solve of size |A|). It is
    accepted, and written to w (zero off A), if every v_j keeps its sign s_j and every
    j ∉ A has |(S_A v_A)_j − μ_j| ≤ λ1 (within ``MBA_KKT_SLACK``): then v satisfies all
    KKT conditions of the problem. ``F`` is flat scratch of ≥ |A|² floats, ``idx``,
    ``v``, ``b``, ``diag`` of length d. Returns whether w was replaced.
    """
    d = S.shape[0]
    k = 0
    for j in range(d):
        if w[j] != 0.0:
            idx[k] = j
            k += 1
    F2 = F[:k * k].reshape((k, k))
    for a in range(k):
        ja = idx[a]
        b[a] = mu[ja] - (l1 if w[ja] > 0.0 else -l1)
        for c in range(a + 1):
            F2[a, c] = S[ja, idx[c]]
        F2[a, a] += l2
    cholesky_solve(F2, b[:k], v[:k], diag[:k])
    for a in range(k):
        if v[a] == 0.0 or (v[a] > 0.0) != (w[idx[a]] > 0.0):
            return False
    big = 0.0
    for j in range(d):
        big = max(big, abs(mu[j]))
    bound = l1 + MBA_KKT_SLACK * (l1 + big)
    a = 0
    for j in range(d):
        if a < k and idx[a] == j:
            a += 1
            continue
        gj = -mu[j]
        for c in range(k):
            gj += S[j, idx[c]] * v[c]
        if not abs(gj) <= bound:
            return False
    for j in range(d):
        w[j] = 0.0
    for a in range(k):
        w[idx[a]] = v[a]
    return True


@njit(cache=True, nogil=True)
def elastic_net(S, mu, l1, l2, w, g, F, idx, v, b, diag):
    """Lasso / elastic net from the warm start w: coordinate descent, polished.

    Runs coordinate descent in rounds of 1, 2, 4, … sweeps; after each round, ``polish``
    tries the exact solution on the support and signs found. Stops when a polish is
    accepted (KKT conditions verified, exact to rounding), or when a round meets the
    descent's own rule (max|Δw_j| ≤ MBA_CD_TOL·max|w_j|), or after MBA_CD_MAX_SWEEPS
    sweeps in all. Returns the number of sweeps (negative if ended by a polish).
    """
    total = 0
    chunk = 1
    while total < MBA_CD_MAX_SWEEPS:
        n = coordinate_descent(S, mu, l1, l2, w, g, min(chunk, MBA_CD_MAX_SWEEPS - total))
        total += abs(n)
        if polish(S, mu, l1, l2, w, F, idx, v, b, diag):
            return -total
        if n < 0:
            break
        chunk *= 2
    return total


@njit(cache=True, nogil=True)
def solve(S, mu, w, solver, F):
    """Line 12 of Algorithm 1 on the moments (S, μ); S is overwritten (scratch).

    λ1 = 0 (MBA-ℓ2, or λ = 0): the closed form w = (S + λ2·I)⁻¹μ by Cholesky, whatever
    w was. Otherwise ``elastic_net`` warm-started from w (the previous solution), with
    ``F`` flat scratch of d² floats.
    """
    d = S.shape[0]
    diag = np.empty(d)
    l1, l2 = penalties(solver.penalty, solver.lam, solver.trace_scaled, S)
    if l1 == 0.0:
        for i in range(d):
            S[i, i] += l2
        cholesky_solve(S, mu, w, diag)
    else:
        elastic_net(S, mu, l1, l2, w, np.empty(d), F, np.empty(d, np.int64), np.empty(d),
                    np.empty(d), diag)


# ------------------------------------------------------------------------ exact mode
@njit(cache=True, nogil=True)
def exact_update(x, c, t, m, half_life, delta):
    """Weighted Welford update of class c with row x at global event t (1-based).

    f = ρ^(t − stamp_c) decays the class's earlier weights (f = 1 without forgetting);
    W' = f·W, W = W' + 1, δ = x − m, m += δ/W, M2 = f·M2 + (W'/W)·δδᵀ. Each entry of
    δδᵀ is δ_i·δ_j, a commuting product, so M2 stays exactly symmetric.
    """
    d = x.shape[0]
    f = 1.0
    if half_life > 0.0:
        f = 2.0 ** (-(t - m.stamp[c]) / half_life)
    m.n_seen[c] += 1
    m.stamp[c] = t
    w_old = f * m.wsum[c]
    w_new = w_old + 1.0
    m.wsum[c] = w_new
    g = w_old / w_new
    mean = m.mean[c]
    for i in range(d):
        di = x[i] - mean[i]
        delta[i] = di
        mean[i] += di / w_new
    M2 = m.scatter[c]
    for i in range(d):
        di = delta[i]
        row = M2[i]
        for j in range(d):
            row[j] = f * row[j] + g * (di * delta[j])


@njit(cache=True, nogil=True)
def exact_problem(m, S, mu):
    """μ_N = m₊ − m₋ and Σ_N = M2₊/W₊ + M2₋/W₋ + μ_N μ_Nᵀ into (S, μ) (spec §3.5.6).

    The two scatter terms are the classes' weighted population covariances; they do not
    depend on when each class was last decayed (scaling all of a class's weights alike
    leaves them unchanged). Needs both classes seen.
    """
    d = mu.shape[0]
    for i in range(d):
        mu[i] = m.mean[1, i] - m.mean[0, i]
    inv0 = 1.0 / m.wsum[0]
    inv1 = 1.0 / m.wsum[1]
    for i in range(d):
        mi = mu[i]
        for j in range(d):
            S[i, j] = m.scatter[1, i, j] * inv1 + m.scatter[0, i, j] * inv0 + mi * mu[j]


@njit(cache=True, nogil=True)
def exact_learn(X, y, m, w, solver, S, F, prior):
    """Exact-moment MBA over a batch; returns the number of solves.

    Per event: the prequential score wᵀx_t (if ``prior`` is non-empty), the class's
    moment update, then a solve if t is a solve point and both classes have been seen.
    ``S`` is (d, d) scratch, ``F`` flat (d²) scratch for lasso / elastic net (else empty).
    """
    n, d = X.shape
    delta = np.empty(d)
    mu = np.empty(d)
    solves = 0
    for r in range(n):
        x = X[r]
        if prior.shape[0]:
            prior[r] = dense_dot(w, x)
        c = 1 if y[r] > 0 else 0
        t = m.n_seen[0] + m.n_seen[1] + 1
        exact_update(x, c, t, m, solver.half_life, delta)
        if solve_point(t, solver.every) and m.n_seen[0] > 0 and m.n_seen[1] > 0:
            exact_problem(m, S, mu)
            solve(S, mu, w, solver, F)
            solves += 1
    return solves


# ---------------------------------------------------------------------- sampled mode
@njit(cache=True, nogil=True)
def sampled_update(x, c, p, n_pairs, half_life, diff):
    """Algorithm 1, lines 6–10, anchored at one event of class c.

    The event enters its own reservoir first (Algorithm R; the counter includes it).
    Then every earlier pair weight decays by ρ = 2^(−1/h) (if forgetting), and B rows
    drawn uniformly with replacement from the opposite reservoir (the j-th oldest for
    j ~ U{0..size−1}) give B pairs d = x⁺ − x⁻ added to Σ d, Σ ddᵀ and the pair count.
    """
    d = x.shape[0]
    slot = admit(p.order, p.n_seen, c, RESERVOIR, p.rng)
    if slot >= 0:
        p.buf[c, slot, :] = x
    if half_life > 0.0:
        f = 2.0 ** (-1.0 / half_life)
        p.weight[0] *= f
        for i in range(d):
            p.musum[i] *= f
        for i in range(d):
            row = p.sigsum[i]
            for j in range(d):
                row[j] *= f
    o = 1 - c
    cap = p.order.shape[1]
    size = min(p.n_seen[o], cap)
    if size == 0:
        return
    sign = 1.0 if c == 1 else -1.0
    for _ in range(n_pairs):
        z = p.buf[o, p.order[o, below(p.rng, size)]]
        for i in range(d):
            diff[i] = sign * (x[i] - z[i])
        for i in range(d):
            p.musum[i] += diff[i]
        for i in range(d):
            di = diff[i]
            row = p.sigsum[i]
            for j in range(d):
                row[j] += di * diff[j]
    p.weight[0] += n_pairs


@njit(cache=True, nogil=True)
def sampled_problem(p, S, mu):
    """μ_S = Σ d / S and Σ_S = Σ ddᵀ / S (eq. 13), S the (decayed) number of pairs."""
    d = mu.shape[0]
    inv = 1.0 / p.weight[0]
    for i in range(d):
        mu[i] = p.musum[i] * inv
        for j in range(d):
            S[i, j] = p.sigsum[i, j] * inv


@njit(cache=True, nogil=True)
def sampled_learn(X, y, p, w, n_pairs, solver, S, F, prior):
    """Sampled MBA over a batch; returns the number of solves (see ``exact_learn``)."""
    n, d = X.shape
    diff = np.empty(d)
    mu = np.empty(d)
    solves = 0
    for r in range(n):
        x = X[r]
        if prior.shape[0]:
            prior[r] = dense_dot(w, x)
        c = 1 if y[r] > 0 else 0
        sampled_update(x, c, p, n_pairs, solver.half_life, diff)
        t = p.n_seen[0] + p.n_seen[1]
        if solve_point(t, solver.every) and p.weight[0] > 0.0:
            sampled_problem(p, S, mu)
            solve(S, mu, w, solver, F)
            solves += 1
    return solves
