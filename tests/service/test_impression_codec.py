"""Kept impressions' payloads: the batch packer gives encode_impression's bytes exactly."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aucstream.service.encoding import EncodedBatch
from aucstream.service.feedback import decode_impression, encode_impression, impressions_of

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
    batch = EncodedBatch(n=n, indptr=indptr,
                         indices=rng.integers(0, 2**40, int(indptr[-1])),
                         values=rng.normal(size=int(indptr[-1])) * 1e3)
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
    got = impressions_of(batch, ids, scores, version)
    assert got == _expected(batch, ids, scores, version)
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
    assert impressions_of(batch, [None, None], np.zeros(2), 1) == []
