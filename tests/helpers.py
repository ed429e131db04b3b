"""Shared test helpers: synthetic streams, state comparison, the per-learner Case."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Case:
    """How the contract suite exercises one learner.

    params: small, fast parameters that still make every code path run (buffers that
    fill and wrap, a reservoir that starts replacing, ...). ``n_features`` and ``n_events``
    size the synthetic stream. ``sparse_params`` (sparse-capable learners only) are
    extra parameters for a run on a hashed-style sparse stream.
    """

    params: dict[str, Any] = field(default_factory=dict)
    n_features: int = 6
    n_events: int = 120
    sparse_params: dict[str, Any] | None = None


def stream(n: int, d: int, seed: int = 0, pos_rate: float = 0.3):
    """A dense stream with a noisy linear rule, imbalanced, values in about [-2, 2]."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    s = X @ w + 0.5 * rng.normal(size=n)
    y = (s > np.quantile(s, 1 - pos_rate)).astype(np.int64)
    return X, y


def sparse_stream(n: int, d: int, nnz: int, seed: int = 0, pos_rate: float = 0.3):
    """CSR triple (indptr, indices, values) with ``nnz`` random columns per row, and labels.

    Columns are drawn from a small hot set often, so rows overlap as hashed features do.
    """
    rng = np.random.default_rng(seed)
    hot = rng.choice(d, size=min(d, 4 * nnz), replace=False)
    w = rng.normal(size=d)
    indptr = np.arange(n + 1, dtype=np.int64) * nnz
    indices = np.empty(n * nnz, np.int64)
    values = np.empty(n * nnz)
    score = np.empty(n)
    for r in range(n):
        k_hot = nnz // 2
        cols = np.concatenate([rng.choice(hot, k_hot, replace=False),
                               rng.choice(d, nnz - k_hot, replace=False)])
        cols = np.unique(cols)
        while cols.size < nnz:
            cols = np.unique(np.append(cols, rng.integers(d)))
        cols.sort()
        vals = np.where(rng.random(nnz) < 0.7, 1.0, rng.random(nnz))
        indices[r * nnz:(r + 1) * nnz] = cols
        values[r * nnz:(r + 1) * nnz] = vals
        score[r] = vals @ w[cols] + 0.3 * rng.normal()
    y = (score > np.quantile(score, 1 - pos_rate)).astype(np.int64)
    return (indptr, indices, values), y


def csr_slice(X, a: int, b: int):
    """Rows a..b of a CSR triple."""
    indptr, indices, values = X
    lo, hi = indptr[a], indptr[b]
    return indptr[a:b + 1] - lo, indices[lo:hi], values[lo:hi]


def assert_states_equal(a: dict, b: dict) -> None:
    """Bit-for-bit equality of two learner states."""
    assert a.keys() == b.keys(), set(a) ^ set(b)
    for k in a:
        va, vb = a[k], b[k]
        if isinstance(va, np.ndarray):
            assert isinstance(vb, np.ndarray), k
            assert va.dtype == vb.dtype and va.shape == vb.shape, (k, va.shape, vb.shape)
            assert np.array_equal(va, vb), f"state array {k!r} differs"
            # array_equal treats -0.0 == 0.0; the bytes must match too.
            assert va.tobytes() == vb.tobytes(), f"state array {k!r} differs in its bytes"
        else:
            assert type(va) is type(vb) and va == vb, (k, va, vb)


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-9, what: str = ""):
    """Relative agreement, measured against the scale of the expected array."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    scale = max(float(np.max(np.abs(expected))) if expected.size else 0.0, 1e-300)
    err = float(np.max(np.abs(actual - expected))) if expected.size else 0.0
    assert err <= rtol * scale, f"{what}: max |diff| {err:.3e} > {rtol:g} × scale {scale:.3e}"
