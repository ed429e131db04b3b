"""Parameter rules and input checks shared by every learner.

Each learner declares its parameters as a table of :class:`Param` rules; a failure reads
the same way everywhere::

    The 'C' parameter of cbr_fifo must be a float in [1e-06, 1e+06]; got -1.

Inputs are checked whole before anything is learned, so a rejected call changes nothing.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from . import _sparse

__all__ = [
    "Batch",
    "Interval",
    "Options",
    "Param",
    "Text",
    "check_labels",
    "check_matrix",
    "validate_params",
]


@dataclass(frozen=True)
class Interval:
    """A real or integer interval; ``None`` bounds are infinite."""

    kind: type  # float or int
    low: float | None
    high: float | None
    closed: str = "neither"  # "neither", "left", "right", "both"

    def describe(self) -> str:
        lo = "-inf" if self.low is None else _fmt(self.low, self.kind)
        hi = "inf" if self.high is None else _fmt(self.high, self.kind)
        left = "[" if self.closed in ("left", "both") and self.low is not None else "("
        right = "]" if self.closed in ("right", "both") and self.high is not None else ")"
        noun = "an int" if self.kind is int else "a float"
        return f"{noun} in {left}{lo}, {hi}{right}"

    def accepts(self, value: Any) -> Any:
        """Return the value converted to ``kind``, or raise ``ValueError``."""
        if isinstance(value, bool | np.bool_):
            raise ValueError
        if self.kind is int:
            if not isinstance(value, numbers.Integral):
                raise ValueError
            value = int(value)
        else:
            if not isinstance(value, numbers.Real):
                raise ValueError
            value = float(value)
            if not math.isfinite(value):
                raise ValueError
        if self.low is not None and (
            value < self.low or (value == self.low and self.closed not in ("left", "both"))
        ):
            raise ValueError
        if self.high is not None and (
            value > self.high or (value == self.high and self.closed not in ("right", "both"))
        ):
            raise ValueError
        return value


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values (strings or booleans)."""

    values: tuple

    def describe(self) -> str:
        if all(isinstance(v, bool) for v in self.values):
            return "a bool"
        return "one of " + ", ".join(repr(v) for v in self.values)

    def accepts(self, value: Any) -> Any:
        if isinstance(value, np.bool_):
            value = bool(value)
        for v in self.values:
            if type(value) is type(v) and value == v:
                return v
        raise ValueError


@dataclass(frozen=True)
class Text:
    """A string (its content is checked by the learner, which words its own errors)."""

    what: str  # e.g. "a JSON list of candidates"
    max_length: int = 65_536

    def describe(self) -> str:
        return f"{self.what} (a string of at most {self.max_length} characters)"

    def accepts(self, value: Any) -> Any:
        if not isinstance(value, str) or len(value) > self.max_length:
            raise ValueError
        return value


@dataclass(frozen=True)
class Param:
    """A learner parameter: its rule, its default and a one-line meaning."""

    rule: Interval | Options | Text
    default: Any
    doc: str = ""


def _fmt(x: float, kind: type = float) -> str:
    """A bound as written in messages: ints in full; floats short ('0', '0.5', '1e+06',
    '1e-06') when that reads back exactly, else their repr."""
    if kind is int:
        return str(int(x))
    short = f"{float(x):g}"
    return short if float(short) == x else repr(float(x))


def validate_params(learner: str, table: dict[str, Param], given: dict[str, Any]) -> dict:
    """Check ``given`` against ``table``; return the full, converted parameter dict."""
    unknown = sorted(set(given) - set(table))
    if unknown:
        valid = ", ".join(sorted(table))
        raise ValueError(
            f"{learner} got an unexpected parameter {unknown[0]!r}; valid parameters are: {valid}."
        )
    out = {}
    for name, spec in table.items():
        value = given.get(name, spec.default)
        try:
            out[name] = spec.rule.accepts(value)
        except ValueError:
            raise ValueError(
                f"The {name!r} parameter of {learner} must be {spec.rule.describe()}; "
                f"got {value!r}."
            ) from None
    return out


