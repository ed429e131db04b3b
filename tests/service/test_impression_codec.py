"""Kept impressions' payloads: the batch packer gives encode_impression's bytes exactly,
and every format written so far decodes."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aucstream.service.encoding import EncodedBatch
from aucstream.service.feedback import decode_impression, encode_impression, impressions_of
from aucstream.service.store import PackedItems

# versions across msgpack's int encodings; row sizes across bin 8 / 16 / 32 headers
VERSIONS = st.sampled_from([0, 1, 127, 128, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32,
                            2**40])
SIZES = st.sampled_from([0, 1, 31, 32, 33, 8_191, 8_192])


def _ids(draw, n: int) -> list[str | None]:
    pool = [f"id-{k}" for k in range(max(1, n // 2 + 1))]
    return draw(st.lists(st.one_of(st.none(), st.sampled_from(pool)), min_size=n, max_size=n))


def _expected(batch: EncodedBatch, ids: list[str | None], scores: np.ndarray,
              version: int) -> list[tuple[str, bytes]]:
    out: dict[str, bytes] = {}
    for i, item_id in enumerate(ids):
        if item_id is not None and item_id not in out:
            out[item_id] = encode_impression(batch, i, float(scores[i]), version)
    return list(out.items())


@st.composite
def sparse_case(draw):
    n = draw(st.integers(1, 6))
    sizes = [draw(SIZES) for _ in range(n)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    indptr = np.zeros(n + 1, np.int64)
    indptr[1:] = np.cumsum(sizes)
    nnz = int(indptr[-1])
    top = draw(st.sampled_from([2**20, 2**32, 2**32 + 2]))  # uint32 or not, row by row
    values = rng.normal(size=nnz) * 1e3
    ones = draw(st.sampled_from(["all", "most", "none"]))  # one-hot rows keep no values
    if ones != "none":
        values = np.where(rng.random(nnz) < (1.0 if ones == "all" else 0.9), 1.0, values)
    batch = EncodedBatch(n=n, indptr=indptr, indices=rng.integers(0, top, nnz), values=values)
    scores = rng.normal(size=n) * draw(st.sampled_from([1.0, 1e-300, 1e300]))
    return batch, _ids(draw, n), scores, draw(VERSIONS)


@st.composite
def dense_case(draw):
    n = draw(st.integers(1, 6))
    d = draw(st.sampled_from([1, 3, 31, 32, 8_192]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    batch = EncodedBatch(n=n, X=rng.normal(size=(n, d)))
    return batch, _ids(draw, n), rng.normal(size=n), draw(VERSIONS)


@settings(max_examples=60, deadline=None)
@given(st.one_of(sparse_case(), dense_case()))
def test_the_batch_packer_gives_encode_impressions_bytes(case) -> None:
    batch, ids, scores, version = case
    packed = impressions_of(batch, ids, scores, version)
    got = packed.pairs()
    assert got == _expected(batch, ids, scores, version)
    assert packed == PackedItems.of(got)  # ids, one buffer and its ends alike
    for item_id, payload in got:  # and they decode to the item they were made from
        i = ids.index(item_id)
        row, score, v = decode_impression(payload)
        assert v == version and score == scores[i]
        if batch.X is not None:
            np.testing.assert_array_equal(row, batch.X[i])
        else:
            a, b = batch.indptr[i], batch.indptr[i + 1]
            np.testing.assert_array_equal(row[0], batch.indices[a:b])
            np.testing.assert_array_equal(row[1], batch.values[a:b])


def test_no_ids_keep_nothing() -> None:
    batch = EncodedBatch(n=2, X=np.ones((2, 3)))
    assert impressions_of(batch, [None, None], np.zeros(2), 1).pairs() == []


def test_one_hot_hashed_rows_take_a_quarter_of_the_bytes() -> None:
    n, nnz = 100, 35
    batch = EncodedBatch(n=n, indptr=np.arange(0, (n + 1) * nnz, nnz),
                         indices=np.random.default_rng(0).integers(0, 2**20, n * nnz),
                         values=np.ones(n * nnz))
    sizes = [len(p) for _, p in impressions_of(batch, [str(i) for i in range(n)],
                                                 np.zeros(n), 12_345).pairs()]
    assert max(sizes) <= 4 * nnz + 32  # format 1 took 16 bytes a feature
    assert all(decode_impression(p)[0][1].tolist() == [1.0] * nnz
               for _, p in impressions_of(batch, ["a"], np.zeros(n), 1).pairs())


def test_format_1_sparse_payloads_still_decode() -> None:
    """Impressions kept before format 2 (int64 indices and float64 values always)."""
    idx, values = np.array([3, 2**40], np.int64), np.array([1.0, 0.5])
    blob = msgpack.packb({"f": 1, "s": -0.25, "v": 9, "i": idx.tobytes(),
                          "w": values.tobytes()}, use_bin_type=True)
    (got_idx, got_values), score, version = decode_impression(blob)
    assert got_idx.tolist() == idx.tolist() and got_values.tolist() == values.tolist()
    assert (score, version) == (-0.25, 9)
    with pytest.raises(ValueError, match="unknown impression format"):
        decode_impression(msgpack.packb({"f": 3, "s": 0.0, "v": 1}))
