"""Compact hashed models: the learner is sized to the hashed columns seen, through a
FeatureIndex; they learn and score as a learner sized 2^bits does (up to the order of
summation), recover bit for bit, and agree across replicas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aucstream.service.codec import decode_state, encode_state
from aucstream.service.feature_index import FeatureIndex
from aucstream.service.hosting import HostedModel, build_config
from loadtest.feed import AdClickFeed


def _csr(rows: list[list[int]]):
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    indices = np.array([c for r in rows for c in r], np.int64)
    values = np.arange(1, indices.shape[0] + 1, dtype=float)
    return indptr, indices, values


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.lists(st.integers(0, 5000), max_size=40), max_size=30),
                min_size=1, max_size=6))
def test_the_index_assigns_in_order_maps_sorted_and_survives_a_round_trip(batches):
    index = FeatureIndex()
    seen: dict[int, int] = {}
    for rows in batches:
        csr = _csr(rows)
        ptr, idx, val = index.assign(csr)
        for c in csr[1]:  # slots in order of first appearance, in batch order
            seen.setdefault(int(c), len(seen))
        assert index.count == len(seen)
        cols = np.concatenate([[-1], index.columns()])  # learner column 0: never assigned
        assert cols[1:].tolist() == list(seen)
        for r, row in enumerate(rows):
            a, b = ptr[r], ptr[r + 1]
            assert np.all(np.diff(idx[a:b]) >= 0)  # sorted (equal only for repeats)
            # each value goes with its column
            got = sorted(zip(cols[idx[a:b]].tolist(), val[a:b].tolist(), strict=True))
            lo = csr[0][r]
            want = sorted(zip(row, csr[2][lo:lo + len(row)].tolist(), strict=True))
            assert got == want
    again = FeatureIndex(index.columns())
    csr = _csr([c for rows in batches for c in rows][:20])
    for limit in (0, index.count // 2, index.count + 1):
        np.testing.assert_array_equal(
            np.concatenate(again.frozen().lookup(csr, limit)),
            np.concatenate(index.frozen().lookup(csr, limit)))
    # what has no learner column below the limit goes to column 0, in quadrature
    known = index.columns()[:2].tolist()
    ptr, idx, val = index.frozen().lookup(_csr([[10**6, 10**6 + 1, *known]]), 10**9)
    assert idx[0] == 0 and val[0] == pytest.approx(np.sqrt(1.0 + 4.0))
    assert sorted(idx[1:].tolist()) == [1, 2][:len(known)]


def test_a_malformed_index_is_refused():
    with pytest.raises(ValueError):
        FeatureIndex(np.array([3, 5, 3]))
    with pytest.raises(ValueError):
        FeatureIndex(np.array([-1]))


def _stream(n: int, seed: int = 1):
    ev = AdClickFeed(seed=seed).events(0, n)
    return ev, np.array([e["label"] for e in ev], np.int8)


@pytest.mark.parametrize("learner", ["cbr_diag_fifo", "solam", "logistic_nag", "auto"])
def test_compact_learns_and_scores_as_a_full_sized_learner(learner):
    config = build_config("m", learner, {}, {"kind": "hashed", "bits": 20}, 0, False, 1000)
    assert config["compact"]
    compact, full = HostedModel(config), HostedModel(dict(config, compact=False))
    events, y = _stream(6000)
    for a in range(0, 6000, 500):
        batch = compact.encoder.encode(events[a:a + 500])
        p = compact._learn(batch.learner_input(), y[a:a + 500])
        q = full._learn(batch.learner_input(), y[a:a + 500])
        np.testing.assert_allclose(p, q, rtol=1e-9, atol=1e-12)
    assert compact.learner.n_features < full.learner.n_features
    assert compact.index.count < compact.learner.n_features
    probe = compact.encoder.encode(_stream(300, seed=9)[0])  # unseen features included
    compact._snapshot, full._snapshot = compact._make_snapshot(), full._make_snapshot()
    np.testing.assert_allclose(compact.snapshot.score(probe), full.snapshot.score(probe),
                               rtol=1e-9, atol=1e-12)
    cache = compact.encoder.cache_bytes  # the encoder's string cache, the same in both
    assert compact.memory_bytes() - cache < (full.memory_bytes() - cache) / 3
    # a checkpoint (what replicas and recovery load) gives the same model bit for bit
    twin = HostedModel(config)
    twin.restore(decode_state(encode_state(compact.full_state())), compact.version, 0.0)
    np.testing.assert_array_equal(twin.snapshot.score(probe), compact.snapshot.score(probe))
    more = compact.encoder.encode(events[:500])
    np.testing.assert_array_equal(twin._learn(more.learner_input(), y[:500]),
                                  compact._learn(more.learner_input(), y[:500]))


def test_small_spaces_and_dense_only_learners_are_not_compact():
    assert not build_config("m", "cbr_diag_fifo", {}, {"kind": "hashed", "bits": 10}, 0,
                            False, 100)["compact"]
    assert not build_config("m", "cbr_fifo", {}, {"kind": "hashed", "bits": 12}, 0,
                            False, 100)["compact"]
    assert not build_config("m", "cbr_diag_fifo", {}, {"kind": "dense", "dim": 5000}, 0,
                            False, 100)["compact"]


def test_an_export_made_before_compact_models_imports_full_sized(tmp_path):
    """Exports carry their config: one without 'compact' (an earlier version's) restores
    into a full-sized learner, and scores as it did."""
    from aucstream import __version__
    from aucstream.service.codec import encode_export
    from aucstream.service.hosting import ModelHost
    from aucstream.service.metrics import Metrics
    from aucstream.service.settings import Settings
    from aucstream.service.store import SqliteStore

    config = build_config("old", "cbr_diag_fifo", {}, {"kind": "hashed", "bits": 14}, 0,
                          False, 100)
    config.pop("compact")
    old = HostedModel(config)
    events, y = _stream(1000)
    batch = old.encoder.encode(events)
    old._learn(batch.learner_input(), y)
    old.version = 1000
    old._snapshot = old._make_snapshot()
    blob = encode_export("old", config, 1000, encode_state(old.full_state()),
                         f"aucstream {__version__}")
    store = SqliteStore(tmp_path / "s.sqlite3")
    host = ModelHost(store, Settings(data_dir=tmp_path), Metrics())
    host.recover()
    imported = host.import_model(blob, "new")
    assert not imported.config["compact"] and imported.index is None
    probe = old.encoder.encode(_stream(50, seed=5)[0])
    np.testing.assert_array_equal(imported.snapshot.score(probe), old.snapshot.score(probe))
    store.close()
