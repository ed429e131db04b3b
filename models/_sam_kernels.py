"""numba kernels of ASAM, SAM and PSAM (Khalid, dissertation 2019, Algorithms 10 and 11).

Every event first enters its own class's reservoir (the counter includes it), then
``Rule.pairs`` partners are drawn uniformly, with replacement, from the opposite
reservoir; each pair x_t = x⁺ − x⁻ is one iteration t (t counts pairs, from 1) of

1. the loss step: ASAM/SAM's hinge subgradient step w ← w + x_t/(λ(t + t0)) when
   wᵀx_t < 1, or PSAM's proximal step w ← prox_{λ_t f_t}(w), λ_t = 1/(γ(t + t0));
2. every r_skip-th pair, the scheduled shrink w ← (1 − r_skip/(t + t0))·w;
3. every a_skip-th pair (ASAM, PSAM), the running average w̃ ← (q·w̃ + w)/(q + 1).

Algorithm 10's counters r_count, a_count and q are r_skip − (t mod r_skip),
a_skip − (t mod a_skip) and ⌊t/a_skip⌋ (both counters start at their skip and count down
once per pair), so the state keeps t alone and the kernels derive them on entry.

Two layouts of the same algorithm. Their arguments are grouped: ``model`` (the learned
vectors and counters), ``bufs`` (the reservoirs) and ``rule`` (the configuration), each
a tuple of arrays or numbers in the field order of :class:`Model`, :class:`DenseBuffers`
/ :class:`SparseBuffers` and :class:`Rule`, which name the fields. The named tuples
themselves are accepted too; the learners pass plain tuples because numba types a named
tuple argument in Python, a few µs per call each. Learners that run these algorithms on
mapped dense features (Nyström, Fourier) call ``dense_learn`` with their mapped rows.

- dense: w and w̃ as vectors, O(d) per pair; buffers of dense rows;
- lazy (sparse rows): w = σ·u and q·w̃ = c·u − Ã, O(nnz) per pair: the shrink is σ's
  product, a snapshot adds σ to c, and a step δ on u adds c·δ to Ã. σ is folded back
  into u (O(d)) when it falls below ``Rule.min_scale``; the kernel returns to its
  caller for that (see :func:`sparse_learn`).

Arithmetic: a pair's margin wᵀx_t is formed as ±(wᵀx − wᵀx_b), x the event and x_b the
buffered partner. The dense layout draws an event's partners first and computes wᵀx and
all their wᵀx_b in one pass over the features (six independent sums per feature), again
after a loss step, while a shrink w ← f·w scales the sums still to come by f; the lazy
layout takes one sparse dot product per row (its σ carries the shrinks). That is one
product per pair instead of a pass that also forms x_t, which only 2–4 % of the pairs
on the bench stream need (the violated ones, and the η0 calibration's). The algebra is
the paper's; the margin's rounding differs from a literal wᵀ(x⁺ − x⁻) at the
1e-16·Σ|wᵢxᵢ| level. x_t itself, for a step and for ‖x_t‖², is formed coordinate by
coordinate as x⁺ᵢ − x⁻ᵢ.

Class index 0 is the negative class, 1 the positive class.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ._buffers import RESERVOIR, admit, sparse_diff, write_sparse_row
from ._rng import below

__all__ = [
    "ETA0_PAIRS",
    "SAM_MIN_SCALE",
    "DenseBuffers",
    "Model",
    "Rule",
    "SparseBuffers",
    "dense_learn",
    "fold",
    "hinge_coef",
    "lazy_scores",
    "lazy_weights",
    "numerator",
    "numerator_scores",
    "prox_coef",
    "sparse_learn",
]

# ------------------------------------------------------------------------------------
# Named constants and tolerances of this family (models/_config.py holds the shared ones).
#
# ASAM/SAM: η0 = eta_scale / mean‖x⁺ − x⁻‖² over this many first pairs, then frozen, and
# t0 = 1/(λ·η0) (specs README, second-wave defaults; review-second-wave §2).
ETA0_PAIRS = 100
# Sparse storage keeps w = σ·u; σ is folded back into u when it falls below this, so
# that u (= w/σ) cannot grow without bound. The idea and the value of
# ``_config.SOLAM_MIN_SCALE``: the lazy average c·u − Ã cancels by up to 1/σ, so its
# rounding is amplified by at most 1/SAM_MIN_SCALE = 1e4.
SAM_MIN_SCALE = 1e-4
# ------------------------------------------------------------------------------------


class Rule(NamedTuple):
    """The configuration of one learner (numbers only)."""

    prox: bool  # PSAM's proximal step (True) or ASAM/SAM's hinge subgradient step
    lam: float  # λ of eq. 6.1 (ASAM, SAM) or γ of Algorithm 11 (PSAM)
    calibrate: bool  # t0 = 1/(λ·η0) with η0 calibrated on the first pairs; else t0 fixed
    t0: float  # the fixed t0 (calibrate=False)
    eta_scale: float  # η0 = eta_scale / mean‖x⁺ − x⁻‖² (calibrate=True)
    r_skip: int  # shrink every r_skip pairs
    a_skip: int  # average every a_skip pairs; 0: no averaging (SAM)
    pairs: int  # pairs per event
    min_scale: float  # lazy layout: fold σ into u below this


class Model(NamedTuple):
    """The learned vectors and counters (updated in place)."""

    w: np.ndarray  # dense: w; lazy: u, with w = σ·u
    avg: np.ndarray  # dense: w̃; lazy: Ã, with q·w̃ = c·u − Ã; empty without averaging
    lazy: np.ndarray  # lazy: [σ, c]; dense: empty
    t: np.ndarray  # int64[1]: pairs learned so far
    cal: np.ndarray  # [pairs calibrated on, Σ‖x⁺ − x⁻‖², η0 (0 until defined)]; empty if t0 fixed


class DenseBuffers(NamedTuple):
    """Per-class reservoirs of dense rows (layout of ``models._buffers``)."""

    rows: np.ndarray  # (2, capacity, d)
    order: np.ndarray  # (2, capacity) slots, oldest to newest
    n_seen: np.ndarray  # (2,) events seen per class
    rng: np.ndarray  # uint64[4] generator state


class SparseBuffers(NamedTuple):
    """Per-class reservoirs of sorted sparse rows (layout of ``models._buffers``)."""

    idx: np.ndarray  # (2, capacity, width) int64
    val: np.ndarray  # (2, capacity, width)
    nnz: np.ndarray  # (2, capacity) int64
    order: np.ndarray
    n_seen: np.ndarray
    rng: np.ndarray


# --------------------------------------------------------------------- one iteration
@njit(cache=True, nogil=True, inline="always")
def hinge_coef(m, lam, t, t0):
    """ASAM/SAM's loss step w ← w − η_t·ℓ′(m)·x_t with η_t = 1/(λ(t + t0)) and ℓ′(m) = −1
    if m = wᵀx_t < 1, else 0 (Algorithm 10): the coefficient of x_t."""
    if m < 1.0:
        return 1.0 / (lam * (t + t0))
    return 0.0


@njit(cache=True, nogil=True, inline="always")
def prox_coef(m, sq, lam_t):
    """PSAM's step prox_{λ_t f}(w) = w − λ_t·g·x_t (Appendix A, closed form) with
    z = (1 − m)/(λ_t‖x_t‖²), g = 0 if z ≤ 0, −1 if z ≥ 1, else −z: the coefficient −λ_t·g
    of x_t. Needs ‖x_t‖² = ``sq`` > 0."""
    z = (1.0 - m) / (lam_t * sq)
    if z <= 0.0:
        g = 0.0
    elif z >= 1.0:
        g = -1.0
    else:
        g = -z
    return -lam_t * g


@njit(cache=True, nogil=True, inline="always")
def _calibrating(calibrate, cal):
    """Is the η0 calibration still open: the first ETA0_PAIRS pairs, or until a pair with
    x⁺ ≠ x⁻ has been seen?"""
    return calibrate and (cal[0] < ETA0_PAIRS or cal[1] == 0.0)


@njit(cache=True, nogil=True, inline="always")
def _calibrate(eta_scale, cal, sq):
    """Count a pair's ‖x⁺ − x⁻‖² into η0 = eta_scale·n/Σ‖·‖² (running until frozen)."""
    cal[0] += 1.0
    cal[1] += sq
    if cal[1] > 0.0:
        cal[2] = eta_scale * cal[0] / cal[1]


