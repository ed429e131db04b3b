"""The k-means++ Nyström map (``models._nystrom``) and NOAM_seq / NOAM_gra on it: agreement
with the numpy references in ``tests/reference/nystrom.py`` and properties that could fail
(the Nyström identity, k-means' descent, batch invariance, the warm-up and the switch)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aucstream import models
from aucstream.models import _nystrom as N
from aucstream.models._rng import new_state
from tests.helpers import assert_close, assert_states_equal, stream
from tests.reference.nystrom import NystromMapRef, kappa, kmeanspp, lloyd, noam_ref

MAP = {"n_components": 10, "warmup": 60}


def buffer_rows(state: dict, c: int) -> np.ndarray:
    cap = state["order_"].shape[1]
    size = int(min(state["n_seen_"][c], cap))
    return state["buf_"][c, state["order_"][c, :size]]


# ------------------------------------------------------------------------ the map
def test_bandwidth_is_the_mean_squared_distance_to_the_mean():
    X, _ = stream(300, 7, seed=2)
    b = N.bandwidth(X)
    assert_close(np.array([b]), np.array([((X - X.mean(0)) ** 2).sum(1).mean()]), rtol=1e-13)


def test_kmeanspp_and_lloyd_match_the_reference_with_the_same_draws():
    X, _ = stream(400, 6, seed=3)
    rng_a, rng_b = new_state(9), new_state(9)
    got = N.kmeanspp_landmarks(X, 25, rng_a, 5)
    want = lloyd(X, kmeanspp(X, 25, rng_b), 5)
    assert np.array_equal(rng_a, rng_b)  # one draw per centre on both sides
    assert_close(got, want, rtol=1e-13, what="landmarks")


def test_seeding_picks_rows_and_lloyd_decreases_the_objective():
    X, _ = stream(300, 4, seed=4)

    def sse(C):
        return float(np.min(((X[:, None, :] - C[None]) ** 2).sum(-1), axis=1).sum())

    seeds = N.kmeanspp_landmarks(X, 12, new_state(1), 0)
    assert all((np.abs(X - c).sum(1) == 0).any() for c in seeds)  # centres are rows
    values = [sse(N.kmeanspp_landmarks(X, 12, new_state(1), it)) for it in range(6)]
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(values))
    assert values[-1] < values[0]


def test_an_empty_cluster_keeps_its_centre_and_duplicates_are_drawn_uniformly():
    X = np.repeat(np.eye(3), 5, axis=0)  # three distinct rows, asked for five centres
    C = N.kmeanspp_landmarks(X, 5, new_state(2), 5)
    assert {tuple(c) for c in C} == {tuple(r) for r in np.eye(3)}
    _, rank = N.nystrom_projection(C, 1.0)
    assert rank == 3  # duplicates make W singular; the floor keeps the distinct part


def test_projection_matches_the_reference_and_the_nystrom_identity_holds():
    X, _ = stream(200, 5, seed=6)
    rng = new_state(7)
    landmarks, proj, b = N.fit_map(X, 15, rng)
    ref = NystromMapRef(X, 15, new_state(7))
    assert b == pytest.approx(ref.b, rel=1e-13)
    assert_close(landmarks, ref.L, rtol=1e-13, what="landmarks")
    assert proj.shape == (15, ref.r)
    assert_close(proj, ref.proj, rtol=1e-9, what="projection")
    Y, _ = stream(40, 5, seed=8)
    Z = N.nystrom_transform(Y, landmarks, proj, b)
    assert_close(Z, np.array([ref.psi(y) for y in Y]), rtol=1e-9, what="ψ")
    # ψ(x)ᵀψ(y) = k_xᵀ W⁺ k_y (the rank is full here, so W_r⁺ = W⁻¹)
    Kx = np.array([[kappa(y, u, b) for u in landmarks] for y in Y])
    W = np.array([[kappa(u, v, b) for v in landmarks] for u in landmarks])
    assert_close(Z @ Z.T, Kx @ np.linalg.pinv(W, rcond=1e-12) @ Kx.T, rtol=1e-7, what="Gram")
    # on the landmarks themselves the approximation is exact: ψ(u_i)ᵀψ(u_j) = W_ij
    ZL = N.nystrom_transform(landmarks, landmarks, proj, b)
    assert_close(ZL @ ZL.T, W, rtol=1e-8, what="landmark Gram")


def test_the_eigenvalue_floor_sets_the_rank():
    X, _ = stream(300, 2, seed=1)  # 2-d data, 40 landmarks: a decaying spectrum
    landmarks = N.kmeanspp_landmarks(X, 40, new_state(0), 5)
    b = N.bandwidth(X)
    W = np.array([[kappa(u, v, b) for v in landmarks] for u in landmarks])
    lam = np.linalg.eigvalsh(W)[::-1]
    ranks = []
    for floor in (1e-6, 1e-3, 1e-1):
        proj, rank = N.nystrom_projection(landmarks, b, floor)
        assert rank == int(np.sum(lam > floor * lam[0])) == proj.shape[1]
        ranks.append(rank)
    assert ranks[0] > ranks[1] > ranks[2]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, 150), first=st.integers(0, 149))
def test_psi_of_a_row_does_not_depend_on_its_batch(cut, first):
    X, _ = stream(150, 9, seed=5)
    landmarks, proj, b = N.fit_map(X[:100], 70, new_state(3))  # r > PANEL: two panels
    whole = N.nystrom_transform(X, landmarks, proj, b)
    parts = np.vstack([N.nystrom_transform(X[:cut], landmarks, proj, b),
                       N.nystrom_transform(X[cut:], landmarks, proj, b)])
    assert whole.tobytes() == parts.tobytes()
    one = N.nystrom_transform(X[first:first + 1], landmarks, proj, b)
    assert one.tobytes() == whole[first:first + 1].tobytes()


def test_identical_rows_use_the_fallback_bandwidth_and_overflow_is_refused():
    X = np.ones((30, 4))
    landmarks, proj, b = N.fit_map(X, 5, new_state(0))
    assert b == N.FALLBACK_BANDWIDTH and proj.shape == (5, 1)
    assert np.isfinite(N.nystrom_transform(X, landmarks, proj, b)).all()
    Y, _ = stream(30, 4, seed=0)
    Y[3, 0] = 1e200
    with pytest.raises(FloatingPointError):
        N.fit_map(Y, 5, new_state(0))


# -------------------------------------------------------------- NOAM_seq / NOAM_gra
@pytest.mark.parametrize("name", ["noam_seq", "noam_gra"])
@pytest.mark.parametrize("cuts", [(), (1, 59, 60, 61), (17, 140), (60,), (200,)])
def test_noam_matches_the_reference_across_batch_splits(name, cuts):
    X, y = stream(300, 5, seed=11)
    params = {"C": 0.5, "capacity": 9, **MAP}
    lrn = models.create(name, n_features=5, seed=4, **params)
    ref = noam_ref(5, seed=4, sequential=name == "noam_seq", **params)
    prior = np.concatenate([lrn.score_then_learn(X[a:b], y[a:b])
                            for a, b in zip((0, *cuts), (*cuts, 300), strict=True)])
    expected = []
    for x, label in zip(X, y, strict=True):
        expected.append(ref.score(x[None])[0])
        ref.learn_one(x, label)
    s = lrn.get_state()
    assert lrn.rank == ref.map.r == 10
    assert list(s["n_seen_"]) == ref.learner.res.n == [int((y == 0).sum()), int((y == 1).sum())]
    assert_close(s["proj_"], ref.map.proj, rtol=1e-9, what="projection")
    assert_close(s["w_"], ref.learner.w, what="w")
    for c in (0, 1):
        assert_close(buffer_rows(s, c), np.array(ref.learner.res.rows[c]), what=f"buffer {c}")
    assert (prior[:60] == 0).all()  # no map during the warm-up
    assert_close(prior, np.array(expected), what="prequential scores")
    assert_close(lrn.score(X), ref.score(X), what="scores")


@pytest.mark.parametrize("name", ["noam_seq", "noam_gra", "nsauc"])
def test_the_state_does_not_depend_on_the_batch_split(name):
    X, y = stream(220, 6, seed=7)
    params = {"capacity": 8, "n_components": 70, "warmup": 90}  # r > PANEL
    whole = models.create(name, n_features=6, seed=2, **params).learn(X, y)
    for cuts in ((1, 2, 89, 90, 91), (45, 150), (90, 219)):
        lrn = models.create(name, n_features=6, seed=2, **params)
        for a, b in zip((0, *cuts), (*cuts, 220), strict=True):
            lrn = models.from_state(lrn.learn(X[a:b], y[a:b]).get_state())
        assert_states_equal(lrn.get_state(), whole.get_state())


@pytest.mark.parametrize("name", ["noam_seq", "noam_gra", "nsauc"])
def test_warm_up_counts_scores_and_the_switch(name):
    X, y = stream(100, 4, seed=3)
    lrn = models.create(name, n_features=4, seed=0, n_components=6, warmup=40)
    lrn.learn(X[:39], y[:39])
    assert lrn.rank == 0 and lrn.buffer_fill == (0, 0)
    assert lrn.n_seen == (int((y[:39] == 0).sum()), int((y[:39] == 1).sum()))
    assert (lrn.score(X) == 0).all()
    s = lrn.get_state()
    assert s["window_"].shape == (40, 4) and (s["window_"][:39] == X[:39]).all()
    assert (s["window_"][39] == 0).all()
    lrn.learn(X[39:40], y[39:40])
    s = lrn.get_state()
    assert lrn.rank == s["proj_"].shape[1] > 0
    assert s["window_"].shape == (0, 4) and s["landmarks_"].shape == (6, 4)
    assert lrn.n_seen == tuple(int(v) for v in s["n_seen_"]) == (
        int((y[:40] == 0).sum()), int((y[:40] == 1).sum()))
    assert np.unique(lrn.score(X)).size > 1


def test_the_switch_is_the_window_replayed_through_the_frozen_map():
    """Learning after the warm-up equals a learner whose map was fitted beforehand: the
    replay feeds the window's ψ rows in order, then the stream continues."""
    X, y = stream(160, 5, seed=9)
    lrn = models.create("noam_gra", n_features=5, seed=6, C=0.1, capacity=12, **MAP)
    lrn.learn(X, y)
    s = lrn.get_state()
    rng = new_state(6)
    landmarks, proj, b = N.fit_map(X[:60], 10, rng)
    assert np.array_equal(landmarks, s["landmarks_"]) and np.array_equal(proj, s["proj_"])
    oam = models.create("oam_gra", n_features=proj.shape[1], seed=6, C=0.1, capacity=12,
                        storage="dense")
    oam._state["rng_"][:] = rng  # the generator after k-means++
    oam.learn(N.nystrom_transform(X, landmarks, proj, b), y)
    o = oam.get_state()
    for key in ("w_", "buf_", "order_", "n_seen_", "rng_"):
        assert np.array_equal(o[key], s[key]), key


