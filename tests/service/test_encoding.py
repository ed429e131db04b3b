"""Feature encoding: VW-style hashing, stable indices, precise errors."""

from __future__ import annotations

import math

import mmh3
import numpy as np
import pytest

from aucstream.service import encoding
from aucstream.service.encoding import EncodingError, FeatureEncoder
from aucstream.service.hashing import murmur3_32, murmur3_32_many


def test_murmur3_matches_the_reference_implementation():
    rng = np.random.default_rng(0)
    keys = [bytes(rng.integers(0, 256, rng.integers(0, 40))) for _ in range(500)]
    seeds = rng.integers(0, 2**32, 500).astype(np.uint32)
    got = murmur3_32_many(keys, seeds)
    assert [int(g) for g in got] == [mmh3.hash(k, int(s), signed=False)
                                     for k, s in zip(keys, seeds, strict=True)]
    assert murmur3_32("", 1) == 0x514E28B7  # a published test vector


def _index(text: str, ns: str = "", bits: int = 18) -> int:
    seed = mmh3.hash(ns.encode(), 0, signed=False) if ns else 0
    return mmh3.hash(text.encode(), seed, signed=False) & ((1 << bits) - 1)


def test_named_features_are_hashed_like_vowpal_wabbit():
    enc = FeatureEncoder({"kind": "hashed", "bits": 18})
    batch = enc.encode([
        {"features": {"site": "a1f3", "hour": 14, "price": 0.25, "mobile": True,
                      "gone": None, "off": False, "user": {"country": "fr", "age": 31}}},
        {"features": {}},
    ])
    assert batch.indptr.tolist() == [0, 6, 6]
    expected = [(_index("site=a1f3"), 1.0), (_index("hour"), 14.0), (_index("price"), 0.25),
                (_index("mobile"), 1.0), (_index("country=fr", "user"), 1.0),
                (_index("age", "user"), 31.0)]
    assert list(zip(batch.indices.tolist(), batch.values.tolist(), strict=True)) == expected
    assert batch.values.dtype == np.float64 and batch.indices.dtype == np.int64


def test_indices_do_not_depend_on_the_cache(monkeypatch):
    items = [{"features": {f"f{j}": f"v{(i * j) % 13}" for j in range(8)}} for i in range(50)]
    a = FeatureEncoder({"kind": "hashed", "bits": 12}).encode(items)
    monkeypatch.setattr(encoding, "_CACHE_LIMIT", 5)  # forces the cache to be cleared often
    small = FeatureEncoder({"kind": "hashed", "bits": 12})
    b = small.encode(items[:10])
    c = small.encode(items[10:])
    assert np.array_equal(a.indices, np.concatenate([b.indices, c.indices]))


@pytest.mark.parametrize(
    ("features", "loc"),
    [
        ({"a": [1, 2]}, ("events", 0, "features", "a")),
        ({"a": {"b": {"c": 1}}}, ("events", 0, "features", "a", "b")),
        ({"a": math.nan}, ("events", 0, "features", "a")),
        ({"a": math.inf}, ("events", 0, "features", "a")),
        ({"a": 10**400}, ("events", 0, "features", "a")),
        ({"ns": {"b": math.nan}}, ("events", 0, "features", "ns", "b")),
    ],
)
def test_bad_values_name_their_place(features, loc):
    enc = FeatureEncoder({"kind": "hashed", "bits": 8})
    with pytest.raises(EncodingError) as err:
        enc.encode([{"features": features}])
    assert err.value.loc == loc


def test_dense_encoding_checks_dimension_and_finiteness():
    enc = FeatureEncoder({"kind": "dense", "dim": 3})
    batch = enc.encode([{"x": [1, 2, 3]}, {"x": [0.5, 0, -1]}])
    assert batch.X.tolist() == [[1, 2, 3], [0.5, 0, -1]]
    with pytest.raises(EncodingError) as err:
        enc.encode([{"x": [1, 2, 3]}, {"x": [1, 2]}])
    assert err.value.loc == ("events", 1, "x")
    with pytest.raises(EncodingError) as err:
        enc.encode([{"x": [1, math.inf, 3]}])
    assert err.value.loc == ("events", 0, "x", 1)
    with pytest.raises(EncodingError):
        enc.encode([{"features": {"a": 1}}])


