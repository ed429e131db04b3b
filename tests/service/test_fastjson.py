"""The numba fast path for /learn and /score bodies against the regular pydantic path.

For any body, the fast path either gives up (None) or yields exactly what the regular
path yields: same indices, same values to the bit, same labels and ids.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aucstream.service import fastjson
from aucstream.service.encoding import FeatureEncoder
from aucstream.service.schemas import LearnRequest, ScoreRequest

HASHED = {"kind": "hashed", "bits": 16}
DENSE = {"kind": "dense", "dim": 3}

names = st.text(st.sampled_from("abcdé_xyz0"), min_size=1, max_size=4)
numbers = st.one_of(
    st.integers(-10**20, 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -0.0, 0.5, 1e-30, 123456789.123, 2**53, 2**53 + 1, 1e22, 1e23]),
)
scalars = st.one_of(st.text(max_size=6), numbers, st.booleans(), st.none())
features = st.dictionaries(names, st.one_of(scalars, st.dictionaries(names, scalars, max_size=3)),
                          max_size=6)
labels = st.sampled_from([0, 1, -1, True, False, 1.0, 0.0, -1.0])
ids = st.one_of(st.none(), st.text(st.sampled_from("ab-9é"), min_size=1, max_size=8))


def _same(fast, batch, y, idlist):
    assert fast.batch.n == batch.n
    if batch.X is not None:
        assert fast.batch.X.tobytes() == batch.X.tobytes()
    else:
        assert np.array_equal(fast.batch.indptr, batch.indptr)
        assert np.array_equal(fast.batch.indices, batch.indices)
        assert fast.batch.values.tobytes() == batch.values.tobytes()
    if y is not None:
        assert np.array_equal(fast.labels, y)
    assert fast.ids == idlist


def _slow_learn(body: bytes, spec):
    req = LearnRequest.model_validate_json(body)
    batch = FeatureEncoder(spec).encode(req.events)
    y = np.array([e.label for e in req.events], np.int8)
    return req, batch, y, [e.id for e in req.events]


@settings(max_examples=300, deadline=None)
@given(events=st.lists(st.fixed_dictionaries({"features": features, "label": labels},
                                             optional={"id": ids}), min_size=1, max_size=5),
       indent=st.sampled_from([None, 1]))
def test_hashed_learn_bodies(events, indent):
    body = json.dumps({"model": "m", "events": events}, indent=indent).encode()
    fast = fastjson.parse_learn(body, HASHED, 100)
    try:
        req, batch, y, idlist = _slow_learn(body, HASHED)
    except Exception:
        assert fast is None  # invalid for the regular path: the fast path gave up
        return
    if fast is not None:
        assert fast.model == req.model
        _same(fast, batch, y, idlist)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(numbers, min_size=2, max_size=4), min_size=1, max_size=4),
       labels_=st.lists(labels, min_size=4, max_size=4))
def test_dense_learn_bodies(rows, labels_):
    events = [{"x": r, "label": labels_[i]} for i, r in enumerate(rows)]
    body = json.dumps({"events": events, "model": "m"}).encode()
    fast = fastjson.parse_learn(body, DENSE, 100)
    try:
        _, batch, y, idlist = _slow_learn(body, DENSE)
    except Exception:
        assert fast is None
        return
    if fast is not None:
        _same(fast, batch, y, idlist)


@settings(max_examples=150, deadline=None)
@given(items=st.lists(st.fixed_dictionaries({"features": features}), min_size=1, max_size=4),
       top_k=st.one_of(st.none(), st.integers(-1, 5)))
def test_score_bodies(items, top_k):
    body = json.dumps({"model": "m", "items": items, "top_k": top_k}).encode()
    fast = fastjson.parse_score(body, HASHED, 100)
    try:
        req = ScoreRequest.model_validate_json(body)
        batch = FeatureEncoder(HASHED).encode(req.items, field="items")
    except Exception:
        assert fast is None
        return
    if fast is not None:
        assert fast.top_k == req.top_k
        _same(fast, batch, None, [i.id for i in req.items])  # kept by models with feedback


label_only_events = st.fixed_dictionaries({"label": labels}, optional={"id": ids})


@settings(max_examples=300, deadline=None)
@given(events=st.lists(st.one_of(
    st.fixed_dictionaries({"features": features, "label": labels}, optional={"id": ids}),
    st.fixed_dictionaries({"x": st.lists(numbers, min_size=3, max_size=3), "label": labels},
                          optional={"id": ids}),
    label_only_events), min_size=1, max_size=5))
def test_labels_by_id_beside_full_events(events):
    """With ``by_id`` (a model with feedback), events without a vector are labels by id:
    the fast path lists them, leaves their rows empty, and encodes the rest exactly as
    the regular path does; an event without a vector or an id is left to the regular
    path (which words the 422), and so is every such event without ``by_id``."""
    body = json.dumps({"model": "m", "events": events}).encode()
    for spec, vec in ((HASHED, "features"), (DENSE, "x")):
        full = [i for i, e in enumerate(events) if vec in e]
        only = [i for i, e in enumerate(events) if "x" not in e and "features" not in e]
        fast = fastjson.parse_learn(body, spec, 100, by_id=True)
        plain = fastjson.parse_learn(body, spec, 100)
        if only:
            assert plain is None
        try:
            req = LearnRequest.model_validate_json(body)
        except Exception:
            assert fast is None
            continue
        if (len(full) + len(only) < len(events)
                or any(req.events[i].id is None for i in only)):
            assert fast is None  # a vector of the other kind; a label without an id
            continue
        if fast is None:
            continue  # gave up (an unusual number or name): allowed
        assert fast.label_only == only
        assert np.array_equal(fast.labels, [e.label for e in req.events])
        assert fast.ids == [e.id for e in req.events]
        assert fast.batch.n == len(events)
        if full:
            batch = FeatureEncoder(spec).encode([req.events[i] for i in full])
            _same(fastjson.FastRequest("m", fast.batch.take(full), None,
                                       [req.events[i].id for i in full], None),
                  batch, None, [req.events[i].id for i in full])
        if spec is HASHED:
            assert all(fast.batch.indptr[i] == fast.batch.indptr[i + 1] for i in only)
        else:
            assert not fast.batch.X[only].any()


def test_ordinary_bodies_take_the_fast_path():
    from loadtest.feed import AdClickFeed, DenseFeed

    body = json.dumps({"model": "ads", "events": AdClickFeed(seed=3).batch(200)}).encode()
    fast = fastjson.parse_learn(body, {"kind": "hashed", "bits": 20}, 1000)
    assert fast is not None and fast.batch.n == 200
    _same(fast, *_slow_learn(body, {"kind": "hashed", "bits": 20})[1:])
    dense = json.dumps({"model": "d", "events": DenseFeed(seed=1).batch(100)}).encode()
    assert fastjson.parse_learn(dense, {"kind": "dense", "dim": 54}, 1000) is not None
    assert fastjson.model_name(body) == "ads"
    assert fastjson.model_name(b'{"events": [{"a": "}\\"x"}], "model": "zz"}') == "zz"


@pytest.mark.parametrize("body", [
    b'{"model": "m", "events": [{"features": {"a": 1, "a": 2}, "label": 1}]}',  # duplicate key
    b'{"model": "m", "events": [{"features": {"a\\u0041": 1}, "label": 1}]}',    # escape
    b'{"model": "m", "events": [{"features": {"a": 1}, "label": 2}]}',           # bad label
    b'{"model": "m", "events": [{"features": {"a": 1}}]}',                       # no label
    b'{"model": "m", "events": []}',                                             # empty
    b'{"model": "m", "events": [{"features": {"a": 1}, "label": 1}], "x": 1}',   # extra key
    b'{"model": "m", "events": [{"features": {"a": 1}, "label": 1}]} trailing',
    b'{"model": "m", "events": [{"features": {"a": 1.5e999}, "label": 1}]}',
])
def test_the_fast_path_gives_up_on_anything_unusual(body):
    assert fastjson.parse_learn(body, HASHED, 100) is None
    assert fastjson.parse_learn(body[:-1], HASHED, 100) is None  # truncated


def test_the_item_limit_is_left_to_the_regular_path():
    events = [{"features": {"a": 1}, "label": 1}] * 5
    body = json.dumps({"model": "m", "events": events}).encode()
    assert fastjson.parse_learn(body, HASHED, 4) is None
    assert fastjson.parse_learn(body, HASHED, 5) is not None


key_names = st.sampled_from(["a", "b", "ab", "ba", "c14", "c41", "site", "x" * 40])


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(key_names, st.one_of(
    st.integers(-5, 5), st.sampled_from(["u", "v"]),
    st.lists(st.tuples(key_names, st.integers(0, 3)), max_size=4))), min_size=1, max_size=12))
def test_duplicate_keys_give_up_at_their_own_level(pairs):
    """Objects written with repeated keys (json.dumps cannot): the fast path gives up
    exactly when some object repeats a key, a namespace's names clashing only among
    themselves; otherwise it agrees with the regular path."""
    def obj(kv):
        return "{" + ", ".join(f'"{k}": {v}' for k, v in kv) + "}"

    def value(v):
        if isinstance(v, list):
            return obj(v)
        return json.dumps(v)

    top = [(k, value(v)) for k, v in pairs]
    dup = len({k for k, _ in pairs}) < len(pairs) or any(
        len({k for k, _ in v}) < len(v) for _, v in pairs if isinstance(v, list))
    body = ('{"model": "m", "items": [{"features": ' + obj(top) + '}, {"features": '
            + obj(top[::-1]) + "}]}").encode()
    fast = fastjson.parse_score(body, HASHED, 100)
    if dup:
        assert fast is None
    else:
        assert fast is not None
        req = ScoreRequest.model_validate_json(body)
        _same(fast, FeatureEncoder(HASHED).encode(req.items, field="items"), None,
              [i.id for i in req.items])


def test_many_keys_in_one_object():
    """Hundreds of keys: the duplicate table fills to its limit and gives up beyond it."""
    for n, ok in ((300, True), (512, True), (513, False)):
        feats = {f"k{i}": i for i in range(n)}
        body = json.dumps({"model": "m", "items": [{"features": feats}] * 2}).encode()
        fast = fastjson.parse_score(body, HASHED, 100)
        assert (fast is not None) == ok, n
        if ok:
            assert fast.batch.indptr.tolist() == [0, n, 2 * n]
    dup = '{"model": "m", "items": [{"features": {' + ", ".join(
        f'"k{i}": {i}' for i in range(400)) + ', "k7": 1}}]}'
    assert fastjson.parse_score(dup.encode(), HASHED, 100) is None


# Strings are scanned eight bytes at a time and pairs hashed in place, a word at a time:
# names and values of every length, with what ends or spoils a string at any offset.
_PLACEHOLDER = "€"  # replaced by a raw control character (invalid JSON) in the body
long_names = st.text(st.sampled_from("abé_"), min_size=1, max_size=20)
long_values = st.text(st.sampled_from('ab"\\\né' + _PLACEHOLDER), max_size=40)


@settings(max_examples=400, deadline=None)
@given(feats=st.dictionaries(long_names, long_values, min_size=1, max_size=6),
       nested=st.dictionaries(long_names, long_values, max_size=3),
       pad=st.integers(0, 12))
def test_strings_of_any_length_scan_and_hash_alike(feats, nested, pad):
    """The fast path gives up exactly when a string holds an escape or a raw control
    character, and otherwise agrees with the regular path (raw UTF-8 included)."""
    event = {"features": {**feats, "ns": nested}, "label": 1, "id": "i" * pad or None}
    text = json.dumps({"model": "m", "events": [event, event]}, ensure_ascii=False)
    body = text.replace(_PLACEHOLDER, "\x01").encode()
    fast = fastjson.parse_learn(body, HASHED, 100)
    if "\\" in text or _PLACEHOLDER in text:
        assert fast is None
        return
    assert fast is not None
    _same(fast, *_slow_learn(body, HASHED)[1:])


def test_names_and_values_of_any_size_are_hashed_in_place():
    """No size limit on a name=value pair (it was 4 kB, a scratch buffer's size)."""
    event = {"features": {"n" * 3000: "v" * 5001, "k": {"m" * 4097: 2.5}}, "label": 1}
    body = json.dumps({"model": "m", "events": [event]}).encode()
    fast = fastjson.parse_learn(body, HASHED, 100)
    assert fast is not None
    _same(fast, *_slow_learn(body, HASHED)[1:])


def test_every_truncation_gives_up():
    """A body cut anywhere (the scan's word reads stop at the end) is left alone."""
    event = {"features": {"site": "abcdefghij", "n": 1.25, "ns": {"k": "vw", "t": True}},
             "label": 0, "id": "e-1"}
    body = json.dumps({"model": "m", "events": [event]}).encode()
    assert fastjson.parse_learn(body, HASHED, 100) is not None
    for k in range(len(body)):
        assert fastjson.parse_learn(body[:k], HASHED, 100) is None, k


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 140), dup=st.one_of(st.none(), st.tuples(st.integers(0, 139),
                                                                 st.integers(0, 140))),
       nested=st.booleans())
def test_duplicates_are_found_before_and_after_an_object_outgrows_the_small_table(
        n, dup, nested):
    """Objects of up to 64 keys use a small duplicate table, larger ones move to a
    large one: a repeated key is found wherever it falls."""
    keys = [f"k{i}" for i in range(n)]
    if dup is not None:
        keys.insert(dup[1] % (n + 1), keys[dup[0] % n])
    obj = "{" + ", ".join(f'"{k}": {i}' for i, k in enumerate(keys)) + "}"
    feats = '{"a": 1, "ns": ' + obj + "}" if nested else obj
    body = ('{"model": "m", "events": [{"features": ' + feats + ', "label": 1}, '
            '{"features": ' + feats + ', "label": 0}]}').encode()
    fast = fastjson.parse_learn(body, HASHED, 100)
    if dup is not None:
        assert fast is None
    else:
        assert fast is not None
        _same(fast, *_slow_learn(body, HASHED)[1:])
