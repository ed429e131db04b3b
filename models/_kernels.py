"""Small numba kernels shared by several families: scoring and row normalisation."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._config import MIN_ROW_NORM

__all__ = ["csr_scores", "dense_scores", "normalize_rows"]


@njit(cache=True, nogil=True)
def dense_scores(X, w):
    """X @ w with a fixed summation order (a row's score never depends on its batch)."""
    n, d = X.shape
    out = np.empty(n)
    for r in range(n):
        acc = 0.0
        for i in range(d):
            acc += X[r, i] * w[i]
        out[r] = acc
    return out


@njit(cache=True, nogil=True)
def csr_scores(indptr, indices, values, w):
    """Scores of canonical CSR rows against a dense weight vector."""
    n = indptr.shape[0] - 1
    out = np.empty(n)
    for r in range(n):
        acc = 0.0
        for j in range(indptr[r], indptr[r + 1]):
            acc += values[j] * w[indices[j]]
        out[r] = acc
    return out


@njit(cache=True, nogil=True)
def normalize_rows(X):
    """Copy of X with each row scaled to unit L2 norm (all-zero rows are kept)."""
    out = X.copy()
    n, d = X.shape
    for r in range(n):
        sq = 0.0
        for i in range(d):
            sq += X[r, i] * X[r, i]
        norm = math.sqrt(sq)
        if norm > MIN_ROW_NORM:
            for i in range(d):
                out[r, i] = X[r, i] / norm
    return out
