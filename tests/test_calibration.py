"""models.calibration.PlattCalibrator: Platt's fit, online schedule, state."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aucstream.models.calibration import PlattCalibrator


def _platt_stream(n: int, a: float, b: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n) * 3.0 + 1.0
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(a * s + b)))).astype(np.int64)
    return s, y


def _smoothed_gradient(s, y, a, b):
    """Gradient of Platt's cross-entropy with smoothed targets, in numpy."""
    n_pos = int(y.sum())
    n_neg = y.shape[0] - n_pos
    t = np.where(y == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    p = 1 / (1 + np.exp(-(a * s + b)))
    return np.array([((p - t) * s).sum(), (p - t).sum()])


def test_the_fit_is_platts_maximum_likelihood_on_the_window():
    s, y = _platt_stream(4800, 0.8, -2.0)
    cal = PlattCalibrator(window=2000, refit_every=500, per_class=2000)
    # fits at 100, 200, 400, 800, 1300, 1800, ... every 500: the last at event 4800, on
    # the whole ring (per_class above the ring's size): the last 2000 pairs
    cal.update(s, y)
    a, b = cal.coef
    g = _smoothed_gradient(s[-2000:], y[-2000:], a, b)
    assert np.abs(g).max() < 1e-6 * 2000
    assert a == pytest.approx(0.8, abs=0.15) and b == pytest.approx(-2.0, abs=0.3)


def test_probabilities_are_prequential_and_batching_does_not_matter():
    s, y = _platt_stream(3000, 1.0, -1.0, seed=1)
    one = PlattCalibrator(window=500, refit_every=200)
    whole = one.update(s, y)
    rng = np.random.default_rng(2)
    cuts = np.sort(rng.choice(np.arange(1, 3000), 40, replace=False))
    other = PlattCalibrator(window=500, refit_every=200)
    parts = [other.update(s[a:b], y[a:b]) for a, b in zip([0, *cuts], [*cuts, 3000],
                                                          strict=True)]
    assert np.array_equal(np.concatenate(parts), whole)
    for k, v in one.get_state().items():
        assert np.array_equal(v, other.get_state()[k]), k
    # each probability is the map's before its event: replay one event at a time
    third = PlattCalibrator(window=500, refit_every=200)
    for i in range(300):
        before = third.predict(s[i:i + 1])[0]
        assert third.update(s[i:i + 1], y[i:i + 1])[0] == before


def test_fits_come_at_fixed_counts_doubling_while_the_ring_fills():
    s, y = _platt_stream(1000, 1.0, 0.0, seed=3)
    cal = PlattCalibrator(window=10_000, refit_every=1000)
    changes = []
    last = cal.coef
    for i in range(1000):
        cal.update(s[i:i + 1], y[i:i + 1])
        if cal.coef != last:
            changes.append(i + 1)
            last = cal.coef
    assert changes == [100, 200, 400, 800]


def test_a_fit_uses_the_newest_pairs_holding_enough_of_each_class():
    s, y = _platt_stream(5600, 0.5, -3.0, seed=8)  # few positives
    cal = PlattCalibrator(window=5000, refit_every=1000, per_class=40, min_fit=300)
    cal.update(s, y)  # fits at 100, 200, 400, 800, 1600, 2600, ...: the last at 5600
    back = y[::-1]
    need = max(int(np.searchsorted(np.cumsum(back == 1), 40)) + 1,
               int(np.searchsorted(np.cumsum(back == 0), 40)) + 1, 300)
    assert cal.fitted_on == need < 5000
    a, b = cal.coef
    g = _smoothed_gradient(s[-need:], y[-need:], a, b)
    assert np.abs(g).max() < 1e-6 * need
    # with classes that rare, the whole ring
    rare = PlattCalibrator(window=500, refit_every=100, per_class=10_000)
    rare.update(s[:1000], y[:1000])
    assert rare.fitted_on == 500


def test_one_class_windows_give_the_smoothed_rate_and_flat_scores_too():
    cal = PlattCalibrator(window=100, refit_every=50, min_pairs=10, min_fit=100)
    cal.update(np.linspace(-1, 1, 100), np.zeros(100))
    a, b = cal.coef
    assert a == 0.0 and 1 / (1 + np.exp(-b)) == pytest.approx(1 / 102)
    flat = PlattCalibrator(window=100, refit_every=50, min_pairs=10, min_fit=100)
    flat.update(np.full(100, 3.0), np.r_[np.ones(30), np.zeros(70)])
    assert flat.coef[0] == 0.0 and 1 / (1 + np.exp(-flat.coef[1])) == pytest.approx(31 / 102)


def test_a_separable_window_stays_finite_and_ranks_the_same_way():
    s = np.r_[np.linspace(-5, -1, 500), np.linspace(1, 5, 500)]
    y = np.r_[np.zeros(500), np.ones(500)].astype(int)
    order = np.random.default_rng(4).permutation(1000)
    cal = PlattCalibrator(window=1000, refit_every=100)
    cal.update(s[order], y[order])
    a, b = cal.coef
    assert np.isfinite([a, b]).all() and a > 0
    p = cal.predict(s)
    # Platt's smoothed targets (1/502, 501/502) keep the map finite: the pairs next to
    # the gap get ~5 %, the far ends are near 0 and 1
    assert p[:500].max() < 0.1 and p[500:].min() > 0.9
    assert p[0] < 1e-4 and p[-1] > 1 - 1e-4


def test_scores_ranked_backwards_never_reverse_the_ranking():
    s, y = _platt_stream(2000, -1.0, 0.0, seed=5)  # high scores click less
    cal = PlattCalibrator(window=1000, refit_every=100)
    p = cal.update(s, y)
    assert cal.coef[0] == 0.0
    assert np.all(np.diff(cal.predict(np.sort(s))) >= 0)
    assert np.isfinite(p).all()


@settings(max_examples=30, deadline=None)
@given(scores=st.lists(st.floats(-1e12, 1e12), min_size=1, max_size=300),
       seed=st.integers(0, 100))
def test_any_finite_scores_give_probabilities_in_0_1_and_a_monotone_map(scores, seed):
    s = np.array(scores)
    y = (np.random.default_rng(seed).random(s.shape[0]) < 0.3).astype(int)
    cal = PlattCalibrator(window=50, refit_every=10, min_pairs=5)
    p = cal.update(s, y)
    assert ((p >= 0) & (p <= 1)).all()
    a, _ = cal.coef
    assert np.isfinite(cal.coef).all() and a >= 0


def test_log_loss_and_click_rate_cover_the_ring():
    s, y = _platt_stream(400, 1.0, -1.0, seed=6)
    cal = PlattCalibrator(window=300, refit_every=100)
    p = cal.update(s, y)
    last = slice(100, 400)
    expected = -np.mean(np.where(y[last] == 1, np.log(p[last]), np.log(1 - p[last])))
    assert cal.log_loss == pytest.approx(expected, rel=1e-12)
    assert cal.click_rate == pytest.approx(y[last].mean())
    assert np.isnan(PlattCalibrator().log_loss)


def test_state_round_trip_and_malformed_states():
    s, y = _platt_stream(700, 1.0, -1.0, seed=7)
    cal = PlattCalibrator(window=300, refit_every=100)
    cal.update(s[:500], y[:500])
    twin = PlattCalibrator.from_state(cal.get_state())
    assert np.array_equal(twin.update(s[500:], y[500:]), cal.copy().update(s[500:], y[500:]))
    bad = cal.get_state()
    bad["ring_s_"] = bad["ring_s_"][:10]
    with pytest.raises(ValueError, match="ring_s_"):
        PlattCalibrator.from_state(bad)
    with pytest.raises(ValueError, match="malformed"):
        PlattCalibrator.from_state({"window": 300})
    with pytest.raises(ValueError, match="window"):
        PlattCalibrator(window=5)
    with pytest.raises(ValueError, match="finite"):
        cal.update([np.nan], [1])


# ---------------------------------------------------------------- the fit's accuracy


def _fit_counts(n: int, window: int, refit_every: int) -> list[int]:
    """The event counts at which fits happen (see the class docstring)."""
    out, count, filled_then = [], 0, 0
    while True:
        count += min(refit_every, max(filled_then, 100))
        if count > n:
            return out
        out.append(count)
        filled_then = min(count, window)


def _optimum(s, y):
    """Platt's maximum likelihood on (s, y), in long double: Newton to convergence from
    a = 0 (a slow reference). Returns (a, b) on standardised scores, and the mean and sd."""
    L = np.longdouble
    n_pos = int(y.sum())
    n_neg = y.shape[0] - n_pos
    t = np.where(y == 1, L(n_pos + 1) / L(n_pos + 2), L(1) / L(n_neg + 2))
    x = s.astype(L)
    mean = x.mean()
    sd = np.sqrt(((x - mean) ** 2).mean())
    z = (x - mean) / sd
    a, b = L(0), np.log(L(n_pos + 1) / L(n_neg + 1))
    for _ in range(100):
        p = 1 / (1 + np.exp(-(a * z + b)))
        r, v = p - t, p * (1 - p)
        g0, g1 = (r * z).sum(), r.sum()
        h00, h01, h11 = (v * z * z).sum(), (v * z).sum(), v.sum()
        det = h00 * h11 - h01 * h01
        da, db = (h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det
        a, b = a - da, b - db
        if max(abs(da), abs(db)) < 1e-16:
            break
    return a, b, mean, sd


@pytest.mark.parametrize("shift, scale", [(5.1, lambda t: 1.0), (3.5, lambda t: 1.0),
                                          (4.0, lambda t: 1 + 4 * t),
                                          (4.0, lambda t: np.where(t < 0.5, 1.0, 10.0))])
def test_every_fit_is_the_optimum_to_its_tolerance(shift, scale):
    """1 % clicks (windows of the whole ring, its oldest pairs dropped between fits), 4 %
    (windows inside the ring), scores whose scale and centre drift, and a scale that jumps
    tenfold (the map in force far from the new optimum): at every fit the map is within
    1e-10 of the optimum in standardised units (1e-9 allowed here for the reference's
    own rounding), whichever start the fit took."""
    n = 26_000
    rng = np.random.default_rng(11)
    x = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(x - shift)))).astype(np.int8)
    t = np.arange(n) / n
    s = x * scale(t) + 3 * t
    cal = PlattCalibrator()
    done = 0
    worst = 0.0
    for count in _fit_counts(n, cal.window, cal.refit_every):
        cal.update(s[done:count], y[done:count])
        done = count
        m = cal.fitted_on
        a, b, mean, sd = _optimum(s[count - m:count], y[count - m:count])
        fa, fb = cal.coef  # back on standardised scores
        worst = max(worst, abs(fa * sd - a), abs(fb + fa * mean - b))
    assert done > 20_000 and 0 < worst < 1e-9


def test_states_keep_the_format_checkpoints_have():
    """The warm start needs no state of its own: a checkpoint holds what it always held,
    so states written before it load (and later ones load in older code)."""
    cal = PlattCalibrator(window=300, refit_every=100)
    cal.update(*_platt_stream(500, 1.0, -1.0, seed=13))
    assert set(cal.get_state()) == {
        "window", "refit_every", "per_class", "min_fit", "min_pairs", "ring_s_", "ring_y_",
        "ring_pos_", "coef_", "since_", "loss_", "n_seen_"}


def test_the_fits_exp_is_exp_to_1e_14():
    """The passes' own exp (vectorisable, unlike the libm call): relative error ≤ 1e-14
    on [−40, 40]."""
    from numba import njit

    from aucstream.models.calibration import _exp

    @njit
    def many(x):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = _exp(x[i])
        return out

    x = np.r_[np.linspace(-40, 40, 200_001), np.random.default_rng(15).uniform(-40, 40, 10_000),
              -40.0, 40.0, 0.0, np.log(2) / 2, -np.log(2) / 2]
    assert np.abs(many(x) / np.exp(x) - 1).max() < 1e-14
