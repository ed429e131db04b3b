"""Versioned binary formats for log payloads and checkpoints (msgpack; never pickle).

A numpy array travels as ``{"nd": dtype string, "shape": [...], "data": raw bytes}``
(little-endian, C order); anything else in a state dict must be a msgpack scalar or
string. A large float64 array that is mostly 0.0 or mostly 1.0 (the weights of a hashed
2^20-dimension model touch a few percent of their coordinates) travels instead as
``{"nd", "shape", "fill", "idx", "val"}``: the positions and values that differ from the
fill, compared bit for bit, so -0.0 and NaN payloads survive. A large array that ends in a
long run of one value (a compact model's learner holds its unused capacity, up to half its
columns, at a fresh column's value) travels as ``{"nd", "shape", "head", "tail"}``: the
elements before the run, and the run's value (one element's bytes; the run fills the
rest). Each array takes the smallest of the forms that apply. Decoding checks the format
version and every array's size.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

__all__ = ["CodecError", "apply_delta", "decode_batch", "decode_delta", "decode_export",
           "decode_state", "encode_batch", "encode_delta", "encode_export", "encode_state"]

BATCH_FORMAT = 1
STATE_FORMAT = 1
DELTA_FORMAT = 1
EXPORT_KIND = "aucstream-model-export"
EXPORT_FORMAT = 1
# The config entries an export carries (the rest — name, uid, created_at — belong to the
# model it is imported as).
EXPORT_CONFIG = ("learner", "params", "features", "seed", "standardize", "rolling_window")


class CodecError(ValueError):
    """A payload or checkpoint that cannot be decoded."""


_SPARSE_MIN_SIZE = 1 << 14  # smaller arrays always travel whole
_SPARSE_MAX_SHARE = 0.25  # sparse form when at most this share differs from the fill


def _pack_array(a: np.ndarray, min_sparse: int = _SPARSE_MIN_SIZE,
                tail: bool = False) -> dict[str, Any]:
    """An array's record: whole, sparse (float64), or with its final run as one value
    (``tail``: states only; log payloads keep the forms every version reads), whichever
    is smallest."""
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    record: dict[str, Any] = {"nd": a.dtype.str, "shape": list(a.shape)}
    if a.size < min_sparse or a.dtype.kind not in "fiu":
        return {**record, "data": a.tobytes()}
    flat = a.reshape(-1)
    bits = flat.view(f"<u{a.dtype.itemsize}")  # compared bit for bit (-0.0, NaN payloads)
    form: dict[str, Any] | None = None  # None: whole
    cost = a.size * a.dtype.itemsize
    if tail:
        other = bits != bits[-1]
        head = a.size - int(np.argmax(other[::-1])) if other.any() else 0
        if (head + 1) * a.dtype.itemsize < cost * (1 - _SPARSE_MAX_SHARE):
            form = {"head": flat[:head].tobytes(), "tail": flat[-1:].tobytes()}
            cost = (head + 1) * a.dtype.itemsize
    if a.dtype == np.float64:
        for fill in (0.0, 1.0):
            differs = bits != np.float64(fill).view(np.uint64)
            n = np.count_nonzero(differs)
            if n <= _SPARSE_MAX_SHARE * a.size and 16 * n < cost:
                idx = np.flatnonzero(differs)
                form = {"fill": fill, "idx": idx.astype("<i8").tobytes(),
                        "val": flat[idx].tobytes()}
                cost = 16 * n
    return {**record, **(form if form is not None else {"data": a.tobytes()})}


def _unpack_array(obj: dict[str, Any]) -> np.ndarray:
    try:
        dtype = np.dtype(obj["nd"])
        shape = tuple(int(s) for s in obj["shape"])
        if "fill" in obj:
            return _unpack_sparse(dtype, shape, float(obj["fill"]), obj["idx"], obj["val"])
        if "tail" in obj:
            return _unpack_tail(dtype, shape, obj["head"], obj["tail"])
        data = obj["data"]
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"malformed array record: {exc}") from None
    if dtype.hasobject or dtype.kind not in "fiubU":
        raise CodecError(f"refusing array dtype {dtype.str}")
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        raise CodecError(f"array of shape {shape} needs {expected} bytes, got {len(data)}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _unpack_tail(dtype: np.dtype, shape: tuple, head: bytes, tail: bytes) -> np.ndarray:
    if dtype.kind not in "fiu" or len(tail) != dtype.itemsize or len(head) % dtype.itemsize:
        raise CodecError("malformed tail array record")
    size = int(np.prod(shape, dtype=np.int64))
    n = len(head) // dtype.itemsize
    if n >= size:
        raise CodecError("tail array record's head fills its shape")
    out = np.empty(size, dtype)
    bits = out.view(f"<u{dtype.itemsize}")  # (as integers: a NaN's payload is kept)
    bits[:n] = np.frombuffer(head, bits.dtype)
    bits[n:] = np.frombuffer(tail, bits.dtype)[0]
    return out.reshape(shape)


def _unpack_sparse(dtype: np.dtype, shape: tuple, fill: float, idx: bytes,
                   val: bytes) -> np.ndarray:
    if dtype != np.float64 or len(idx) % 8 or len(idx) != len(val):
        raise CodecError("malformed sparse array record")
    positions = np.frombuffer(idx, "<i8")
    size = int(np.prod(shape, dtype=np.int64))
    if positions.size and (positions.min() < 0 or positions.max() >= size):
        raise CodecError("sparse array record indexes outside its shape")
    out = np.full(size, fill)
    out[positions] = np.frombuffer(val, "<f8")
    return out.reshape(shape)


def _pack_value(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return _pack_array(v, tail=True)
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, dict):
        return {"map": {k: _pack_value(x) for k, x in v.items()}}
    if v is None or isinstance(v, bool | int | float | str):
        return v
    raise CodecError(f"cannot encode a value of type {type(v).__name__}")


def _unpack_value(v: Any) -> Any:
    if isinstance(v, dict):
        if "nd" in v:
            return _unpack_array(v)
        if "map" in v:
            return {k: _unpack_value(x) for k, x in v["map"].items()}
        raise CodecError("malformed record")
    return v


def encode_state(state: dict[str, Any]) -> bytes:
    """Bytes of a flat state dict (learner state plus service extras)."""
    body = {k: _pack_value(v) for k, v in state.items()}
    return msgpack.packb({"format": STATE_FORMAT, "state": body}, use_bin_type=True)


def _document(blob: bytes, what: str, fmt: int) -> dict[str, Any]:
    """The msgpack map of a ``what`` (checkpoint, delta) in format ``fmt``."""
    try:
        doc = msgpack.unpackb(blob, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise CodecError(f"undecodable {what}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise CodecError(f"unknown {what} format")
    return doc


def decode_state(blob: bytes) -> dict[str, Any]:
    doc = _document(blob, "checkpoint", STATE_FORMAT)
    return {k: _unpack_value(v) for k, v in doc["state"].items()}


# ----------------------------------------------------------------------------- deltas
# A publication to the followers of what changed between two versions of a state: each
# large array that kept its dtype and shape travels as the positions whose bits changed
# and their new values, or as "same"; everything else travels whole. Applied to the state
# at the base version (bit for bit the one the owner diffed against: states at equal
# versions are equal, the learners being deterministic), it gives the new state exactly.
_DIFF_MIN_SIZE = 1 << 10  # smaller arrays travel whole
_DIFF_MAX_SHARE = 0.5  # an array with more changed positions than this share goes whole


def _diff_value(old: Any, new: Any) -> Any:
    if isinstance(new, dict):
        if not isinstance(old, dict):
            return _pack_value(new)
        return {"dmap": {k: _diff_value(old.get(k), v) for k, v in new.items()}}
    # same dtype and shape, or a 1-D array that grew (a feature index's columns)
    if (not isinstance(new, np.ndarray) or not isinstance(old, np.ndarray)
            or new.size < _DIFF_MIN_SIZE or new.dtype != old.dtype
            or new.dtype.kind not in "fiub"
            or not (new.shape == old.shape
                    or (new.ndim == old.ndim == 1 and new.size > old.size))):
        return _pack_value(new)
    size = new.dtype.itemsize
    a = np.ascontiguousarray(new).reshape(-1).view(f"u{size}")
    b = np.ascontiguousarray(old).reshape(-1).view(f"u{size}")
    at = np.flatnonzero(a[:b.size] != b)
    if at.size == 0 and a.size == b.size:
        return {"same": True}
    if at.size + (a.size - b.size) > _DIFF_MAX_SHARE * new.size:
        return _pack_value(new)
    wide = new.size >= 2**31
    return {"nd": new.dtype.str, "shape": list(new.shape), "aw": 8 if wide else 4,
            "at": at.astype("<i8" if wide else "<i4").tobytes(),
            "val": a[at].astype(f"<u{size}").tobytes(),
            "tail": a[b.size:].astype(f"<u{size}").tobytes()}


def _apply_value(old: Any, rec: Any) -> Any:
    if not isinstance(rec, dict):
        return rec
    if "dmap" in rec:
        if not isinstance(old, dict):
            raise CodecError("a delta's map applies to no map of the base state")
        return {k: _apply_value(old.get(k), v) for k, v in rec["dmap"].items()}
    if "same" in rec or "at" in rec:
        if not isinstance(old, np.ndarray):
            raise CodecError("a delta's array applies to no array of the base state")
        if "same" in rec:
            return old  # states are never changed in place: sharing the array is safe
        try:
            dtype = np.dtype(rec["nd"])
            shape = tuple(int(x) for x in rec["shape"])
            at = np.frombuffer(rec["at"], {4: "<i4", 8: "<i8"}[rec["aw"]])
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(f"malformed delta record: {exc}") from None
        word = f"<u{dtype.itemsize}"
        vals = np.frombuffer(rec["val"], word)
        tail = np.frombuffer(rec.get("tail", b""), word)
        if (dtype != old.dtype or int(np.prod(shape)) != old.size + tail.size
                or (tail.size and not len(shape) == old.ndim == 1)
                or (not tail.size and shape != old.shape)):
            raise CodecError("a delta's array differs from the base state's in type or shape")
        out = np.empty(shape, dtype)
        bits = out.reshape(-1).view(word)
        bits[:old.size] = np.ascontiguousarray(old).reshape(-1).view(word)
        bits[old.size:] = tail
        if vals.size != at.size or (at.size and (at.min() < 0 or at.max() >= old.size)):
            raise CodecError("a delta's positions do not fit its array")
        bits[at] = vals
        return out
    return _unpack_value(rec)


def encode_delta(base: int, version: int, old: dict[str, Any], new: dict[str, Any]) -> bytes:
    """Bytes of what changed from ``old`` (the state at version ``base``) to ``new``."""
    body = {k: _diff_value(old.get(k), v) for k, v in new.items()}
    return msgpack.packb({"format": DELTA_FORMAT, "base": int(base), "version": int(version),
                          "state": body}, use_bin_type=True)


def decode_delta(blob: bytes) -> tuple[int, int, dict[str, Any]]:
    """(base version, version, delta records) of :func:`encode_delta`'s bytes."""
    doc = _document(blob, "delta", DELTA_FORMAT)
    return int(doc["base"]), int(doc["version"]), doc["state"]


