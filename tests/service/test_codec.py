"""Log payloads and checkpoints round-trip bit for bit, and refuse what they can't read."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aucstream.service.codec import (
    CodecError,
    apply_delta,
    decode_batch,
    decode_delta,
    decode_state,
    encode_batch,
    encode_delta,
    encode_state,
)

# Values as the encoder produces them: mostly 1.0 (categorical), some numbers, signed zeros.
_values = st.one_of(st.just(1.0), st.just(-0.0), st.just(0.0),
                    st.floats(allow_nan=False, allow_infinity=False, width=64))


@st.composite
def csr_batches(draw):
    n = draw(st.integers(1, 20))
    lengths = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    nnz = int(indptr[-1])
    top = draw(st.sampled_from([2**20, 2**31, 2**40]))
    indices = draw(hnp.arrays(np.int64, nnz, elements=st.integers(0, top - 1)))
    values = draw(hnp.arrays(np.float64, nnz, elements=_values))
    y = draw(hnp.arrays(np.int8, n, elements=st.sampled_from([-1, 1])))
    return y, indptr, indices, values


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@settings(max_examples=200, deadline=None)
@given(csr_batches())
def test_csr_batch_round_trips_bit_for_bit(batch):
    y, indptr, indices, values = batch
    y2, (p2, i2, v2) = decode_batch(encode_batch(y, csr=(indptr, indices, values)))
    assert _same_bits(y2, y)
    assert _same_bits(p2, indptr)
    assert _same_bits(i2, indices)  # int64 again, whatever travelled
    assert _same_bits(v2, values)  # -0.0 stays -0.0


@settings(max_examples=50, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=30),
                  elements=_values))
def test_dense_batch_round_trips_bit_for_bit(X):
    y = np.ones(X.shape[0], np.int8)
    y2, X2 = decode_batch(encode_batch(y, X=X))
    assert _same_bits(y2, y) and _same_bits(X2, X)


def test_hashed_batch_travels_compactly():
    rng = np.random.default_rng(0)
    n, per_row = 500, 34
    indptr = np.arange(0, n * per_row + 1, per_row, dtype=np.int64)
    indices = rng.integers(0, 2**20, n * per_row)
    values = np.where(rng.random(n * per_row) < 0.85, 1.0, rng.random(n * per_row))
    y = np.ones(n, np.int8)
    blob = encode_batch(y, csr=(indptr, indices, values))
    wide = n * per_row * 16  # int64 indices + float64 values
    assert len(blob) < 0.45 * wide
    _, (_, i2, v2) = decode_batch(blob)
    assert np.array_equal(i2, indices) and _same_bits(v2, values)


def test_payloads_of_the_earlier_layout_still_decode():
    """Logs written before indices travelled as int32 (int64, whole float64 values)."""
    y = np.array([1, -1], np.int8)
    indptr = np.array([0, 2, 3], np.int64)
    indices = np.array([5, 2**20 - 1, 7], np.int64)
    values = np.array([1.0, 0.5, 1.0])

    def whole(a):
        return {"nd": a.dtype.str, "shape": list(a.shape), "data": a.tobytes()}

    blob = msgpack.packb({"format": 1, "y": whole(y), "indptr": whole(indptr),
                          "indices": whole(indices), "values": whole(values)},
                         use_bin_type=True)
    y2, (p2, i2, v2) = decode_batch(blob)
    assert _same_bits(y2, y) and _same_bits(p2, indptr)
    assert _same_bits(i2, indices) and _same_bits(v2, values)


def test_state_round_trips_with_sparse_and_nested_values():
    w = np.zeros(1 << 15)
    w[[3, 9000]] = [-0.0, 2.5]
    state = {"w": w, "t": 7, "name": "x", "rng": {"s": np.arange(4, dtype=np.uint64)}}
    out = decode_state(encode_state(state))
    assert _same_bits(out["w"], w) and out["t"] == 7 and out["name"] == "x"
    assert _same_bits(out["rng"]["s"], state["rng"]["s"])


# Bit patterns a state array may hold: signed zeros, a NaN with a payload, infinities.
_odd_floats = [0.0, -0.0, 1.0, np.frombuffer(np.uint64(0x7FF8DEADBEEF0001).tobytes(),
                                            np.float64)[0], np.inf, 2.5]


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from([np.float64, np.int64, np.int32, np.uint64, np.int8]),
       size=st.integers(1 << 14, 1 << 15), head=st.floats(0.0, 1.0),
       picks=st.lists(st.integers(0, len(_odd_floats) - 1), min_size=1, max_size=40),
       seed=st.integers(0, 2**32 - 1))
def test_state_arrays_with_a_final_run_round_trip_bit_for_bit(dtype, size, head, picks, seed):
    """A compact model's arrays end in their unused capacity (one value repeated): they
    travel as the elements before that run and its value, and come back bit for bit."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.float64:
        pool = np.array([_odd_floats[p] for p in picks])
        a = pool[rng.integers(0, pool.size, size)]
        a.view(np.uint64)[int(head * size):] = np.float64(pool[0]).view(np.uint64)
    else:
        a = rng.integers(-3 if np.dtype(dtype).kind == "i" else 0, 4, size).astype(dtype)
        a[int(head * size):] = a[-1]
    for shape in ((size,), (2, size // 2) if size % 2 == 0 else (size,)):
        x = a[: int(np.prod(shape))].reshape(shape)
        out = decode_state(encode_state({"x": x}))["x"]
        assert _same_bits(out, x)


def test_unused_capacity_is_not_sent():
    """A learner array whose second half is the fresh value (a compact model's doubling)
    takes about half its bytes; log payloads keep the forms every version reads."""
    g = np.full(1 << 16, 1e-3)  # e.g. CBR-diag's fresh variance, not 0 or 1
    g[: 1 << 15] = np.random.default_rng(0).random(1 << 15)
    blob = encode_state({"g": g})
    assert len(blob) < 0.55 * g.nbytes
    assert _same_bits(decode_state(blob)["g"], g)
    X = np.zeros((500, 64))
    X[:300] = 1.5  # rows ending in a long run of zeros (too few for the sparse form)
    doc = msgpack.unpackb(encode_batch(np.ones(500, np.int8), X=X))
    assert "data" in doc["X"] and "tail" not in doc["X"]


@pytest.mark.parametrize("record", [
    {"nd": "<f8", "shape": [4], "head": b"\0" * 8, "tail": b"\0" * 4},  # tail not one item
    {"nd": "<f8", "shape": [4], "head": b"\0" * 12, "tail": b"\0" * 8},  # partial item
    {"nd": "<f8", "shape": [2], "head": b"\0" * 16, "tail": b"\0" * 8},  # no room for it
    {"nd": "|b1", "shape": [4], "head": b"", "tail": b"\0"},  # not a number
    {"nd": "<f8", "shape": [4], "tail": b"\0" * 8},  # no head
])
def test_malformed_tail_records_raise_codec_error(record):
    blob = msgpack.packb({"format": 1, "state": {"x": record}}, use_bin_type=True)
    with pytest.raises(CodecError):
        decode_state(blob)


@pytest.mark.parametrize("blob", [b"\xc1", msgpack.packb({"format": 99}),
                                  msgpack.packb([1, 2])])
def test_undecodable_payloads_raise_codec_error(blob):
    with pytest.raises(CodecError):
        decode_batch(blob)
    with pytest.raises(CodecError):
        decode_state(blob)


def test_float_indices_are_refused():
    blob = encode_batch(np.ones(1, np.int8), csr=(np.array([0, 1]), np.array([3]),
                                                 np.array([1.0])))
    doc = msgpack.unpackb(blob)
    doc["indices"] = {"nd": "<f8", "shape": [1], "data": np.array([3.0]).tobytes()}
    with pytest.raises(CodecError, match="indices"):
        decode_batch(msgpack.packb(doc, use_bin_type=True))


# -- deltas (publications to followers) --------------------------------------------------


def _same_state(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k, v in a.items():
        w = b[k]
        if isinstance(v, dict):
            if not (isinstance(w, dict) and _same_state(v, w)):
                return False
        elif isinstance(v, np.ndarray):
            if not (isinstance(w, np.ndarray) and _same_bits(v, w)):
                return False
        elif type(v) is not type(w) or v != w:
            return False
    return True


def _copy(state: dict) -> dict:
    return {k: _copy(v) if isinstance(v, dict) else v.copy() if isinstance(v, np.ndarray)
            else v for k, v in state.items()}


@st.composite
def state_pairs(draw):
    """A state and a later one: arrays changed at a few positions or many, grown, shrunk,
    retyped, added or dropped; NaN payloads and signed zeros included."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    old: dict = {"uid": "u", "version": 3}
    new: dict = {"uid": "u", "version": draw(st.integers(4, 10**9))}
    for i in range(draw(st.integers(1, 6))):
        dtype = draw(st.sampled_from([np.float64, np.int64, np.int8, np.bool_, np.uint32]))
        size = draw(st.sampled_from([8, 1000, 1024, 5000]))
        shape = (size,) if draw(st.booleans()) else (size // 4, 4)
        a = rng.integers(0, 3, size=shape).astype(dtype)
        if dtype == np.float64:
            a.reshape(-1)[rng.integers(0, size, 3)] = [np.nan, -0.0, 1e30]
        b = a.copy()
        how = draw(st.sampled_from(["few", "many", "same", "grow", "shrink", "retype",
                                    "new", "gone"]))
        flat = b.reshape(-1)
        if how == "few":
            flat[rng.integers(0, size, draw(st.integers(1, 20)))] = 1
            if dtype == np.float64:  # a NaN of another payload, and -0.0 for 0.0
                flat[0] = np.frombuffer(b"\x01\x00\x00\x00\x00\x00\xf8\x7f", "<f8")[0]
                flat[1] = -0.0 if flat[1] == 0 else flat[1]
        elif how == "many":
            flat[:] = rng.integers(5, 9, size=size).astype(dtype)
        elif how == "grow":
            b = np.concatenate([flat, flat[: draw(st.integers(1, 300))]])
        elif how == "shrink":
            b = flat[: size // 2].copy()
        elif how == "retype":
            b = b.astype(np.float32)
        key = f"a{i}"
        if how != "new":
            old[key] = a
        if how != "gone":
            new[key] = b
    new["learner"] = {"w_": new.get("a0", np.zeros(2)).copy(), "C": 0.5}
    old["learner"] = {"w_": old.get("a0", np.ones(2)).copy(), "C": 0.5}
    return old, new


@settings(max_examples=200, deadline=None)
@given(pair=state_pairs())
def test_a_delta_applied_to_the_base_state_gives_the_new_state_bit_for_bit(pair):
    old, new = pair
    kept = _copy(old)
    blob = encode_delta(3, new["version"], old, new)
    base, version, delta = decode_delta(blob)
    assert (base, version) == (3, new["version"])
    got = apply_delta(old, delta)
    assert _same_state(got, new)
    assert _same_state(old, kept)  # the base state is left as it was
    assert _same_state(decode_state(encode_state(got)), new)


def test_a_delta_carries_what_changed_not_the_whole_state():
    rng = np.random.default_rng(0)
    w = rng.normal(size=65_536)
    cols = np.arange(30_000, dtype=np.int64)
    old = {"version": 1, "learner": {"w_": w, "n_": np.zeros(1)}, "feature_index": cols}
    w2 = w.copy()
    w2[rng.integers(0, w.size, 2_000)] += 1.0
    new = {"version": 2, "learner": {"w_": w2, "n_": np.ones(1)},
           "feature_index": np.concatenate([cols, np.arange(30_000, 30_500)])}
    blob = encode_delta(1, 2, old, new)
    assert len(blob) < 30_000  # against ~760 kB whole
    assert len(encode_state(new)) > 700_000
    assert _same_state(apply_delta(old, decode_delta(blob)[2]), new)
    same = decode_delta(encode_delta(2, 3, new, {**new, "version": 3}))[2]
    assert same["learner"]["dmap"]["w_"] == {"same": True}
    assert apply_delta(new, same)["learner"]["w_"] is new["learner"]["w_"]  # shared


@pytest.mark.parametrize("record", [
    {"dmap": {"w": {"same": True}}},  # no array in the base state
    {"dmap": {"w_": {"nd": "<f8", "shape": [4], "aw": 4, "at": b"\x09\x00\x00\x00",
                     "val": b"\x00" * 8}}},  # a position outside the array
    {"dmap": {"w_": {"nd": "<f4", "shape": [4], "aw": 4, "at": b"", "val": b""}}},
    {"dmap": {"w_": {"nd": "<f8", "shape": [5], "aw": 4, "at": b"", "val": b""}}},
    {"dmap": {"w_": {"nd": "<f8", "shape": [4], "aw": 3, "at": b"", "val": b""}}},
])
def test_deltas_that_do_not_fit_the_base_state_raise_codec_error(record):
    with pytest.raises(CodecError):
        apply_delta({"learner": {"w_": np.zeros(4)}}, {"learner": record})
    with pytest.raises(CodecError):
        decode_delta(b"\x81\xa6format\x09")
