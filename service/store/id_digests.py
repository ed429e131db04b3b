"""The append script's id arguments, built for a whole batch in one numba call: each event
id's digest (BLAKE2b-64 of its UTF-8, RFC 7693, the same bytes as
``hashlib.blake2b(id, digest_size=8).digest()``) and its dedup field, both msgpack-packed
as the script unpacks them.

Per id in Python (hashlib, then numpy and msgpack for the fields) this cost ~0.9 µs of
GIL time, ~14 ms per 16,000-event append; here it is ~0.15 µs and lets the GIL go.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["digest_args", "id_digests", "id_digests_128"]

_IV = np.array([
    0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
    0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179,
], dtype=np.uint64)

_SIGMA = np.array([
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
    [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
    [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
    [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
    [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
    [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
    [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
    [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
], dtype=np.int64)

# Shift counts as uint64 constants: numba then emits plain shifts (an int count made each
# shift a conversion and a range check).
_S1, _S16, _S24, _S32, _S40, _S48, _S63 = (np.uint64(n) for n in (1, 16, 24, 32, 40, 48, 63))


@njit(cache=True, nogil=True, inline="always")
def _g(a, b, c, d, x, y):
    a = a + b + x
    d ^= a
    d = (d >> _S32) | (d << _S32)
    c = c + d
    b ^= c
    b = (b >> _S24) | (b << _S40)
    a = a + b + y
    d ^= a
    d = (d >> _S16) | (d << _S48)
    c = c + d
    b ^= c
    b = (b >> _S63) | (b << _S1)
    return a, b, c, d


# The state is sixteen scalars, not an array: LLVM then keeps it in registers (an array
# it must assume aliased with the message made each step a store and a load: 6x slower).
@njit(cache=True, nogil=True, inline="always")
def _compress(h, m, t, last, iv, sigma):
    v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    v8, v9, v10, v11 = iv[0], iv[1], iv[2], iv[3]
    v12 = iv[4] ^ np.uint64(t)  # the byte counter's high word stays 0 (ids < 2**64 bytes)
    v13 = iv[5]
    v14 = ~iv[6] if last else iv[6]
    v15 = iv[7]
    for r in range(12):
        q = r % 10
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, m[sigma[q, 0]], m[sigma[q, 1]])
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, m[sigma[q, 2]], m[sigma[q, 3]])
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, m[sigma[q, 4]], m[sigma[q, 5]])
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, m[sigma[q, 6]], m[sigma[q, 7]])
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, m[sigma[q, 8]], m[sigma[q, 9]])
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, m[sigma[q, 10]], m[sigma[q, 11]])
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, m[sigma[q, 12]], m[sigma[q, 13]])
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, m[sigma[q, 14]], m[sigma[q, 15]])
    h[0] ^= v0 ^ v8
    h[1] ^= v1 ^ v9
    h[2] ^= v2 ^ v10
    h[3] ^= v3 ^ v11
    h[4] ^= v4 ^ v12
    h[5] ^= v5 ^ v13
    h[6] ^= v6 ^ v14
    h[7] ^= v7 ^ v15


@njit(cache=True, nogil=True, inline="always")
def _blake2b(data, start, end, iv, sigma, h, m, outlen):
    """BLAKE2b (no key) of data[start:end] with an ``outlen``-byte digest: its first
    ``outlen`` bytes are h[0], h[1], ... (little-endian) on return."""
    for i in range(8):
        h[i] = iv[i]
    h[0] ^= np.uint64(0x01010000) | np.uint64(outlen)  # key length 0, fanout 1, depth 1
    n = end - start
    done = 0
    while True:
        left = n - done
        last = left <= 128
        take = left if last else 128
        for w in range(16):
            m[w] = np.uint64(0)
        for j in range(take):
            m[j >> 3] |= np.uint64(data[start + done + j]) << np.uint64(8 * (j & 7))
        done += take
        _compress(h, m, done, last, iv, sigma)
        if last:
            return


@njit(cache=True, nogil=True, inline="always")
def _blake2b_64(data, start, end, iv, sigma, h, m):
    """BLAKE2b with an 8-byte digest (no key) of data[start:end]: h[0] (little-endian)."""
    _blake2b(data, start, end, iv, sigma, h, m, 8)
    return h[0]


@njit(cache=True, nogil=True)
def _pack(data, starts, ends, fields, iv, sigma):
    """(msgpack [digest], msgpack [field as decimal str]) of the ids data[starts[i]:ends[i]]."""
    k = starts.shape[0]
    head = 1 if k < 16 else 3 if k < 65536 else 5  # msgpack's fixarray, array 16, array 32
    digs = np.empty(head + 9 * k, np.uint8)
    # a field takes at most 20 decimal digits and its fixstr byte
    fld = np.empty(head + 21 * k, np.uint8)
    for out in (digs, fld):
        if k < 16:
            out[0] = 0x90 | k
        elif k < 65536:
            out[0] = 0xDC
            out[1] = k >> 8
            out[2] = k & 0xFF
        else:
            out[0] = 0xDD
            out[1] = (k >> 24) & 0xFF
            out[2] = (k >> 16) & 0xFF
            out[3] = (k >> 8) & 0xFF
            out[4] = k & 0xFF
    h = np.empty(8, np.uint64)
    m = np.empty(16, np.uint64)
    digits = np.empty(20, np.uint8)
    p = head
    nb = np.uint64(fields)
    for i in range(k):
        x = _blake2b_64(data, starts[i], ends[i], iv, sigma, h, m)
        q = head + 9 * i
        digs[q] = 0xA8  # fixstr of 8 bytes (msgpack's raw type: use_bin_type=False)
        big = np.uint64(0)
        for j in range(8):
            byte = (x >> np.uint64(8 * j)) & np.uint64(0xFF)
            digs[q + 1 + j] = byte
            big = (big << np.uint64(8)) | byte
        f = big % nb
        nd = 0
        while True:
            digits[nd] = 48 + f % np.uint64(10)
            nd += 1
            f //= np.uint64(10)
            if f == 0:
                break
        fld[p] = 0xA0 | nd
        p += 1
        for j in range(nd):
            fld[p + j] = digits[nd - 1 - j]
        p += nd
    return digs, fld[:p]


def digest_args(ids: list[str], fields: int) -> tuple[bytes, bytes]:
    """(msgpack [8-byte digest of each id], msgpack [its field: digest (big-endian) mod
    ``fields``, in decimal]): the append script's ARGV[2] and ARGV[6]."""
    if not 1 <= fields < 2**63:
        raise ValueError(f"fields must be in [1, 2**63); got {fields}")
    digs, fld = _pack(*_spans(ids), fields, _IV, _SIGMA)
    return digs.tobytes(), fld.tobytes()


