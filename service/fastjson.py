"""A fast path for the two hot request bodies: /learn and /score, parsed in numba.

A 500-event ad-click batch is ~360 kB of JSON. Building Python objects for it (pydantic)
and hashing its ~17k named features in a Python loop took ~15 ms; this module scans the
bytes once, hashes ``name=value`` straight from the buffer and writes the encoded batch.

It handles the common, well-formed case only. Anything else — an escape sequence in a
string, a duplicate key, an unexpected key or type, a number whose decimal value is not
exactly reproducible by the fast method, a wrong vector length — makes it give up, and
the caller takes the regular path (pydantic + :mod:`service.encoding`), which accepts the
same inputs and produces the same encoded batch, and which words every error. The
fast path never rejects a request by itself.

Numbers use Clinger's fast path: at most 19 significant digits with a mantissa ≤ 2^53 and
a decimal exponent within ±22 give the correctly rounded double, i.e. exactly what
Python's ``float()`` gives; other numbers are left to the regular path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .encoding import EncodedBatch
from .hashing import _M32, _fmix32, _mul32, _murmur_inline, _rotl32

__all__ = ["FastRequest", "model_name", "parse_learn", "parse_score"]

_SP, _TAB, _LF, _CR = 32, 9, 10, 13
_QUOTE, _BSLASH, _COLON, _COMMA = 34, 92, 58, 44
_LBRACE, _RBRACE, _LBRACK, _RBRACK = 123, 125, 91, 93
_MINUS, _PLUS, _DOT, _ZERO, _NINE = 45, 43, 46, 48, 57

# Indexing with an unsigned integer spares numba the negative-index wrap-around test on
# every byte read (positions here are never negative): scanning ran ~1.6x faster.
_u = np.uint64
# The scan (:func:`_scan`) and its helpers allocate nothing and compile with
# ``_nrt=False``: with numba's reference counting, every call of a helper counted its
# array arguments up and down with atomic operations, a third of a whole scan (perf).
# The helpers called per key or value must be inlined: a call passes each array as seven
# words on the stack. LLVM inlines the small ones by itself; the larger ones that it left
# as calls (string ends, keys, pair hashes, the duplicate table) are inlined by numba
# (``inline="always"``), at as few call sites as possible: each copy costs compile time
# (with every helper inlined by numba, a cold compile took ~2 min instead of ~30 s).
# :func:`_string`, called at seven places, stays a call: inlined it cost 5 s more of a
# cold compile (26 s against 21 s; 16 s before the helpers above were inlined) for 7 %
# of a scan.

_TWO53 = 9007199254740992
_C1 = np.uint64(0xCC9E2D51)  # MurmurHash3's constants (service/hashing.py)
_C2 = np.uint64(0x1B873593)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: a multiplicative mix
_POW10 = np.array([10.0**k for k in range(23)])
_SMALL_SLOTS = 128  # duplicate-key table slots (see _first_time): objects of <= 64 keys
_KEY_SLOTS = 1024  # the large table's: at most 512 keys per object
# SWAR constants (see _string_end) and words read as little-endian 4-byte integers
_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_QUOTES = np.uint64(0x2222222222222222)
_BSLASHES = np.uint64(0x5C5C5C5C5C5C5C5C)
_SPACES = np.uint64(0x2020202020202020)
_W_TRUE = np.uint64(int.from_bytes(b"true", "little"))
_W_FALS = np.uint64(int.from_bytes(b"fals", "little"))
_W_NULL = np.uint64(int.from_bytes(b"null", "little"))
# the keys of a request body (global arrays: numba compiles them in as constants)
_MODEL, _EVENTS, _ITEMS, _TOP_K, _X, _FEATURES, _LABEL, _ID = (
    np.frombuffer(w.encode(), np.uint8).copy()
    for w in ("model", "events", "items", "top_k", "x", "features", "label", "id"))


@dataclass(frozen=True)
class FastRequest:
    """A parsed and encoded /learn or /score body."""

    model: str
    batch: EncodedBatch
    labels: np.ndarray | None  # int8 ±1 per event (learn only)
    ids: list[str | None]  # one per event or item
    top_k: int | None
    starts: np.ndarray | None = None  # where each event's object begins in the body (learn)
    label_only: list[int] = field(default_factory=list)  # events that are labels by id


# ----------------------------------------------------------------------------- scanning
@intrinsic
def _ctz(typingctx, x):
    """The number of trailing zero bits of a nonzero uint64 (one instruction)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _ws(b, p):
    n = b.shape[0]
    while p < n:
        c = b[_u(p)]
        if c > _SP or not (c == _SP or c == _LF or c == _CR or c == _TAB):
            break
        p += 1
    return p


