"""CBR, CBR-diag and FCBR against the numpy reference, plus the family's invariants."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aucstream import models
from aucstream.models._config import CBR_PRODUCT_REFRESH, CBR_PRODUCTS_MIN_DIM
from aucstream.models._sparse import dense_to_csr
from tests.helpers import assert_close, stream
from tests.reference.cbr import CBRRef, rff_sincos

POLICY = {"fifo": "fifo", "rs": "reservoir"}


def _buffers(state, c):
    """Rows of class c's buffer, oldest first, as a dense matrix."""
    n = min(int(state["n_seen_"][c]), state["capacity"])
    slots = state["order_"][c, :n]
    if "buf_" in state:
        return state["buf_"][c, slots]
    d = state["n_features"]
    out = np.zeros((n, d))
    for r, slot in enumerate(slots):
        k = state["bnnz_"][c, slot]
        out[r, state["bidx_"][c, slot, :k]] = state["bval_"][c, slot, :k]
    return out


def _check_buffers(state, ref):
    for c in (0, 1):
        rows = ref.buffers.rows[c]
        got = _buffers(state, c)
        expected = np.array(rows) if rows else np.zeros((0, got.shape[1]))
        assert_close(got, expected, what=f"buffer {c}")
        assert ref.buffers.count[c] == state["n_seen_"][c]


@pytest.mark.parametrize("kind", ["fifo", "rs"])
@pytest.mark.parametrize("d, n", [(7, 400), (CBR_PRODUCTS_MIN_DIM, CBR_PRODUCT_REFRESH + 400)])
def test_full_cbr_matches_the_reference(kind, d, n):
    """Small d forms Σz from Σ. From CBR_PRODUCTS_MIN_DIM on, the kernel keeps Σb per
    buffered row and recomputes the products every CBR_PRODUCT_REFRESH events; a stream
    longer than that still matches the direct products of the reference."""
    X, y = stream(n, d, seed=11)
    X *= 0.7 * np.sqrt(7 / d)
    lrn = models.create(f"cbr_{kind}", n_features=d, seed=4, C=0.8, capacity=13)
    assert ("sbuf_" in lrn.get_state()) == (d >= CBR_PRODUCTS_MIN_DIM)
    ref = CBRRef(d, C=0.8, eta=0.7, capacity=13, policy=POLICY[kind], seed=4)
    for start in range(0, n, 150):
        lrn.learn(X[start:start + 150], y[start:start + 150])
    for x, t in zip(X, y, strict=True):
        ref.learn_one(x, t)
    st_ = lrn.get_state()
    assert_close(st_["mu_"], ref.mu, what="mu")
    assert_close(st_["sigma_"], ref.sigma, what="sigma")
    _check_buffers(st_, ref)


def test_buffered_products_only_in_high_dimensions():
    small = models.create("cbr_fifo", n_features=CBR_PRODUCTS_MIN_DIM - 1)
    assert "sbuf_" not in small.get_state()
    big = models.create("fcbr_rs", n_features=3, n_components=CBR_PRODUCTS_MIN_DIM // 2)
    assert big.get_state()["sbuf_"].shape == (2, 50, CBR_PRODUCTS_MIN_DIM)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 400),
       kind=st.sampled_from(["cbr_fifo", "cbr_rs", "fcbr_fifo", "fcbr_rs"]))