@dataclass(frozen=True)
class Batch:
    """A validated batch: dense rows or canonical CSR rows (sorted, unique indices)."""

    n: int
    dense: np.ndarray | None = None
    indptr: np.ndarray | None = None
    indices: np.ndarray | None = None
    values: np.ndarray | None = None

    @property
    def is_sparse(self) -> bool:
        return self.dense is None

    def head(self, k: int) -> Batch:
        """The first ``k`` rows (views, no copy)."""
        if self.dense is not None:
            return Batch(n=k, dense=self.dense[:k])
        end = self.indptr[k]
        return Batch(n=k, indptr=self.indptr[:k + 1], indices=self.indices[:end],
                     values=self.values[:end])


def _looks_sparse(X: Any) -> bool:
    if isinstance(X, tuple) and len(X) == 3:
        return True
    return hasattr(X, "indptr") and hasattr(X, "indices") and hasattr(X, "data")


def check_matrix(learner: str, X: Any, n_features: int, accept_sparse: bool) -> Batch:
    """Validate a batch of rows; raise ``ValueError`` naming the problem."""
    if _looks_sparse(X):
        if not accept_sparse:
            raise ValueError(
                f"{learner} takes dense input only; got a sparse matrix. Pass a dense "
                f"(n, {n_features}) float array."
            )
        return _check_csr(learner, X, n_features)
    try:
        A = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{learner}: X must be a 2-D array of floats ({exc}).") from None
    if A.ndim != 2:
        raise ValueError(
            f"{learner}: X must be 2-D with shape (n, {n_features}); got shape {A.shape}."
        )
    if A.shape[1] != n_features:
        raise ValueError(
            f"{learner}: X has {A.shape[1]} features per row; this learner expects "
            f"{n_features}."
        )
    A = np.ascontiguousarray(A)
    if _count_not_finite(A.reshape(-1).view(np.uint64)):
        bad = np.argwhere(~np.isfinite(A))[0]
        raise ValueError(
            f"{learner}: X contains NaN or infinite values (first at row {bad[0]}, "
            f"column {bad[1]})."
        )
    return Batch(n=A.shape[0], dense=A)


# Counted on the bit patterns, the finiteness check is an integer reduction that the
# compiler vectorises (a float test summed in a fixed order is not): for rows of 54
# floats, 6 ns per row instead of numpy's 12 (isfinite, then all) with the batch in
# cache, 17 instead of 26 streamed from memory, where the check is the batch's first read
# (measured).
@njit(cache=True, nogil=True)
def _count_not_finite(bits):
    """How many of the float64 bit patterns ``bits`` are ±inf or NaN (exponent all ones)."""
    count = 0
    for i in range(bits.shape[0]):
        count += (bits[i] & np.uint64(0x7FF0000000000000)) == np.uint64(0x7FF0000000000000)
    return count


# One pass in numba: label checks run on every learn call, and the numpy version cost
# a sixth of a fast learner's time on a 500-row batch.
@njit(cache=True, nogil=True)
def _labels_pm1(a, out):
    """±1 labels into ``out``; returns -1 if fine, -2 if 0 and -1 are mixed, else the
    index of the first label outside {0, 1, -1}."""
    has_zero = False
    has_neg = False
    for i in range(a.shape[0]):
        v = a[i]
        if v == 1.0:
            out[i] = 1.0
        elif v == 0.0:
            out[i] = -1.0
            has_zero = True
        elif v == -1.0:
            out[i] = -1.0
            has_neg = True
        else:
            return i
    return -2 if has_zero and has_neg else -1


_BAD_INDPTR, _BAD_INDEX, _NOT_FINITE = 1, 2, 3


@njit(cache=True, nogil=True)
def _indptr_ok(indptr, nnz):
    if indptr.shape[0] < 1 or indptr[0] != 0 or indptr[-1] != nnz:
        return False
    for r in range(indptr.shape[0] - 1):  # noqa: SIM110 (numba compiles no generators)
        if indptr[r + 1] < indptr[r]:
            return False
    return True