@njit(cache=True, nogil=True, _nrt=False)
def _word(b, i):
    """The little-endian 4-byte word at b[i] (one load: LLVM joins the four)."""
    return (np.uint64(b[_u(i)]) | (np.uint64(b[_u(i + 1)]) << np.uint64(8))
            | (np.uint64(b[_u(i + 2)]) << np.uint64(16))
            | (np.uint64(b[_u(i + 3)]) << np.uint64(24)))


@njit(cache=True, nogil=True, _nrt=False)
def _word8(b, i):
    """The little-endian 8-byte word at b[i]."""
    return _word(b, i) | (_word(b, i + 4) << np.uint64(32))


@njit(cache=True, nogil=True, inline="always")
def _string_end(b, p):
    """The position of the '"' closing a string whose text starts at p, or -1 if a
    backslash (an escape), a control character or the end of the body comes first.

    Eight bytes at a time: the usual SWAR test flags the bytes equal to '"' or '\\' or
    below 32 (the lowest flag is exact; borrows can only add flags above it), so the
    first special byte is found without a branch per byte."""
    n = b.shape[0]
    while p + 8 <= n:
        x = _word8(b, p)
        q = x ^ _QUOTES
        e = x ^ _BSLASHES
        m = (((q - _ONES) & ~q) | ((e - _ONES) & ~e) | ((x - _SPACES) & ~x)) & _HIGH
        if m:
            p += np.int64(_ctz(m) >> np.uint64(3))
            return p if b[_u(p)] == _QUOTE else -1
        p += 8
    while p < n:
        c = b[_u(p)]
        if c == _QUOTE:
            return p
        if c == _BSLASH or c < 32:
            return -1
        p += 1
    return -1


@njit(cache=True, nogil=True, _nrt=False)
def _string(b, p):
    """A string without escapes at b[p] == '"': (start, end, next) or (-1, -1, -1)."""
    if p >= b.shape[0] or b[_u(p)] != _QUOTE:
        return -1, -1, -1
    e = _string_end(b, p + 1)
    if e < 0:
        return -1, -1, -1
    return p + 1, e, e + 1


@njit(cache=True, nogil=True, _nrt=False)
def _number(b, p):
    """A JSON number at p: (value, is_integer, next, ok). ok is False to give up."""
    n = b.shape[0]
    neg = False
    if p < n and b[_u(p)] == _MINUS:
        neg = True
        p += 1
    if p >= n or b[_u(p)] < _ZERO or b[_u(p)] > _NINE:
        return 0.0, False, p, False
    mant = 0
    digits = 0
    exp10 = 0
    is_int = True
    if b[_u(p)] == _ZERO:
        p += 1
        if p < n and _ZERO <= b[_u(p)] <= _NINE:
            return 0.0, False, p, False  # a leading zero: invalid JSON
    else:
        while p < n and _ZERO <= b[_u(p)] <= _NINE:
            mant = mant * 10 + (b[_u(p)] - _ZERO)
            digits += 1
            if digits > 18:
                return 0.0, False, p, False
            p += 1
    if p < n and b[_u(p)] == _DOT:
        is_int = False
        p += 1
        if p >= n or b[_u(p)] < _ZERO or b[_u(p)] > _NINE:
            return 0.0, False, p, False
        while p < n and _ZERO <= b[_u(p)] <= _NINE:
            if mant or b[_u(p)] != _ZERO:
                digits += 1
            mant = mant * 10 + (b[_u(p)] - _ZERO)
            exp10 -= 1
            if digits > 18:
                return 0.0, False, p, False
            p += 1
    if p < n and (b[_u(p)] == 101 or b[_u(p)] == 69):  # e, E
        is_int = False
        p += 1
        eneg = False
        if p < n and (b[_u(p)] == _PLUS or b[_u(p)] == _MINUS):
            eneg = b[_u(p)] == _MINUS
            p += 1
        if p >= n or b[_u(p)] < _ZERO or b[_u(p)] > _NINE:
            return 0.0, False, p, False
        e = 0
        while p < n and _ZERO <= b[_u(p)] <= _NINE:
            e = e * 10 + (b[_u(p)] - _ZERO)
            if e > 400:
                return 0.0, False, p, False
            p += 1
        exp10 += -e if eneg else e
    if mant == 0:
        value = -0.0 if (neg and not is_int) else 0.0
        return value, is_int, p, True
    if mant > _TWO53:
        return 0.0, False, p, False
    if 0 <= exp10 <= 22:
        value = float(mant) * _POW10[exp10]
        if is_int and value > _TWO53:
            return 0.0, False, p, False
    elif -22 <= exp10 < 0:
        value = float(mant) / _POW10[-exp10]
    else:
        return 0.0, False, p, False
    return (-value if neg else value), is_int, p, True