@njit(cache=True, nogil=True, inline="always")
def _offset(calibrate, lam, t0, cal):
    """t0 for the current pair (the fixed ``t0``, or 1/(λη0) when calibrating), or −1
    while ASAM/SAM's η0 is undefined (no pair with x⁺ ≠ x⁻ yet: w is still 0, and the
    pair changes nothing)."""
    if not calibrate:
        return t0
    eta0 = cal[2]
    if eta0 > 0.0:
        return 1.0 / (lam * eta0)
    return -1.0


@njit(cache=True, nogil=True, inline="always")
def _step_coef(prox, lam, m, sq, t, t0):
    """The loss step's coefficient of x_t for margin m: PSAM's (``prox``; ``sq`` =
    ‖x_t‖² > 0) with λ_t = 1/(λ(t + t0)), or ASAM/SAM's."""
    if prox:
        return prox_coef(m, sq, 1.0 / (lam * (t + t0)))
    return hinge_coef(m, lam, t, t0)


# ------------------------------------------------------------------------ dense layout
@njit(cache=True, nogil=True, inline="always")
def _sqnorm(v):
    """‖v‖² with four interleaved partial sums (``_kernels.dot4``'s order)."""
    n = v.shape[0]
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    i = 0
    while i + 4 <= n:
        s0 += v[i] * v[i]
        s1 += v[i + 1] * v[i + 1]
        s2 += v[i + 2] * v[i + 2]
        s3 += v[i + 3] * v[i + 3]
        i += 4
    while i < n:
        s0 += v[i] * v[i]
        i += 1
    return (s0 + s1) + (s2 + s3)