def test_buffered_products_track_sigma(seed, n, kind):
    """sbuf_ holds Σb for every buffered row b (to rounding), whatever the stream.

    Rounding is measured against ‖b‖: Σ starts at I and only shrinks, so the updates
    that brought Σb down from b carried terms of that size."""
    d = CBR_PRODUCTS_MIN_DIM
    if kind.startswith("fcbr"):
        X, y = stream(n, 4, seed=seed)
        lrn = models.create(kind, n_features=4, seed=seed, C=1.0, capacity=7,
                            n_components=d // 2)
    else:
        X, y = stream(n, d, seed=seed)
        lrn = models.create(kind, n_features=d, seed=seed, C=1.0, capacity=7)
    st_ = lrn.learn(X, y).get_state()
    for c in (0, 1):
        slots = st_["order_"][c, :min(int(st_["n_seen_"][c]), 7)]
        rows = st_["buf_"][c, slots]
        err = np.abs(st_["sbuf_"][c, slots] - rows @ st_["sigma_"])
        assert (err <= 1e-12 * max(np.abs(rows).max(initial=0.0), 1e-300)).all(), c


@pytest.mark.parametrize("kind", ["fcbr_fifo", "fcbr_rs"])
def test_buffered_products_path_is_split_and_restore_exact(kind):
    """Σ's deferred updates are flushed at the end of every learn call; the next call's
    Σx_t then equals what the fused pass would have given, to the bit."""
    X, y = stream(CBR_PRODUCT_REFRESH + 300, 3, seed=5)
    kw = {"n_features": 3, "seed": 2, "capacity": 9, "n_components": CBR_PRODUCTS_MIN_DIM // 2}
    whole = models.create(kind, **kw).learn(X, y).get_state()
    part = models.create(kind, **kw)
    r = CBR_PRODUCT_REFRESH
    for a, b in ((0, 1), (1, 333), (333, r - 1), (r - 1, r), (r, r + 300)):
        part = models.from_state(part.learn(X[a:b], y[a:b]).get_state())
    got = part.get_state()
    assert got.keys() == whole.keys()
    for key, value in whole.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_a_state_without_buffered_products_is_migrated():
    X, y = stream(300, 3, seed=4)
    lrn = models.create("fcbr_rs", n_features=3, seed=1, capacity=8, n_components=64
                        ).learn(X, y)
    old = {k: v for k, v in lrn.get_state().items() if k != "sbuf_"}
    twin = models.from_state(old)
    assert_close(twin.get_state()["sbuf_"], lrn.get_state()["sbuf_"], rtol=1e-12,
                 what="products")
    assert_close(twin.learn(X, y).score(X), lrn.learn(X, y).score(X), rtol=1e-9,
                 what="scores")


@pytest.mark.parametrize("kind", ["fifo", "rs"])
@pytest.mark.parametrize("mode", ["cov", "paper", "prec"])
@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_diag_cbr_matches_the_reference(kind, mode, storage):
    X, y = stream(350, 9, seed=3)
    X[np.abs(X) < 0.6] = 0.0  # real zeros, so sparse rows differ in their patterns
    lrn = models.create(f"cbr_diag_{kind}", n_features=9, seed=2, C=2.0, capacity=11,
                        diag_mode=mode, storage=storage)
    ref = CBRRef(9, C=2.0, eta=0.7, capacity=11, policy=POLICY[kind], seed=2, diag_mode=mode)
    lrn.learn(dense_to_csr(X[:100]), y[:100]).learn(X[100:], y[100:])
    for x, t in zip(X, y, strict=True):
        ref.learn_one(x, t)
    st_ = lrn.get_state()
    assert_close(st_["mu_"], ref.mu, what="mu")
    assert_close(st_["g_"], ref.g, what="G")
    _check_buffers(st_, ref)


@pytest.mark.parametrize("kind", ["fifo", "rs"])
@pytest.mark.parametrize(("step", "normalize"), [(1.0, True), (0.5, False), (1.0, False)])
@pytest.mark.parametrize("m", [12, CBR_PRODUCTS_MIN_DIM // 2])  # direct Σz; buffered Σb
def test_fcbr_matches_the_reference(kind, step, normalize, m):
    X, y = stream(250, 3, seed=8)
    lrn = models.create(f"fcbr_{kind}", n_features=3, seed=6, C=0.3, capacity=9,
                        n_components=m, sigma=1.5, mean_step_scale=step, normalize=normalize)
    theta = lrn.get_state()["theta_"]
    ref = CBRRef(2 * m, C=0.3, eta=0.7, capacity=9, policy=POLICY[kind], seed=6, step_scale=step)
    # θ is drawn first from the same generator that the reservoir then continues.
    ref.buffers.rng = lrn.get_state()["rng_"].copy()
    lrn.learn(X, y)
    Z = rff_sincos(X / np.linalg.norm(X, axis=1, keepdims=True) if normalize else X, theta)
    for z, t in zip(Z, y, strict=True):
        ref.learn_one(z, t)
    st_ = lrn.get_state()
    assert_close(st_["mu_"], ref.mu, what="mu")
    assert_close(st_["sigma_"], ref.sigma, what="sigma")
    _check_buffers(st_, ref)
    assert_close(lrn.score(X), Z @ ref.mu, what="scores")


def test_fcbr_frequencies_follow_the_kernel_width():
    lrn = models.create("fcbr_fifo", n_features=40, seed=1, n_components=500, sigma=2.0)
    theta = lrn.get_state()["theta_"]
    assert theta.shape == (500, 40)
    assert abs(theta.std() - 0.5) < 0.01 and abs(theta.mean()) < 0.01
    # (1/m)-scaled sin/cos features approximate the Gaussian kernel
    rng = np.random.default_rng(0)
    x, z = rng.normal(size=(2, 40)) * 0.25
    phi = rff_sincos(np.stack([x, z]), theta)
    k = np.exp(-np.sum((x - z) ** 2) / (2 * 2.0**2))
    assert abs(phi[0] @ phi[1] - k) < 0.06


def _pair_loss(mu, sigma, z, y, phi):
    return phi * np.sqrt(z @ sigma @ z) - y * (mu @ z)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), C=st.sampled_from([0.01, 0.3, 5.0, 1e6]))
def test_one_step_solves_the_per_pair_problem(seed, C):
    """Prop. 1: with α < C the post-update confidence loss is exactly 0; α = 0 iff loss ≤ 0."""
    rng = np.random.default_rng(seed)
    d = 4
    xp, xn = rng.normal(size=(2, d))
    lrn = models.create("cbr_fifo", n_features=d, C=C, capacity=1)
    lrn.learn(xn[None], [0])  # fills the negative buffer; nothing to pair with yet
    st0 = lrn.get_state()
    lrn.learn(xp[None], [1])
    st1 = lrn.get_state()
    phi = NormalDist().inv_cdf(0.7)
    z = xp - xn
    before = _pair_loss(st0["mu_"], st0["sigma_"], z, 1.0, phi)
    after = _pair_loss(st1["mu_"], st1["sigma_"], z, 1.0, phi)
    assert before > 0  # μ = 0: the pair is always violated at first
    step = np.linalg.norm(st1["mu_"] - st0["mu_"])
    alpha = step / np.linalg.norm(st0["sigma_"] @ z)
    if alpha < C * (1 - 1e-9):
        assert abs(after) <= 1e-9 * max(1.0, abs(before))
    else:
        assert after > -1e-12
    # A second identical pair is satisfied already when the cap did not bind: no change.
    if alpha < C * (1 - 1e-9):
        lrn2 = models.from_state(st1)
        lrn2.learn(xn[None], [0])  # re-buffer the same negative (capacity 1)
        lrn2.learn(xp[None], [1])
        assert np.allclose(lrn2.get_state()["mu_"], st1["mu_"], atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), C=st.sampled_from([0.05, 1.0, 50.0]),
       kind=st.sampled_from(["cbr_fifo", "cbr_rs"]))
def test_sigma_stays_symmetric_positive_definite(seed, C, kind):
    X, y = stream(200, 5, seed=seed)
    lrn = models.create(kind, n_features=5, seed=seed, C=C, capacity=10).learn(X * 3, y)
    sigma = lrn.get_state()["sigma_"]
    assert np.array_equal(sigma, sigma.T)
    assert np.linalg.eigvalsh(sigma).min() > 0
    assert np.linalg.eigvalsh(sigma).max() <= 1.0 + 1e-12  # Σ only shrinks from I


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), mode=st.sampled_from(["cov", "paper", "prec"]),
       C=st.sampled_from([0.05, 1.0, 50.0]))