@njit(cache=True, nogil=True, inline="always")
def _is(b, s, e, word):
    """b[s:e] equals the ASCII word (a uint8 array)."""
    if e - s != word.shape[0]:
        return False
    for k in range(e - s):
        if b[_u(s + k)] != word[_u(k)]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _same(b, s1, e1, s2, e2):
    """b[s1:e1] equals b[s2:e2]."""
    if e1 - s1 != e2 - s2:
        return False
    for k in range(e1 - s1):
        if b[_u(s1 + k)] != b[_u(s2 + k)]:
            return False
    return True


@njit(cache=True, nogil=True, _nrt=False)
def _true(b, p):
    return p + 4 <= b.shape[0] and _word(b, p) == _W_TRUE


@njit(cache=True, nogil=True, _nrt=False)
def _false(b, p):
    return p + 5 <= b.shape[0] and _word(b, p) == _W_FALS and b[_u(p + 4)] == 101  # e


@njit(cache=True, nogil=True, _nrt=False)
def _null(b, p):
    return p + 4 <= b.shape[0] and _word(b, p) == _W_NULL


@njit(cache=True, nogil=True, _nrt=False)
def _mix(h, k):
    """One MurmurHash3 block: the 4-byte word k into the state h."""
    k = _mul32(_rotl32(_mul32(k, _C1), 15), _C2)
    h = _rotl32(h ^ k, 13)
    return (_mul32(h, 5) + np.uint64(0xE6546B64)) & _M32


@njit(cache=True, nogil=True, _nrt=False)
def _bytes(b, i, m):
    """The little-endian word of the m (0-3) bytes at b[i] (branches: a loop here was
    vectorised for lengths it never sees)."""
    k = np.uint64(0)
    if m >= 3:
        k |= np.uint64(b[_u(i + 2)]) << np.uint64(16)
    if m >= 2:
        k |= np.uint64(b[_u(i + 1)]) << np.uint64(8)
    if m >= 1:
        k |= np.uint64(b[_u(i)])
    return k


@njit(cache=True, nogil=True, inline="always")
def _hash_pair(b, ns, ne, vs, ve, seed):
    """MurmurHash3 of the bytes name + '=' + value, read in place: the name's whole
    words, the word holding '=' put together from both sides, then the value's words.
    (Copied into a scratch buffer first, then hashed, the pairs took ~30% of a scan;
    read in place ~15%.)"""
    h = np.uint64(seed) & _M32
    p = ns
    while p + 4 <= ne:
        h = _mix(h, _word(b, p))
        p += 4
    r = ne - p  # the name's last 0-3 bytes, then '=', then `need` bytes of the value
    k = _bytes(b, p, r) | (np.uint64(61) << np.uint64(8 * r))
    need = 3 - r
    lv = ve - vs
    if lv < need:  # the word holding '=' is the tail
        k |= _bytes(b, vs, lv) << np.uint64(8 * (r + 1))
        h ^= _mul32(_rotl32(_mul32(k, _C1), 15), _C2)
    else:
        k |= _bytes(b, vs, need) << np.uint64(8 * (r + 1))
        h = _mix(h, k)
        p = vs + need
        while p + 4 <= ve:
            h = _mix(h, _word(b, p))
            p += 4
        if p < ve:
            h ^= _mul32(_rotl32(_mul32(_bytes(b, p, ve - p), _C1), 15), _C2)
    return _fmix32(h, (ne - ns) + 1 + lv)