def test_map_arrays_are_frozen_shared_by_snapshots_and_not_journaled():
    X, y = stream(120, 4, seed=1)
    lrn = models.create("noam_seq", n_features=4, seed=0, **MAP).learn(X, y)
    s = lrn._state
    assert not s["proj_"].flags.writeable and not s["landmarks_"].flags.writeable
    assert lrn.fixed_keys >= {"proj_", "landmarks_", "bandwidth_"}
    snap = lrn.snapshot()
    assert snap._state["proj_"] is s["proj_"]
    assert snap._state["w_"] is not s["w_"]
    np.testing.assert_array_equal(snap.score(X), lrn.score(X))
    twin = models.from_state(lrn.get_state())
    assert not twin._state["proj_"].flags.writeable
    np.testing.assert_array_equal(twin.score(X), lrn.score(X))


def test_a_warm_up_window_that_overflows_is_refused_whole():
    X, y = stream(80, 4, seed=2)
    lrn = models.create("noam_gra", n_features=4, seed=0, **MAP).learn(X[:50], y[:50])
    before = lrn.get_state()
    bad = X[50:70].copy()
    bad[3, 1] = 1e200  # inside the window: b overflows when the map is fitted (row 9)
    with pytest.raises(models.NonFiniteError) as err:
        lrn.learn(bad, y[50:70])
    assert err.value.row == 9
    assert_states_equal(lrn.get_state(), before)
    lrn.learn(X[50:70], y[50:70])
    assert lrn.rank > 0
    after = lrn.get_state()
    huge = X[70:].copy()
    huge[:, 0] = 1e300  # after the warm-up: κ = 0, learned
    lrn.learn(huge, y[70:])
    assert np.isfinite(lrn.score(X)).all()
    assert not np.array_equal(after["n_seen_"], lrn.get_state()["n_seen_"])


def test_inconsistent_states_are_refused():
    X, y = stream(120, 4, seed=1)
    good = models.create("noam_seq", n_features=4, seed=0, **MAP).learn(X, y).get_state()
    warm = models.create("noam_seq", n_features=4, seed=0, **MAP).learn(X[:20], y[:20])
    cases = [
        {**good, "proj_": good["proj_"][:, :-1]},
        {**good, "w_": np.zeros(3)},
        {**good, "rank_": np.array([0])},
        {**good, "bandwidth_": np.array([0.0])},
        {**good, "landmarks_": good["landmarks_"][:-1]},
        {**warm.get_state(), "warm_": np.array([30, 30])},
        {**warm.get_state(), "n_seen_": np.array([1, 0])},
    ]
    for bad in cases:
        with pytest.raises(ValueError, match="state"):
            models.from_state(bad)


def test_warmup_shorter_than_the_landmarks_is_refused():
    with pytest.raises(ValueError, match="'warmup' parameter of noam_seq must be at least"):
        models.create("noam_seq", n_features=3, n_components=50, warmup=49)
