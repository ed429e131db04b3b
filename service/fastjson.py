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
from dataclasses import dataclass

import numpy as np
from numba import njit

from .encoding import EncodedBatch
from .hashing import _murmur, _murmur_inline

__all__ = ["FastRequest", "model_name", "parse_learn", "parse_score"]

_SP, _TAB, _LF, _CR = 32, 9, 10, 13
_QUOTE, _BSLASH, _COLON, _COMMA = 34, 92, 58, 44
_LBRACE, _RBRACE, _LBRACK, _RBRACK = 123, 125, 91, 93
_MINUS, _PLUS, _DOT, _ZERO, _NINE = 45, 43, 46, 48, 57

# Indexing with an unsigned integer spares numba the negative-index wrap-around test on
# every byte read (positions here are never negative): scanning ran ~1.6x faster.
_u = np.uint64
# The helpers below that allocate nothing compile with ``_nrt=False``: with numba's
# reference counting, every call of a non-inlined helper counted its array arguments up
# and down with atomic operations, a third of a whole scan (perf).

_TWO53 = 9007199254740992
_POW10 = np.array([10.0**k for k in range(23)])


@dataclass(frozen=True)
class FastRequest:
    """A parsed and encoded /learn or /score body."""

    model: str
    batch: EncodedBatch
    labels: np.ndarray | None  # int8 ±1 per event (learn only)
    ids: list[str | None]  # one per event or item
    top_k: int | None


# ----------------------------------------------------------------------------- scanning
@njit(cache=True, nogil=True, inline="always")
def _ws(b, p):
    n = b.shape[0]
    while p < n and (b[_u(p)] == _SP or b[_u(p)] == _LF or b[_u(p)] == _CR or b[_u(p)] == _TAB):
        p += 1
    return p


@njit(cache=True, nogil=True, _nrt=False)
def _string(b, p):
    """A string without escapes at b[p] == '"': (start, end, next) or (-1, -1, -1)."""
    n = b.shape[0]
    if p >= n or b[_u(p)] != _QUOTE:
        return -1, -1, -1
    p += 1
    s = p
    while p < n:
        c = b[_u(p)]
        if c == _QUOTE:
            return s, p, p + 1
        if c == _BSLASH or c < 32:
            return -1, -1, -1
        p += 1
    return -1, -1, -1


@njit(cache=True, nogil=True, _nrt=False)
def _number(b, p, pow10):
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
        value = float(mant) * pow10[exp10]
        if is_int and value > _TWO53:
            return 0.0, False, p, False
    elif -22 <= exp10 < 0:
        value = float(mant) / pow10[-exp10]
    else:
        return 0.0, False, p, False
    return (-value if neg else value), is_int, p, True


@njit(cache=True, nogil=True, inline="always")
def _is(b, s, e, word):
    """b[s:e] equals the ASCII word (given as a uint8 array)."""
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


@njit(cache=True, nogil=True, inline="always")
def _literal(b, p, word):
    n = b.shape[0]
    if p + word.shape[0] > n:
        return False
    for k in range(word.shape[0]):
        if b[_u(p + k)] != word[_u(k)]:
            return False
    return True


@njit(cache=True, nogil=True, _nrt=False)
def _hash_pair(b, ns, ne, vs, ve, seed, scratch):
    """MurmurHash3 of the bytes name + '=' + value without building a string."""
    k = 0
    for j in range(ns, ne):
        scratch[_u(k)] = b[_u(j)]
        k += 1
    scratch[_u(k)] = 61  # '='
    k += 1
    for j in range(vs, ve):
        scratch[_u(k)] = b[_u(j)]
        k += 1
    return _murmur_inline(scratch, 0, k, seed)