def test_diagonal_stays_positive(seed, mode, C):
    X, y = stream(200, 5, seed=seed)
    lrn = models.create("cbr_diag_fifo", n_features=5, C=C, capacity=10, diag_mode=mode)
    g = lrn.learn(X * 3, y).get_state()["g_"]
    assert (g > 0).all()
    if mode == "cov":
        assert (g <= 1.0).all()
    else:
        assert (g >= 1.0).all()


def test_diag_cov_equals_full_cbr_while_sigma_stays_diagonal():
    """Positives at the origin and one-hot negatives: every z is axis-aligned."""
    rng = np.random.default_rng(5)
    d, n = 6, 300
    y = (rng.random(n) < 0.4).astype(int)
    X = np.zeros((n, d))
    neg = np.flatnonzero(y == 0)
    X[neg, rng.integers(0, d, neg.size)] = rng.uniform(0.5, 2.0, neg.size)
    full = models.create("cbr_fifo", n_features=d, C=0.7, capacity=5).learn(X, y).get_state()
    diag = models.create("cbr_diag_fifo", n_features=d, C=0.7, capacity=5).learn(X, y)
    assert np.count_nonzero(full["sigma_"] - np.diag(np.diag(full["sigma_"]))) == 0
    assert_close(diag.get_state()["mu_"], full["mu_"], rtol=1e-12, what="mu")
    assert_close(diag.get_state()["g_"], np.diag(full["sigma_"]), rtol=1e-12, what="G")