# Partners whose margins one pass over the features computes together (with the event's
# own wᵀx): six independent sums per feature keep the core busy, where one sum per pass
# waits on its own additions (an event's margins took 0.6× the time of one dot product
# per row at d = 54, measured).
BLOCK = 5


@njit(cache=True, nogil=True, inline="always")
def _block_sums(w, X, r, rows, c, b0, b1, b2, b3, b4):
    """(wᵀX[r], wᵀrows[c, b0], …, wᵀrows[c, b4]) in one pass over the features; every sum
    runs left to right, as ``_kernels.dense_dot`` does, whichever block a row falls in.
    Rows are indexed in place and only numbers come back: see :func:`dense_learn`."""
    sx = 0.0
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    s4 = 0.0
    for i in range(w.shape[0]):
        wi = w[i]
        sx += X[r, i] * wi
        s0 += rows[c, b0, i] * wi
        s1 += rows[c, b1, i] * wi
        s2 += rows[c, b2, i] * wi
        s3 += rows[c, b3, i] * wi
        s4 += rows[c, b4, i] * wi
    return sx, s0, s1, s2, s3, s4


@njit(cache=True, nogil=True)
def dense_learn(X, y, model, bufs, rule, prior):
    """ASAM/SAM/PSAM over dense rows, w and w̃ as vectors. ``y`` is ±1. If ``prior`` is
    non-empty, ``prior[r]`` receives the served score of row r before it is learned (w̃ᵀx
    once an average exists, else wᵀx). Returns the number of pairs whose loss step
    changed w.

    An event's partners are drawn first (the generator's sequence is the same: nothing
    else draws in between) and their margins computed together with wᵀx in one pass;
    after a pair's loss step those of the partners still to come are computed again,
    after a shrink they are scaled with w.

    The event loop indexes rows in place (``X[r, i]``, ``rows[c, b, i]``) and gives no
    helper an array to fill: row views, a slice assignment and such helpers made numba
    keep atomic reference-count increments and decrements in the loop, about ten pairs
    per event, a sixth of the kernel's time at d = 54 (measured). The reservoir's
    ``admit`` call still costs two pairs per event."""
    n, d = X.shape
    w, avg, _, count, cal = model
    rows, order, n_seen, rng = bufs
    prox, lam, calibrate, t0_fixed, eta_scale, r_skip, a_skip, pairs, _ = rule
    cap = rows.shape[1]
    averaging = a_skip > 0
    # Algorithm 10/11's counters, from t (see the module docstring)
    t = count[0]
    r_count = r_skip - t % r_skip
    a_count = a_skip - t % a_skip if averaging else 1
    q = t // a_skip if averaging else 0
    t0 = _offset(calibrate, lam, t0_fixed, cal)
    calibrating = _calibrating(calibrate, cal)  # changes only when a pair calibrates
    delta = np.empty(d)
    partner = np.empty(pairs, np.int64)  # the event's partner slots
    wb = np.empty(pairs)  # and their wᵀx_b
    steps = 0
    for r in range(n):
        if prior.shape[0]:  # the served score, as _kernels.dense_scores sums it
            acc = 0.0
            if q > 0:
                for i in range(d):
                    acc += X[r, i] * avg[i]
            else:
                for i in range(d):
                    acc += X[r, i] * w[i]
            prior[r] = acc
        c = 1 if y[r] > 0 else 0
        opp = 1 - c
        slot = admit(order, n_seen, c, RESERVOIR, rng)
        if slot >= 0:
            for i in range(d):
                rows[c, slot, i] = X[r, i]
        size = min(n_seen[opp], cap)
        if size == 0:
            continue
        sign = y[r]
        for j in range(pairs):
            partner[j] = order[opp, below(rng, size)]
        wx = 0.0
        # j = -1 only computes the sums; pair j ≥ 0 takes its loss step, then (if w moved)
        # the sums of the partners still to come, then its shrink and average
        for j in range(-1, pairs):
            due = j < 0
            if j >= 0:
                b = partner[j]
                m = sign * (wx - wb[j])  # wᵀx_t (see the module docstring)
                t += 1
                sq = -1.0
                step = t0 >= 0.0 and m < 1.0  # with m ≥ 1 both loss steps are the identity
                if calibrating or step:  # x_t = sign·(x − x_b) = x⁺ − x⁻ (negation is exact)
                    for i in range(d):
                        delta[i] = sign * (X[r, i] - rows[opp, b, i])
                if calibrating:
                    sq = _sqnorm(delta)
                    _calibrate(eta_scale, cal, sq)
                    t0 = _offset(calibrate, lam, t0_fixed, cal)
                    calibrating = _calibrating(calibrate, cal)
                    step = t0 >= 0.0 and m < 1.0
                # t0 < 0: ASAM/SAM before any pair with x⁺ ≠ x⁻; w is 0 and stays 0
                if step:
                    if prox and sq < 0.0:
                        sq = _sqnorm(delta)
                    if not prox or sq > 0.0:  # PSAM skips a pair with ‖x_t‖² = 0
                        coef = _step_coef(prox, lam, m, sq, t, t0)
                        if coef != 0.0:
                            for i in range(d):
                                w[i] += coef * delta[i]
                            steps += 1
                            due = j + 1 < pairs  # the partners to come, at the new w
            if due:
                first = j + 1
                for lo in range(first, pairs, BLOCK):
                    hi = min(lo + BLOCK, pairs)
                    b0 = partner[lo]  # an unused lane repeats lane 0
                    sx, s0, s1, s2, s3, s4 = _block_sums(
                        w, X, r, rows, opp, b0, partner[lo + 1] if lo + 1 < hi else b0,
                        partner[lo + 2] if lo + 2 < hi else b0,
                        partner[lo + 3] if lo + 3 < hi else b0,
                        partner[lo + 4] if lo + 4 < hi else b0)
                    if lo == first:
                        wx = sx
                    wb[lo] = s0
                    if lo + 1 < hi:
                        wb[lo + 1] = s1
                    if lo + 2 < hi:
                        wb[lo + 2] = s2
                    if lo + 3 < hi:
                        wb[lo + 3] = s3
                    if lo + 4 < hi:
                        wb[lo + 4] = s4
            if j < 0:
                continue
            r_count -= 1
            if r_count <= 0:
                if t0 >= 0.0:
                    f = 1.0 - r_skip / (t + t0)
                    for i in range(d):
                        w[i] *= f
                    # the sums to come scale with w (to rounding; see the module docstring)
                    wx *= f
                    for k in range(j + 1, pairs):
                        wb[k] *= f
                r_count = r_skip
            if averaging:
                a_count -= 1
                if a_count <= 0:  # w̃ ← (q·w̃ + w)/(q + 1)
                    f0 = q / (q + 1.0)
                    f1 = 1.0 / (q + 1.0)
                    for i in range(d):
                        avg[i] = f0 * avg[i] + f1 * w[i]
                    q += 1
                    a_count = a_skip
    count[0] = t
    return steps


