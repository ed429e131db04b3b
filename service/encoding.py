"""Feature encoding: request items → the vectors a learner takes.

Two feature specs:

- ``dense``: every item carries ``x``, a list of exactly ``dim`` finite floats.
- ``hashed``: every item carries ``features``, named values hashed into 2^bits
  dimensions (as Vowpal Wabbit's ``--hash all`` does in its default namespace; see the
  README for where it differs): a string value becomes the feature
  ``name=value`` with value 1.0, a number becomes the feature ``name`` with that value,
  ``true`` is 1.0, ``false`` and ``null`` are absent. A nested object is a namespace:
  ``{"user": {"country": "fr"}}`` hashes ``country=fr`` with the namespace's hash as
  seed. Indices are MurmurHash3 values masked to ``bits`` bits, identical on every run
  and machine; colliding features add up. ``interactions`` add crossed features (see
  :meth:`FeatureEncoder._with_crosses`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .hashing import murmur3_32, murmur3_32_many

__all__ = ["EncodedBatch", "EncodingError", "FeatureEncoder", "check_interactions"]

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

    def take(self, rows: Sequence[int]) -> EncodedBatch:
        """The batch of the given rows, in that order."""
        r = np.asarray(rows, np.int64)
        picked = select_rows(self.learner_input(), r)
        if isinstance(picked, np.ndarray):
            return EncodedBatch(n=r.size, X=picked)
        indptr, indices, values = picked
        return EncodedBatch(n=r.size, indptr=indptr, indices=indices, values=values)


def select_rows(X: Any, rows: np.ndarray) -> Any:
    """The given rows (int64 positions, in that order) of a learner input: a dense array
    or CSR ``(indptr, indices, values)``."""
    if isinstance(X, np.ndarray):
        return X[rows]
    indptr, indices, values = X
    starts = indptr[rows]
    lengths = indptr[rows + 1] - starts
    new_ptr = np.zeros(rows.size + 1, np.int64)
    np.cumsum(lengths, out=new_ptr[1:])
    # each kept entry's position: its row's start, plus its offset within the row
    sel = np.repeat(starts - new_ptr[:-1], lengths) + np.arange(new_ptr[-1])
    return new_ptr, indices[sel], values[sel]


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
            self.interactions = check_interactions(spec.get("interactions"))
            self._full: dict[tuple[str, str, str | None], int] = {}  # 32-bit hashes

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
        if self.interactions:
            return self._with_crosses(items, field, indptr, out, values)
        return EncodedBatch(n=len(items), indptr=indptr, indices=out, values=values)

    # ------------------------------------------------------------------ interactions
    # Crossed features, as Vowpal Wabbit's -q: for each interaction, every combination of
    # one feature from each named group (a top-level feature, or all the features of a
    # namespace) becomes a feature whose hash combines theirs as VW's quadratic features
    # do (h ← h·16777619 ^ h', FNV's prime, on the 32-bit hashes) and whose value is the
    # product of theirs. Added after the bound check: the bound is on what clients send.
    def _with_crosses(self, items: Sequence[Any], field: str, indptr: np.ndarray,
                      indices: np.ndarray, values: np.ndarray) -> EncodedBatch:
        new_ptr = np.zeros_like(indptr)
        idx_parts: list[np.ndarray] = []
        val_parts: list[np.ndarray] = []
        for i, item in enumerate(items):
            a, b = indptr[i], indptr[i + 1]
            cross_idx, cross_val = self._crosses(_get(item, "features"), field, i)
            idx_parts += [indices[a:b], np.asarray(cross_idx, np.int64)]
            val_parts += [values[a:b], np.asarray(cross_val, np.float64)]
            new_ptr[i + 1] = new_ptr[i] + (b - a) + len(cross_idx)
        return EncodedBatch(n=len(items), indptr=new_ptr,
                            indices=np.concatenate(idx_parts) if idx_parts else indices,
                            values=np.concatenate(val_parts) if val_parts else values)

    def _crosses(self, feats: dict, field: str, i: int) -> tuple[list[int], list[float]]:
        out_idx: list[int] = []
        out_val: list[float] = []
        mask = self._mask
        for names in self.interactions:
            combos = [(0, 1.0)]
            for k, name in enumerate(names):
                group = self._group(feats, name, field, i)
                if k == 0:
                    combos = group
                else:
                    combos = [(((h * _FNV_PRIME) ^ g) & 0xFFFFFFFF, v * w)
                              for h, v in combos for g, w in group]
                if not combos:
                    break
            for h, v in combos:
                out_idx.append(h & mask)
                out_val.append(v)
        return out_idx, out_val

    def _group(self, feats: dict, name: str, field: str, i: int) -> list[tuple[int, float]]:
        """(32-bit hash, value) of the features under a top-level name or namespace."""
        value = feats.get(name)
        if type(value) is dict:
            pairs = [((name, sub, v), 1.0) if type(v) is str
                     else _key(name, sub, v, (field, i, "features", name, sub))
                     for sub, v in value.items()]
        elif value is None:
            return []
        else:
            pairs = [(("", name, value), 1.0) if type(value) is str
                     else _key("", name, value, (field, i, "features", name))]
        return [(self._full_hash(key), val) for key, val in pairs if key is not None]

    def _full_hash(self, key: tuple[str, str, str | None]) -> int:
        h = self._full.get(key)
        if h is None:
            ns, name, value = key
            text = name if value is None else f"{name}={value}"
            h = murmur3_32(text.encode(), self._seed(ns))
            if len(self._full) >= _CACHE_LIMIT:
                self._full.clear()
            self._full[key] = h
        return h

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


_FNV_PRIME = 16777619
MAX_INTERACTIONS = 32


def check_interactions(spec: Any) -> tuple[tuple[str, ...], ...]:
    """The interactions of a hashed feature spec: a list of 2 or 3 distinct names each
    (top-level features or namespaces), at most 32; raises ValueError."""
    if spec is None:
        return ()
    if not isinstance(spec, list | tuple) or len(spec) > MAX_INTERACTIONS:
        raise ValueError(f"interactions must be a list of at most {MAX_INTERACTIONS} "
                         "lists of names")
    out = []
    for names in spec:
        if not isinstance(names, list | tuple) or not 2 <= len(names) <= 3 \
                or not all(isinstance(n, str) and n for n in names) \
                or len(set(names)) != len(names):
            raise ValueError(f"each interaction is a list of 2 or 3 distinct feature or "
                             f"namespace names; got {names!r}")
        out.append(tuple(names))
    return tuple(out)


def _magnitude(value: Any) -> float:
    """|value| of a numeric feature value (booleans count as 1), else 0."""
    if type(value) in (int, float):
        return abs(float(value))
    return 0.0


def _get(item: Any, name: str) -> Any:
    if type(item) is dict:
        return item.get(name)
    return getattr(item, name, None)
