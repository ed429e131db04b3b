"""The ``auto`` learner: shadow candidates, windowed quality, selection with hysteresis.

The contract suite (determinism, save/restore at any split, all-or-nothing learning)
covers ``auto`` like every learner; these tests check what it adds, against a reference
built from the candidates trained alone.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from aucstream import models
from aucstream.models.auc import u_statistic
from aucstream.models.auto import _child_seed, default_candidates
from tests.helpers import assert_states_equal, sparse_stream, stream

CANDS = [
    {"learner": "cbr_diag_fifo", "params": {"C": 0.001, "capacity": 10}},
    {"learner": "cbr_diag_fifo", "params": {"C": 1.0, "capacity": 10}},
    {"learner": "solam", "params": {"zeta": 2.0, "R": 5.0}},
]
PARAMS = {"candidates": json.dumps(CANDS), "block": 50, "windows": 4, "min_events": 100,
          "margin": 0.01}


def _alone(d, seed, X, y):
    """Each candidate trained alone from Auto's seed for it: (learner, prequential scores)."""
    out = []
    for i, c in enumerate(CANDS):
        lrn = models.create(c["learner"], n_features=d, seed=_child_seed(seed, i), **c["params"])
        out.append((lrn, lrn.score_then_learn(X, y)))
    return out


def _reference(priors, y, block, windows, min_events, margin):
    """The served candidate for every event, and the promotions, from the definition."""
    k, n = priors.shape
    served, promotions = 0, 0
    ring_u, ring_p = [], []
    out = np.empty(n, np.int64)
    for start in range(0, n, block):
        out[start:start + block] = served
        end = start + block
        if end > n:
            break
        lab = y[start:end] > 0
        pairs = lab.sum() * (~lab).sum()
        if pairs:
            ring_u.append([u_statistic(priors[c, start:end], lab) for c in range(k)])
            ring_p.append(float(pairs))
            ring_u, ring_p = ring_u[-windows:], ring_p[-windows:]
        if end >= min_events and ring_p:
            q = np.sum(ring_u, axis=0) / np.sum(ring_p)
            best = int(np.argmax(q))
            if best != served and q[best] > q[served] + margin:
                served, promotions = best, promotions + 1
    return out, promotions


@pytest.mark.parametrize("seed", [0, 7])
def test_candidates_learn_as_alone_and_the_served_one_follows_the_definition(seed):
    X, y = stream(1234, 8, seed=seed, pos_rate=0.2)
    auto = models.create("auto", n_features=8, seed=seed, **PARAMS)
    prior = np.concatenate([auto.score_then_learn(X[a:a + 97], y[a:a + 97])
                            for a in range(0, len(y), 97)])
    alone = _alone(8, seed, X, y)
    state = auto.get_state()
    for i, (lrn, _) in enumerate(alone):
        for key, arr in lrn.get_state().items():
            if isinstance(arr, np.ndarray):
                np.testing.assert_array_equal(state[f"c{i}.{key}"], arr, err_msg=key)
    priors = np.array([p for _, p in alone])
    served, promotions = _reference(priors, y, 50, 4, 100, 0.01)
    np.testing.assert_array_equal(prior, priors[served, np.arange(len(y))])
    assert auto.served == served[-1] and auto.promotions == promotions and auto.pinned is None
    assert promotions >= 1, "the stream should make the selection move"
    assert auto.candidates[auto.served]["serving"]
    np.testing.assert_array_equal(auto.score(X[:30]), alone[auto.served][0].score(X[:30]))


def test_quality_is_the_auc_within_the_recent_windows():
    X, y = stream(1000, 8, seed=3, pos_rate=0.2)
    auto = models.create("auto", n_features=8, seed=3, **PARAMS).learn(X, y)
    priors = np.array([p for _, p in _alone(8, 3, X, y)])
    windows = [(a, a + 50) for a in range(0, 1000, 50)][-4:]
    u = [[u_statistic(priors[c, a:b], y[a:b] > 0) for c in range(3)] for a, b in windows]
    pairs = sum(float((y[a:b] > 0).sum() * (y[a:b] == 0).sum()) for a, b in windows)
    np.testing.assert_allclose(auto.quality, np.sum(u, axis=0) / pairs, rtol=0, atol=1e-15)
    assert [c["quality"] for c in auto.candidates] == auto.quality.tolist()


