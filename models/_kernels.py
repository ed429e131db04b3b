"""Small numba kernels shared by several families: scoring and row normalisation."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._config import MIN_ROW_NORM

__all__ = ["csr_scores", "dense_dot", "dense_scores", "dot4", "normalize_csr_values",
           "normalize_rows", "sparse_dot"]

# An empty array passed as a kernel's ``prior`` argument: no prequential scores wanted.
NO_SCORES = np.zeros(0)


@njit(cache=True, nogil=True, inline="always")
def dense_dot(w, x):
    """wᵀx summed left to right: learn kernels and ``dense_scores`` agree to the bit."""
    acc = 0.0
    for i in range(x.shape[0]):
        acc += x[i] * w[i]
    return acc


@njit(cache=True, nogil=True, inline="always")
def dot4(a, b):
    """aᵀb for 1-D rows with four interleaved partial sums (a fixed order, so the same
    bits on every call; independent chains let the CPU overlap the additions)."""
    n = a.shape[0]
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    i = 0
    while i + 4 <= n:
        s0 += a[i] * b[i]
        s1 += a[i + 1] * b[i + 1]
        s2 += a[i + 2] * b[i + 2]
        s3 += a[i + 3] * b[i + 3]
        i += 4
    while i < n:
        s0 += a[i] * b[i]
        i += 1
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, nogil=True, inline="always")
def sparse_dot(w, indices, values, lo, hi):
    """wᵀx for the CSR row values[lo:hi] at indices[lo:hi], in index order."""
    acc = 0.0
    for j in range(lo, hi):
        acc += values[j] * w[indices[j]]
    return acc


@njit(cache=True, nogil=True)
def dense_scores(X, w):
    """X @ w with a fixed summation order (a row's score never depends on its batch)."""
    n = X.shape[0]
    out = np.empty(n)
    for r in range(n):
        out[r] = dense_dot(w, X[r])
    return out


@njit(cache=True, nogil=True)
def csr_scores(indptr, indices, values, w):
    """Scores of canonical CSR rows against a dense weight vector."""
    n = indptr.shape[0] - 1
    out = np.empty(n)
    for r in range(n):
        out[r] = sparse_dot(w, indices, values, indptr[r], indptr[r + 1])
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


@njit(cache=True, nogil=True)
def normalize_csr_values(indptr, values):
    """Copy of a CSR batch's values with each row scaled to unit L2 norm (rows of norm
    at most MIN_ROW_NORM, all-zero ones included, are kept as they are)."""
    out = values.copy()
    for r in range(indptr.shape[0] - 1):
        sq = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            sq += values[k] * values[k]
        norm = math.sqrt(sq)
        if norm > MIN_ROW_NORM:
            for k in range(indptr[r], indptr[r + 1]):
                out[k] = values[k] / norm
    return out