# ------------------------------------------------------------------------- lazy layout
@njit(cache=True, nogil=True, inline="always")
def _lazy_served(u, atil, sigma, csum, q, indices, values, lo, hi):
    """The served score of a CSR row: q·w̃ᵀx/q = Σ(c·u_i − Ã_i)·x_i / q once an average
    exists (q > 0), else wᵀx = σ·Σ u_i·x_i."""
    acc = 0.0
    if q > 0:
        for j in range(lo, hi):
            i = indices[j]
            acc += (csum * u[i] - atil[i]) * values[j]
        return acc / q
    for j in range(lo, hi):
        acc += u[indices[j]] * values[j]
    return sigma * acc


@njit(cache=True, nogil=True)
def sparse_learn(first, first_pair, indptr, indices, values, y, model, bufs, rule, prior):
    """ASAM/SAM/PSAM over canonical CSR rows with sparse reservoirs, O(nnz) per pair.

    ``model`` = (u, Ã, [σ, c], [t], cal) with w = σ·u and, with averaging,
    q·w̃ = c·u − Ã. Rows ``first``, ``first`` + 1, … are learned,
    the first of them from its pair ``first_pair`` on (a row resumed at a pair > 0 was
    already admitted and scored). When a pair needs x_t = x⁺ − x⁻ it is merged over the
    union of the two rows' columns, so each coordinate is formed as the dense layout
    forms it.

    Returns ``(row, pair, fold_due)``: when a shrink leaves σ below the rule's ``min_scale``, the
    kernel stops after that pair (and its snapshot) with the position to resume from;
    the caller runs :func:`fold` (O(d)) and calls again. Otherwise ``(n, 0, False)``.
    """
    n = indptr.shape[0] - 1
    u, atil, lazy, count, cal = model
    bidx, bval, bnnz, order, n_seen, rng = bufs
    prox, lam, calibrate, t0_fixed, eta_scale, r_skip, a_skip, pairs, min_scale = rule
    cap = bidx.shape[1]
    longest = bidx.shape[2]
    for r in range(first, n):
        longest = max(longest, indptr[r + 1] - indptr[r])
    di = np.empty(2 * longest, np.int64)
    dv = np.empty(2 * longest)
    averaging = a_skip > 0
    t = count[0]
    r_count = r_skip - t % r_skip
    a_count = a_skip - t % a_skip if averaging else 1
    q = t // a_skip if averaging else 0
    t0 = _offset(calibrate, lam, t0_fixed, cal)
    p0 = first_pair
    for r in range(first, n):
        lo, hi = indptr[r], indptr[r + 1]
        xi = indices[lo:hi]
        xv = values[lo:hi]
        c = 1 if y[r] > 0 else 0
        opp = 1 - c
        if p0 == 0:
            if prior.shape[0]:
                prior[r] = _lazy_served(u, atil, lazy[0], lazy[1], q, indices, values, lo, hi)
            slot = admit(order, n_seen, c, RESERVOIR, rng)
            if slot >= 0:
                write_sparse_row(bidx, bval, bnnz, c, slot, xi, xv)
        size = min(n_seen[opp], cap)
        if size == 0:
            p0 = 0
            continue
        sign = y[r]
        ux = 0.0  # uᵀx, refreshed whenever u changes
        for j in range(hi - lo):
            ux += u[xi[j]] * xv[j]
        for p in range(p0, pairs):
            b = order[opp, below(rng, size)]
            bi = bidx[opp, b]
            bv = bval[opp, b]
            nb = bnnz[opp, b]
            uo = 0.0
            for j in range(nb):
                uo += u[bi[j]] * bv[j]
            sigma = lazy[0]
            m = sigma * (sign * (ux - uo))  # wᵀx_t
            t += 1
            sq = -1.0
            calibrating = _calibrating(calibrate, cal)
            step = t0 >= 0.0 and m < 1.0
            k = 0
            if calibrating or step:  # x_t over the union of the two rows' columns
                k = sparse_diff(xi, xv, hi - lo, bi, bv, nb, di, dv)
                if sign < 0.0:
                    for j in range(k):
                        dv[j] = -dv[j]
            if calibrating:
                sq = 0.0
                for j in range(k):
                    sq += dv[j] * dv[j]
                _calibrate(eta_scale, cal, sq)
                t0 = _offset(calibrate, lam, t0_fixed, cal)  # < 0: w = 0 stays 0, as in dense_learn
                step = t0 >= 0.0 and m < 1.0
            if step:
                if prox and sq < 0.0:
                    sq = 0.0
                    for j in range(k):
                        sq += dv[j] * dv[j]
                if not prox or sq > 0.0:
                    coef = _step_coef(prox, lam, m, sq, t, t0)
                    if coef != 0.0:  # w += coef·x_t: u += (coef/σ)·x_t, Ã += c·(coef/σ)·x_t
                        cu = coef / sigma
                        for j in range(k):
                            u[di[j]] += cu * dv[j]
                        if averaging:
                            ca = lazy[1] * cu
                            for j in range(k):
                                atil[di[j]] += ca * dv[j]
                        ux = 0.0
                        for j in range(hi - lo):
                            ux += u[xi[j]] * xv[j]
            fold_due = False
            r_count -= 1
            if r_count <= 0:
                if t0 >= 0.0:
                    sigma *= 1.0 - r_skip / (t + t0)
                    lazy[0] = sigma
                    fold_due = sigma < min_scale
                r_count = r_skip
            if averaging:
                a_count -= 1
                if a_count <= 0:
                    lazy[1] += sigma  # q·w̃ += w = σ·u
                    q += 1
                    a_count = a_skip
            if fold_due:
                count[0] = t
                if p + 1 < pairs:
                    return r, p + 1, True
                return r + 1, 0, True
        p0 = 0
    count[0] = t
    return n, 0, False


