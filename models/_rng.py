"""A small random generator whose whole state is a ``uint64[4]`` array.

xoshiro256** (Blackman & Vigna), seeded through SplitMix64. Kernels advance the state
array in place, so a learner's random stream is part of its saved state and a restored
learner continues it exactly. numba's own ``np.random`` state cannot be saved, so it is
never used on a learning path.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["below", "new_state", "next_u64", "normal", "normals", "uniform"]

def new_state(seed: int) -> np.ndarray:
    """Generator state for a non-negative integer seed (SplitMix64 expansion)."""
    if seed < 0:
        raise ValueError("seed must be non-negative")
    s = np.zeros(4, np.uint64)
    x = int(seed) & 0xFFFFFFFFFFFFFFFF
    mask = 0xFFFFFFFFFFFFFFFF
    for i in range(4):
        x = (x + 0x9E3779B97F4A7C15) & mask
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        s[i] = z ^ (z >> 31)
    if not s.any():  # the all-zero state is a fixed point of xoshiro
        s[0] = 1
    return s


@njit(cache=True, nogil=True, inline="always")
def _rotl(x, k):
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True, nogil=True)
def next_u64(s):
    """Next 64-bit output; advances ``s`` in place."""
    result = _rotl(s[1] * np.uint64(5), 7) * np.uint64(9)
    t = s[1] << np.uint64(17)
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = _rotl(s[3], 45)
    return result


@njit(cache=True, nogil=True)
def uniform(s):
    """A double uniform on [0, 1) with 53 random bits."""
    return float(next_u64(s) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, nogil=True)
def below(s, n):
    """An integer uniform on [0, n) for 1 <= n < 2**53."""
    j = np.int64(uniform(s) * n)
    return j if j < n else n - 1


@njit(cache=True, nogil=True)
def normal(s):
    """A standard normal draw (Box–Muller, cosine branch; two uniforms per draw)."""
    u1 = uniform(s)
    u2 = uniform(s)
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


@njit(cache=True, nogil=True)
def normals(s, out):
    """Fill ``out`` (any shape, C-contiguous) with standard normal draws in order."""
    flat = out.reshape(-1)
    for i in range(flat.shape[0]):
        flat[i] = normal(s)