@njit(cache=True, nogil=True, _nrt=False)
def _key(b, p):
    """A key without escapes at b[p] == '"': (start, end, next, hash) or (-1, -1, -1, 0).

    The hash (FNV-1a, computed while scanning) only finds duplicate keys; feature
    indices use MurmurHash3.
    """
    n = b.shape[0]
    if p >= n or b[_u(p)] != _QUOTE:
        return -1, -1, -1, 0
    p += 1
    s = p
    h = 2166136261
    while p < n:
        c = b[_u(p)]
        if c == _QUOTE:
            return s, p, p + 1, h
        if c == _BSLASH or c < 32:
            return -1, -1, -1, 0
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
        p += 1
    return -1, -1, -1, 0


@njit(cache=True, nogil=True, _nrt=False)
def _first_time(table, stamp, b, s, e, h):
    """Record the key b[s:e] (hash h) in the object stamped ``stamp`` (its position in
    the body); False if that object already has it.

    ``table`` is an open-addressing hash table, a row (stamp, start, end, hash) per slot.
    A slot holding another object's stamp counts as free, so the table is never cleared;
    at most half of it is ever in use by one object, so a probe always ends.
    """
    mask = table.shape[0] - 1
    slot = h & mask
    while table[slot, 0] == stamp:
        if table[slot, 3] == h and _same(b, table[slot, 1], table[slot, 2], s, e):
            return False
        slot = (slot + 1) & mask
    table[slot, 0] = stamp
    table[slot, 1] = s
    table[slot, 2] = e
    table[slot, 3] = h
    return True


# ----------------------------------------------------------------------------- features
@njit(cache=True, nogil=True, _nrt=False)
def _features(b, p, mask, pow10, words, out_idx, out_val, nf, scratch, keys_top, keys_ns):
    """Parse a features object at p into (index, value) pairs from nf on.

    Returns (next position, new nf) or (-1, nf) to give up. Duplicate names within an
    object give up too: the regular path keeps only the last one. ``keys_top`` and
    ``keys_ns`` are the duplicate-key tables of the object and of its namespaces.
    """
    W_TRUE, W_FALSE, W_NULL = words[0], words[1], words[2]
    max_keys = keys_top.shape[0] // 2
    p = _ws(b, p)
    if p >= b.shape[0] or b[_u(p)] != _LBRACE:
        return -1, nf
    obj = p
    p = _ws(b, p + 1)
    if p < b.shape[0] and b[_u(p)] == _RBRACE:
        return p + 1, nf
    nkeys = 0
    while True:
        ks, ke, p, h = _key(b, p)
        if ks < 0:
            return -1, nf
        nkeys += 1
        if nkeys > max_keys or not _first_time(keys_top, obj, b, ks, ke, h):
            return -1, nf
        p = _ws(b, p)
        if p >= b.shape[0] or b[_u(p)] != _COLON:
            return -1, nf
        p = _ws(b, p + 1)
        if p >= b.shape[0]:
            return -1, nf
        c = b[_u(p)]
        if c == _LBRACE:  # a namespace: one level of scalars
            seed = _murmur(b, ks, ke - ks, 0)
            ns = p
            p = _ws(b, p + 1)
            if p < b.shape[0] and b[_u(p)] == _RBRACE:
                p += 1
            else:
                nsub = 0
                while True:
                    ss, se, p, sh = _key(b, p)
                    if ss < 0:
                        return -1, nf
                    nsub += 1  # names inside a namespace only clash among themselves
                    if nsub > max_keys or not _first_time(keys_ns, ns, b, ss, se, sh):
                        return -1, nf
                    p = _ws(b, p)
                    if p >= b.shape[0] or b[_u(p)] != _COLON:
                        return -1, nf
                    p = _ws(b, p + 1)
                    p, nf = _scalar(b, p, ss, se, seed, mask, pow10, W_TRUE, W_FALSE,
                                    W_NULL, out_idx, out_val, nf, scratch)
                    if p < 0:
                        return -1, nf
                    p = _ws(b, p)
                    if p < b.shape[0] and b[_u(p)] == _COMMA:
                        p = _ws(b, p + 1)
                        continue
                    if p < b.shape[0] and b[_u(p)] == _RBRACE:
                        p += 1
                        break
                    return -1, nf
        else:
            p, nf = _scalar(b, p, ks, ke, 0, mask, pow10, W_TRUE, W_FALSE, W_NULL, out_idx,
                            out_val, nf, scratch)
            if p < 0:
                return -1, nf
        p = _ws(b, p)
        if p < b.shape[0] and b[_u(p)] == _COMMA:
            p = _ws(b, p + 1)
            continue
        if p < b.shape[0] and b[_u(p)] == _RBRACE:
            return p + 1, nf
        return -1, nf


