"""NASAM, NPSAM and FASAM (models.sam_kernel): agreement with the numpy reference in
``tests/reference/sam_kernel.py``, bit-for-bit identities with the learners they are built
from (NSAUC; ASAM/PSAM on mapped rows; FBAM's map), FASAM's warm-up, restore checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aucstream import models
from aucstream.models import _nystrom as N
from aucstream.models._rng import new_state
from aucstream.models.sam_kernel import FASAM, NASAM, NPSAM
from tests.helpers import assert_close, assert_states_equal, stream
from tests.reference.sam_kernel import fasam_ref, mean_sqdist, nystrom_sam_ref, transplant

# Reservoirs of 9 that wrap, 3 pairs per event, shrink every 4 pairs, average every 3.
SAM = {"r_skip": 4, "a_skip": 3, "capacity": 9, "pairs": 3}
MAP = {"n_components": 10, "warmup": 60}
VARIANT = {"nasam": "asam", "npsam": "psam"}


def buffer_rows(state: dict, c: int) -> np.ndarray:
    cap = state["order_"].shape[1]
    size = int(min(state["n_seen_"][c], cap))
    return state["buf_"][c, state["order_"][c, :size]]


def run_in_pieces(lrn, X, y, cuts):
    """score_then_learn over the pieces, through a save/restore between pieces."""
    prior = []
    for a, b in zip((0, *cuts), (*cuts, len(y)), strict=True):
        prior.append(lrn.score_then_learn(X[a:b], y[a:b]))
        lrn = models.from_state(lrn.get_state())
    return lrn, np.concatenate(prior)


def assert_matches(lrn, ref, X, y, prior, warmup):
    """The learner against the reference fed the same events one at a time."""
    s = lrn.get_state()
    alg = ref.learner
    assert int(s["t_"][0]) == alg.t > 100  # η0 calibration closed; shrinks and averages ran
    if "cal_" in s:
        assert s["cal_"][0] == alg.cal_n
        assert s["cal_"][1] == pytest.approx(alg.cal_sum, rel=1e-12)
        assert s["cal_"][2] == pytest.approx(alg.eta0, rel=1e-12)
    assert list(s["n_seen_"]) == alg.res.n
    assert_close(s["w_"], alg.w, what="w")
    assert_close(s["wbar_"], alg.wbar, what="w̃")
    assert_close(lrn.weights(), alg.served(), what="served")
    for c in (0, 1):
        assert_close(buffer_rows(s, c), np.array(alg.res.rows[c]), what=f"buffer {c}")
    assert (prior[:warmup] == 0).all()
    assert_close(lrn.score(X), ref.score(X), what="scores")


@pytest.mark.parametrize("name", ["nasam", "npsam"])
@pytest.mark.parametrize("cuts", [(), (1, 59, 60, 61), (33, 200)])
def test_nystrom_learners_match_the_reference_across_batch_splits(name, cuts):
    X, y = stream(300, 5, seed=12)
    params = {**SAM, **MAP, **({"lam": 1e-3} if name == "nasam" else {})}
    lrn, prior = run_in_pieces(models.create(name, n_features=5, seed=8, **params), X, y, cuts)
    ref = nystrom_sam_ref(5, variant=VARIANT[name], seed=8, **params)
    expected = []
    for x, label in zip(X, y, strict=True):
        expected.append(ref.score(x[None])[0])
        ref.learn_one(x, label)
    assert lrn.rank == ref.learner.w.shape[0]
    assert_matches(lrn, ref, X, y, prior, 60)
    assert_close(prior, np.array(expected), what="prequential scores")


@pytest.mark.parametrize(("bw", "cuts"), [(0.0, ()), (0.0, (1, 59, 60, 61)), (0.0, (45, 200)),
                                          (3.0, ()), (3.0, (1, 2, 150))])
def test_fasam_matches_the_reference_across_batch_splits(bw, cuts):
    X, y = stream(300, 5, seed=13)
    params = {**SAM, "n_components": 12, "warmup": 60, "bandwidth": bw, "lam": 1e-3}
    lrn, prior = run_in_pieces(models.create("fasam", n_features=5, seed=3, **params), X, y,
                               cuts)
    ref = fasam_ref(5, seed=3, **params)
    expected = []
    for x, label in zip(X, y, strict=True):
        expected.append(ref.score(x[None])[0])
        ref.learn_one(x, label)
    s = lrn.get_state()
    if bw == 0:
        assert np.array_equal(s["freq_"], ref.freq)
    assert s["bw_"][0] == pytest.approx(bw or mean_sqdist(X[:60]), rel=1e-13)
    assert_matches(lrn, ref, X, y, prior, 60 if bw == 0 else 0)
    assert_close(prior, np.array(expected), what="prequential scores")
    if bw > 0:  # no warm-up: the first pairs already move the scores
        assert np.unique(prior[:60]).size > 1


def test_the_transplanted_reference_goes_on_as_the_learner():
    """tests.reference.sam_kernel.transplant (the throughput oracle's warm start): from a
    learner's state, the reference learns the next events as the learner does."""
    X, y = stream(400, 4, seed=5)
    for name, params in (("nasam", {**SAM, **MAP}), ("npsam", {**SAM, **MAP}),
                         ("nsauc", {**SAM, **MAP}),
                         ("fasam", {**SAM, "n_components": 16, "warmup": 60})):
        lrn = models.create(name, n_features=4, seed=2, **params).learn(X[:250], y[:250])
        ref = transplant(lrn)
        lrn.learn(X[250:], y[250:])
        ref.learn(X[250:], y[250:])
        assert_close(lrn.weights(), ref.served(), what=name)
        assert_close(lrn.score(X), ref.score(X), what=name)
    with pytest.raises(ValueError, match="not fixed yet"):
        transplant(models.create("fasam", n_features=4, warmup=50).learn(X[:10], y[:10]))


# ------------------------------------------------------------- shared code, bit for bit
def test_nasam_is_nsauc_bit_for_bit():
    """NASAM (dissertation §6.6) and NSAUC (seed 002, Algorithm 3) are one method: the
    same class with the same rule, the same parameters and defaults."""
    assert NASAM.param_table.keys() == models.base._lookup("nsauc").param_table.keys()
    for key, spec in NASAM.param_table.items():
        other = models.base._lookup("nsauc").param_table[key]
        assert (spec.rule, spec.default) == (other.rule, other.default), key
    X, y = stream(260, 5, seed=4)
    for params in ({**SAM, **MAP}, {**MAP, "lam": 1e-2, "eta_scale": 3.0}):
        a = models.create("nasam", n_features=5, seed=6, **params)
        b = models.create("nsauc", n_features=5, seed=6, **params)
        pa, pb = a.score_then_learn(X, y), b.score_then_learn(X, y)
        sa, sb = a.get_state(), b.get_state()
        assert sa.pop("learner") == "nasam" and sb.pop("learner") == "nsauc"
        assert_states_equal(sa, sb)
        np.testing.assert_array_equal(pa, pb)


def test_the_parameter_tables_are_asam_s_and_psam_s():
    for cls, base in ((NASAM, "asam"), (NPSAM, "psam"), (FASAM, "asam")):
        table = models.base._lookup(base).param_table
        for key, spec in table.items():
            if key != "storage":
                assert cls.param_table[key] == spec, (cls.name, key)


@pytest.mark.parametrize(("name", "linear"), [("nasam", "asam"), ("npsam", "psam")])
def test_nystrom_learners_are_the_linear_kernel_on_mapped_rows(name, linear):
    """After the warm-up the learner is models.sam's dense learner fed ψ(x) of the frozen
    map (the window replayed first), to the bit."""
    X, y = stream(200, 5, seed=9)
    params = {**SAM, "a_skip": 5}
    lrn = models.create(name, n_features=5, seed=6, **params, **MAP).learn(X, y)
    s = lrn.get_state()
    rng = new_state(6)
    landmarks, proj, b = N.fit_map(X[:60], 10, rng)
    assert np.array_equal(landmarks, s["landmarks_"]) and np.array_equal(proj, s["proj_"])
    twin = models.create(linear, n_features=proj.shape[1], seed=6, storage="dense", **params)
    twin._state["rng_"][:] = rng  # the generator after k-means++
    twin.learn(N.nystrom_transform(X, landmarks, proj, b), y)
    o = twin.get_state()
    for key in ("w_", "wbar_", "t_", "buf_", "order_", "n_seen_", "rng_", "cal_"):
        if key in o or key in s:
            assert np.array_equal(o[key], s[key]), key


def test_fasam_is_asam_on_fbam_s_features():
    """FASAM draws FBAM's frequencies and phases (same seed) and maps rows as FBAM does;
    with b fixed it is ASAM's dense learner fed those rows, to the bit."""
    X, y = stream(200, 5, seed=10)
    b = 4.0
    lrn = models.create("fasam", n_features=5, seed=7, n_components=24, bandwidth=b, **SAM)
    fbam = models.create("fbam", n_features=5, seed=7, n_components=24, bandwidth=b)
    s, f = lrn.get_state(), fbam.get_state()
    assert np.array_equal(s["freq_"], f["freq_"]) and np.array_equal(s["phase_"], f["phase_"])
    assert s["window_"].shape == (0, 5)  # a fixed bandwidth: no warm-up
    Z = fbam._features(X, b)
    for a, c in ((0, 1), (1, 4), (4, 11), (11, 200)):  # tiles of 4 rows and remainders
        np.testing.assert_array_equal(lrn._map_rows(X[a:c], lrn._state), Z[a:c])
    lrn.learn(X, y)
    twin = models.create("asam", n_features=24, seed=7, storage="dense", **SAM)
    twin._state["rng_"][:] = f["rng_"]  # the generator after the draws
    twin.learn(Z, y)
    s, o = lrn.get_state(), twin.get_state()
    for key in ("w_", "wbar_", "t_", "cal_", "buf_", "order_", "n_seen_", "rng_"):
        assert np.array_equal(o[key], s[key]), key
    np.testing.assert_array_equal(lrn.score(X), twin.score(Z))


def test_fasam_bandwidth_is_the_nystrom_maps_on_the_same_window():
    """bandwidth=0: b is the Nyström map's b over the same warm-up window, to the bit,
    so FASAM and NASAM approximate one kernel; the features approximate it."""
    X, y = stream(150, 6, seed=11)
    X[:, 0] *= 3.0
    fa = models.create("fasam", n_features=6, seed=1, n_components=4096, warmup=80).learn(X, y)
    na = models.create("nasam", n_features=6, seed=1, n_components=8, warmup=80).learn(X, y)
    b = fa.get_state()["bw_"][0]
    assert b == na.get_state()["bandwidth_"][0]
    assert b == pytest.approx(mean_sqdist(X[:80]), rel=1e-13)
    P = fa._map_rows(X[:40], fa._state)
    K = np.exp(-((X[:40, None, :] - X[None, :40, :]) ** 2).sum(-1) / b)
    err = np.abs(P @ P.T - K)  # Monte Carlo error ~ 1/√m ≈ 0.016
    assert err.mean() < 0.02 and err.max() < 0.1


# ------------------------------------------------------------------- FASAM's warm-up
def test_fasam_warm_up_counts_scores_and_the_switch():
    X, y = stream(100, 4, seed=3)
    lrn = models.create("fasam", n_features=4, seed=0, n_components=16, warmup=40)
    lrn.learn(X[:39], y[:39])
    s = lrn.get_state()
    assert s["bw_"][0] == 0.0 and lrn.buffer_fill == (0, 0) and not s["t_"].any()
    assert lrn.n_seen == (int((y[:39] == 0).sum()), int((y[:39] == 1).sum()))
    assert (lrn.score(X) == 0).all() and (lrn.snapshot().score(X) == 0).all()
    assert s["window_"].shape == (40, 4) and (s["window_"][:39] == X[:39]).all()
    lrn.learn(X[39:40], y[39:40])
    s = lrn.get_state()
    assert s["bw_"][0] > 0 and s["window_"].shape == (0, 4) and s["wlabel_"].shape == (0,)
    assert lrn.n_seen == tuple(int(v) for v in s["n_seen_"]) == (
        int((y[:40] == 0).sum()), int((y[:40] == 1).sum()))
    assert s["t_"][0] > 0 and np.unique(lrn.score(X)).size > 1


def test_fasam_fixed_bandwidth_split_and_restore_give_the_same_state():
    X, y = stream(150, 5, seed=2)
    params = {**SAM, "n_components": 16, "bandwidth": 2.5}
    whole = models.create("fasam", n_features=5, seed=4, **params).learn(X, y).get_state()
    for cuts in ((1, 2, 3), (70,), (33, 34, 149)):
        lrn = models.create("fasam", n_features=5, seed=4, **params)
        for a, b in zip((0, *cuts), (*cuts, 150), strict=True):
            lrn = models.from_state(lrn.learn(X[a:b], y[a:b]).get_state())
        assert_states_equal(lrn.get_state(), whole)


def test_fasam_draws_are_frozen_and_shared_by_snapshots():
    X, y = stream(120, 4, seed=1)
    lrn = models.create("fasam", n_features=4, seed=0, n_components=16, warmup=50).learn(X, y)
    s = lrn._state
    assert not s["freq_"].flags.writeable and not s["phase_"].flags.writeable
    assert lrn.fixed_keys == {"freq_", "phase_"}
    snap = lrn.snapshot()
    assert snap._state["freq_"] is s["freq_"] and snap._state["w_"] is not s["w_"]
    np.testing.assert_array_equal(snap.score(X), lrn.score(X))
    twin = models.from_state(lrn.get_state())
    assert not twin._state["freq_"].flags.writeable
    np.testing.assert_array_equal(twin.score(X), lrn.score(X))
    assert s["phase_"].min() >= 0.0 and s["phase_"].max() < 2 * math.pi


def test_a_fasam_warm_up_window_that_overflows_is_refused_whole():
    X, y = stream(80, 4, seed=2)
    lrn = models.create("fasam", n_features=4, seed=0, n_components=8, warmup=60)
    lrn.learn(X[:50], y[:50])
    before = lrn.get_state()
    bad = X[50:70].copy()
    bad[3, 1] = 1e200  # inside the window: b overflows when the window completes (row 9)
    with pytest.raises(models.NonFiniteError) as err:
        lrn.learn(bad, y[50:70])
    assert err.value.row == 9
    assert_states_equal(lrn.get_state(), before)
    lrn.learn(X[50:70], y[50:70])
    assert lrn.get_state()["bw_"][0] > 0


def test_inconsistent_fasam_states_are_refused():
    X, y = stream(120, 4, seed=1)
    good = models.create("fasam", n_features=4, seed=0, n_components=8, warmup=50)
    good = good.learn(X, y).get_state()
    warm = models.create("fasam", n_features=4, seed=0, n_components=8, warmup=50)
    warm = warm.learn(X[:20], y[:20]).get_state()
    fixed = models.create("fasam", n_features=4, seed=0, n_components=8, bandwidth=2.0)
    fixed = fixed.learn(X, y).get_state()
    cases = [
        {**good, "bw_": np.array([0.0])},
        {**good, "bw_": np.array([np.inf])},
        {**good, "warm_": np.array([10, 10])},
        {**good, "window_": np.zeros((50, 4))},
        {**warm, "warm_": np.array([30, 30])},
        {**warm, "n_seen_": np.array([1, 0])},
        {**warm, "window_": np.zeros((0, 4))},
        {**fixed, "bw_": np.array([3.0])},
        {**fixed, "warm_": np.array([1, 0])},
    ]
    for bad in cases:
        with pytest.raises(ValueError, match="state"):
            models.from_state(bad)


# --------------------------------------------------------------------- what they learn
@pytest.mark.parametrize(("name", "params"), [
    ("nasam", {"n_components": 50, "warmup": 500}),
    ("npsam", {"n_components": 50, "warmup": 500}),
    ("fasam", {"n_components": 200, "warmup": 500}),
])
def test_they_learn_a_nonlinear_boundary_that_a_linear_model_cannot(name, params):
    """Positives inside a ball, negatives outside: no linear score ranks them, the
    Gaussian-kernel features do (a sign error would drive the AUC towards 0)."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(3000, 3))
    y = (np.linalg.norm(X, axis=1) < 1.2).astype(int)
    lrn = models.create(name, n_features=3, seed=0, **params).learn(X[:2500], y[:2500])
    assert models.auc(y[2500:], lrn.score(X[2500:])) > 0.95
    linear = models.create(VARIANT.get(name, "asam"), n_features=3, seed=0)
    assert models.auc(y[2500:], linear.learn(X[:2500], y[:2500]).score(X[2500:])) < 0.7


def test_served_weights_before_the_first_average():
    X, y = stream(80, 4, seed=2)
    for name, params in (("npsam", {"n_components": 6, "warmup": 30}),
                         ("fasam", {"n_components": 6, "warmup": 30})):
        lrn = models.create(name, n_features=4, seed=0, a_skip=1000, **params)
        assert lrn.weights().shape == ((0,) if name == "npsam" else (6,))
        lrn.learn(X, y)
        assert 0 < int(lrn.get_state()["t_"][0]) < 1000
        np.testing.assert_array_equal(lrn.weights(), lrn.weights("last"))
        assert not lrn.weights("average").any() and lrn.weights().any()
        with pytest.raises(ValueError, match="which must be one of"):
            lrn.weights("bogus")