def test_identical_candidates_never_flap():
    """Two copies of one candidate on a stationary stream have equal quality at every
    window: the first keeps serving."""
    twins = json.dumps([CANDS[0], CANDS[0]])
    X, y = stream(3000, 6, seed=1)
    auto = models.create("auto", n_features=6, seed=1, candidates=twins, block=50,
                         min_events=0, margin=0.0)
    for a in range(0, 3000, 250):
        auto.learn(X[a:a + 250], y[a:a + 250])
        assert auto.served == 0
    assert auto.promotions == 0


def test_a_margin_no_candidate_can_beat_freezes_the_choice():
    X, y = stream(1500, 8, seed=0, pos_rate=0.2)
    auto = models.create("auto", n_features=8, seed=0, **{**PARAMS, "margin": 1.0})
    auto.learn(X, y)
    assert auto.promotions == 0 and auto.served == 0


def test_nothing_switches_before_min_events():
    X, y = stream(1234, 8, seed=0, pos_rate=0.2)
    free = models.create("auto", n_features=8, seed=0, **{**PARAMS, "min_events": 0})
    late = models.create("auto", n_features=8, seed=0, **{**PARAMS, "min_events": 10**9})
    free.learn(X, y)
    late.learn(X, y)
    assert free.promotions >= 1 and late.promotions == 0


def test_a_snapshot_scores_as_the_served_candidate_and_stays_put():
    X, y = stream(800, 8, seed=2, pos_rate=0.2)
    auto = models.create("auto", n_features=8, seed=2, **PARAMS).learn(X[:600], y[:600])
    snap = auto.snapshot()
    before = snap.score(X[:40])
    np.testing.assert_array_equal(before, auto.score(X[:40]))
    auto.learn(X[600:], y[600:])
    np.testing.assert_array_equal(snap.score(X[:40]), before)
    with pytest.raises(RuntimeError):
        snap.learn(X[:2], y[:2])
    assert snap.n_seen == (int((y[:600] == 0).sum()), int((y[:600] == 1).sum()))


def test_the_built_in_set_follows_the_input_dimension():
    small = models.create("auto", n_features=20)
    assert [(c["learner"], c["params"].get("C")) for c in small.candidates] == [
        ("logistic_nag", None), ("cbr_diag_fifo", 1e-4), ("cbr_diag_fifo", 1e-3),
        ("cbr_diag_fifo", 1e-2), ("cbr_diag_fifo", 1e-1), ("solam", None)]
    assert small.served == 0  # VW's default learner serves until evidence says otherwise
    hashed = models.create("auto", n_features=1 << 18)
    assert hashed.accepts_sparse
    assert [c["params"].get("C") for c in hashed.candidates] == [None, 1e-4, 1e-3, 1e-2,
                                                                 None]
    assert [c["learner"] for c in hashed.candidates] == [
        c["learner"] for c in default_candidates(1 << 18)]
    # saved resolved: every candidate parameter explicit, storage made concrete
    saved = json.loads(hashed.params["candidates"])
    assert all(c["params"].get("storage", "sparse") == "sparse" for c in saved)
    assert saved[1]["params"] == models.create("cbr_diag_fifo", n_features=1 << 18,
                                               C=1e-4).params
    csr, y = sparse_stream(300, 1 << 18, nnz=12, seed=0)
    hashed.learn(csr, y)
    twin = models.from_state(hashed.get_state())
    assert_states_equal(twin.get_state(), hashed.get_state())


def test_a_dense_only_candidate_makes_auto_refuse_sparse_input():
    auto = models.create("auto", n_features=50, candidates=json.dumps(
        [{"learner": "cbr_fifo", "params": {}}]))
    with pytest.raises(ValueError, match="auto takes dense input only"):
        auto.learn((np.array([0, 1]), np.array([3]), np.array([1.0])), [1])