# One numba pass instead of six numpy ones (diff, any, min, max, isfinite, all): this
# runs on every learn and score call, inside the service's per-model applier.
@njit(cache=True, nogil=True)
def _csr_problem(indptr, indices, values, n_features):
    """(0, -1) for well-formed CSR arrays, else (problem, position): the checks in the
    order their messages are given: indptr, then column range, then finiteness."""
    if not _indptr_ok(indptr, indices.shape[0]):
        return _BAD_INDPTR, -1
    for k in range(indices.shape[0]):
        if indices[k] < 0 or indices[k] >= n_features:
            return _BAD_INDEX, k
    for k in range(values.shape[0]):
        if not np.isfinite(values[k]):
            return _NOT_FINITE, k
    return 0, -1


def _check_csr(learner: str, X: Any, n_features: int) -> Batch:
    if isinstance(X, tuple):
        indptr, indices, values = X
        n_cols = None
    else:
        indptr, indices, values = X.indptr, X.indices, X.data
        n_cols = X.shape[1]
    if n_cols is not None and n_cols != n_features:
        raise ValueError(
            f"{learner}: X has {n_cols} features per row; this learner expects {n_features}."
        )
    indptr = np.asarray(indptr)
    indices = np.asarray(indices)
    try:
        values = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{learner}: sparse values must be floats.") from None
    if indptr.ndim != 1 or indices.ndim != 1 or values.ndim != 1 or indptr.size < 1:
        raise ValueError(f"{learner}: CSR indptr, indices and values must be 1-D arrays.")
    # np.asarray([]) is float64, so an empty index array of any dtype is accepted.
    if indptr.dtype.kind not in "iu" or (indices.size and indices.dtype.kind not in "iu"):
        raise ValueError(f"{learner}: CSR indptr and indices must be integer arrays.")
    indptr = indptr.astype(np.int64, copy=False)
    indices = indices.astype(np.int64, copy=False)
    if indices.size != values.size and _indptr_ok(indptr, indices.size):
        raise ValueError(f"{learner}: CSR indices and values differ in length.")
    problem, at = _csr_problem(indptr, indices, values, n_features)
    if problem == _BAD_INDPTR:
        raise ValueError(f"{learner}: CSR indptr must start at 0, never decrease and end at nnz.")
    if problem == _BAD_INDEX:
        raise ValueError(
            f"{learner}: a sparse column index is outside [0, {n_features})."
        )
    if problem == _NOT_FINITE:
        row = int(np.searchsorted(indptr, at, side="right") - 1)
        raise ValueError(f"{learner}: X contains NaN or infinite values (first at row {row}).")
    indptr, indices, values = _sparse.canonical_csr(indptr, indices, values)
    return Batch(n=indptr.size - 1, indptr=indptr, indices=indices, values=values)


def check_labels(learner: str, y: Any, n: int) -> np.ndarray:
    """Return labels as float64 ±1; accept {0,1}, {-1,+1} or booleans, never a mix."""
    a = np.asarray(y)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(
            f"{learner}: y must be 1-D with one label per row ({n}); got shape {a.shape}."
        )
    if a.dtype == np.bool_:
        return np.where(a, 1.0, -1.0)
    # int64 and float64 (the usual labels) go to the kernel as they are, no conversion
    values = a
    if not (a.dtype == np.int64 or a.dtype == np.float64):
        if not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
            raise ValueError(f"{learner}: labels must be numbers in {{0, 1}} or {{-1, +1}}.")
        values = a.astype(np.float64)
    out = np.empty(n)
    first = _labels_pm1(np.ascontiguousarray(values), out)
    if first == -2:
        raise ValueError(
            f"{learner}: labels mix 0 and -1; use {{0, 1}} or {{-1, +1}}, not both."
        )
    if first >= 0:
        raise ValueError(
            f"{learner}: labels must be in {{0, 1}} or {{-1, +1}}; got {a[first]!r} at "
            f"row {first}."
        )
    return out
