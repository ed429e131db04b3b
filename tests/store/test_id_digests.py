"""The append script's id arguments built in numba equal what hashlib and msgpack give
(the dedup windows already in Redis hold digests made that way), and so do the raw
digests of the log layout."""

from __future__ import annotations

import hashlib

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aucstream.service.store.id_digests import digest_args, id_digests, id_digests_128


def reference(ids: list[str], fields: int) -> tuple[bytes, bytes]:
    digests = [hashlib.blake2b(i.encode("utf-8", "surrogatepass"), digest_size=8).digest()
               for i in ids]
    at = np.frombuffer(b"".join(digests), dtype=">u8") % np.uint64(fields)
    return (msgpack.packb(digests, use_bin_type=False),
            msgpack.packb(at.astype(np.bytes_).tolist(), use_bin_type=False))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=300), min_size=1, max_size=40),
       st.integers(1, 2**63 - 1))
def test_digest_args_equal_hashlib_and_msgpack(ids: list[str], fields: int) -> None:
    assert digest_args(ids, fields) == reference(ids, fields)


@pytest.mark.parametrize("ids", [
    ["", "a", "x" * 127, "y" * 128, "z" * 129, "w" * 256, "v" * 257, "é\ud800"],
    [str(i) for i in range(15)], [str(i) for i in range(16)],
    [f"ev-{i}" for i in range(65_535)], [f"ev-{i}" for i in range(65_536)],
])
def test_block_edges_and_array_headers(ids: list[str]) -> None:
    for fields in (1, 12_500, 2**40 + 3):
        assert digest_args(ids, fields) == reference(ids, fields)


def test_a_field_count_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="fields"):
        digest_args(["a"], 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=40))
def test_id_digests_equal_hashlib(ids: list[str]) -> None:
    """Ids holding NULs (the joined fast path splits at NULs) and surrogates included."""
    want = b"".join(hashlib.blake2b(i.encode("utf-8", "surrogatepass"), digest_size=8).digest()
                    for i in ids)
    assert id_digests(ids).tobytes() == want
    assert id_digests([*ids, "a\0b", ""]).tobytes()[:len(want)] == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=40))
def test_16_byte_digests_equal_hashlib(ids: list[str]) -> None:
    """The embedded store's impression index keys: BLAKE2b-128, not a longer BLAKE2b-64."""
    want = b"".join(hashlib.blake2b(i.encode("utf-8", "surrogatepass"), digest_size=16).digest()
                    for i in ids)
    assert id_digests_128(ids).tobytes() == want
    assert id_digests_128(ids).shape == (len(ids), 2)
    assert id_digests_128([*ids, "a\0b"]).tobytes()[:len(want)] == want
