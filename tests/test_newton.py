"""The PRSVM+ solver (models._newton) against brute force over every pair, and its
properties: the sorted sums, the gradient and Hessian by finite differences, the line
search, the stopping rule, L-BFGS, warm starts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from aucstream.models import _newton as N
from aucstream.models._sparse import dense_to_csr
from tests.helpers import assert_close, stream
from tests.reference import newton as R


def _problem(n=120, d=6, seed=0, pos_rate=0.3, offset=0.0):
    X, y = stream(n, d, seed=seed, pos_rate=pos_rate)
    return X + offset, y == 1


def _design(X, sparse=False):
    return N.csr_design(*dense_to_csr(X)) if sparse else N.dense_design(X)


# ------------------------------------------------------------- sorted sums = all pairs
_SIZES = st.sampled_from([2, 4, 8, 16, 32, 64])


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_sorted_sums_equal_all_pairs_with_exact_ties(data):
    """Integer scores: ties in scores, and pairs whose slack is exactly 0 (o_i − o_j = 1,
    inactive under the strict rule). n is a power of two, so the centring subtracts a
    dyadic mean exactly and every tie survives it: agreement to the bit expected, and
    to 1e-12 asked."""
    n = data.draw(_SIZES)
    o = np.array(data.draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n)), float)
    pos = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    delta = np.array(data.draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n)), float)
    if pos.all() or not pos.any():
        pos[0] = not pos[0]
    loss, r = N.score_loss(o, pos)
    loss_ref, r_ref = R.score_loss(o, pos)
    assert loss == pytest.approx(loss_ref, rel=1e-12, abs=1e-12)
    assert_close(r, r_ref, rtol=1e-12, what="∂L/∂o")
    assert_close(N.score_hessian(o, pos, delta), R.score_hessian(o, pos, delta), rtol=1e-12,
                 what="H_L δ")


@settings(max_examples=100, deadline=None)
@given(n=st.integers(2, 90), seed=st.integers(0, 10_000),
       offset=st.sampled_from([0.0, 3.0, -1e3, 1e7]), spread=st.sampled_from([0.1, 1.0, 30.0]))
def test_sorted_sums_equal_all_pairs_on_real_scores(n, seed, offset, spread):
    """Random scores, some repeated (ties), under a common offset up to 1e7: the centred
    sorted sums equal the explicit pairs, which see only differences."""
    rng = np.random.default_rng(seed)
    o = spread * rng.normal(size=n) + offset
    o[rng.random(n) < 0.2] = o[0]  # ties in scores
    pos = rng.random(n) < 0.4
    pos[0], pos[-1] = True, False
    delta = rng.normal(size=n)
    loss_ref, r_ref = R.score_loss(o, pos)
    loss, r = N.score_loss(o, pos)
    assert loss == pytest.approx(loss_ref, rel=1e-11)
    assert_close(r, r_ref, rtol=1e-11, what="∂L/∂o")
    assert_close(N.score_hessian(o, pos, delta), R.score_hessian(o, pos, delta), rtol=1e-12,
                 what="H_L δ")


def test_the_offset_does_not_cancel():
    """The review's cancellation case: at an offset of 1e7 the uncentred expanded sums
    lose ~1e-2 of L; centred, the loss of o + 1e7 equals that of o to ~1e-9."""
    rng = np.random.default_rng(3)
    o = rng.normal(size=400)
    pos = rng.random(400) < 0.3
    loss0, _ = N.score_loss(o, pos)
    loss1, _ = N.score_loss(o + 1e7, pos)
    assert loss1 == pytest.approx(loss0, rel=1e-8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 60), d=st.integers(1, 7), seed=st.integers(0, 10_000),
       C=st.sampled_from([1e-3, 1.0, 1e3, 1e5]), sparse=st.booleans())
def test_objective_gradient_and_hv_equal_all_pairs(n, d, seed, C, sparse):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[rng.random((n, d)) < 0.3] = 0.0
    X[rng.random(n) < 0.2] = X[0]  # duplicate rows: ties in every score
    pos = rng.random(n) < 0.5
    pos[0], pos[-1] = True, False
    w = rng.normal(size=d)
    v = rng.normal(size=d)
    f, g, hv = N.objective(_design(X, sparse), pos, C, w, v)
    f_ref, g_ref, hv_ref = R.objective(X, pos, C, w, v)
    f_pairs, g_pairs = R.objective_by_pairs(X, pos, C, w)
    assert f == pytest.approx(f_ref, rel=1e-12)
    assert f_ref == pytest.approx(f_pairs, rel=1e-12)
    assert_close(g, g_ref, rtol=1e-11, what="∇F")
    assert_close(g_ref, g_pairs, rtol=1e-11, what="∇F by pair differences")
    assert_close(hv, hv_ref, rtol=1e-11, what="Hv")


def test_gradient_and_hessian_by_finite_differences():
    X, pos = _problem(n=80, d=5, seed=2)
    A = N.dense_design(X)
    rng = np.random.default_rng(0)
    for C in (1.0, 100.0):
        w = 0.3 * rng.normal(size=5)
        _, g, _ = N.objective(A, pos, C, w)
        h = 1e-6
        fd = np.array([(N.objective(A, pos, C, w + h * e)[0]
                        - N.objective(A, pos, C, w - h * e)[0]) / (2 * h) for e in np.eye(5)])
        assert_close(g, fd, rtol=1e-7, what="∇F vs central differences of F")
        # away from the kinks (no slack within 1e-4 of 0) Hv is the derivative of ∇F
        o = X @ w
        slack = R.pair_slacks(o, pos)
        v = rng.normal(size=5)
        eps = 1e-7
        assert np.abs(slack).min() > 10 * eps * np.abs(X @ v).max()
        _, _, hv = N.objective(A, pos, C, w, v)
        fd = (N.objective(A, pos, C, w + eps * v)[1] - N.objective(A, pos, C, w - eps * v)[1])
        assert_close(hv, fd / (2 * eps), rtol=1e-6, what="Hv vs differences of ∇F")


# ------------------------------------------------------------- the line search
def test_the_line_search_is_exact():
    """φ(t) = F(w + t s) is piecewise quadratic: at the returned t, φ'(t) ≈ 0 by
    brute force, and φ is no lower a little to either side."""
    X, pos = _problem(n=100, d=6, seed=4)
    rng = np.random.default_rng(1)
    ip, ineg = np.flatnonzero(pos), np.flatnonzero(~pos)
    c = 50.0 / (len(ip) * len(ineg))
    for trial in range(5):
        w = rng.normal(size=6)
        s = rng.normal(size=6) * (trial + 1)
        F0 = R.objective(X, pos, 50.0, w)[0]
        o, p = X @ w, X @ s
        n = len(pos)
        scratch = [np.empty(n) for _ in range(6)]
        sp, sn = np.empty(len(ip), np.int64), np.empty(len(ineg), np.int64)
        u, yhat, alpha, beta, r, z = scratch
        if R.objective(X, pos, 50.0, w)[1] @ s > 0:
            s = -s
            p = -p
        t, Ft, evals = N._line_search(o, p, pos, ip, ineg, c, w @ w, w @ s, s @ s, F0,
                                      N.LINE_SEARCH_TOL, N.LINE_SEARCH_MAX_ITER, u, yhat,
                                      sp, sn, alpha, beta, r, z)
        assert evals < N.LINE_SEARCH_MAX_ITER

        def phi(tt, w=w, s=s):
            return R.objective(X, pos, 50.0, w + tt * s)[0]

        dphi = R.objective(X, pos, 50.0, w + t * s)[1] @ s
        assert abs(dphi) <= 1e-7 * (abs(w @ s) + abs(t) * (s @ s) + 1.0)
        assert Ft == pytest.approx(phi(t), rel=1e-12)
        assert phi(t) <= min(phi(t * (1 + 1e-3)), phi(t * (1 - 1e-3)))
        assert phi(t) <= F0


# ------------------------------------------------------------- the solver
def _solve(X, pos, C, w0=None, sparse=False, **kw):
    w = np.zeros(X.shape[1]) if w0 is None else np.array(w0, dtype=float)
    info = N.solve(_design(X, sparse), pos, C, w, **kw)
    return w, info


def _exact_decrement(X, pos, C, w):
    """gᵀH⁻¹g at w with H formed over the explicit active pairs (small problems)."""
    ip, ineg = np.flatnonzero(pos), np.flatnonzero(~pos)
    c = C / (len(ip) * len(ineg))
    diffs = (X[ip][:, None, :] - X[ineg][None, :, :]).reshape(-1, X.shape[1])
    act = (1.0 - diffs @ w) > 0
    H = np.eye(X.shape[1]) + 2 * c * diffs[act].T @ diffs[act]
    g = R.objective(X, pos, C, w)[1]
    return float(g @ np.linalg.solve(H, g))


@pytest.mark.parametrize("C", [1.0, 1e3, 1e5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_solver_meets_its_stopping_rule_and_beats_lbfgs(C, seed):
    X, pos = _problem(n=150, d=8, seed=seed, offset=0.5)
    w, info = _solve(X, pos, C)
    assert info.status == N.CONVERGED and 1 <= info.newton_iters <= N.NEWTON_MAX_ITER
    # the rule, as the solver applied it, and at the returned w with an exact solve
    assert info.decrement < N.NEWTON_DECREMENT_TOL * info.objective_at_decrement
    f = R.objective(X, pos, C, w)[0]
    assert info.objective == pytest.approx(f, rel=1e-12)
    assert _exact_decrement(X, pos, C, w) < N.NEWTON_DECREMENT_TOL * f
    res = minimize(lambda v: R.objective_by_pairs(X, pos, C, v), np.zeros(8), jac=True,
                   method="L-BFGS-B", options={"maxiter": 20_000, "maxfun": 40_000,
                                               "ftol": 1e-15, "gtol": 1e-11})
    assert f <= res.fun * (1 + 1e-6), (f, res.fun, res.message)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("seed", [3, 4])
def test_the_solver_follows_the_reference_step_by_step(seed, sparse):
    X, pos = _problem(n=140, d=7, seed=seed)
    X[np.abs(X) < 0.5] = 0.0
    w0 = np.random.default_rng(seed).normal(size=7)
    for C in (10.0, 1e4):
        w, info = _solve(X, pos, C, w0, sparse=sparse)
        w_ref, trace = R.truncated_newton(X, pos, C, w0)
        assert_close(w, w_ref, rtol=1e-10, what=f"w (C={C})")
        assert info.newton_iters == len(trace.steps) and info.cg_iters == trace.cg_iters
        assert info.objective == pytest.approx(trace.objective, rel=1e-12)
        assert info.decrement == pytest.approx(trace.steps[-1][1], rel=1e-8)


@pytest.mark.parametrize("C", [1.0, 1e3, 1e5])
def test_warm_starts_reach_the_same_fixed_point(C):
    X, pos = _problem(n=200, d=6, seed=5, offset=-0.3)
    rng = np.random.default_rng(7)
    w_cold, _ = _solve(X, pos, C)
    f_cold = R.objective(X, pos, C, w_cold)[0]
    for scale in (0.1, 1.0, 10.0):
        w_warm, info = _solve(X, pos, C, scale * rng.normal(size=6))
        assert info.status == N.CONVERGED
        assert R.objective(X, pos, C, w_warm)[0] == pytest.approx(f_cold, rel=1e-8)
        assert_close(w_warm, w_cold, rtol=1e-4, what="w from a warm start")
    # from the optimum itself: one step at most, nothing moves beyond the tolerance
    w_again, info = _solve(X, pos, C, w_cold)
    assert info.newton_iters <= 1
    assert_close(w_again, w_cold, rtol=1e-6, what="w restarted at the optimum")


def test_dead_columns_are_zeroed_and_sparse_equals_dense():
    X, pos = _problem(n=120, d=8, seed=6)
    X[:, [2, 5]] = 0.0
    X[np.abs(X) < 0.3] = 0.0
    w0 = np.arange(1.0, 9.0)
    w_dense, info_d = _solve(X, pos, 100.0, w0)
    w_sparse, info_s = _solve(X, pos, 100.0, w0, sparse=True)
    assert w_dense[2] == 0.0 and w_dense[5] == 0.0
    assert w_sparse[2] == 0.0 and w_sparse[5] == 0.0
    assert_close(w_sparse, w_dense, rtol=1e-12, what="CSR vs dense design")
    assert info_d.newton_iters == info_s.newton_iters


def test_one_class_and_overflow_are_reported():
    X, pos = _problem(n=30, d=3, seed=8)
    w = np.ones(3)
    info = N.solve(N.dense_design(X), np.ones(30, bool), 1.0, w)
    assert info.status == N.NO_PAIRS and (w == 1.0).all()
    X[4, 0] = 1e200
    info = N.solve(N.dense_design(X), pos, 1.0, np.ones(3))
    assert info.status == N.NONFINITE


def test_the_iteration_caps_hold():
    X, pos = _problem(n=150, d=8, seed=9)
    w, info = _solve(X, pos, 1e6, max_newton=2, max_cg=3)
    assert info.status == N.MAX_ITER
    assert info.newton_iters == 2 and info.cg_iters <= 6
    assert np.isfinite(w).all()
    # and it still went downhill
    assert R.objective(X, pos, 1e6, w)[0] < R.objective(X, pos, 1e6, np.zeros(8))[0]


@pytest.mark.parametrize("n", [29, 32])
def test_wide_rows_take_the_blocked_products(n):
    """D ≥ 512: X v and Xᵀz four rows at a time (n = 29 leaves a remainder); a row of
    zeros and rows without active pairs (z = 0) included."""
    rng = np.random.default_rng(n)
    D = 4 * N._BLOCK_MIN_COLS // 3
    X = rng.normal(size=(n, D)) / np.sqrt(D)
    X[5] = 0.0
    w = 20.0 * rng.normal(size=D)
    o = X @ w
    pos = o > np.median(o)  # separable by w with wide gaps: rows far from the boundary
    v = rng.normal(size=D)  # have no active pair (z = 0)
    f, g, hv = N.objective(N.dense_design(X), pos, 10.0, w, v)
    f_s, g_s, hv_s = N.objective(_design(X, sparse=True), pos, 10.0, w, v)
    f_ref, g_ref, hv_ref = R.objective(X, pos, 10.0, w, v)
    assert R.score_loss(X @ w, pos)[1].tolist().count(0.0) > 0
    for a, b, what in ((g, g_ref, "∇F"), (hv, hv_ref, "Hv"), (g_s, g, "∇F, CSR"),
                       (hv_s, hv, "Hv, CSR")):
        assert_close(a, b, rtol=1e-12, what=what)
    assert f == pytest.approx(f_ref, rel=1e-12) and f_s == pytest.approx(f, rel=1e-12)
    w_dense, info = _solve(X, pos, 10.0)
    w_ref, trace = R.truncated_newton(X, pos, 10.0, np.zeros(D))
    assert_close(w_dense, w_ref, rtol=1e-10, what="w")
    assert info.newton_iters == len(trace.steps)