@pytest.mark.parametrize("name", ["cbr_fifo", "cbr_diag_fifo"])
def test_scaling_features_by_c_is_the_same_as_scaling_C(name):
    """review-first-wave §1: features × c with penalty C ≡ features with penalty c·C."""
    X, y = stream(300, 5, seed=2)
    a = models.create(name, n_features=5, C=0.2 * 4.0, capacity=8).learn(X, y)
    b = models.create(name, n_features=5, C=0.2, capacity=8).learn(4.0 * X, y)
    np.testing.assert_allclose(a.score(X), b.score(X), rtol=1e-9, atol=1e-12)


def test_duplicate_rows_are_skipped_not_nan():
    x = np.array([[0.3, -1.0, 2.0]])
    lrn = models.create("cbr_fifo", n_features=3, capacity=3)
    lrn.learn(np.repeat(x, 6, axis=0), [0, 1, 0, 1, 1, 0])
    st_ = lrn.get_state()
    assert np.array_equal(st_["mu_"], np.zeros(3))
    assert np.array_equal(st_["sigma_"], np.eye(3))


def test_empty_opposite_buffer_means_no_update():
    X, _ = stream(20, 4)
    lrn = models.create("cbr_rs", n_features=4).learn(X, np.ones(20, int))
    assert np.array_equal(lrn.get_state()["mu_"], np.zeros(4))
    assert lrn.buffer_fill == (0, 20)


def test_sparse_learners_share_a_thread_workspace_and_learn_as_alone():
    """The sparse CBR-diag kernel's zeroed workspace is one per thread, not per learner:
    learners of different dimensions learning in turn in one thread, and at once in two
    threads, end exactly where each ends learning alone."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.helpers import sparse_stream

    def batches(d, seed):
        csr, y = sparse_stream(3000, d, nnz=9, seed=seed)
        indptr, indices, values = csr
        return [((indptr[a:a + 101] - indptr[a], indices[indptr[a]:indptr[a + 100]],
                  values[indptr[a]:indptr[a + 100]]), y[a:a + 100])
                for a in range(0, 3000, 100)]

    specs = [(300, 1, 1e-3), (5000, 2, 1e-2), (1200, 3, 1e-4)]
    data = [batches(d, seed) for d, seed, _ in specs]

    def fresh():
        return [models.create("cbr_diag_fifo", n_features=d, C=C, storage="sparse", seed=s)
                for d, s, C in specs]

    alone = fresh()
    for lrn, bs in zip(alone, data, strict=True):
        for X, y in bs:
            lrn.learn(X, y)
    in_turn = fresh()
    for k in range(30):  # one thread, the learners interleaved batch by batch
        for lrn, bs in zip(in_turn, data, strict=True):
            lrn.learn(*bs[k])
    at_once = fresh()
    with ThreadPoolExecutor(2) as pool:
        for k in range(30):
            list(pool.map(lambda i, k=k: at_once[i].learn(*data[i][k]), range(3)))
    for a, b, c in zip(alone, in_turn, at_once, strict=True):
        for key, arr in a.get_state().items():
            np.testing.assert_array_equal(b.get_state()[key], arr)
            np.testing.assert_array_equal(c.get_state()[key], arr)