@njit(cache=True, nogil=True)
def fold(u, atil, lazy, averaging):
    """Fold σ into u: u ← σ·u, σ ← 1; with averaging, c restarts at 0 with Ã ← Ã − c·u
    (so that c·u − Ã is unchanged)."""
    sigma = lazy[0]
    csum = lazy[1]
    for i in range(u.shape[0]):
        if averaging:
            atil[i] -= csum * u[i]
        u[i] *= sigma
    lazy[0] = 1.0
    lazy[1] = 0.0


@njit(cache=True, nogil=True)
def lazy_scores(indptr, indices, values, u, atil, sigma, csum, q):
    """Served scores of canonical CSR rows (w̃ᵀx if q > 0, else wᵀx); the learn kernel's
    arithmetic, to the bit."""
    n = indptr.shape[0] - 1
    out = np.empty(n)
    for r in range(n):
        out[r] = _lazy_served(u, atil, sigma, csum, q, indices, values, indptr[r],
                              indptr[r + 1])
    return out


@njit(cache=True, nogil=True)
def numerator(u, atil, csum):
    """c·u − Ã element by element, rounded exactly as :func:`lazy_scores` forms it."""
    out = np.empty(u.shape[0])
    for i in range(u.shape[0]):
        out[i] = csum * u[i] - atil[i]
    return out


@njit(cache=True, nogil=True)
def numerator_scores(indptr, indices, values, num, q):
    """:func:`lazy_scores` serving w̃ (q > 0) from a precomputed numerator c·u − Ã: the
    same products summed in the same order, so the same bits, from one array."""
    n = indptr.shape[0] - 1
    out = np.empty(n)
    for r in range(n):
        acc = 0.0
        for j in range(indptr[r], indptr[r + 1]):
            acc += num[indices[j]] * values[j]
        out[r] = acc / q
    return out


@njit(cache=True, nogil=True)
def lazy_weights(u, atil, sigma, csum, q, average):
    """Dense w = σ·u, or w̃ = (c·u − Ã)/q (zero before the first snapshot), O(d)."""
    d = u.shape[0]
    out = np.zeros(d)
    if average:
        if q > 0:
            for i in range(d):
                out[i] = (csum * u[i] - atil[i]) / q
        return out
    for i in range(d):
        out[i] = sigma * u[i]
    return out