@njit(cache=True, nogil=True)
def _digests(data, starts, ends, iv, sigma):
    k = starts.shape[0]
    out = np.empty(k, np.uint64)
    h = np.empty(8, np.uint64)
    m = np.empty(16, np.uint64)
    for i in range(k):
        out[i] = _blake2b_64(data, starts[i], ends[i], iv, sigma, h, m)
    return out


@njit(cache=True, nogil=True)
def _nul_spans(data, k):
    """(starts, ends) of the k NUL-separated pieces of ``data``."""
    starts = np.empty(k, np.int64)
    ends = np.empty(k, np.int64)
    s = 0
    j = 0
    for i in range(data.shape[0]):
        if data[i] == 0:
            starts[j] = s
            ends[j] = i
            j += 1
            s = i + 1
    starts[j] = s
    ends[j] = data.shape[0]
    return starts, ends


@njit(cache=True, nogil=True)
def _digests_128(data, starts, ends, iv, sigma):
    k = starts.shape[0]
    out = np.empty((k, 2), np.uint64)
    h = np.empty(8, np.uint64)
    m = np.empty(16, np.uint64)
    for i in range(k):
        _blake2b(data, starts[i], ends[i], iv, sigma, h, m, 16)
        out[i, 0] = h[0]
        out[i, 1] = h[1]
    return out


def _spans(ids: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ids' UTF-8 bytes, one after another, and each id's (start, end) in them."""
    joined = "\0".join(ids)
    if joined.count("\0") == len(ids) - 1:  # no id holds a NUL: one encode, split in numba
        # (encoding each id and summing lengths in Python cost 0.15 us per id)
        data = np.frombuffer(joined.encode("utf-8", "surrogatepass"), np.uint8)
        starts, ends = _nul_spans(data, len(ids))
        return data, starts, ends
    encoded = [eid.encode("utf-8", "surrogatepass") for eid in ids]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    return np.frombuffer(b"".join(encoded), np.uint8), offsets[:-1], offsets[1:]


def id_digests(ids: list[str]) -> np.ndarray:
    """The ids' 8-byte digests as little-endian uint64s: ``.tobytes()`` gives the digests
    one after another, as ``hashlib.blake2b(id, digest_size=8).digest()`` would."""
    if not ids:
        return np.zeros(0, "<u8")
    return _digests(*_spans(ids), _IV, _SIGMA).astype("<u8", copy=False)


def id_digests_128(ids: list[str]) -> np.ndarray:
    """The ids' 16-byte digests, an (n, 2) array of little-endian uint64s: row i's
    ``.tobytes()`` is ``hashlib.blake2b(ids[i], digest_size=16).digest()``."""
    if not ids:
        return np.zeros((0, 2), "<u8")
    return _digests_128(*_spans(ids), _IV, _SIGMA).astype("<u8", copy=False)
