"""Feature encoding: request items → the vectors a learner takes.

Two feature specs:

- ``dense``: every item carries ``x``, a list of exactly ``dim`` finite floats.
- ``hashed``: every item carries ``features``, named values hashed into 2^bits
  dimensions the way Vowpal Wabbit does: a string value becomes the feature
  ``name=value`` with value 1.0, a number becomes the feature ``name`` with that value,
  ``true`` is 1.0, ``false`` and ``null`` are absent. A nested object is a namespace:
  ``{"user": {"country": "fr"}}`` hashes ``country=fr`` with the namespace's hash as
  seed. Indices are MurmurHash3 values masked to ``bits`` bits, identical on every run
  and machine; colliding features add up.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .hashing import murmur3_32, murmur3_32_many

__all__ = ["EncodedBatch", "EncodingError", "FeatureEncoder"]

# Bounded cache of feature → index; indices are a pure function of the key, so clearing
# it never changes a result.
_CACHE_LIMIT = 1 << 16


class EncodingError(ValueError):
    """An item cannot be encoded; ``loc`` names where (e.g. ('events', 3, 'x'))."""

    def __init__(self, loc: tuple[Any, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg


@dataclass(frozen=True)
class EncodedBatch:
    """Rows ready for a learner: dense ``X`` or canonical-to-be CSR arrays."""

    n: int
    X: np.ndarray | None = None
    indptr: np.ndarray | None = None
    indices: np.ndarray | None = None
    values: np.ndarray | None = None

    def learner_input(self) -> Any:
        return self.X if self.X is not None else (self.indptr, self.indices, self.values)


class FeatureEncoder:
    """Encodes items for one model's feature spec (``{"kind": ..., "dim"/"bits": ...}``)."""

    def __init__(self, spec: Mapping[str, Any], max_value: float = math.inf) -> None:
        self.kind = spec["kind"]
        self.max_value = max_value
        if self.kind == "dense":
            self.n_features = int(spec["dim"])
        else:
            self.bits = int(spec["bits"])
            self.n_features = 1 << self.bits
            self._mask = self.n_features - 1
            self._cache: dict[tuple[str, str, str | None], int] = {}
            self._ns_seed: dict[str, int] = {"": 0}

    @property
    def cache_bytes(self) -> int:
        """About how much memory the feature cache takes (dict slots, key tuples and
        their strings, measured on typical keys: ~250 bytes an entry)."""
        if self.kind == "dense":
            return 0
        return sys.getsizeof(self._cache) + 200 * len(self._cache)

    def encode(self, items: Sequence[Any], field: str = "events") -> EncodedBatch:
        """Encode items (objects with ``x`` or ``features`` attributes, or dicts)."""
        if self.kind == "dense":
            return self._dense(items, field)
        return self._hashed(items, field)

    # ------------------------------------------------------------------ dense
    def _dense(self, items: Sequence[Any], field: str) -> EncodedBatch:
        n, d = len(items), self.n_features
        X = np.empty((n, d))
        for i, item in enumerate(items):
            x = _get(item, "x")
            if x is None:
                raise EncodingError(
                    (field, i, "x"), f"this model takes dense 'x' vectors of {d} floats"
                )
            if len(x) != d:
                raise EncodingError((field, i, "x"), f"expected {d} values, got {len(x)}")
            X[i] = x
        if not np.isfinite(X).all():
            i, j = np.argwhere(~np.isfinite(X))[0]
            raise EncodingError((field, int(i), "x", int(j)), "values must be finite numbers")
        if n and self.max_value < math.inf and np.abs(X).max() > self.max_value:
            i, j = np.argwhere(np.abs(X) > self.max_value)[0]
            raise EncodingError((field, int(i), "x", int(j)), self._bound_message())
        return EncodedBatch(n=n, X=X)

    def _bound_message(self) -> str:
        return (f"feature values must lie within ±{self.max_value:g} "
                "(AUCSTREAM_MAX_FEATURE_VALUE)")

    # ------------------------------------------------------------------ hashed
    # This loop runs once per named feature of every request, so it is written for speed:
    # exact type tests instead of isinstance, and a cache keyed by (namespace, name,
    # string value or None) so that a known feature costs one dict lookup.
    def _hashed(self, items: Sequence[Any], field: str) -> EncodedBatch:
        cache_get = self._cache.get
        indices: list[int] = []
        vals: list[float] = []
        add_index = indices.append
        add_value = vals.append
        missing: dict[tuple[str, str, str | None], list[int]] = {}
        indptr = np.zeros(len(items) + 1, np.int64)
        for i, item in enumerate(items):
            feats = _get(item, "features")
            if type(feats) is not dict:
                raise EncodingError(
                    (field, i, "features"), "this model takes named 'features' (hashed)"
                )
            for name, value in feats.items():
                if type(value) is str:  # the common case, inline
                    key = ("", name, value)
                    val = 1.0
                elif type(value) is dict:
                    for sub, v in value.items():
                        if type(v) is str:
                            key = (name, sub, v)
                            val = 1.0
                        else:
                            key, val = _key(name, sub, v, (field, i, "features", name, sub))
                            if key is None:
                                continue
                        idx = cache_get(key)
                        if idx is None:
                            missing.setdefault(key, []).append(len(indices))
                            idx = -1  # filled in once the batch's new features are hashed
                        add_index(idx)
                        add_value(val)
                    continue
                else:
                    key, val = _key("", name, value, (field, i, "features", name))
                    if key is None:
                        continue
                idx = cache_get(key)
                if idx is None:
                    missing.setdefault(key, []).append(len(indices))
                    idx = -1
                add_index(idx)
                add_value(val)
            indptr[i + 1] = len(indices)
        values = np.asarray(vals, dtype=np.float64)
        if values.shape[0] and self.max_value < math.inf and \
                np.abs(values).max() > self.max_value:
            k = int(np.argmax(np.abs(values) > self.max_value))
            i = int(np.searchsorted(indptr, k, side="right")) - 1
            raise EncodingError((field, i, "features", *self._large(_get(items[i], "features"))),
                                self._bound_message())
        out = np.asarray(indices, dtype=np.int64)
        if missing:
            self._hash_missing(missing, out)
        return EncodedBatch(n=len(items), indptr=indptr, indices=out, values=values)

    def _large(self, feats: dict) -> tuple[str, ...]:
        """Where in an item's features the first out-of-bound value is (rare path)."""
        for name, value in feats.items():
            if type(value) is dict:
                for sub, v in value.items():
                    if _magnitude(v) > self.max_value:
                        return (name, sub)
            elif _magnitude(value) > self.max_value:
                return (name,)
        return ()

    def _hash_missing(self, missing: dict, out: np.ndarray) -> None:
        todo = list(missing)
        seeds = np.array([self._seed(ns) for ns, _, _ in todo], np.uint32)
        texts = [(name if value is None else f"{name}={value}").encode()
                 for _, name, value in todo]
        hashes = murmur3_32_many(texts, seeds)
        if len(self._cache) + len(todo) > _CACHE_LIMIT:
            self._cache.clear()
        for key, h in zip(todo, hashes, strict=True):
            idx = int(h) & self._mask
            self._cache[key] = idx
            out[missing[key]] = idx

    def _seed(self, ns: str) -> int:
        seed = self._ns_seed.get(ns)
        if seed is None:
            seed = self._ns_seed[ns] = murmur3_32(ns.encode(), 0)
        return seed


def _key(ns: str, name: str, value: Any, loc: tuple) -> tuple[Any, float]:
    """(cache key, value) of one named feature, or (None, 0) if it is absent."""
    t = type(value)
    if t is str:
        return (ns, name, value), 1.0
    if t is float:
        if not math.isfinite(value):
            raise EncodingError(loc, "values must be finite numbers")
        return (ns, name, None), value
    if value is True:
        return (ns, name, None), 1.0
    if value is None or value is False:
        return None, 0.0
    if t is int:
        try:
            return (ns, name, None), float(value)
        except OverflowError:
            raise EncodingError(loc, "values must be finite numbers") from None
    raise EncodingError(loc, "values must be strings, numbers, booleans or null")


def _magnitude(value: Any) -> float:
    """|value| of a numeric feature value (booleans count as 1), else 0."""
    if type(value) in (int, float):
        return abs(float(value))
    return 0.0


def _get(item: Any, name: str) -> Any:
    if type(item) is dict:
        return item.get(name)
    return getattr(item, name, None)