@njit(cache=True, nogil=True, inline="always")
def _scalar(b, p, ks, ke, seed, mask, pow10, w_true, w_false, w_null, out_idx, out_val, nf,
            scratch):
    """One named value: a string (name=value, 1.0), a number (name, value), true (name,
    1.0), false/null (absent). Returns (next, nf) or (-1, nf)."""
    if p >= b.shape[0] or nf >= out_idx.shape[0]:
        return -1, nf
    c = b[_u(p)]
    if c == _QUOTE:
        vs, ve, p = _string(b, p)
        if vs < 0 or (ke - ks) + 1 + (ve - vs) > scratch.shape[0]:
            return -1, nf
        out_idx[nf] = _hash_pair(b, ks, ke, vs, ve, seed, scratch) & mask
        out_val[nf] = 1.0
        return p, nf + 1
    if c == _MINUS or (_ZERO <= c <= _NINE):
        value, _, p, ok = _number(b, p, pow10)
        if not ok:
            return -1, nf
        out_idx[nf] = _murmur(b, ks, ke - ks, seed) & mask
        out_val[nf] = value
        return p, nf + 1
    if _literal(b, p, w_true):
        out_idx[nf] = _murmur(b, ks, ke - ks, seed) & mask
        out_val[nf] = 1.0
        return p + 4, nf + 1
    if _literal(b, p, w_false):
        return p + 5, nf
    if _literal(b, p, w_null):
        return p + 4, nf
    return -1, nf