@njit(cache=True, nogil=True, inline="always")
def _key(b, p):
    """A key without escapes at b[p] == '"': (start, end, next, hash) or (-1, -1, -1, 0).

    The hash only finds duplicate keys (feature indices use MurmurHash3), so it is taken
    from the length and three of the bytes after the scan, not byte by byte: FNV-1a over
    every byte was a multiply chain. Keys that share it are told apart by their bytes.
    """
    if p >= b.shape[0] or b[_u(p)] != _QUOTE:
        return -1, -1, -1, 0
    s = p + 1
    e = _string_end(b, s)
    if e < 0:
        return -1, -1, -1, 0
    m = np.uint64(e - s)
    if e > s:
        m |= ((np.uint64(b[_u(s)]) << np.uint64(8)) | (np.uint64(b[_u(e - 1)]) << np.uint64(16))
              | (np.uint64(b[_u(s + (e - s) // 2)]) << np.uint64(24)))
    return s, e, e + 1, np.int64((m * _GOLDEN) >> np.uint64(32))


@njit(cache=True, nogil=True, inline="always")
def _first_time(table, big, stamp, b, s, e, h):
    """Record the key b[s:e] (hash h) in the object stamped ``stamp`` (its position in
    the body); False if that object already has it.

    ``table`` holds two open-addressing hash tables, four entries (stamp, start, end,
    hash) per slot, flat: a small one (``_SMALL_SLOTS``, 4 kB, which stays in cache
    where the probes of a 32 kB one missed it) for objects of up to
    ``_SMALL_SLOTS // 2`` keys, then (``big``) a large one, ``_KEY_SLOTS``, where
    :func:`_spill` moved the object's keys. A slot holding another object's stamp
    counts as free, so a table is never cleared; at most half of one is ever in use by
    one object, so a probe always ends.
    """
    base = 4 * _SMALL_SLOTS if big else 0
    mask = (_KEY_SLOTS if big else _SMALL_SLOTS) - 1
    slot = h & mask
    while table[_u(base + 4 * slot)] == stamp:
        i = base + 4 * slot
        if table[_u(i + 3)] == h and _same(b, table[_u(i + 1)], table[_u(i + 2)], s, e):
            return False
        slot = (slot + 1) & mask
    i = base + 4 * slot
    table[_u(i)] = stamp
    table[_u(i + 1)] = s
    table[_u(i + 2)] = e
    table[_u(i + 3)] = h
    return True


@njit(cache=True, nogil=True, _nrt=False)
def _spill(table, stamp):
    """Move the keys of the object stamped ``stamp`` from the small table of
    :func:`_first_time` to the large one (the object has outgrown the small one)."""
    base = 4 * _SMALL_SLOTS
    mask = _KEY_SLOTS - 1
    for i in range(0, 4 * _SMALL_SLOTS, 4):
        if table[i] == stamp:
            slot = table[i + 3] & mask
            while table[base + 4 * slot] == stamp:
                slot = (slot + 1) & mask
            for k in range(4):
                table[base + 4 * slot + k] = table[i + k]


@njit(cache=True, nogil=True, inline="always")
def _note_key(table, stamp, nkeys, b, s, e, h):
    """The object's ``nkeys``-th key b[s:e] recorded: False if it repeats a key of the
    object or if the object has more keys than the tables take (the regular path)."""
    if nkeys > _KEY_SLOTS // 2:
        return False
    if nkeys == _SMALL_SLOTS // 2 + 1:
        _spill(table, stamp)
    return _first_time(table, nkeys > _SMALL_SLOTS // 2, stamp, b, s, e, h)


# ----------------------------------------------------------------------------- features
@njit(cache=True, nogil=True, _nrt=False)
def _features(b, p, mask, out_idx, out_val, nf, keys_top, keys_ns):
    """Parse a features object at p into (index, value) pairs from nf on.

    Returns (next position, new nf) or (-1, nf) to give up. Duplicate names within an
    object give up too: the regular path keeps only the last one. ``keys_top`` and
    ``keys_ns`` are the duplicate-key tables of the object and of its namespaces.

    One loop for both levels (``ns``: the position of the namespace being read, else
    -1), so that the inlined helpers are compiled in once: written per level, they
    doubled the compile time.
    """
    n = b.shape[0]
    p = _ws(b, p)
    if p >= n or b[_u(p)] != _LBRACE:
        return -1, nf
    obj = p
    p = _ws(b, p + 1)
    if p < n and b[_u(p)] == _RBRACE:
        return p + 1, nf
    nkeys = 0
    nsub = 0
    ns = -1
    seed = np.uint64(0)
    while True:
        ks, ke, p, h = _key(b, p)
        if ks < 0:
            return -1, nf
        if ns < 0:
            nkeys += 1
            ok = _note_key(keys_top, obj, nkeys, b, ks, ke, h)
        else:
            nsub += 1  # names inside a namespace only clash among themselves
            ok = _note_key(keys_ns, ns, nsub, b, ks, ke, h)
        if not ok:
            return -1, nf
        p = _ws(b, p)
        if p >= n or b[_u(p)] != _COLON:
            return -1, nf
        p = _ws(b, p + 1)
        if p >= n:
            return -1, nf
        if ns < 0 and b[_u(p)] == _LBRACE:  # a namespace: one level of scalars
            seed = _murmur_inline(b, ks, ke - ks, 0)
            ns = p
            nsub = 0
            p = _ws(b, p + 1)
            if p >= n:
                return -1, nf
            if b[_u(p)] != _RBRACE:
                continue  # to its first name
            p += 1  # empty
            ns = -1
        else:
            p, nf = _scalar(b, p, ks, ke, seed if ns >= 0 else np.uint64(0), mask, out_idx,
                            out_val, nf)
            if p < 0:
                return -1, nf
        p = _ws(b, p)
        if p < n and b[_u(p)] == _COMMA:
            p = _ws(b, p + 1)
            continue
        if p >= n or b[_u(p)] != _RBRACE:
            return -1, nf
        p += 1
        if ns < 0:
            return p, nf
        ns = -1  # the namespace ends: on with the object
        p = _ws(b, p)
        if p < n and b[_u(p)] == _COMMA:
            p = _ws(b, p + 1)
            continue
        if p < n and b[_u(p)] == _RBRACE:
            return p + 1, nf
        return -1, nf


@njit(cache=True, nogil=True, inline="always")
def _scalar(b, p, ks, ke, seed, mask, out_idx, out_val, nf):
    """One named value: a string (name=value, 1.0), a number (name, value), true (name,
    1.0), false/null (absent). Returns (next, nf) or (-1, nf)."""
    if p >= b.shape[0] or nf >= out_idx.shape[0]:
        return -1, nf
    c = b[_u(p)]
    if c == _QUOTE:
        vs, ve, p = _string(b, p)
        if vs < 0:
            return -1, nf
        out_idx[nf] = _hash_pair(b, ks, ke, vs, ve, seed) & mask
        out_val[nf] = 1.0
        return p, nf + 1
    if c == _MINUS or (_ZERO <= c <= _NINE):
        value, _, p, ok = _number(b, p)
        if not ok:
            return -1, nf
        out_idx[nf] = _murmur_inline(b, ks, ke - ks, seed) & mask
        out_val[nf] = value
        return p, nf + 1
    if _true(b, p):
        out_idx[nf] = _murmur_inline(b, ks, ke - ks, seed) & mask
        out_val[nf] = 1.0
        return p + 4, nf + 1
    if _false(b, p):
        return p + 5, nf
    if _null(b, p):
        return p + 4, nf
    return -1, nf


# ----------------------------------------------------------------------------- requests
@njit(cache=True, nogil=True)
def _parse(b, learn, hashed, dim, mask, max_items, by_id):
    """Scan a whole /learn (``learn``) or /score body; ``by_id``: /learn events may be
    labels by id (an id and a label, no vector: the model keeps impressions).

    Returns (ok, n, model_start, model_end, top_k, labels, id_spans, indptr, idx, vals, X,
    starts, has_vec).
    """
    n = b.shape[0]
    cap_items = max_items + 1
    # sized by what the body could hold (~50 times what a usual one does): left unfilled,
    # the scan writes each item's row (filling them was ~3% of a scan's profile)
    labels = np.empty(cap_items, np.int8)
    id_spans = np.empty((cap_items, 2), np.int64)
    indptr = np.empty(cap_items + 1, np.int64)
    starts = np.empty(cap_items, np.int64)
    has_vec = np.empty(cap_items, np.bool_)
    cap_f = n // 4 + 1 if hashed else 1
    idx = np.empty(cap_f, np.int64)
    vals = np.empty(cap_f)
    X = np.empty((cap_items if not hashed else 0, dim))
    keys_top = np.full(4 * (_SMALL_SLOTS + _KEY_SLOTS), -1, np.int64)  # see _first_time
    keys_ns = np.full(4 * (_SMALL_SLOTS + _KEY_SLOTS), -1, np.int64)
    ok, count, ms, me, top_k = _scan(b, learn, hashed, dim, mask, max_items, by_id, labels,
                                     id_spans, indptr, idx, vals, X, keys_top, keys_ns, starts,
                                     has_vec)
    return ok, count, ms, me, top_k, labels, id_spans, indptr, idx, vals, X, starts, has_vec


# Without reference counting: the inlined helpers' array arguments were counted up and
# down (atomically) at every call inside a counted function, ~14% of a scan (perf).
@njit(cache=True, nogil=True, _nrt=False)
def _scan(b, learn, hashed, dim, mask, max_items, by_id, labels, id_spans, indptr, idx, vals,
          X, keys_top, keys_ns, starts, has_vec):
    """The scan of :func:`_parse` into its buffers: (ok, n, model_start, model_end,
    top_k)."""
    n = b.shape[0]
    fail = (False, 0, -1, -1, -1)
    ms = -1
    me = -1
    top_k = -1
    seen_list = False
    seen_topk = False
    count = 0
    nf = 0
    indptr[0] = 0
    p = _ws(b, 0)
    if p >= n or b[_u(p)] != _LBRACE:
        return fail
    p = _ws(b, p + 1)
    while True:
        ks, ke, p = _string(b, p)
        if ks < 0:
            return fail
        p = _ws(b, p)
        if p >= n or b[_u(p)] != _COLON:
            return fail
        p = _ws(b, p + 1)
        if _is(b, ks, ke, _MODEL):
            if ms >= 0:
                return fail
            ms, me, p = _string(b, p)
            if ms < 0:
                return fail
        elif not learn and _is(b, ks, ke, _TOP_K):
            if seen_topk:
                return fail
            seen_topk = True
            if _null(b, p):
                p += 4
            else:
                v, is_int, p, ok = _number(b, p)
                if not ok or not is_int or v < 1:
                    return fail
                top_k = int(v)
        elif (learn and _is(b, ks, ke, _EVENTS)) or (not learn and _is(b, ks, ke, _ITEMS)):
            if seen_list or p >= n or b[_u(p)] != _LBRACK:
                return fail
            seen_list = True
            p = _ws(b, p + 1)
            if p < n and b[_u(p)] == _RBRACK:
                return fail  # an empty list: the regular path words the error
            while True:  # one event / item
                if count >= max_items or p >= n or b[_u(p)] != _LBRACE:
                    return fail
                starts[count] = p
                p = _ws(b, p + 1)
                got_label = False
                got_vec = False
                got_id = False
                id_spans[count, 0] = -1  # no id (yet)
                id_spans[count, 1] = -1
                while True:
                    fs, fe, p = _string(b, p)
                    if fs < 0:
                        return fail
                    p = _ws(b, p)
                    if p >= n or b[_u(p)] != _COLON:
                        return fail
                    p = _ws(b, p + 1)
                    if learn and _is(b, fs, fe, _LABEL):
                        if got_label:
                            return fail
                        got_label = True
                        if _true(b, p):
                            labels[count] = 1
                            p += 4
                        elif _false(b, p):
                            labels[count] = -1
                            p += 5
                        else:
                            v, _, p, ok = _number(b, p)
                            if not ok or not (v == 1.0 or v == 0.0 or v == -1.0):
                                return fail
                            labels[count] = 1 if v == 1.0 else -1
                    elif _is(b, fs, fe, _ID):
                        if got_id:
                            return fail
                        got_id = True
                        if _null(b, p):
                            p += 4
                        else:
                            s0, s1, p = _string(b, p)
                            if s0 < 0 or s1 == s0 or s1 - s0 > 256:
                                return fail
                            for j in range(s0, s1):
                                if b[_u(j)] >= 128:
                                    return fail  # non-ASCII: lengths are in characters
                            id_spans[count, 0] = s0
                            id_spans[count, 1] = s1
                    elif hashed and _is(b, fs, fe, _FEATURES):
                        if got_vec:
                            return fail
                        got_vec = True
                        p, nf = _features(b, p, mask, idx, vals, nf, keys_top, keys_ns)
                        if p < 0:
                            return fail
                    elif not hashed and _is(b, fs, fe, _X):
                        if got_vec or p >= n or b[_u(p)] != _LBRACK:
                            return fail
                        got_vec = True
                        p = _ws(b, p + 1)
                        k = 0
                        while True:
                            v, _, p, ok = _number(b, p)
                            if not ok or k >= dim:
                                return fail
                            X[count, k] = v
                            k += 1
                            p = _ws(b, p)
                            if p < n and b[_u(p)] == _COMMA:
                                p = _ws(b, p + 1)
                                continue
                            if p < n and b[_u(p)] == _RBRACK:
                                p += 1
                                break
                            return fail
                        if k != dim:
                            return fail
                    else:
                        return fail
                    p = _ws(b, p)
                    if p < n and b[_u(p)] == _COMMA:
                        p = _ws(b, p + 1)
                        continue
                    if p < n and b[_u(p)] == _RBRACE:
                        p += 1
                        break
                    return fail
                if learn and not got_label:
                    return fail
                has_vec[count] = got_vec
                if not got_vec:
                    # a label by id needs its id (else the regular path words the 422)
                    if not (learn and by_id and id_spans[count, 0] >= 0):
                        return fail
                    if not hashed:
                        X[count, :] = 0.0  # a row the caller drops; never left unset
                count += 1
                indptr[count] = nf
                p = _ws(b, p)
                if p < n and b[_u(p)] == _COMMA:
                    p = _ws(b, p + 1)
                    continue
                if p < n and b[_u(p)] == _RBRACK:
                    p += 1
                    break
                return fail
        else:
            return fail
        p = _ws(b, p)
        if p < n and b[_u(p)] == _COMMA:
            p = _ws(b, p + 1)
            continue
        if p < n and b[_u(p)] == _RBRACE:
            p = _ws(b, p + 1)
            break
        return fail
    if p != n or ms < 0 or not seen_list:
        return fail
    return (True, count, ms, me, top_k)


@njit(cache=True, nogil=True, _nrt=False)
def _skip(b, p):
    """The position after the JSON value at p (strings may hold escapes), or -1."""
    n = b.shape[0]
    depth = 0
    while p < n:
        c = b[_u(p)]
        if c == _QUOTE:
            p += 1
            while p < n and b[_u(p)] != _QUOTE:
                p += 2 if b[_u(p)] == _BSLASH else 1
            p += 1
        elif c == _LBRACE or c == _LBRACK:
            depth += 1
            p += 1
        elif c == _RBRACE or c == _RBRACK:
            depth -= 1
            p += 1
        elif depth == 0 and (c == _COMMA or c == _SP or c == _LF or c == _CR or c == _TAB):
            return p
        else:
            p += 1
        if depth == 0 and (c == _QUOTE or c == _RBRACE or c == _RBRACK):
            return p
        if depth < 0:
            return -1
    return p if depth == 0 else -1


@njit(cache=True, nogil=True, _nrt=False)
def _find_model(b):
    """The span of the top-level "model" string (usually the first key), or (-1, -1)."""
    n = b.shape[0]
    p = _ws(b, 0)
    if p >= n or b[_u(p)] != _LBRACE:
        return -1, -1
    p = _ws(b, p + 1)
    while p < n:
        ks, ke, p = _string(b, p)
        if ks < 0:
            return -1, -1
        p = _ws(b, p)
        if p >= n or b[_u(p)] != _COLON:
            return -1, -1
        p = _ws(b, p + 1)
        if _is(b, ks, ke, _MODEL):
            s, e, _ = _string(b, p)
            return s, e
        p = _skip(b, p)
        if p < 0:
            return -1, -1
        p = _ws(b, p)
        if p >= n or b[_u(p)] != _COMMA:
            return -1, -1
        p = _ws(b, p + 1)
    return -1, -1


def model_name(body: bytes) -> str | None:
    """The request's model name if it can be read without escapes, else None."""
    s, e = _find_model(np.frombuffer(body, np.uint8))
    if s < 0:
        return None
    try:
        return body[s:e].decode()
    except UnicodeDecodeError:
        return None


@njit(cache=True, nogil=True)
def _join_ids(b, spans):
    """The ids' bytes, each followed by a NUL (which a parsed id cannot contain)."""
    total = 0
    for i in range(spans.shape[0]):
        if spans[i, 0] >= 0:
            total += spans[i, 1] - spans[i, 0] + 1
    out = np.empty(total, np.uint8)
    k = 0
    for i in range(spans.shape[0]):
        if spans[i, 0] >= 0:
            for j in range(spans[i, 0], spans[i, 1]):
                out[k] = b[_u(j)]
                k += 1
            out[k] = 0
            k += 1
    return out


def _ids(buf: np.ndarray, spans: np.ndarray) -> list[str | None]:
    """Event ids (ASCII, checked by the scan) from their spans; None where absent.

    One decode and split for all of them: a slice-and-decode per id cost ~0.15 ms of
    GIL time per 500 events.
    """
    have = spans[:, 0] >= 0
    if not have.any():
        return [None] * spans.shape[0]
    ids: list[str | None] = _join_ids(buf, spans).tobytes().decode("ascii").split("\0")
    ids.pop()  # after the last NUL
    if have.all():
        return ids
    it = iter(ids)
    return [next(it) if h else None for h in have.tolist()]


def _run(body: bytes, learn: bool, spec: dict, max_items: int,
         max_value: float, by_id: bool = False) -> FastRequest | None:
    if spec.get("interactions"):  # crossed features: the regular path makes them
        return None
    # Strings are hashed as raw bytes: invalid UTF-8 must not get that far (the regular
    # path refuses it). An ASCII body, the usual one, needs no decoding to know.
    if not body.isascii():
        try:
            body.decode()
        except UnicodeDecodeError:
            return None
    buf = np.frombuffer(body, np.uint8)
    hashed = spec["kind"] == "hashed"
    dim = 0 if hashed else int(spec["dim"])
    # Buffers are sized by the items the body can hold (an item takes at least
    # `{"x":[` + two bytes per value, or `{"features":{}}`), not by the configured limit.
    max_items = min(max_items, len(body) // (15 if hashed else 2 * dim + 6) + 1)
    mask = (1 << int(spec["bits"])) - 1 if hashed else 0
    ok, n, ms, me, top_k, labels, id_spans, indptr, idx, vals, X, starts, has_vec = _parse(
        buf, learn, hashed, dim, mask, max_items, by_id)
    if not ok:
        return None
    try:
        model = body[ms:me].decode()
    except UnicodeDecodeError:
        return None
    ids = _ids(buf, id_spans[:n])
    # A value out of bounds: the regular path names it in its 422.
    if hashed:
        nf = int(indptr[n])
        if nf and max_value < math.inf and np.abs(vals[:nf]).max() > max_value:
            return None
        batch = EncodedBatch(n=n, indptr=indptr[: n + 1].copy(), indices=idx[:nf].copy(),
                             values=vals[:nf].copy())
    else:
        if n and max_value < math.inf and np.abs(X[:n]).max() > max_value:
            return None
        batch = EncodedBatch(n=n, X=X[:n].copy())
    by_ids = np.flatnonzero(~has_vec[:n]) if learn and by_id else None
    return FastRequest(model=model, batch=batch, labels=labels[:n].copy() if learn else None,
                       ids=ids, top_k=None if top_k < 0 else top_k,
                       starts=starts[:n].copy() if learn else None,
                       label_only=by_ids.tolist() if by_ids is not None and by_ids.size else [])


def parse_learn(body: bytes, spec: dict, max_items: int, max_value: float = math.inf,
                by_id: bool = False) -> FastRequest | None:
    """The encoded /learn body, or None when the regular path must decide (anything
    unusual, invalid, or with a feature value beyond ±``max_value``). With ``by_id`` (the
    model keeps impressions), events may be labels by id ``{"id", "label"}``: their
    indices are in ``label_only``, and their rows in the batch are empty."""
    return _run(body, True, spec, max_items, max_value, by_id)


def parse_score(body: bytes, spec: dict, max_items: int,
                max_value: float = math.inf) -> FastRequest | None:
    """The encoded /score body, or None when the regular path must decide."""
    return _run(body, False, spec, max_items, max_value)
