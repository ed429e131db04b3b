"""loadtest.delays (impressions on a clock) and bench.delayed_feedback's label rules."""

from __future__ import annotations

import numpy as np

from bench.delayed_feedback import learn_events
from loadtest.delays import DelayedClicks, Timeline


def test_the_timeline_is_a_function_of_seed_and_position():
    a = DelayedClicks(seed=3).timeline(1000, 3000)
    b = DelayedClicks(seed=3).timeline(0, 4000)
    for name in ("shown_at", "label", "click_at"):
        assert np.array_equal(getattr(a, name), getattr(b, name)[1000:3000])
    assert np.allclose(b.shown_at, np.arange(4000) / 10.0)


def test_clicks_come_only_for_positives_within_the_window():
    t = DelayedClicks(seed=1, window_s=600.0, never_share=0.2).timeline(0, 40_000)
    observed = np.isfinite(t.click_at)
    assert not observed[t.label == 0].any()
    delay = t.click_at[observed] - t.shown_at[observed]
    assert (delay >= 0).all() and (delay <= 600.0).all()
    share = observed[t.label == 1].mean()
    assert 0.5 < share < 0.8  # 20 % never come, and the slow ones miss a 10-minute window


def _timeline():
    # impressions at 0, 1, 2, 3 s: #0 clicks at 0.5 s, #1 at 10 s (after T = 5), #2 never
    # observed, #3 a negative
    return Timeline(np.array([0.0, 1.0, 2.0, 3.0]), np.array([1, 1, 1, 0]),
                    np.array([0.5, 10.0, np.inf, np.inf]))


def test_label_rules():
    t = _timeline()
    when, who, lab = learn_events(t, "timeout", 5.0)
    assert list(zip(when.tolist(), who.tolist(), lab.tolist(), strict=True)) == [
        (0.5, 0, 1), (6.0, 1, -1), (7.0, 2, -1), (8.0, 3, -1)]
    when, who, lab = learn_events(t, "fake negative", 5.0)
    assert list(zip(when.tolist(), who.tolist(), lab.tolist(), strict=True)) == [
        (0.5, 0, 1), (6.0, 1, -1), (7.0, 2, -1), (8.0, 3, -1), (10.0, 1, 1)]
    when, who, lab = learn_events(t, "perfect", 5.0)  # the timeout's timing, true labels
    assert who.tolist() == [0, 1, 2, 3] and lab.tolist() == [1, 1, -1, -1]
    assert when.tolist() == [0.5, 6.0, 7.0, 8.0]
    when, _, lab = learn_events(t, "immediate", 5.0)
    assert when.tolist() == [0.0, 1.0, 2.0, 3.0] and lab.tolist() == [1, 1, -1, -1]


def test_the_module_example_runs():
    import doctest

    from loadtest import delays

    assert doctest.testmod(delays).failed == 0
