"""Truncated Newton for the pairwise squared hinge (PRSVM+), and the window kernels of
``models.batch`` (rank_svm, FBAM, NBAM, NBAUC).

The objective (dissertation eq. 3.1 with the pair-normalised penalty of the specs README):

    F(w) = ½‖w‖² + c·L(Xw),   c = C̃/(n₊n₋),
    L(o) = Σ_{i∈P} Σ_{j∈N} max(0, 1 − (o_i − o_j))².

PRSVM+ (Chapelle & Keerthi 2010; dissertation §3.3, S0 L1204–1275) never forms the
n₊n₋ pairs: with ŷ_k = o_k − ½ for positives and o_k + ½ for negatives, the pair (i, j) is
active iff ŷ_j > ŷ_i (strictly) and costs (ŷ_j − ŷ_i)², so with B_i = {j ∈ N : ŷ_j > ŷ_i},
A_j = {i ∈ P : ŷ_i < ŷ_j}, α_k = |B_k| or |A_k| and β_k the sum of ŷ over that set,

    L = Σ_k α_k ŷ_k² − β_k ŷ_k,   ∂L/∂ŷ_k = 2(α_k ŷ_k − β_k),
    (H_L δ)_k = 2(α_k δ_k − γ_k),  γ_k = Σ of δ over the same set,

all from one sort of each class's ŷ and running sums: O(n log n) after the O(n·D)
product Xw. Then ∇F = w + c·Xᵀ∂L and Hv = v + 2c·Xᵀz(Xv), the active set frozen at w.
The scores are centred (their mean subtracted) before ŷ is formed: only differences
enter L, and the expanded sums above lose all precision under a common offset
(review-second-wave §5).

The solver (specs README, second table): at w, one CG solve of H s = −g (relative
residual ≤ 1e-3, ≤ 100 iterations, s₀ = 0), an exact line search on the piecewise
quadratic φ(t) = F(w + t·s) (1-D Newton, bracketed), w ← w + t·s; stop after the step
whose Newton decrement −sᵀg is below 1e-4·F(w) (Chapelle's ``ranksvm.m`` order: the
step is still taken), or after 50 iterations. Before the first iteration, w_j is set to 0
on every column j that is zero in every row: F separates there into ½w_j², whose
minimiser is 0, and from w = 0 (the paper's start) no iterate ever leaves it, so this is
exact for warm starts, and it lets a sparse caller solve on the window's columns only.

Every sum runs in a fixed order, so a solve is a deterministic function of its arrays.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from ._atomic import all_finite
from ._buffers import admit, write_sparse_row
from ._kernels import dot4, sparse_dot

__all__ = [
    "CG_MAX_ITER",
    "CG_TOL",
    "CONVERGED",
    "LINE_SEARCH_MAX_ITER",
    "LINE_SEARCH_TOL",
    "MAX_ITER",
    "NEWTON_DECREMENT_TOL",
    "NEWTON_MAX_ITER",
    "NONFINITE",
    "NO_PAIRS",
    "Design",
    "SolveInfo",
    "admit_csr",
    "admit_dense",
    "csr_design",
    "dense_design",
    "objective",
    "score_hessian",
    "score_loss",
    "solve",
    "spread_moments",
    "truncated_newton",
    "window_csr",
    "window_dense",
]

# ------------------------------------------------------------------ named tolerances
# The solver's stopping rules (specs README, second table; Chapelle's ranksvm.m for the
# decrement and CG tolerances, with more iterations: review-second-wave §5 measured that
# 20 CG iterations need > 40 Newton iterations at large C, 200 need 9-13).
NEWTON_DECREMENT_TOL = 1e-4  # stop after the step whose −sᵀg < tol·F(w)
NEWTON_MAX_ITER = 50  # Newton iterations per solve
CG_TOL = 1e-3  # CG stops when ‖H s + g‖ ≤ tol·‖g‖
CG_MAX_ITER = 100  # CG iterations per Newton iteration
# Exact line search: 1-D Newton on φ'(t), stopped once the decrease still available,
# φ'(t)²/(2φ''(t)), is below ½·tol·F(w) (far below the decrement test above; φ' is
# piecewise linear, so the step that lands on the right piece is exact).
LINE_SEARCH_TOL = 1e-12
LINE_SEARCH_MAX_ITER = 60  # bracketed, so it cannot cycle; this only bounds the work

# Solver outcomes (info[0]).
CONVERGED = 0  # the decrement test was met
MAX_ITER = 1  # NEWTON_MAX_ITER steps taken without meeting it (w is the last iterate)
NONFINITE = 2  # F or ∇F overflowed: w must not be used
NO_PAIRS = 3  # one class is empty: nothing to solve, w unchanged

# info array layout: status, Newton iterations, CG iterations (total), line-search
# evaluations (total), F at the returned w, the last Newton decrement −sᵀg, F at the
# point where that decrement was taken.
INFO_SIZE = 7


class Design(NamedTuple):
    """The rows of a solve: dense (n, D), or CSR (n rows over D = len(w) columns).
    The unused form holds empty arrays (one numba signature serves both)."""

    sparse: bool
    dense: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray


_NO_DENSE = np.zeros((0, 0))
_NO_INT = np.zeros(0, np.int64)
_NO_FLOAT = np.zeros(0)


def dense_design(X: np.ndarray) -> Design:
    return Design(False, np.ascontiguousarray(X, dtype=np.float64), _NO_INT, _NO_INT,
                  _NO_FLOAT)


def csr_design(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> Design:
    return Design(True, _NO_DENSE, np.ascontiguousarray(indptr, dtype=np.int64),
                  np.ascontiguousarray(indices, dtype=np.int64),
                  np.ascontiguousarray(values, dtype=np.float64))


class SolveInfo(NamedTuple):
    status: int
    newton_iters: int
    cg_iters: int
    line_search_evals: int
    objective: float
    decrement: float
    objective_at_decrement: float


# ------------------------------------------------------------------ products with X
# Dense rows at least this wide are multiplied four rows at a time (four independent
# sums): 1.6-2x faster at D = 1600 (FBAM), slower at D = 123 (measured), so by width.
_BLOCK_MIN_COLS = 512


@njit(cache=True, nogil=True)
def _matvec(A, v, out):
    """out = X v."""
    if A.sparse:
        for k in range(out.shape[0]):
            out[k] = sparse_dot(v, A.indices, A.values, A.indptr[k], A.indptr[k + 1])
        return
    X = A.dense
    n, D = X.shape
    k = 0
    if D >= _BLOCK_MIN_COLS:
        while k + 4 <= n:
            r0 = X[k]
            r1 = X[k + 1]
            r2 = X[k + 2]
            r3 = X[k + 3]
            a0 = 0.0
            a1 = 0.0
            a2 = 0.0
            a3 = 0.0
            for j in range(D):
                vj = v[j]
                a0 += r0[j] * vj
                a1 += r1[j] * vj
                a2 += r2[j] * vj
                a3 += r3[j] * vj
            out[k] = a0
            out[k + 1] = a1
            out[k + 2] = a2
            out[k + 3] = a3
            k += 4
    while k < n:
        out[k] = dot4(X[k], v)
        k += 1


@njit(cache=True, nogil=True)
def _rmatvec(A, z, out):
    """out = Xᵀ z, row by row (each out_j summed over the rows in order); rows with
    z_k = 0 (no active pair) are skipped."""
    out[:] = 0.0
    n = z.shape[0]
    if A.sparse:
        for k in range(n):
            zk = z[k]
            if zk != 0.0:
                for p in range(A.indptr[k], A.indptr[k + 1]):
                    out[A.indices[p]] += zk * A.values[p]
        return
    X = A.dense
    D = X.shape[1]
    k = 0
    if D >= _BLOCK_MIN_COLS:
        while k + 4 <= n:
            z0 = z[k]
            z1 = z[k + 1]
            z2 = z[k + 2]
            z3 = z[k + 3]
            if z0 != 0.0 or z1 != 0.0 or z2 != 0.0 or z3 != 0.0:
                r0 = X[k]
                r1 = X[k + 1]
                r2 = X[k + 2]
                r3 = X[k + 3]
                for j in range(D):
                    out[j] = (((out[j] + z0 * r0[j]) + z1 * r1[j]) + z2 * r2[j]) + z3 * r3[j]
            k += 4
    while k < n:
        zk = z[k]
        if zk != 0.0:
            row = X[k]
            for j in range(D):
                out[j] += zk * row[j]
        k += 1


@njit(cache=True, nogil=True)
def _zero_dead_columns(A, w):
    """w_j = 0 on every column that is zero in every row (F separates there)."""
    live = np.zeros(w.shape[0], np.bool_)
    if A.sparse:
        for p in range(A.indices.shape[0]):
            if A.values[p] != 0.0:
                live[A.indices[p]] = True
    else:
        n, D = A.dense.shape
        for k in range(n):
            for j in range(D):
                if A.dense[k, j] != 0.0:
                    live[j] = True
    for j in range(w.shape[0]):
        if not live[j]:
            w[j] = 0.0


@njit(cache=True, nogil=True, inline="always")
def _dot(a, b):
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i] * b[i]
    return acc


# ------------------------------------------------------------------ sort-based pairs
@njit(cache=True, nogil=True)
def _classes(pos):
    """Indices of the positives and of the negatives, in row order."""
    n_pos = 0
    for k in range(pos.shape[0]):
        n_pos += pos[k]
    ip = np.empty(n_pos, np.int64)
    ineg = np.empty(pos.shape[0] - n_pos, np.int64)
    a = 0
    b = 0
    for k in range(pos.shape[0]):
        if pos[k]:
            ip[a] = k
            a += 1
        else:
            ineg[b] = k
            b += 1
    return ip, ineg


@njit(cache=True, nogil=True)
def _shifted(o, pos, yhat):
    """ŷ = (o − mean(o)) − ½ for positives, + ½ for negatives."""
    n = o.shape[0]
    m = 0.0
    for k in range(n):
        m += o[k]
    m /= n
    for k in range(n):
        yhat[k] = (o[k] - m) - 0.5 if pos[k] else (o[k] - m) + 0.5


@njit(cache=True, nogil=True)
def _sort_classes(yhat, ip, ineg, sp, sn):
    """sp, sn: the positives and the negatives in ascending order of ŷ."""
    kp = np.empty(ip.shape[0])
    for a in range(ip.shape[0]):
        kp[a] = yhat[ip[a]]
    order = np.argsort(kp)
    for a in range(ip.shape[0]):
        sp[a] = ip[order[a]]
    kn = np.empty(ineg.shape[0])
    for b in range(ineg.shape[0]):
        kn[b] = yhat[ineg[b]]
    order = np.argsort(kn)
    for b in range(ineg.shape[0]):
        sn[b] = ineg[order[b]]


@njit(cache=True, nogil=True)
def _pair_stats(yhat, sp, sn, alpha, beta):
    """α_k, β_k of every row and L = Σ α_k ŷ_k² − β_k ŷ_k (strict active sets).

    Negatives in ascending order take the positives below them (a running prefix);
    positives in descending order take the negatives above them (a running suffix), so
    every β is a direct running sum, never a total minus a prefix.
    """
    n_pos = sp.shape[0]
    n_neg = sn.shape[0]
    a = 0
    acc = 0.0
    for q in range(n_neg):
        j = sn[q]
        v = yhat[j]
        while a < n_pos and yhat[sp[a]] < v:
            acc += yhat[sp[a]]
            a += 1
        alpha[j] = a
        beta[j] = acc
    b = n_neg - 1
    acc = 0.0
    for q in range(n_pos - 1, -1, -1):
        i = sp[q]
        v = yhat[i]
        while b >= 0 and yhat[sn[b]] > v:
            acc += yhat[sn[b]]
            b -= 1
        alpha[i] = n_neg - 1 - b
        beta[i] = acc
    loss = 0.0
    for k in range(yhat.shape[0]):
        loss += (alpha[k] * yhat[k] - beta[k]) * yhat[k]
    return loss


@njit(cache=True, nogil=True)
def _score_gradient(yhat, alpha, beta, r):
    """r = ∂L/∂o = 2(α ŷ − β)."""
    for k in range(yhat.shape[0]):
        r[k] = 2.0 * (alpha[k] * yhat[k] - beta[k])


@njit(cache=True, nogil=True)
def _pair_hessian(delta, sp, sn, alpha, z):
    """z = α δ − γ with the active sets of the last ``_pair_stats`` (H_L δ = 2z).

    The sets are prefixes (negatives) and suffixes (positives) of the sorted orders, of
    lengths α, which grow along the sweeps: γ is a running sum again.
    """
    n_pos = sp.shape[0]
    n_neg = sn.shape[0]
    a = 0
    acc = 0.0
    for q in range(n_neg):
        j = sn[q]
        target = alpha[j]
        while a < target:
            acc += delta[sp[a]]
            a += 1
        z[j] = alpha[j] * delta[j] - acc
    b = 0
    acc = 0.0
    for q in range(n_pos - 1, -1, -1):
        i = sp[q]
        target = alpha[i]
        while b < target:
            acc += delta[sn[n_neg - 1 - b]]
            b += 1
        z[i] = alpha[i] * delta[i] - acc


# ------------------------------------------------------------------ the solver
@njit(cache=True, nogil=True)
def _hess_vec(A, c, v, sp, sn, alpha, delta, z, out):
    """out = v + 2c·Xᵀ z(Xv), the active set frozen (``sp``, ``sn``, ``alpha``)."""
    _matvec(A, v, delta)
    _pair_hessian(delta, sp, sn, alpha, z)
    _rmatvec(A, z, out)
    for j in range(out.shape[0]):
        out[j] = v[j] + 2.0 * c * out[j]


@njit(cache=True, nogil=True)
def _line_search(o, p, pos, ip, ineg, c, ww, wd, dd, F0, tol, max_iter, u, yhat, sp, sn,
                 alpha, beta, r, z):
    """Exact minimiser t of φ(t) = F(w + t s) (scores o = Xw, p = Xs; ww = wᵀw,
    wd = wᵀs, dd = sᵀs). φ'(t) = wd + t·dd + c·rᵀp and φ''(t) = dd + 2c·zᵀp, with r and
    z at the active set of o + t·p. Returns (t, φ(t), evaluations)."""
    t = 0.0
    lo = 0.0
    hi = np.inf
    Ft = F0
    it = 0
    while it < max_iter:
        it += 1
        for k in range(o.shape[0]):
            u[k] = o[k] + t * p[k]
        _shifted(u, pos, yhat)
        _sort_classes(yhat, ip, ineg, sp, sn)
        L = _pair_stats(yhat, sp, sn, alpha, beta)
        _score_gradient(yhat, alpha, beta, r)
        _pair_hessian(p, sp, sn, alpha, z)
        d1 = wd + t * dd + c * _dot(r, p)
        d2 = dd + 2.0 * c * _dot(z, p)
        Ft = 0.5 * (ww + t * (2.0 * wd + t * dd)) + c * L
        if d1 < 0.0:
            lo = t
        elif d1 > 0.0:
            hi = t
        else:
            break
        if d1 * d1 <= tol * d2 * F0:
            break
        t_new = t - d1 / d2
        if not (lo < t_new < hi):
            t_new = 0.5 * (lo + hi)
        if t_new == t:
            break
        t = t_new
    return t, Ft, it


@njit(cache=True, nogil=True)
def truncated_newton(A, pos, C, w, tol, max_newton, cg_tol, max_cg, ls_tol, max_ls, info):
    """Minimise F from the warm start ``w`` (updated in place); fills ``info``.

    ``A`` a :class:`Design` of n rows, ``pos`` bool[n] (True for positives), C the
    pair-normalised penalty C̃. Returns the status (also info[0]).
    """
    n = pos.shape[0]
    D = w.shape[0]
    info[:] = 0.0
    ip, ineg = _classes(pos)
    if ip.shape[0] == 0 or ineg.shape[0] == 0:
        info[0] = NO_PAIRS
        return NO_PAIRS
    c = C / (float(ip.shape[0]) * float(ineg.shape[0]))
    _zero_dead_columns(A, w)
    o = np.empty(n)
    p = np.empty(n)
    u = np.empty(n)
    yhat = np.empty(n)
    alpha = np.empty(n)
    beta = np.empty(n)
    r = np.empty(n)
    z = np.empty(n)
    delta = np.empty(n)
    sp = np.empty(ip.shape[0], np.int64)
    sn = np.empty(ineg.shape[0], np.int64)
    g = np.empty(D)
    s = np.empty(D)
    res = np.empty(D)
    d = np.empty(D)
    q = np.empty(D)
    status = MAX_ITER
    n_cg = 0
    n_ls = 0
    it = 0
    F = 0.0
    while it < max_newton:
        # F and ∇F at w
        _matvec(A, w, o)
        _shifted(o, pos, yhat)
        _sort_classes(yhat, ip, ineg, sp, sn)
        L = _pair_stats(yhat, sp, sn, alpha, beta)
        _score_gradient(yhat, alpha, beta, r)
        _rmatvec(A, r, g)
        ww = _dot(w, w)
        F = 0.5 * ww + c * L
        for j in range(D):
            g[j] = w[j] + c * g[j]
        gg = _dot(g, g)
        if not (math.isfinite(F) and math.isfinite(gg) and all_finite(g)):
            status = NONFINITE
            break
        if gg == 0.0:
            status = CONVERGED
            info[5] = 0.0
            info[6] = F
            break
        it += 1
        # CG on H s = −g from s = 0, the active set frozen at w
        stop = cg_tol * cg_tol * gg
        for j in range(D):
            s[j] = 0.0
            res[j] = -g[j]
            d[j] = -g[j]
        rr = gg
        for _ in range(max_cg):
            n_cg += 1
            _hess_vec(A, c, d, sp, sn, alpha, delta, z, q)
            step = rr / _dot(d, q)
            for j in range(D):
                s[j] += step * d[j]
                res[j] -= step * q[j]
            rr_new = _dot(res, res)
            if rr_new <= stop:
                break
            ratio = rr_new / rr
            for j in range(D):
                d[j] = res[j] + ratio * d[j]
            rr = rr_new
        decrement = -_dot(s, g)
        # exact line search along s, then the step
        _matvec(A, s, p)
        t, F_new, evals = _line_search(o, p, pos, ip, ineg, c, ww, _dot(w, s), _dot(s, s), F,
                                       ls_tol, max_ls, u, yhat, sp, sn, alpha, beta, r, z)
        n_ls += evals
        for j in range(D):
            w[j] += t * s[j]
        info[5] = decrement
        info[6] = F
        F = F_new
        if not (math.isfinite(F) and all_finite(w)):
            status = NONFINITE
            break
        if decrement < tol * info[6]:
            status = CONVERGED
            break
    info[0] = status
    info[1] = it
    info[2] = n_cg
    info[3] = n_ls
    info[4] = F
    return status


def solve(A: Design, pos: np.ndarray, C: float, w: np.ndarray, *,
          tol: float = NEWTON_DECREMENT_TOL, max_newton: int = NEWTON_MAX_ITER,
          cg_tol: float = CG_TOL, max_cg: int = CG_MAX_ITER,
          ls_tol: float = LINE_SEARCH_TOL, max_ls: int = LINE_SEARCH_MAX_ITER) -> SolveInfo:
    """Minimise ½‖w‖² + (C/(n₊n₋))·Σ_pairs max(0, 1 − wᵀ(x_i − x_j))² from ``w`` (in place).

    ``pos`` is a boolean array (True for positives), one per row of ``A``. On NONFINITE
    ``w`` holds garbage: the caller must discard it.
    """
    info = np.zeros(INFO_SIZE)
    truncated_newton(A, np.ascontiguousarray(pos, dtype=np.bool_), float(C), w, tol,
                     max_newton, cg_tol, max_cg, ls_tol, max_ls, info)
    return SolveInfo(int(info[0]), int(info[1]), int(info[2]), int(info[3]), float(info[4]),
                     float(info[5]), float(info[6]))


# ------------------------------------------------------------------ pieces, for tests
@njit(cache=True, nogil=True)
def _score_loss(o, pos):
    n = o.shape[0]
    ip, ineg = _classes(pos)
    yhat = np.empty(n)
    alpha = np.empty(n)
    beta = np.empty(n)
    r = np.empty(n)
    sp = np.empty(ip.shape[0], np.int64)
    sn = np.empty(ineg.shape[0], np.int64)
    _shifted(o, pos, yhat)
    _sort_classes(yhat, ip, ineg, sp, sn)
    L = _pair_stats(yhat, sp, sn, alpha, beta)
    _score_gradient(yhat, alpha, beta, r)
    return L, r, sp, sn, alpha


def score_loss(o: np.ndarray, pos: np.ndarray) -> tuple[float, np.ndarray]:
    """L(o) = Σ_pairs max(0, 1 − (o_i − o_j))² and ∂L/∂o, by the sort (no c, no ½‖w‖²)."""
    L, r, _, _, _ = _score_loss(np.ascontiguousarray(o, dtype=np.float64),
                                np.ascontiguousarray(pos, dtype=np.bool_))
    return float(L), r


def score_hessian(o: np.ndarray, pos: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """H_L δ = 2z for the generalised Hessian of L at the scores o (active set at o)."""
    _, _, sp, sn, alpha = _score_loss(np.ascontiguousarray(o, dtype=np.float64),
                                      np.ascontiguousarray(pos, dtype=np.bool_))
    z = np.empty(o.shape[0])
    _pair_hessian(np.ascontiguousarray(delta, dtype=np.float64), sp, sn, alpha, z)
    return 2.0 * z


def objective(A: Design, pos: np.ndarray, C: float, w: np.ndarray,
              v: np.ndarray | None = None) -> tuple[float, np.ndarray, np.ndarray | None]:
    """F(w), ∇F(w) and (if ``v`` is given) the generalised Hessian times v, by the sort."""
    pos = np.ascontiguousarray(pos, dtype=np.bool_)
    n = pos.shape[0]
    c = float(C) / (float(pos.sum()) * float(n - pos.sum()))
    o = np.empty(n)
    _matvec(A, np.ascontiguousarray(w, dtype=np.float64), o)
    L, r, sp, sn, alpha = _score_loss(o, pos)
    g = np.empty(w.shape[0])
    _rmatvec(A, r, g)
    F = 0.5 * float(w @ w) + c * L
    g = w + c * g
    hv = None
    if v is not None:
        hv = np.empty(w.shape[0])
        _hess_vec(A, c, np.ascontiguousarray(v, dtype=np.float64), sp, sn, alpha,
                  np.empty(n), np.empty(n), hv)
    return F, g, hv


# ------------------------------------------------------------------ window kernels
# models.batch keeps per-class buffers (models._buffers layout) of raw rows and solves
# on them at fixed event counts. These kernels admit rows and gather the window, the
# negatives' buffer first, then the positives', each oldest to newest.


@njit(cache=True, nogil=True)
def admit_dense(X, y, lo, hi, buf, order, n_seen, rng, policy):
    """Rows lo..hi−1 into the dense per-class buffers (reservoir or FIFO)."""
    for t in range(lo, hi):
        c = 1 if y[t] > 0 else 0
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            buf[c, slot, :] = X[t]


@njit(cache=True, nogil=True)
def admit_csr(indptr, indices, values, y, lo, hi, bidx, bval, bnnz, order, n_seen, rng,
              policy):
    """CSR rows lo..hi−1 into the sparse per-class buffers."""
    for t in range(lo, hi):
        c = 1 if y[t] > 0 else 0
        slot = admit(order, n_seen, c, policy, rng)
        if slot >= 0:
            a = indptr[t]
            b = indptr[t + 1]
            write_sparse_row(bidx, bval, bnnz, c, slot, indices[a:b], values[a:b])


@njit(cache=True, nogil=True)
def window_dense(buf, order, n_seen):
    """The buffered rows (negatives, then positives, oldest first) and their labels."""
    cap = order.shape[1]
    size0 = min(n_seen[0], cap)
    size1 = min(n_seen[1], cap)
    D = buf.shape[2]
    X = np.empty((size0 + size1, D))
    pos = np.zeros(size0 + size1, np.bool_)
    k = 0
    for c in range(2):
        for q in range(min(n_seen[c], cap)):
            X[k, :] = buf[c, order[c, q]]
            pos[k] = c == 1
            k += 1
    return X, pos


@njit(cache=True, nogil=True)
def window_csr(bidx, bval, bnnz, order, n_seen):
    """The sparse window as CSR over its own columns: (indptr, local indices, values,
    pos, cols) with cols the window's distinct columns ascending, local index k ↔ cols[k]."""
    cap = order.shape[1]
    n = min(n_seen[0], cap) + min(n_seen[1], cap)
    indptr = np.zeros(n + 1, np.int64)
    pos = np.zeros(n, np.bool_)
    k = 0
    for c in range(2):
        for q in range(min(n_seen[c], cap)):
            indptr[k + 1] = indptr[k] + bnnz[c, order[c, q]]
            pos[k] = c == 1
            k += 1
    nnz = indptr[n]
    indices = np.empty(nnz, np.int64)
    values = np.empty(nnz)
    k = 0
    for c in range(2):
        for q in range(min(n_seen[c], cap)):
            slot = order[c, q]
            a = indptr[k]
            for p in range(bnnz[c, slot]):
                indices[a + p] = bidx[c, slot, p]
                values[a + p] = bval[c, slot, p]
            k += 1
    cols = np.unique(indices)
    return indptr, np.searchsorted(cols, indices), values, pos, cols


@njit(cache=True, nogil=True)
def spread_moments(X, t0, limit, moments):
    """Welford over the rows of X, events t0 + 1, t0 + 2, … up to event ``limit``:
    moments[0] the running mean, moments[1] the sums of squared deviations (per column),
    so that mean‖x − x̄‖² over the events so far is Σ moments[1] / min(t, limit)."""
    mean = moments[0]
    m2 = moments[1]
    for r in range(X.shape[0]):
        t = t0 + r + 1
        if t > limit:
            break
        row = X[r]
        for j in range(row.shape[0]):
            delta = row[j] - mean[j]
            mean[j] += delta / t
            m2[j] += delta * (row[j] - mean[j])
