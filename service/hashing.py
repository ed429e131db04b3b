"""MurmurHash3 (x86, 32-bit), the hash Vowpal Wabbit uses for feature names.

The same bytes give the same index on every run, process and machine (Python's own
``hash`` is salted per process, so it cannot be used). Many keys are hashed in one numba
call over a concatenated UTF-8 buffer.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["murmur3_32", "murmur3_32_many"]


# numba widens uint32 arithmetic to 64 bits, so every product and sum is masked back.
_M32 = np.uint64(0xFFFFFFFF)
# An unsigned index spares numba the negative-index wrap-around test on each byte read.
_u = np.uint64


@njit(cache=True, nogil=True, inline="always")
def _mul32(a, b):
    return (np.uint64(a) * np.uint64(b)) & _M32


@njit(cache=True, nogil=True, inline="always")
def _rotl32(x, r):
    x = np.uint64(x)
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _M32


# A plain call (scalars only): LLVM inlines it, numba's own inlining cost compile time.
@njit(cache=True, nogil=True)
def _fmix32(h, length):
    """MurmurHash3's finalisation of the state ``h`` of ``length`` bytes."""
    h ^= np.uint64(length)
    h ^= h >> np.uint64(16)
    h = _mul32(h, 0x85EBCA6B)
    h ^= h >> np.uint64(13)
    h = _mul32(h, 0xC2B2AE35)
    h ^= h >> np.uint64(16)
    return h


@njit(cache=True, nogil=True, _nrt=False)
def _murmur(data, start, length, seed):
    c1 = np.uint64(0xCC9E2D51)
    c2 = np.uint64(0x1B873593)
    h = np.uint64(seed) & _M32
    n_blocks = length // 4
    for b in range(n_blocks):
        i = start + 4 * b
        k = (np.uint64(data[_u(i)]) | (np.uint64(data[_u(i + 1)]) << np.uint64(8))
             | (np.uint64(data[_u(i + 2)]) << np.uint64(16))
             | (np.uint64(data[_u(i + 3)]) << np.uint64(24)))
        k = _mul32(_rotl32(_mul32(k, c1), 15), c2)
        h = _rotl32(h ^ k, 13)
        h = (_mul32(h, 5) + np.uint64(0xE6546B64)) & _M32
    tail = start + 4 * n_blocks
    rem = length & 3
    k = np.uint64(0)
    if rem >= 3:
        k ^= np.uint64(data[_u(tail + 2)]) << np.uint64(16)
    if rem >= 2:
        k ^= np.uint64(data[_u(tail + 1)]) << np.uint64(8)
    if rem >= 1:
        k ^= np.uint64(data[_u(tail)])
        h ^= _mul32(_rotl32(_mul32(k, c1), 15), c2)
    return _fmix32(h, length)


# The same function for callers that want it inlined (the JSON scan's hot loop).
_murmur_inline = njit(cache=True, nogil=True, inline="always")(_murmur.py_func)


@njit(cache=True, nogil=True)
def _murmur_many(data, offsets, seeds, out):
    for j in range(out.shape[0]):
        a = offsets[j]
        out[j] = _murmur(data, a, offsets[j + 1] - a, seeds[j])


def murmur3_32_many(keys: list[bytes], seeds: np.ndarray) -> np.ndarray:
    """Hashes (uint32) of byte strings, each with its own seed."""
    out = np.empty(len(keys), np.uint32)
    if not keys:
        return out
    offsets = np.zeros(len(keys) + 1, np.int64)
    np.cumsum([len(k) for k in keys], out=offsets[1:])
    data = np.frombuffer(b"".join(keys), np.uint8) if offsets[-1] else np.zeros(1, np.uint8)
    _murmur_many(data, offsets, np.asarray(seeds, np.uint32), out)
    return out


def murmur3_32(key: bytes | str, seed: int = 0) -> int:
    """MurmurHash3_x86_32 of one key.

    >>> hex(murmur3_32(b"hello", 0))
    '0x248bfa47'
    """
    if isinstance(key, str):
        key = key.encode()
    return int(murmur3_32_many([key], np.array([seed], np.uint32))[0])