# ----------------------------------------------------------------------------- requests
@njit(cache=True, nogil=True)
def _parse(b, learn, hashed, dim, mask, pow10, words, max_items):
    """Scan a whole /learn (``learn``) or /score body.

    Returns (ok, n, model_start, model_end, top_k, labels, id_spans, indptr, idx, vals, X).
    """
    n = b.shape[0]
    cap_items = max_items + 1
    labels = np.zeros(cap_items, np.int8)
    id_spans = np.full((cap_items, 2), -1, np.int64)
    indptr = np.zeros(cap_items + 1, np.int64)
    cap_f = n // 4 + 1 if hashed else 1
    idx = np.empty(cap_f, np.int64)
    vals = np.empty(cap_f)
    X = np.empty((cap_items if not hashed else 0, dim))
    scratch = np.empty(4096, np.uint8)
    keys_top = np.full((1024, 4), -1, np.int64)  # at most 512 keys per object
    keys_ns = np.full((1024, 4), -1, np.int64)
    fail = (False, 0, -1, -1, -1, labels, id_spans, indptr, idx, vals, X)
    w_model, w_events, w_items, w_topk = words[3], words[4], words[5], words[6]
    w_x, w_features, w_label, w_id = words[7], words[8], words[9], words[10]
    w_true, w_false, w_null = words[0], words[1], words[2]
    ms = -1
    me = -1
    top_k = -1
    seen_list = False
    seen_topk = False
    count = 0
    nf = 0
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
        if _is(b, ks, ke, w_model):
            if ms >= 0:
                return fail
            ms, me, p = _string(b, p)
            if ms < 0:
                return fail
        elif not learn and _is(b, ks, ke, w_topk):
            if seen_topk:
                return fail
            seen_topk = True
            if _literal(b, p, w_null):
                p += 4
            else:
                v, is_int, p, ok = _number(b, p, pow10)
                if not ok or not is_int or v < 1:
                    return fail
                top_k = int(v)
        elif (learn and _is(b, ks, ke, w_events)) or (not learn and _is(b, ks, ke, w_items)):
            if seen_list or p >= n or b[_u(p)] != _LBRACK:
                return fail
            seen_list = True
            p = _ws(b, p + 1)
            if p < n and b[_u(p)] == _RBRACK:
                return fail  # an empty list: the regular path words the error
            while True:  # one event / item
                if count >= max_items or p >= n or b[_u(p)] != _LBRACE:
                    return fail
                p = _ws(b, p + 1)
                got_label = False
                got_vec = False
                got_id = False
                while True:
                    fs, fe, p = _string(b, p)
                    if fs < 0:
                        return fail
                    p = _ws(b, p)
                    if p >= n or b[_u(p)] != _COLON:
                        return fail
                    p = _ws(b, p + 1)
                    if learn and _is(b, fs, fe, w_label):
                        if got_label:
                            return fail
                        got_label = True
                        if _literal(b, p, w_true):
                            labels[count] = 1
                            p += 4
                        elif _literal(b, p, w_false):
                            labels[count] = -1
                            p += 5
                        else:
                            v, _, p, ok = _number(b, p, pow10)
                            if not ok or not (v == 1.0 or v == 0.0 or v == -1.0):
                                return fail
                            labels[count] = 1 if v == 1.0 else -1
                    elif _is(b, fs, fe, w_id):
                        if got_id:
                            return fail
                        got_id = True
                        if _literal(b, p, w_null):
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
                    elif hashed and _is(b, fs, fe, w_features):
                        if got_vec:
                            return fail
                        got_vec = True
                        p, nf = _features(b, p, mask, pow10, words, idx, vals, nf, scratch,
                                          keys_top, keys_ns)
                        if p < 0:
                            return fail
                    elif not hashed and _is(b, fs, fe, w_x):
                        if got_vec or p >= n or b[_u(p)] != _LBRACK:
                            return fail
                        got_vec = True
                        p = _ws(b, p + 1)
                        k = 0
                        while True:
                            v, _, p, ok = _number(b, p, pow10)
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
                if not got_vec or (learn and not got_label):
                    return fail
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
    return (True, count, ms, me, top_k, labels, id_spans, indptr, idx, vals, X)


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
def _find_model(b, w_model):
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
        if _is(b, ks, ke, w_model):
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
    s, e = _find_model(np.frombuffer(body, np.uint8), _WORDS[3])
    if s < 0:
        return None
    try:
        return body[s:e].decode()
    except UnicodeDecodeError:
        return None


_WORDS = tuple(np.frombuffer(w.encode(), np.uint8).copy() for w in (
    "true", "false", "null", "model", "events", "items", "top_k", "x", "features", "label",
    "id"))


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
         max_value: float) -> FastRequest | None:
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
    ok, n, ms, me, top_k, labels, id_spans, indptr, idx, vals, X = _parse(
        buf, learn, hashed, dim, mask, _POW10, _WORDS, max_items)
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
    return FastRequest(model=model, batch=batch, labels=labels[:n].copy() if learn else None,
                       ids=ids, top_k=None if top_k < 0 else top_k)


def parse_learn(body: bytes, spec: dict, max_items: int,
                max_value: float = math.inf) -> FastRequest | None:
    """The encoded /learn body, or None when the regular path must decide (anything
    unusual, invalid, or with a feature value beyond ±``max_value``)."""
    return _run(body, True, spec, max_items, max_value)


def parse_score(body: bytes, spec: dict, max_items: int,
                max_value: float = math.inf) -> FastRequest | None:
    """The encoded /score body, or None when the regular path must decide."""
    return _run(body, False, spec, max_items, max_value)