def apply_delta(old: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """The new state: ``delta`` (from :func:`decode_delta`) applied to ``old``, the state
    at its base version, which is left unchanged (unchanged arrays are shared)."""
    return {k: _apply_value(old.get(k), v) for k, v in delta.items()}


def encode_batch(y: np.ndarray, X: np.ndarray | None = None,
                 csr: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> bytes:
    """Bytes of an encoded batch: labels (±1 or 0/1 as int8) and dense rows or CSR.

    CSR travels compactly, because every learn request writes it to the durable log:
    column indices as 32-bit integers when they fit, and values in the sparse form when
    most are 1.0 (hashed categorical features). A 500-event ad-click batch takes ~110 kB
    instead of ~270 kB. :func:`decode_batch` widens them back, bit for bit.
    """
    body: dict[str, Any] = {"format": BATCH_FORMAT, "y": _pack_array(np.asarray(y, np.int8))}
    if X is not None:
        body["X"] = _pack_array(np.asarray(X, np.float64))
    else:
        indptr, indices, values = csr
        indices = np.asarray(indices, np.int64)
        if indices.size == 0 or (indices.min() >= 0 and indices.max() < 2**31):
            indices = indices.astype(np.int32)
        body["indptr"] = _pack_array(np.asarray(indptr, np.int64))
        body["indices"] = _pack_array(indices)
        body["values"] = _pack_array(np.asarray(values, np.float64), min_sparse=1)
    return msgpack.packb(body, use_bin_type=True)


def decode_batch(blob: bytes) -> tuple[np.ndarray, Any]:
    """(labels, learner input) of an encoded batch: int64 indices, float64 values."""
    try:
        doc = msgpack.unpackb(blob, raw=False)
    except Exception as exc:
        raise CodecError(f"undecodable log entry: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != BATCH_FORMAT:
        raise CodecError("unknown log entry format")
    y = _unpack_array(doc["y"])
    if "X" in doc:
        return y, _unpack_array(doc["X"])
    indices = _unpack_array(doc["indices"])
    if indices.dtype.kind not in "iu":
        raise CodecError(f"log entry indices of dtype {indices.dtype.str}")
    return y, (_unpack_array(doc["indptr"]), indices.astype(np.int64, copy=False),
               _unpack_array(doc["values"]))


def encode_export(name: str, config: dict[str, Any], version: int, state: bytes,
                  producer: str) -> bytes:
    """A model export: self-describing, versioned; ``state`` is a checkpoint blob."""
    return msgpack.packb({
        "kind": EXPORT_KIND, "format": EXPORT_FORMAT, "producer": producer, "name": name,
        "config": {k: config[k] for k in EXPORT_CONFIG}, "version": int(version),
        "state": bytes(state)}, use_bin_type=True)


def decode_export(blob: bytes) -> dict[str, Any]:
    """The fields of a model export; CodecError says what is wrong with it."""
    try:
        doc = msgpack.unpackb(blob, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise CodecError(f"not a model export (undecodable: {exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != EXPORT_KIND:
        raise CodecError("not an aucstream model export")
    if doc.get("format") != EXPORT_FORMAT:
        raise CodecError(f"model export format {doc.get('format')!r}; this aucstream reads "
                         f"format {EXPORT_FORMAT}")
    config, version, state = doc.get("config"), doc.get("version"), doc.get("state")
    if not isinstance(config, dict) or set(config) != set(EXPORT_CONFIG):
        raise CodecError("the export's config is incomplete")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise CodecError("the export's version is not a position")
    if not isinstance(state, bytes):
        raise CodecError("the export carries no state")
    return {"name": doc.get("name"), "config": config, "version": version, "state": state,
            "producer": doc.get("producer")}