def test_the_feature_cache_is_bounded_and_clearing_it_changes_nothing():
    enc = FeatureEncoder({"kind": "hashed", "bits": 20})
    fresh = FeatureEncoder({"kind": "hashed", "bits": 20})
    limit = encoding._CACHE_LIMIT
    step = 10_000
    probe = [{"features": {"city": f"c{k}", "n": 1.5}} for k in range(50)]
    for start in range(0, limit + 3 * step, step):
        enc.encode([{"features": {"id": f"u{k}"}} for k in range(start, start + step)])
        assert len(enc._cache) <= limit
    assert enc.cache_bytes < 300 * limit
    a, b = enc.encode(probe), fresh.encode(probe)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.values, b.values)


# ---------------------------------------------------------------------------- interactions
def _h(text: str, seed: int = 0) -> int:
    return mmh3.hash(text.encode(), seed, signed=False)


def _cross(*hashes: int) -> int:
    h = hashes[0]
    for g in hashes[1:]:
        h = ((h * 16777619) ^ g) & 0xFFFFFFFF
    return h


def test_interactions_cross_features_and_namespaces_as_vw_quadratics():
    spec = {"kind": "hashed", "bits": 20,
            "interactions": [["device", "pos"], ["user", "site"], ["device", "pos", "site"]]}
    enc = FeatureEncoder(spec)
    plain = FeatureEncoder({"kind": "hashed", "bits": 20})
    item = {"features": {"device": "phone", "pos": "top", "site": "s1", "price": 2.0,
                         "user": {"country": "fr", "age": 30}}}
    got, base = enc.encode([item]), plain.encode([item])
    n = base.indices.shape[0]
    np.testing.assert_array_equal(got.indices[:n], base.indices)  # the plain ones first
    mask, user = (1 << 20) - 1, _h("user")
    want = [(_cross(_h("device=phone"), _h("pos=top")) & mask, 1.0),
            (_cross(_h("country=fr", user), _h("site=s1")) & mask, 1.0),
            (_cross(_h("age", user), _h("site=s1")) & mask, 30.0),
            (_cross(_h("device=phone"), _h("pos=top"), _h("site=s1")) & mask, 1.0)]
    assert list(zip(got.indices[n:].tolist(), got.values[n:].tolist(), strict=True)) == want
    assert got.indptr.tolist() == [0, n + 4]


def test_a_missing_group_crosses_nothing_and_rows_stay_apart():
    enc = FeatureEncoder({"kind": "hashed", "bits": 16, "interactions": [["a", "b"]]})
    out = enc.encode([{"features": {"a": "x"}}, {"features": {"a": "x", "b": 2.5}},
                      {"features": {"b": False, "a": "y"}}])
    assert np.diff(out.indptr).tolist() == [1, 3, 1]  # false is absent: no cross either
    assert out.values.tolist() == [1.0, 1.0, 2.5, 2.5, 1.0]


def test_the_value_bound_applies_to_what_clients_send_not_to_products():
    enc = FeatureEncoder({"kind": "hashed", "bits": 16, "interactions": [["a", "b"]]},
                         max_value=1e12)
    out = enc.encode([{"features": {"a": 1e7, "b": 1e7}}])
    assert out.values.tolist() == [1e7, 1e7, 1e14]
    with pytest.raises(EncodingError, match="within"):
        enc.encode([{"features": {"a": 1e13, "b": 1.0}}])


@pytest.mark.parametrize("bad", [[["a"]], [["a", "a"]], [["a", "b", "c", "d"]], [["a", 3]],
                                 [[""]], "ab", [["a", "b"]] * 33])
def test_bad_interactions_are_refused(bad):
    with pytest.raises(ValueError, match="interaction"):
        FeatureEncoder({"kind": "hashed", "bits": 8, "interactions": bad})
