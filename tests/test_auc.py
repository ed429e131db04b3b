"""Exact AUC and the rolling-window AUC against brute force, scikit-learn and River."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river import metrics as river_metrics
from sklearn.metrics import roc_auc_score

from aucstream.models import RollingAUC, auc
from aucstream.models import _auc_kernels as K


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


def _same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def _check_window(r, s_all, y_all):
    """r holds the last r.window pairs of the stream so far, and its AUC is exact."""
    lo = max(0, len(s_all) - r.window)
    s, y = s_all[lo:], y_all[lo:]
    expected = brute_auc(y, s)
    got = r.value
    assert (math.isnan(expected) and math.isnan(got)) or got == expected
    assert (r.n_pos, r.n_neg) == (sum(y), len(y) - sum(y))
    state = r.get_state()
    assert state["scores"].tolist() == s and state["labels"].tolist() == y


@settings(max_examples=300, deadline=None)
@given(data=st.data(), window=st.integers(1, 50), ties=st.booleans())
def test_rolling_auc_batches_of_any_size_equal_brute_force(data, window, ties):
    """Batches of 1, W - 1, W, more than W and anything between, with many ties, each
    followed by a state round trip that must continue with the same values."""
    score = st.integers(-2, 2).map(float) if ties else st.floats(-1e3, 1e3, allow_subnormal=False)
    size = st.one_of(st.sampled_from([1, max(window - 1, 1), window, window + 1, 2 * window + 3]),
                     st.integers(1, 3 * window))
    r = RollingAUC(window)
    s_all: list[float] = []
    y_all: list[int] = []
    for _ in range(data.draw(st.integers(1, 8))):
        n = data.draw(size)
        s = data.draw(st.lists(score, min_size=n, max_size=n))
        y = data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
        r.update(np.array(s), np.array(y))
        s_all += s
        y_all += y
        _check_window(r, s_all, y_all)
        if data.draw(st.booleans()):
            r = RollingAUC.from_state(r.get_state())
            _check_window(r, s_all, y_all)


@pytest.mark.parametrize("window", [1500, 4000])
def test_rolling_auc_large_windows_exercise_buffers_and_flushes(window):
    """Windows large enough for the buffered insertions and deletions, both search
    strategies and the flushes; every batch checked against the exact AUC."""
    rng = np.random.default_rng(window)
    r = RollingAUC(window)
    restored = None
    s_all = np.empty(0)
    y_all = np.empty(0, bool)
    sizes = [1, 1, 3, 500, 1, 40, window - 1, 1, 7, window, 250, window + 17, 2, 900] * 3
    for i, n in enumerate(sizes):
        s = rng.integers(0, 20, n).astype(float) if i % 2 else rng.normal(size=n)
        y = rng.random(n) < (0.04 if i % 3 else 0.5)
        r.update(s, y)
        if restored is not None:
            restored.update(s, y)
        s_all = np.r_[s_all, s][-window:]
        y_all = np.r_[y_all, y][-window:]
        assert _same(r.value, auc(y_all, s_all))
        assert (r.n_pos, r.n_neg) == (int(y_all.sum()), int((~y_all).sum()))
        if restored is not None:
            assert _same(restored.value, r.value)
        if i == 9:
            restored = RollingAUC.from_state(r.get_state())
    assert r.get_state()["scores"].tolist() == s_all.tolist()


def test_rolling_auc_single_events_on_a_large_window():
    rng = np.random.default_rng(5)
    window, n = 20_000, 23_000
    s = rng.normal(size=n)
    y = rng.random(n) < 0.1
    r = RollingAUC(window)
    r.update(s[:window - 100], y[:window - 100])
    for i in range(window - 100, n):
        r.update(s[i], y[i])
        if i % 997 == 0 or i == n - 1:
            lo = max(0, i + 1 - window)
            assert _same(r.value, auc(y[lo:i + 1], s[lo:i + 1]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=300),
       st.integers(0, 3))
def test_sort_scores_sorts_any_finite_floats(xs, spread):
    # spread > 0 adds copies and heavy tails: ties, skew and the radix fallback.
    a = np.array(xs + [x * 10.0 ** (40 * spread) for x in xs[: 20 * spread]])
    a = a[np.isfinite(a)]
    b = a.copy()
    K.sort_scores(b)
    assert b.tolist() == np.sort(a).tolist() or (b == np.sort(a)).all()


def test_rolling_auc_reports_a_broken_invariant():
    r = RollingAUC(4)
    r.update([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1])
    r._sorted[:] = 7.0  # the scores that leave are no longer where they should be
    with pytest.raises(RuntimeError, match="bug"):
        for _ in range(8):  # found at the latest when the class's buffer is flushed
            r.update([0.5], [0])


def test_rolling_auc_nbytes_counts_its_arrays():
    small, large = RollingAUC(1000), RollingAUC(100_000)
    # ring (9 bytes a pair) and the sorted rows (24) at least; the old treaps took 121.
    for r in (small, large):
        assert 25 * r.window <= r.nbytes <= 72 * r.window


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([-1, 0, 1, 2, -2, 0.5, np.nan, -0.0]), min_size=1, max_size=6),
       st.sampled_from([np.int8, np.int64, np.uint8, np.float64, np.float32, bool, None]))
def test_rolling_auc_takes_and_refuses_labels_like_auc(values, dtype):
    """The rolling update's quicker label check accepts, refuses (same message) and
    reads labels exactly as auc() does."""
    try:
        y = np.array(values, dtype=dtype)
    except (ValueError, TypeError, OverflowError):
        return
    s = np.linspace(0.0, 1.0, len(values))
    r = RollingAUC(10)
    try:
        expected = auc(y, s)
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            r.update(s, y)
        assert r.n_pos + r.n_neg == 0
        return
    r.update(s, y)
    assert _same(r.value, expected)