@pytest.mark.parametrize(("candidates", "message"), [
    ("not json", r"must be a JSON list of 1 to 16 .* \(not valid JSON\); got 'not json'\."),
    ("[]", r"\(not a list of 1 to 16\); got '\[\]'\."),
    (json.dumps([{"learner": "cbr_fifo"}] * 17), r"not a list of 1 to 16"),
    ('{"learner": "cbr_fifo"}', r"not a list of 1 to 16"),
    ('[{"learner": "nope"}]', r"candidate 0 names an unknown learner 'nope'; available: "),
    ('[{"learner": "auto"}]', r"candidate 0 is 'auto' itself"),
    ('[{"learner": "solam", "extra": 1}]', r"candidate 0 is not such an object"),
    ('[{"learner": "solam", "params": []}]', r"candidate 0 is not such an object"),
    ('[{"learner": "solam"}, {"learner": "cbr_fifo", "params": {"C": -1}}]',
     r"candidate 1 \(cbr_fifo\): The 'C' parameter of cbr_fifo must be a float in "
     r"\[1e-06, 1e\+06\]; got -1\."),
])
def test_bad_candidate_lists_are_refused_with_a_clear_message(candidates, message):
    with pytest.raises(ValueError, match=message):
        models.create("auto", n_features=8, candidates=candidates)


def test_a_candidate_limit_below_the_dimension_is_named():
    with pytest.raises(ValueError, match=r"candidate 0 \(cbr_fifo\): The 'n_features'"):
        models.create("auto", n_features=1 << 16,
                      candidates=json.dumps([{"learner": "cbr_fifo"}]))


def test_a_state_with_an_out_of_range_index_is_refused():
    X, y = stream(200, 8, seed=0)
    state = models.create("auto", n_features=8, **PARAMS).learn(X, y).get_state()
    state["served_"] = np.array([7], np.int64)
    with pytest.raises(ValueError, match="out-of-range index"):
        models.from_state(state)


def test_candidates_learning_in_parallel_give_the_serial_result(monkeypatch):
    """Batches of 64 events and more are learned by the candidates in threads; smaller
    ones in turn. Both give the same bits."""
    import aucstream.models.auto as auto_module

    X, y = stream(1500, 8, seed=4, pos_rate=0.2)
    parallel = models.create("auto", n_features=8, seed=4, **PARAMS)
    parallel.learn(X, y)
    monkeypatch.setattr(auto_module, "_PARALLEL_MIN_BATCH", 10**9)
    serial = models.create("auto", n_features=8, seed=4, **PARAMS)
    serial.learn(X, y)
    assert_states_equal(parallel.get_state(), serial.get_state())


def test_a_failing_candidate_in_parallel_leaves_every_state_as_it_was():
    X, y = stream(600, 8, seed=5, pos_rate=0.2)
    auto = models.create("auto", n_features=8, seed=5, **PARAMS).learn(X[:400], y[:400])
    before = auto.get_state()
    poisoned = X[400:].copy()
    poisoned[150, :] = 1e300
    with pytest.raises(models.NonFiniteError) as err:
        auto.learn(poisoned, y[400:])
    assert err.value.row == 150
    assert_states_equal(auto.get_state(), before)


def test_a_pinned_candidate_serves_and_the_choice_goes_on_underneath():
    X, y = stream(1234, 8, seed=0, pos_rate=0.2)
    free = models.create("auto", n_features=8, seed=0, **PARAMS)
    pinned = models.create("auto", n_features=8, seed=0, **PARAMS).pin(2)
    free.score_then_learn(X, y)
    prior_pinned = pinned.score_then_learn(X, y)
    alone = _alone(8, 0, X, y)
    np.testing.assert_array_equal(prior_pinned, alone[2][1])  # candidate 2 served throughout
    assert pinned.served == 2 and pinned.pinned == 2
    assert pinned.chosen == free.served and pinned.promotions == free.promotions
    np.testing.assert_array_equal(pinned.score(X[:20]), alone[2][0].score(X[:20]))
    np.testing.assert_array_equal(pinned.snapshot().score(X[:20]), alone[2][0].score(X[:20]))
    twin = models.from_state(pinned.get_state())
    assert twin.pinned == 2
    pinned.pin(None)
    assert pinned.served == free.served and pinned.pinned is None
    with pytest.raises(ValueError, match="no candidate 3; there are 3"):
        pinned.pin(3)
    state = free.get_state()
    del state["pinned_"]  # saved before pins existed
    assert models.from_state(state).pinned is None
