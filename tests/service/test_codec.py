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
    decode_batch,
    decode_state,
    encode_batch,
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
