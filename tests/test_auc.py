"""Exact AUC and the rolling-window AUC against brute force, scikit-learn and River."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river import metrics as river_metrics
from sklearn.metrics import roc_auc_score

from aucstream.models import RollingAUC, auc


def brute_auc(y, s):
    y = np.asarray(y) > 0
    pos, neg = np.asarray(s)[y], np.asarray(s)[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


# Few distinct score values so that ties are common.
scores_st = st.lists(st.sampled_from([-1.5, 0.0, 0.25, 0.5, 2.0, 3.0]), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_auc_equals_brute_force_with_ties(data):
    s = data.draw(scores_st)
    y = data.draw(st.lists(st.booleans(), min_size=len(s), max_size=len(s)))
    expected = brute_auc(y, s)
    got = auc(np.array(y, int), s)
    assert (math.isnan(expected) and math.isnan(got)) or got == pytest.approx(expected, abs=1e-12)


def test_auc_matches_scikit_learn():
    rng = np.random.default_rng(0)
    y = rng.random(5000) < 0.1
    s = np.round(rng.normal(size=5000) + y, 1)  # rounded: many ties
    assert auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert auc(2 * y.astype(int) - 1, s) == auc(y, s)


def test_auc_is_undefined_without_both_classes():
    assert math.isnan(auc([1, 1, 1], [0.1, 0.2, 0.3]))
    assert math.isnan(auc([0], [0.1]))
    assert auc([1, 0], [0.0, 0.0]) == 0.5  # a constant scorer is ½, not 0


def test_auc_rejects_bad_input():
    with pytest.raises(ValueError, match="finite"):
        auc([1, 0], [np.nan, 0.0])
    with pytest.raises(ValueError, match="labels"):
        auc([2, 0], [1.0, 0.0])
    with pytest.raises(ValueError, match="entries"):
        auc([1, 0, 1], [1.0, 0.0])


@settings(max_examples=150, deadline=None)
@given(data=st.data(), window=st.integers(1, 12))
def test_rolling_auc_equals_brute_force_over_the_window(data, window):
    s = data.draw(scores_st)
    y = data.draw(st.lists(st.booleans(), min_size=len(s), max_size=len(s)))
    r = RollingAUC(window)
    for i in range(len(s)):
        r.update([s[i]], [y[i]])
        lo = max(0, i + 1 - window)
        expected = brute_auc(y[lo:i + 1], s[lo:i + 1])
        got = r.value
        assert (math.isnan(expected) and math.isnan(got)) or got == expected
        assert r.n_pos + r.n_neg == i + 1 - lo


def test_rolling_auc_matches_river():
    rng = np.random.default_rng(3)
    n, window = 3000, 200
    y = rng.random(n) < 0.2
    s = rng.normal(size=n) + 0.8 * y  # continuous: River and we agree without ties
    ours = RollingAUC(window)
    theirs = river_metrics.RollingROCAUC(window_size=window)
    for i in range(n):
        ours.update(s[i], y[i])
        theirs.update(bool(y[i]), float(s[i]))
        if i % 97 == 0 and i > 50:
            assert ours.value == pytest.approx(theirs.get(), abs=1e-12)


def test_rolling_auc_batches_and_state_round_trip():
    rng = np.random.default_rng(1)
    s = np.round(rng.normal(size=500), 1)
    y = rng.random(500) < 0.3
    one = RollingAUC(64)
    for i in range(500):
        one.update(s[i], y[i])
    batched = RollingAUC(64)
    batched.update(s[:123], y[:123])
    restored = RollingAUC.from_state(batched.get_state())
    restored.update(s[123:], y[123:])
    assert restored.value == one.value == brute_auc(y[-64:], s[-64:])
    state = restored.get_state()
    assert state["scores"].tolist() == s[-64:].tolist()


def test_rolling_auc_handles_a_long_stream_with_heavy_ties():
    r = RollingAUC(1000)
    rng = np.random.default_rng(9)
    s = rng.integers(0, 5, 50_000).astype(float)
    y = rng.random(50_000) < 0.05
    r.update(s, y)
    assert r.value == pytest.approx(brute_auc(y[-1000:], s[-1000:]), abs=0)


def test_rolling_auc_validates():
    with pytest.raises(ValueError, match="window"):
        RollingAUC(0)
    r = RollingAUC(5)
    with pytest.raises(ValueError, match="finite"):
        r.update([np.inf], [1])
    assert math.isnan(r.value)
