"""The Redis store: per model a Stream as the event log, hashes beside it.

Key layout (``P`` = prefix, ``N`` = model name; ``{N}`` is a hash tag, so a Redis Cluster
keeps all of a model's keys in one slot and every script below touches one slot only)::

    P:{N}:config   hash    json (the config), created_at
    P:{N}:meta     hash    end (the log end = number of learned events); the dedup
                           window's floor, rel (released ranges "s:e,..."), and in the log
                           layout dgen (generation), dver (version), in the fields layout
                           nb (field count), sweep (the next field a trim cleans)
    P:{N}:log      stream  entry id "<end>-0"; fields p (payload), s (start), k (skip: "3,7")
    P:{N}:dlog     stream  the dedup window, log layout: per append that took ids, entry id
                           "<end>-0"; fields s (start), d (the ids' 8-byte digests, in
                           order), m (mask: "" if every learned event has an id, else a
                           byte per learned event, "1" for those that have one)
    P:{N}:dedup    hash    the dedup window, fields layout: field f (decimal) -> the
                           records of the ids whose digest mod nb is f, 14 bytes each,
                           in position order: the 8-byte digest, the position (6 bytes,
                           big-endian)
    P:{N}:ids      zset    event id -> position: the previous version's dedup window, read
                           until trims have emptied it (Redis then drops the key)
    P:{N}:ckpt     hash    version, blob, created_at
    P:{N}:tok:<t>  string  what the append with token t did ("written:start:end:skip"),
                           or "fenced"; expires (see below)
    P:{N}:imp      hash    item id -> impression: msgpack [payload, shown_at, expires_at,
                           status]
    P:{N}:imp:shown:<s>  zset  item id -> shown_at, of the impressions with status s (one
                           key per status of IMPRESSION_STATUSES: due scans, oldest first)
    P:{N}:imp:exp:<s>    zset  item id -> expires_at, of the same impressions (expiry, and
                           counts of unexpired impressions by status)
    P:{N}:lease    string  "<token>:<replica>": the ownership lease; expires (PX) with it
    P:{N}:lease:last  string  the last fencing token granted (INCR); outlives the model's
                           deletion, so that a re-created model's tokens go on growing
    P:models       set     model names (an index; a model exists iff its config exists)
    P:replicas     zset    replica id -> expiry (ms of the server's clock): the registry
    P:wake:<R>     set     names of models whose log another replica appended to, for
                           their owner R (``wake``/``woken``); expires a minute after the
                           last wake-up, so a replica that is gone leaves nothing behind

The dedup window remembers an event id by its digest, BLAKE2b-64 of its UTF-8 (computed by
the client; the script never sees the id). Forgetting is a number: ``trim`` raises
``floor`` (ids at positions <= floor are forgotten) and ``release_ids`` adds a released
range. Models have one of two layouts, chosen when they are made (``dedup_layout``):

*The log layout* (the default). Each appender keeps a copy of the window
(:class:`~service.store.id_window.IdWindow`), decides which events are duplicates, and
sends the version ``dver`` of the window its decision was made on; the append script
writes the log entry and the window entry only if ``dver`` is still the model's, and
then moves it on. Trims (which also drop the window entries whose ids are all forgotten)
and releases move it on too. Versions are unique strings (the append's token, a fresh
one per trim or release), never counters, so a store that lost history and moved on
cannot match a copy by chance. An appender whose copy is behind is told so, reads the
window entries after the last it has seen, if that entry is still there as it read it
(else the whole window), with floor and rel, and decides again. So the
redis-server does no work per id (an append script of 500 events went from ~1.6 ms to
~0.3 ms of its CPU, bench/dedup_memory.py), and an id costs its 8-byte digest (~9 B per
remembered id). ``dgen``, drawn when the model is made, tells a copy that the model was
deleted and made again under its name. Several appenders of one model take turns: each
append that records ids sends the others' next append through one more read. A service
of an earlier version knows nothing of this layout: it must not share a store with this
one (its append script would write a fields-layout window beside the log one).

*The fields layout* (models made before the log layout). Lookups are one HMGET of the
batch's fields and a search of each record list; an append rewrites each field it adds
to (one HSET), first dropping its forgotten records. Lookups skip the floor and the
released ranges, so forgetting scans nothing; the records below the floor go when an
append next rewrites their field, or when a trim's sweep (``_SWEEP_FIELDS`` fields per call, round
robin) reaches it. Memory: ~24 bytes per remembered id at the window with the default
``_IDS_PER_FIELD`` (bench/dedup_memory.py; the previous sorted set took ~104). The field
count ``nb`` is fixed when the model is created (from the store's ``dedup_window``) and
kept in meta; a store that assumed another count is told so by the append script and
resends.

In either layout an event is wrongly taken for a duplicate only when its digest equals
that of an id in the window: with W ids remembered, probability ~W / 2**64 per event (5.4e-15 at W =
100,000: one such event in ~58 years at 10^5 events/s). The fields layout's records are
matched at multiples of 14 bytes only, never across two records.

Why one hash of packed records, not a small listpack-encoded key per bucket (which Redis
also keeps compact): a call from a script costs a microsecond or more, so one call per id
to ~2,000 bucket keys made an append of 500 ids 2-3x slower; here a batch is one HMGET and
one HSET of ~500 values of ~120 bytes (the hash itself is hashtable-encoded: the saving is
the packing). The price: the redis-server spends ~1.5x the sorted set's ZMSCORE + ZADD per
append, trims included (which no longer scan); see bench/dedup_memory.py.

Models written by the previous version keep their ``ids`` sorted set: while it exists the
append script also looks the batch's ids up in it (the client then sends the ids too,
after one refused attempt), ``release_ids`` removes its ids of the range, and trims empty
it in slices; new ids go to the dedup hash only. So existing data keeps deduplicating and
the old key ages out with the window.

An impression is in ``imp`` and in the two sorted sets of its status, nowhere else. It is
expired at ``now`` when ``expires_at <= now``: reads leave it out, and the writing scripts
(keep, claim) drop at most ``_EXPIRE_SLICE`` expired impressions per call, oldest expiry
first, so that no call blocks the server for long.

Every write of a model is one Lua script: atomic, and durable on return when the server
runs with ``appendonly yes`` and ``appendfsync always`` (Redis replies only after the
fsync; deployments must set both). The scripts need Redis >= 7.0: their ``#!lua``
shebang makes the server refuse a writing script up front when it is out of memory or a
read-only replica, so a script never stops half-way through its writes.

Errors of redis-py (connection refused or reset, timeouts, loading, READONLY, OOM, ...)
become :class:`StoreUnavailable`. The client does not retry by itself (a retried append
without ids could be learned twice); the pool reconnects on the next call once the
server is back.

An append cut off after it was sent may still run: a stalled server executes the queued
script when it resumes. So appends wait for their reply ``resolve_timeout`` seconds
longer than other calls (on a client of their own), which rides out short stalls, and
every append carries a random token under which the script records what it did. If the
reply still does not come (or the connection breaks), the store *fences* the token: one
script that returns the record if the append ran, or else writes "fenced", which makes
the append a no-op should it still arrive. Scripts run one at a time, so either answer
is final: written (the append's result), or certainly not written (StoreUnavailable). A
server out of reach until the append's time is up leaves the outcome unknown
(AppendOutcomeUnknown). Records expire after ``_TOKEN_TTL_MIN`` or more (long enough for
the fence that follows a cut-off append), fences after a day.

Leases (see :mod:`~service.store.base`) live on the server's clock: a lease is a key with a
PX expiry, checked by the acquiring and the fenced scripts in the same atomic step as their
writes; the registry's expiries are the server's ``TIME`` read inside its script (allowed
since scripts replicate their effects, the only mode of Redis >= 7.0). The registry is one
key, so in a cluster it lives in one slot; every other script touches one model's slot.
"""

from __future__ import annotations

import json
import struct
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn, cast

import msgpack
import numpy as np
import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from aucstream.service.store.base import (
    IMPRESSION_STATUSES,
    AppendOutcomeUnknown,
    AppendResult,
    Checkpoint,
    Delta,
    Impression,
    Lease,
    LeaseLost,
    LogEntry,
    ModelExists,
    ModelNotFound,
    PackedItems,
    StoreUnavailable,
    check_delta_versions,
    check_event_ids,
    check_keep_group,
    check_name,
    check_position,
    check_replica,
    check_time,
    check_token,
    check_ttl,
)
from aucstream.service.store.id_digests import digest_args, id_digests
from aucstream.service.store.id_window import IdWindow

__all__ = ["RedisStore"]

# The model keys a create clears and a delete removes (all but the lease counter).
_MODEL_KEYS = ("config", "meta", "log", "ids", "ckpt", "pins", "lease", "dedup", "dlog",
               "pub")

# The fence of the fenced writes: whether a write with fencing token `token` (a decimal
# string, "" = not fenced) must be refused because the lease at key `lease` is not held
# with that token (expired keys read as missing).
_FENCE_LIB = """
local function lease_lost(lease, token)
  if token == '' then return false end
  local cur = redis.call('GET', lease)
  if not cur then return true end
  return string.sub(cur, 1, string.find(cur, ':', 1, true) - 1) ~= token
end
"""

# KEYS: _MODEL_KEYS, then the impression keys (_IMP_KEYS). ARGV: config json, created_at,
# log start (0, or the version of an imported checkpoint), that checkpoint's blob ("" for
# none), the dedup window's field count ("" for the log layout), the log layout's
# generation ("" for the fields layout).
_CREATE = """#!lua
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('UNLINK', unpack(KEYS, 2))
redis.call('HSET', KEYS[1], 'json', ARGV[1], 'created_at', ARGV[2])
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[2], 'end', ARGV[3], 'dgen', ARGV[6], 'dver', ARGV[6])
else
  redis.call('HSET', KEYS[2], 'end', ARGV[3], 'nb', ARGV[5])
end
if ARGV[3] ~= '0' or ARGV[4] ~= '' then
  redis.call('HSET', KEYS[5], 'version', ARGV[3], 'blob', ARGV[4], 'created_at', ARGV[2])
end
return 1
"""

# KEYS: _MODEL_KEYS, then the impression keys (_IMP_KEYS).
_DELETE = """#!lua
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('UNLINK', unpack(KEYS))
return 1
"""

# KEYS: config, meta, pins, lease. ARGV: candidate (-1: none), fencing token. The pin takes
# effect at the log's end: atomic with appends, so every entry after it was appended after
# the pin. Returns -1 (no model), -3 (lease lost), else the position.
_SET_PIN = "#!lua" + _FENCE_LIB + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if lease_lost(KEYS[4], ARGV[2]) then return -3 end
local e = redis.call('HGET', KEYS[2], 'end') or '0'
redis.call('RPUSH', KEYS[3], e .. ':' .. ARGV[1])
return tonumber(e)
"""

# KEYS: config, pins. Returns nil if no model, else the "at:candidate" strings.
_READ_PINS = """#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('LRANGE', KEYS[2], 0, -1)
"""

# The dedup window's lookups (a Lua library shared by the append and the trim scripts).
# `m` is the HMGET of meta's 'floor' and 'rel': ids at positions <= floor are forgotten,
# and so are those in the released ranges ("s:e,s:e", positions s+1..e).
_DEDUP_LIB = """
local REC = 14
local floor = 0
local rel_text = false
local rel = nil
local function released(p)
  if rel == nil then
    rel = {}
    if rel_text then
      for a, b in string.gmatch(rel_text, '(%d+):(%d+)') do
        rel[#rel + 1] = {tonumber(a), tonumber(b)}
      end
    end
  end
  for t = 1, #rel do
    if p > rel[t][1] and p <= rel[t][2] then return true end
  end
  return false
end
-- whether the record list `v` holds digest `d` at a remembered position
local function live(v, d)
  if not v then return false end
  local at = 1
  while true do
    local x = string.find(v, d, at, true)
    if not x then return false end
    if x % REC == 1 then
      local p = struct.unpack('>I6', v, x + 8)
      if p > floor and not released(p) then return true end
      at = x + REC
    else
      at = x + 1  -- the bytes matched across two records
    end
  end
end
-- `v` without its forgotten prefix (records are in position order)
local function fresh(v)
  if not v then return '' end
  local cut = 0
  local len = #v
  while cut < len and struct.unpack('>I6', v, cut + 9) <= floor do cut = cut + REC end
  if cut == 0 then return v end
  return string.sub(v, cut + 1)
end
"""

# KEYS: config, meta, log, ids (the previous layout's zset), dedup, token. ARGV: payload,
# msgpack [8-byte digest of each event that has an id, in event order] ("" if none), token
# ttl (ms), mask ("" if every event has an id, else one byte per event: "1" has an id, "0"
# not), the client's field count, msgpack [field of each digest, a decimal string],
# msgpack [id of each digest] ("" unless the client knows the zset exists), "1" if the
# digests are distinct (else "0"). Returns {-1} (no model), {-2,
# record} (the token was fenced, or this append ran before: a client-side resend), {-4}
# (the zset exists: resend with the ids), {-5, field count} (the model has another field
# count: resend with its fields), {-8} (the model has the log layout), else {written 0/1,
# start, end, skip "i,j", zset 0/1}.
_APPEND = "#!lua" + _DEDUP_LIB + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local record = redis.call('GET', KEYS[6])
if record then return {-2, record} end
local m = redis.call('HMGET', KEYS[2], 'end', 'nb', 'floor', 'rel', 'dgen')
if m[5] then return {-8} end
if not m[2] then
  redis.call('HSET', KEYS[2], 'nb', ARGV[5])
elseif m[2] ~= ARGV[5] then
  return {-5, tonumber(m[2])}
end
local legacy = redis.call('EXISTS', KEYS[4]) == 1
if legacy and ARGV[7] == '' then return {-4} end
floor = tonumber(m[3] or '0')
rel_text = m[4]
local digs = {}
local fields = {}
local vals = {}
local old = {}
if ARGV[2] ~= '' then
  digs = cmsgpack.unpack(ARGV[2])
  fields = cmsgpack.unpack(ARGV[6])
end
local k = #digs
local mask = ARGV[4]
local n = k
if mask ~= '' then n = #mask end
for j = 1, k, 1000 do
  local hi = math.min(j + 999, k)
  local got = redis.call('HMGET', KEYS[5], unpack(fields, j, hi))
  for t = 1, hi - j + 1 do vals[j + t - 1] = got[t] end
end
if legacy and k > 0 then
  local raw = cmsgpack.unpack(ARGV[7])
  for j = 1, k, 1000 do
    local hi = math.min(j + 999, k)
    local scores = redis.call('ZMSCORE', KEYS[4], unpack(raw, j, hi))
    for t = 1, hi - j + 1 do
      local p = scores[t] and tonumber(scores[t])
      if p and p > floor and not released(p) then old[j + t - 1] = true end
    end
  end
end
local start = tonumber(m[1] or '0')
-- the 6-byte positions start + 1 .. start + n, one string
local P = {}
for i = 1, n do P[i] = start + i end
local packed = {}
for i = 1, n, 1000 do
  local hi = math.min(i + 999, n)
  packed[#packed + 1] = struct.pack('>' .. string.rep('I6', hi - i + 1), unpack(P, i, hi))
end
packed = table.concat(packed)
local pos = start
local skip = {}
local seen = {}
local check = ARGV[8] ~= '1'
local add = {}
local find = string.find
local sub = string.sub
local j = 0
for i = 1, n do
  if mask ~= '' and string.byte(mask, i) == 48 then
    pos = pos + 1
  else
    j = j + 1
    local d = digs[j]
    local v = vals[j]
    if (check and seen[d]) or old[j] or (v and find(v, d, 1, true) and live(v, d)) then
      skip[#skip + 1] = i - 1
    else
      if check then seen[d] = true end
      pos = pos + 1
      local c = pos - start
      local f = fields[j]
      local a = add[f]
      if a then
        add[f] = a .. d .. sub(packed, 6 * c - 5, 6 * c)
      else
        if not v then
          v = ''
        elseif struct.unpack('>I6', v, 9) <= floor then
          v = fresh(v)
        end
        add[f] = v .. d .. sub(packed, 6 * c - 5, 6 * c)
      end
    end
  end
end
local skipped = table.concat(skip, ',')
local s = string.format('%d', start)
local lg = legacy and 1 or 0
if pos == start then
  redis.call('SET', KEYS[6], '0:' .. s .. ':' .. s .. ':' .. skipped, 'PX', ARGV[3])
  return {0, start, start, skipped, lg}
end
local e = string.format('%d', pos)
redis.call('XADD', KEYS[3], e .. '-0', 'p', ARGV[1], 's', s, 'k', skipped)
local out = {}
for f, v in pairs(add) do
  out[#out + 1] = f
  out[#out + 1] = v
  if #out >= 1000 then
    redis.call('HSET', KEYS[5], unpack(out))
    out = {}
  end
end
if #out > 0 then redis.call('HSET', KEYS[5], unpack(out)) end
redis.call('HSET', KEYS[2], 'end', e)
redis.call('SET', KEYS[6], '1:' .. s .. ':' .. e .. ':' .. skipped, 'PX', ARGV[3])
return {1, start, pos, skipped, lg}
"""

# The log layout's append (see the module docstring): the client decided the duplicates
# on its copy of the window, at version ARGV[4] of generation ARGV[3]. KEYS: config, meta,
# log, dlog, token. ARGV: payload, token ttl (ms), generation, version, events learned,
# skip ("i,j"), the 8-byte digests of the learned events' ids ("" if none), mask ("" if
# every learned event has an id, else one byte per learned event: "1" has one), the
# version this append makes if it records ids (unique: the token's). Returns
# {-1} (no model), {-2, record} (as _APPEND), {-6} (the window moved on: read it again),
# {-7} (the model has the fields layout), else {written 0/1, start, end, skip, 0}.
_APPEND_LOG = """#!lua
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local record = redis.call('GET', KEYS[5])
if record then return {-2, record} end
local m = redis.call('HMGET', KEYS[2], 'end', 'dgen', 'dver')
if not m[2] then return {-7} end
if m[2] ~= ARGV[3] or m[3] ~= ARGV[4] then return {-6} end
local start = tonumber(m[1] or '0')
local pos = start + tonumber(ARGV[5])
local s = string.format('%d', start)
if pos == start then
  redis.call('SET', KEYS[5], '0:' .. s .. ':' .. s .. ':' .. ARGV[6], 'PX', ARGV[2])
  return {0, start, start, ARGV[6], 0}
end
local e = string.format('%d', pos)
redis.call('XADD', KEYS[3], e .. '-0', 'p', ARGV[1], 's', s, 'k', ARGV[6])
if ARGV[7] ~= '' then
  redis.call('XADD', KEYS[4], e .. '-0', 's', s, 'd', ARGV[7], 'm', ARGV[8])
  redis.call('HSET', KEYS[2], 'end', e, 'dver', ARGV[9])
else
  redis.call('HSET', KEYS[2], 'end', e)
end
redis.call('SET', KEYS[5], '1:' .. s .. ':' .. e .. ':' .. ARGV[6], 'PX', ARGV[2])
return {1, start, pos, ARGV[6], 0}
"""

# The log layout's window, for an appender's copy. KEYS: config, meta, dlog. ARGV: the
# copy's generation, the log end of the last entry it read, that entry's tag (its start,
# ':', its last digest). Returns nil (no model), {0} (the fields layout), else {1,
# generation, version, floor, released ranges, 1 if read from the start, the entries}:
# the entries after the copy's last, if that entry is still there as the copy read it,
# else all of them (another generation, or a store that lost history: the copy starts
# over). A trimmed last entry is no loss: its ids were all forgotten.
_READ_WINDOW = """#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local m = redis.call('HMGET', KEYS[2], 'dgen', 'dver', 'floor', 'rel')
if not m[1] then return {0} end
local from = '-'
if m[1] == ARGV[1] and ARGV[2] ~= '0' then
  local id = ARGV[2] .. '-0'
  local last = redis.call('XRANGE', KEYS[3], id, id)[1]
  if last then
    local f = {}
    for i = 1, #last[2], 2 do f[last[2][i]] = last[2][i + 1] end
    if f['s'] .. ':' .. string.sub(f['d'], -8) == ARGV[3] then from = '(' .. id end
  elseif tonumber(ARGV[2]) <= tonumber(m[3] or '0') then
    from = '(' .. id
  end
end
return {1, m[1], m[2], m[3] or '0', m[4] or '', from == '-' and 1 or 0,
        redis.call('XRANGE', KEYS[3], from, '+')}
"""

# KEYS: token. ARGV: fence ttl (ms). The record of the token's append if it ran, else
# "fenced" (and the append becomes a no-op should it still arrive).
_FENCE = """#!lua
local record = redis.call('GET', KEYS[1])
if record then return record end
redis.call('SET', KEYS[1], 'fenced', 'PX', ARGV[1])
return 'fenced'
"""

# KEYS: config, ids (the previous layout's zset), meta. ARGV: start, end, the window's new
# version (unique). Returns -1 if
# no model. The digests stay where they are: the range joins meta's released ranges,
# which lookups skip, until the floor passes it; the window's version moves on.
_RELEASE_IDS = """#!lua
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], ARGV[2])
local m = redis.call('HMGET', KEYS[3], 'floor', 'rel')
local s = math.max(tonumber(ARGV[1]), tonumber(m[1] or '0'))
local e = tonumber(ARGV[2])
if e > s then
  local item = string.format('%d:%d', s, e)
  if m[2] and m[2] ~= '' then item = m[2] .. ',' .. item end
  redis.call('HSET', KEYS[3], 'rel', item)
  redis.call('HSET', KEYS[3], 'dver', ARGV[3])
end
return 1
"""

# KEYS: config, log. ARGV: first entry id, count ("" = all). Returns nil if no model.
_READ_LOG = """#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
if ARGV[2] == '' then return redis.call('XRANGE', KEYS[2], ARGV[1], '+') end
if ARGV[2] == '0' then return {} end
return redis.call('XRANGE', KEYS[2], ARGV[1], '+', 'COUNT', ARGV[2])
"""

# KEYS: config, meta, log. Returns nil if no model, else {entries, first start, end}.
_BOUNDS = """#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local e = tonumber(redis.call('HGET', KEYS[2], 'end') or '0')
local n = redis.call('XLEN', KEYS[3])
local first = e
if n > 0 then
  local f = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', 1)[1][2]
  for i = 1, #f, 2 do
    if f[i] == 's' then first = tonumber(f[i + 1]) end
  end
end
return {n, first, e}
"""

# KEYS: config, meta, ckpt, lease, pub. ARGV: version, blob, created_at, fencing token.
# Returns -1 (no model), -3 (lease lost), -2 (beyond the log end), 0 (not newer), 1 (saved).
# The deltas up to the checkpoint go (entry ids of `pub` are "<version>-0").
_SAVE_CKPT = "#!lua" + _FENCE_LIB + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if lease_lost(KEYS[4], ARGV[4]) then return -3 end
local v = tonumber(ARGV[1])
if v > tonumber(redis.call('HGET', KEYS[2], 'end') or '0') then return -2 end
local cur = redis.call('HGET', KEYS[3], 'version')
if cur and tonumber(cur) >= v then return 0 end
redis.call('HSET', KEYS[3], 'version', ARGV[1], 'blob', ARGV[2], 'created_at', ARGV[3])
redis.call('XTRIM', KEYS[5], 'MINID', string.format('%d-0', v + 1))
return 1
"""

# The newest kept delta's version (0 if none) of the `pub` stream at `key`.
_PUB_LIB = """
local function last_delta(key)
  local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
  if not last then return 0 end
  return tonumber(string.sub(last[1], 1, string.find(last[1], '-', 1, true) - 1))
end
"""

# KEYS: config, meta, ckpt, lease, pub. ARGV: base, version, blob, fencing token.
# Returns -1 (no model), -3 (lease lost), -2 (beyond the log end), 0 (not newer), 1 (kept).
_PUBLISH_DELTA = "#!lua" + _FENCE_LIB + _PUB_LIB + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if lease_lost(KEYS[4], ARGV[4]) then return -3 end
local v = tonumber(ARGV[2])
if v > tonumber(redis.call('HGET', KEYS[2], 'end') or '0') then return -2 end
if tonumber(redis.call('HGET', KEYS[3], 'version') or '0') >= v then return 0 end
if last_delta(KEYS[5]) >= v then return 0 end
redis.call('XADD', KEYS[5], string.format('%d-0', v), 'b', ARGV[1], 'd', ARGV[3])
return 1
"""

# KEYS: config, pub. ARGV: after. Returns nil if no model, else the entries beyond `after`.
_READ_DELTAS = """#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('XRANGE', KEYS[2], string.format('%d-0', tonumber(ARGV[1]) + 1), '+')
"""

# KEYS: config, ckpt, pub. Returns -1 if no model, else the newest published version.
_PUB_VERSION = "#!lua flags=no-writes" + _PUB_LIB + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return math.max(tonumber(redis.call('HGET', KEYS[2], 'version') or '0'), last_delta(KEYS[3]))
"""

# KEYS: config, ckpt. Returns nil if no model, {} if no checkpoint, else the 3 fields.
_LOAD_CKPT = """#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local c = redis.call('HMGET', KEYS[2], 'version', 'blob', 'created_at')
if not c[1] then return {} end
return c
"""

# KEYS: config, log, ids (the previous layout's zset), ckpt, lease, meta, dedup, dlog. ARGV:
# upto, keep_ids, slice, fencing token, sweep, the window's new version (unique). Returns
# -1 if no model, -3 if the lease is lost, 2 if ids remain to drop. Forgetting ids is one
# write, the floor (lookups skip what is below it). The log layout's window entries go
# once all their ids are forgotten; the fields layout's records go when an append
# rewrites their field, and `sweep` fields per call are cleaned here (models that stop
# learning). The zset of
# the previous layout loses at most `slice` positions' ids per call, because a script
# blocks the whole server and a second's worth of ids (100k at full load) took ~30 ms.
_TRIM = "#!lua" + _FENCE_LIB + _DEDUP_LIB + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if lease_lost(KEYS[5], ARGV[4]) then return -3 end
local cur = redis.call('HGET', KEYS[4], 'version')
if not cur then return 0 end
local upto = math.min(tonumber(ARGV[1]), tonumber(cur))
redis.call('XTRIM', KEYS[2], 'MINID', string.format('%d-0', upto + 1))
local drop = upto - tonumber(ARGV[2])
if drop < 1 then return 1 end
local m = redis.call('HMGET', KEYS[6], 'floor', 'rel', 'nb', 'sweep')
floor = tonumber(m[1] or '0')
if drop > floor then
  floor = drop
  redis.call('HSET', KEYS[6], 'floor', string.format('%d', drop))
  -- the log layout's window: entries whose ids are all forgotten go, its version moves
  redis.call('XTRIM', KEYS[8], 'MINID', string.format('%d-0', drop + 1))
  redis.call('HSET', KEYS[6], 'dver', ARGV[6])
  if m[2] then
    local keep = {}
    for a, b in string.gmatch(m[2], '(%d+):(%d+)') do
      if tonumber(b) > drop then keep[#keep + 1] = a .. ':' .. b end
    end
    if #keep > 0 then
      redis.call('HSET', KEYS[6], 'rel', table.concat(keep, ','))
    else
      redis.call('HDEL', KEYS[6], 'rel')
    end
  end
end
local nb = tonumber(m[3] or '0')
if nb > 0 and redis.call('EXISTS', KEYS[7]) == 1 then
  local c = tonumber(m[4] or '0') % nb
  local count = math.min(nb, tonumber(ARGV[5]))
  local fs = {}
  for t = 0, count - 1 do fs[#fs + 1] = (c + t) % nb end
  local vs = redis.call('HMGET', KEYS[7], unpack(fs))
  local put = {}
  local gone = {}
  for t = 1, #fs do
    local v = vs[t]
    if v then
      local w = fresh(v)
      if w == '' then
        gone[#gone + 1] = fs[t]
      elseif #w < #v then
        put[#put + 1] = fs[t]
        put[#put + 1] = w
      end
    end
  end
  if #gone > 0 then redis.call('HDEL', KEYS[7], unpack(gone)) end
  if #put > 0 then redis.call('HSET', KEYS[7], unpack(put)) end
  redis.call('HSET', KEYS[6], 'sweep', string.format('%d', (c + count) % nb))
end
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if first[2] then
  local hi = math.min(drop, tonumber(first[2]) + tonumber(ARGV[3]) - 1)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', string.format('%d', hi))
  if hi < drop then return 2 end
end
return 1
"""
_TRIM_SLICE = 5_000  # positions whose ids a trim drops per call from the previous zset
_SWEEP_FIELDS = 256  # dedup fields a trim call cleans of forgotten records
_IDS_PER_FIELD = 8  # remembered ids per dedup field at the dedup window
_MIN_FIELDS = 2_048  # dedup fields at least (the ids since the last checkpoint spread too)

# -- leases and the replica registry ----------------------------------------------------

# KEYS: config, lease, lease:last. ARGV: replica, ttl (ms). Returns nil if no model, {0} if
# another replica holds the lease, else {1, token} (taken, or renewed by its holder).
_ACQUIRE = """#!lua
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local cur = redis.call('GET', KEYS[2])
if cur then
  local sep = string.find(cur, ':', 1, true)
  if string.sub(cur, sep + 1) ~= ARGV[1] then return {0} end
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, tonumber(string.sub(cur, 1, sep - 1))}
end
local t = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[2], string.format('%d', t) .. ':' .. ARGV[1], 'PX', ARGV[2])
return {1, t}
"""

# KEYS: lease. ARGV: replica, token, ttl (ms). Returns 1 if renewed, 0 if not held so.
_RENEW = """#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[2] .. ':' .. ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: lease. ARGV: replica, token. Returns 1 if released, 0 if not held so.
_RELEASE = """#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[2] .. ':' .. ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS: config, lease. Returns nil if no model, {} if no lease, else {"token:holder", pttl}.
_GET_LEASE = """#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local cur = redis.call('GET', KEYS[2])
if not cur then return {} end
return {cur, redis.call('PTTL', KEYS[2])}
"""

# KEYS: config, ckpt. Returns -1 if no model, else the checkpoint's version (0 if none).
_CKPT_VERSION = """#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
"""

# KEYS: registry. ARGV: replica, ttl (ms). Forgets the expired (expiry <= now), records
# the replica, returns the live ids (in expiry order; the caller sorts them).
_ANNOUNCE = """#!lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now))
redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""

# KEYS: a replica's wake set. ARGV: ttl (ms), then the names.
_WAKE = """#!lua
redis.call('SADD', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""
_WAKE_TTL_MS = 60_000
_WOKEN_MAX = 10_000  # names taken per ``woken`` call; the rest wait for the next

# -- impressions ------------------------------------------------------------------------
# Every impression script takes KEYS: config, imp, the shown_at zsets of the statuses in
# IMPRESSION_STATUSES order, then their expires_at zsets; status s (1-based) has
# KEYS[2 + s] and KEYS[2 + n + s]. Times come as ARGV strings (Python's repr of a float,
# exact), and go to ZADD as strings: a Lua number would be formatted with 14 digits.
_IMP_KEYS = ("imp", *(f"imp:shown:{s}" for s in IMPRESSION_STATUSES),
             *(f"imp:exp:{s}" for s in IMPRESSION_STATUSES))
_IMP_LIB = "\nlocal NAMES = {" + ", ".join(f"'{s}'" for s in IMPRESSION_STATUSES) + "}" + """
local N = #NAMES
local STATUS = {}
for i = 1, N do STATUS[NAMES[i]] = i end
-- drop impressions expired at `now` (a string), at most `budget` of them
local function drop_expired(now, budget)
  local dropped = 0
  for s = 1, N do
    if dropped >= budget then break end
    local gone = redis.call('ZRANGE', KEYS[2 + N + s], '-inf', now, 'BYSCORE',
                            'LIMIT', 0, budget - dropped)
    for j = 1, #gone, 1000 do
      local hi = math.min(j + 999, #gone)
      redis.call('HDEL', KEYS[2], unpack(gone, j, hi))
      redis.call('ZREM', KEYS[2 + s], unpack(gone, j, hi))
      redis.call('ZREM', KEYS[2 + N + s], unpack(gone, j, hi))
    end
    dropped = dropped + #gone
  end
  return dropped
end
"""

# ARGV: max_pending, slice, then per request kept: shown_at, expires_at, msgpack [id,
# record, id, record, ...] (each the impression's record, status pending, packed by the
# client rather than here). Each request is kept as a call of its own would keep it after
# the ones before (one call for the requests that came together: one round trip, and with
# appendfsync always one fsync). Returns -1 if no model, else how many each newly kept.
_KEEP_IMP = "#!lua" + _IMP_LIB + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local cap = tonumber(ARGV[1])
local function keep(shown_s, expires_s, packed)
  local now = tonumber(shown_s)
  drop_expired(shown_s, tonumber(ARGV[2]))
  local held = 0
  for s = 1, N do held = held + redis.call('ZCOUNT', KEYS[2 + N + s], '(' .. shown_s, '+inf') end
  local expires = tonumber(expires_s)
  local items = cmsgpack.unpack(packed)
  local kept = 0
  local seen = {}
  -- in slices of 500 items: one HMGET, one HSET and two ZADDs each (not four calls an item)
  for c = 1, #items, 1000 do
    if held >= cap then break end
    local ids = {}
    for i = c, math.min(c + 999, #items), 2 do ids[#ids + 1] = items[i] end
    local olds = redis.call('HMGET', KEYS[2], unpack(ids))
    local fields, shown, exp = {}, {}, {}
    for k = 1, #ids do
      if held >= cap then break end
      local id = ids[k]
      local fresh = not seen[id]  -- a repeat within the request: the first counts
      local old = olds[k]
      if fresh and old then
        local r = cmsgpack.unpack(old)
        if r[3] > now then
          fresh = false  -- the first showing counts
        else  -- expired, not dropped yet: replaced
          local s = STATUS[r[4]]
          redis.call('ZREM', KEYS[2 + s], id)
          redis.call('ZREM', KEYS[2 + N + s], id)
        end
      end
      if fresh then
        seen[id] = true
        fields[#fields + 1] = id
        fields[#fields + 1] = items[c + 2 * k - 1]  -- its record, packed by the client
        shown[#shown + 1] = shown_s
        shown[#shown + 1] = id
        exp[#exp + 1] = expires_s
        exp[#exp + 1] = id
        held = held + 1
        kept = kept + 1
      end
    end
    if #fields > 0 then
      redis.call('HSET', KEYS[2], unpack(fields))
      redis.call('ZADD', KEYS[3], unpack(shown))
      redis.call('ZADD', KEYS[3 + N], unpack(exp))
    end
  end
  return kept
end
local out = {}
for g = 3, #ARGV, 3 do out[#out + 1] = keep(ARGV[g], ARGV[g + 1], ARGV[g + 2]) end
return out
"""

# ARGV: now, slice, to status (index), from statuses ("1,3"), msgpack [id, ...] (distinct),
# "1" to return the records too. Returns nil if no model, else the ids moved, in the order
# given (with "1": {those, then per slice of ids their records as they were before, nil
# for an id not kept}).
_CLAIM_IMP = "#!lua" + _IMP_LIB + """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local now = tonumber(ARGV[1])
drop_expired(ARGV[1], tonumber(ARGV[2]))
local to = tonumber(ARGV[3])
local from = {}
for s in string.gmatch(ARGV[4], '%d+') do from[tonumber(s)] = true end
local ids = cmsgpack.unpack(ARGV[5])
local moved = {}
local olds_out = {moved}
-- in slices of 1000 ids: one HMGET, then per status left one ZREM of each set, and one
-- ZADD of each and one HSET for all (seven calls an item took ~25 us of it)
for c = 1, #ids, 1000 do
  local slice = {unpack(ids, c, math.min(c + 999, #ids))}
  local olds = redis.call('HMGET', KEYS[2], unpack(slice))
  local gone = {}  -- status -> the ids that leave it
  local shown, exp, fields = {}, {}, {}
  for k = 1, #slice do
    local old = olds[k]
    if old then
      local id = slice[k]
      local r = cmsgpack.unpack(old)
      local s = STATUS[r[4]]
      if r[3] > now and from[s] then
        if s ~= to then
          local g = gone[s]
          if not g then g = {}; gone[s] = g end
          g[#g + 1] = id
          shown[#shown + 1] = string.format('%.17g', r[2]); shown[#shown + 1] = id
          exp[#exp + 1] = string.format('%.17g', r[3]); exp[#exp + 1] = id
          r[4] = NAMES[to]
          fields[#fields + 1] = id; fields[#fields + 1] = cmsgpack.pack(r)
        end
        moved[#moved + 1] = id
      end
    end
  end
  olds_out[#olds_out + 1] = olds  -- the records as they were, for take_impressions
  for s = 1, N do
    local g = gone[s]
    if g then
      redis.call('ZREM', KEYS[2 + s], unpack(g))
      redis.call('ZREM', KEYS[2 + N + s], unpack(g))
    end
  end
  if #fields > 0 then
    redis.call('ZADD', KEYS[2 + to], unpack(shown))
    redis.call('ZADD', KEYS[2 + N + to], unpack(exp))
    redis.call('HSET', KEYS[2], unpack(fields))
  end
end
if ARGV[6] == '1' then return olds_out end
return moved
"""

# KEYS: config, imp. ARGV: msgpack [id, ...]. Returns nil if no model, else the records
# (nil for an id not kept); the caller leaves out the expired ones.
_GET_IMP = """#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local ids = cmsgpack.unpack(ARGV[1])
local out = {}
for j = 1, #ids, 1000 do
  local recs = redis.call('HMGET', KEYS[2], unpack(ids, j, math.min(j + 999, #ids)))
  for k = 1, #recs do out[j + k - 1] = recs[k] end
end
return out
"""

# ARGV: shown_before, now, limit, statuses ("1,3"). Returns nil if no model, else
# [id, record, ...]: per status its oldest `limit` unexpired impressions shown at or before
# shown_before (by shown_at, then id); the caller merges the statuses.
_DUE_IMP = "#!lua flags=no-writes" + _IMP_LIB + """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local before = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local out = {}
for st in string.gmatch(ARGV[4], '%d+') do
  local s = tonumber(st)
  local got = 0
  local off = 0
  local past = false
  while got < limit and not past do
    local n = math.min(math.max(limit - got, 100), 1000)
    local chunk = redis.call('ZRANGE', KEYS[2 + s], off, off + n - 1, 'WITHSCORES')
    if #chunk == 0 then break end
    local ids = {}
    for k = 1, #chunk, 2 do
      if tonumber(chunk[k + 1]) > before then
        past = true
        break
      end
      ids[#ids + 1] = chunk[k]
    end
    if #ids > 0 then
      local exps = redis.call('ZMSCORE', KEYS[2 + N + s], unpack(ids))
      local live = {}
      for k = 1, #ids do
        if got < limit and exps[k] and tonumber(exps[k]) > now then
          live[#live + 1] = ids[k]
          got = got + 1
        end
      end
      if #live > 0 then
        local recs = redis.call('HMGET', KEYS[2], unpack(live))
        for k = 1, #live do
          out[#out + 1] = live[k]
          out[#out + 1] = recs[k]
        end
      end
    end
    off = off + #chunk / 2
  end
end
return out
"""

# ARGV: now. Returns nil if no model, else the unexpired impressions of each status.
_COUNT_IMP = "#!lua flags=no-writes" + _IMP_LIB + """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local out = {}
for s = 1, N do out[s] = redis.call('ZCOUNT', KEYS[2 + N + s], '(' .. ARGV[1], '+inf') end
return out
"""
_EXPIRE_SLICE = 2_000  # expired impressions a keep or claim drops, at most
_TOKEN_TTL_MIN = 60.0  # seconds an append's record is kept, at least
_WINDOW_IDLE_S = 300.0  # seconds after which an unused copy of a dedup window is dropped
_FENCE_TTL = 86_400.0  # seconds a fence is kept: longer than any stall it could outlast
_RESOLVE_RETRY = 0.05  # first pause between fence attempts (doubling to 0.5 s)


class RedisStore:
    """The durable log in Redis (standalone, or a Cluster client: keys are hash-tagged).

    Parameters
    ----------
    client : redis.Redis or redis.RedisCluster
        Made with ``decode_responses=False`` (payloads and blobs are raw bytes); see
        :meth:`from_url`, which also disables redis-py's own retries.
    prefix : str
        Prefix of every key.
    resolve_timeout : float
        Seconds an append waits for its reply beyond the client's socket timeout, and then
        tries to find out whether it was written (see the module docstring), before
        raising AppendOutcomeUnknown.
    append_client : redis.Redis or redis.RedisCluster, optional
        The client appends go through, with a socket timeout ``resolve_timeout`` longer
        than ``client``'s (:meth:`from_url` makes one); default ``client``.
    dedup_window : int
        The ids a model is expected to remember (the service's ``dedup_window``): models
        this store creates in the fields layout spread their dedup window over
        ``max(2048, dedup_window / 8)`` fields (see the module docstring). Only the memory
        and the append's cost depend on it, never what is remembered.
    dedup_layout : {"log", "fields"}
        The dedup window's layout of the models this store creates (see the module
        docstring); models keep the layout they were made with, and the store appends
        to either.
    """

    def __init__(self, client: Any, *, prefix: str = "aucstream",
                 resolve_timeout: float = 10.0, append_client: Any = None,
                 dedup_window: int = 100_000, dedup_layout: str = "log") -> None:
        if not prefix or "{" in prefix or "}" in prefix:
            raise ValueError(f"a Redis key prefix must be non-empty without braces; got {prefix!r}")
        if dedup_layout not in ("log", "fields"):
            raise ValueError(f"dedup_layout must be 'log' or 'fields'; got {dedup_layout!r}")
        self._layout = dedup_layout
        # the log layout's windows (per model name) and the models found in the fields one
        self._windows: dict[str, IdWindow] = {}
        self._window_locks: dict[str, threading.Lock] = {}
        self._window_used: dict[str, float] = {}
        self._windows_swept = time.monotonic()
        self._fields_models: set[str] = set()
        self._windows_lock = threading.Lock()
        window = check_position(dedup_window, "dedup_window")
        self._fields = max(_MIN_FIELDS, -(-window // _IDS_PER_FIELD))
        # per model name: its field count where it differs from ours (made by a store
        # with another window), and whether it still has the previous layout's zset
        self._model_fields: dict[str, int] = {}
        self._legacy: set[str] = set()
        self._r = client
        self._w = client if append_client is None else append_client
        self._resolve_timeout = resolve_timeout
        # an append's whole time: its reply's wait, then finding out, until this is up
        self._append_time = _socket_timeout(self._w)
        if self._w is client:
            self._append_time += resolve_timeout
        self._token_ttl_ms = int(1000 * max(_TOKEN_TTL_MIN, 4 * self._append_time))
        self._prefix = prefix
        self._index = f"{prefix}:models"
        self._registry = f"{prefix}:replicas"
        self._where = _describe(client)
        self._create = client.register_script(_CREATE)
        self._delete = client.register_script(_DELETE)
        self._append = self._w.register_script(_APPEND)
        self._append_log = self._w.register_script(_APPEND_LOG)
        # on the appenders' connection: part of an append, it waits as long as one
        self._read_window = self._w.register_script(_READ_WINDOW)
        self._fence = client.register_script(_FENCE)
        self._release_ids = client.register_script(_RELEASE_IDS)
        self._read_log = client.register_script(_READ_LOG)
        self._bounds = client.register_script(_BOUNDS)
        self._save_ckpt = client.register_script(_SAVE_CKPT)
        self._load_ckpt = client.register_script(_LOAD_CKPT)
        self._publish_delta = client.register_script(_PUBLISH_DELTA)
        self._read_deltas = client.register_script(_READ_DELTAS)
        self._pub_version = client.register_script(_PUB_VERSION)
        self._trim = client.register_script(_TRIM)
        self._set_pin = client.register_script(_SET_PIN)
        self._read_pins = client.register_script(_READ_PINS)
        self._keep_imp = client.register_script(_KEEP_IMP)
        self._claim_imp = client.register_script(_CLAIM_IMP)
        self._get_imp = client.register_script(_GET_IMP)
        self._due_imp = client.register_script(_DUE_IMP)
        self._count_imp = client.register_script(_COUNT_IMP)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._get_lease = client.register_script(_GET_LEASE)
        self._ckpt_version = client.register_script(_CKPT_VERSION)
        self._announce = client.register_script(_ANNOUNCE)
        self._wake = client.register_script(_WAKE)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "aucstream",
        socket_timeout: float = 5.0,
        connect_timeout: float = 2.0,
        resolve_timeout: float = 10.0,
        dedup_window: int = 100_000,
        dedup_layout: str = "log",
    ) -> RedisStore:
        """A store on ``redis://[:password@]host:port/db`` (or ``rediss://``, ``unix://``).

        ``redis+cluster://host:port`` (or ``rediss+cluster://``) connects to a Redis
        Cluster through that node.

        The timeouts (seconds) may also be given in the URL's query, which wins:
        ``redis://host:6379/0?socket_timeout=1&socket_connect_timeout=0.5``.
        """
        options: dict[str, Any] = {
            "decode_responses": False,
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "retry": Retry(NoBackoff(), 0),
        }
        # appends wait resolve_timeout longer for their reply (the query's timeout wins
        # over the keyword, so the appenders' URL carries the longer one)
        waited = _query_timeout(url, socket_timeout) + resolve_timeout
        append_url = _with_query(url, socket_timeout=repr(waited))
        scheme, sep, _ = url.partition("://")
        if sep and scheme in ("redis+cluster", "rediss+cluster"):
            plain, plain_append = (f"{scheme.removesuffix('+cluster')}://{u.partition('://')[2]}"
                                   for u in (url, append_url))
            try:  # a cluster client asks for the slot map at once
                cluster = redis.RedisCluster.from_url(plain, **options)
                appender = redis.RedisCluster.from_url(plain_append, **options)
            except (redis.RedisError, RedisClusterException) as exc:
                raise StoreUnavailable(
                    f"Redis Cluster at {plain.rpartition('@')[2]} unavailable: {exc}"
                ) from exc
            return cls(cluster, prefix=prefix, resolve_timeout=resolve_timeout,
                       append_client=appender, dedup_window=dedup_window,
                       dedup_layout=dedup_layout)
        return cls(redis.Redis.from_url(url, **options), prefix=prefix,
                   resolve_timeout=resolve_timeout,
                   append_client=redis.Redis.from_url(append_url, **options),
                   dedup_window=dedup_window, dedup_layout=dedup_layout)

    def __repr__(self) -> str:
        return f"RedisStore({self._where!r}, prefix={self._prefix!r})"

    # -- helpers ---------------------------------------------------------------------

    def _keys(self, name: str, *parts: str) -> list[str]:
        base = f"{self._prefix}:{{{check_name(name)}}}:"
        return [base + part for part in parts]

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except (redis.RedisError, RedisClusterException) as exc:
            raise StoreUnavailable(
                f"Redis at {self._where} unavailable ({what}): {type(exc).__name__}: {exc}"
            ) from exc

    @staticmethod
    def _not_found(name: str) -> NoReturn:
        raise ModelNotFound(f"Model {name!r} not found")

    @staticmethod
    def _lease_lost(name: str, what: str, token: int | None) -> NoReturn:
        raise LeaseLost(f"Model {name!r}: {what} refused, the lease with token {token} is "
                        "not held (expired, or taken by another replica)")

    # -- the Store protocol ----------------------------------------------------------

    def ping(self) -> None:
        with self._guard("ping"):
            self._r.ping()

    def create_model(self, name: str, config: dict[str, Any],
                     start: tuple[int, bytes] | None = None) -> None:
        keys = self._keys(name, *_MODEL_KEYS, *_IMP_KEYS)
        text = json.dumps(config)
        version, blob = (0, b"") if start is None else (check_position(start[0], "version"),
                                                       bytes(start[1]))
        with self._guard("create_model"):
            # Index first (and again after): a crash in between leaves a stale index
            # entry, which list_models filters out, never a model missing from the index.
            self._r.sadd(self._index, name)
            log_layout = self._layout == "log"
            args = [text, repr(time.time()), version, blob, "" if log_layout else self._fields,
                    uuid.uuid4().hex if log_layout else ""]
            if not self._create(keys=keys, args=args):
                raise ModelExists(f"Model {name!r} exists already")
            self._r.sadd(self._index, name)

    def get_config(self, name: str) -> dict[str, Any]:
        (config,) = self._keys(name, "config")
        with self._guard("get_config"):
            text = self._r.hget(config, "json")
        if text is None:
            self._not_found(name)
        return cast(dict[str, Any], json.loads(text))

    def list_models(self) -> list[str]:
        with self._guard("list_models"):
            names = sorted(n.decode() for n in self._r.smembers(self._index))
            pipe = self._r.pipeline(transaction=False)
            for n in names:
                pipe.exists(self._keys(n, "config")[0])
            alive = pipe.execute()
        return [n for n, ok in zip(names, alive, strict=True) if ok]

    def delete_model(self, name: str) -> None:
        keys = self._keys(name, *_MODEL_KEYS, *_IMP_KEYS)
        with self._guard("delete_model"):
            if not self._delete(keys=keys):
                self._not_found(name)
            self._model_fields.pop(name, None)
            self._legacy.discard(name)
            self._fields_models.discard(name)
            with self._windows_lock:
                self._windows.pop(name, None)
                self._window_locks.pop(name, None)
                self._window_used.pop(name, None)
            self._r.srem(self._index, name)
            # A create of the same name may have raced between the two writes above.
            if self._r.exists(keys[0]):
                self._r.sadd(self._index, name)

    def append(self, name: str, payload: bytes, event_ids: Sequence[str | None]) -> AppendResult:
        ids = check_event_ids(event_ids)
        data = bytes(payload)
        token = f"tok:{uuid.uuid4().hex}"
        while True:
            if name in self._fields_models:
                res = self._append_fields(name, data, ids, token)
            else:
                res = self._append_window(name, data, ids, token)
            if res is not None:
                return res

    def _window(self, name: str) -> tuple[IdWindow, threading.Lock]:
        """This store's copy of a model's window (and its lock). Copies this store has
        not appended with for ``_WINDOW_IDLE_S`` are dropped (read again if needed): a
        copy holds ~40-70 bytes per remembered id. A copy dropped while an append uses
        it is still a valid copy: every decision is checked against the model's version."""
        now = time.monotonic()
        with self._windows_lock:
            if now - self._windows_swept > _WINDOW_IDLE_S:
                self._windows_swept = now
                for idle in [n for n, t in self._window_used.items()
                             if now - t > _WINDOW_IDLE_S]:
                    del self._windows[idle], self._window_locks[idle], self._window_used[idle]
            window = self._windows.get(name)
            if window is None:
                window = self._windows[name] = IdWindow()
                self._window_locks[name] = threading.Lock()
            self._window_used[name] = now
            return window, self._window_locks[name]

    def _sync_window(self, name: str, window: IdWindow) -> bool:
        """Bring ``window`` up to the store's (under its lock); False if the model has
        the fields layout."""
        keys = self._keys(name, "config", "meta", "dlog")
        with self._guard("append"):
            res = self._read_window(keys=keys, args=[window.gen, window.seen, window.tag])
        if res is None:
            self._not_found(name)
        if not res[0]:
            return False
        _, gen, dver, floor, rel, full, entries = res
        if full:
            window.reset(bytes(gen))
        window.forget(int(floor), [(int(a), int(b)) for a, _, b in
                                   (r.partition(b":") for r in rel.split(b",") if r)])
        for eid, fields in entries:
            f = dict(zip(fields[::2], fields[1::2], strict=True))
            window.read_entry(int(f[b"s"]), f[b"d"], f[b"m"])
            window.seen = int(eid.partition(b"-")[0])
            window.tag = f[b"s"] + b":" + f[b"d"][-8:]
        window.dver = bytes(dver)
        return True

    def _append_window(self, name: str, data: bytes, ids: list[str | None],
                       token: str) -> AppendResult | None:
        """An append to a model of the log layout; None if it has the fields layout."""
        keys = self._keys(name, "config", "meta", "log", "dlog", token)
        version = token.removeprefix("tok:").encode()  # the window's, should this record ids
        window, lock = self._window(name)
        has_id = np.fromiter((eid is not None for eid in ids), np.bool_, len(ids))
        digests = id_digests([eid for eid in ids if eid is not None])
        started = time.monotonic()
        while True:
            with lock:
                if not window.dver and not self._sync_window(name, window):
                    self._fields_models.add(name)
                    return None
                keep = window.keep(digests)
                gen, base = window.gen, window.dver
            learned = has_id.copy()
            learned[has_id] = keep
            learned |= ~has_id
            skipped = ",".join(map(str, np.flatnonzero(~learned).tolist()))
            kept = digests[keep]
            with_id = has_id[learned]
            mask = b"" if with_id.all() else np.where(with_id, 49, 48).astype(np.uint8).tobytes()
            args = [data, self._token_ttl_ms, gen, base, int(learned.sum()), skipped,
                    kept.tobytes(), mask, version]
            res = self._send_append(self._append_log, keys, args, name, data, started)
            if isinstance(res, AppendResult):
                return res
            if res[0] == -6:  # the window moved on since this copy was read
                if time.monotonic() - started > self._append_time:
                    raise StoreUnavailable(
                        f"append to {name!r}: other appends kept moving its dedup window on "
                        f"for {self._append_time:.0f} s; nothing was written")
                with lock:
                    if window.gen == gen and window.dver == base:
                        self._sync_window(name, window)
                continue
            break
        if res[0] == -1:
            self._not_found(name)
        if res[0] == -7:
            self._fields_models.add(name)
            return None
        if res[0] == -2:  # a resend of a script that ran or was fenced
            return _result(self._checked(name, res[1]), data)
        written, start, end, skipped_text, _ = res
        if kept.shape[0]:
            with lock:  # unless a read of the window since has it already
                if window.gen == gen and window.dver == base:
                    window.record(kept, int(start) + 1 + np.flatnonzero(with_id))
                    window.dver = version
                    window.seen = int(end)
                    window.tag = b"%d:" % start + kept[-1:].tobytes()
        return _result(b"%d:%d:%d:%s" % (written, start, end, skipped_text), data)

    def _append_fields(self, name: str, data: bytes, ids: list[str | None],
                       token: str) -> AppendResult | None:
        """An append to a model of the fields layout; None if it has the log layout."""
        keys = self._keys(name, "config", "meta", "log", "ids", "dedup", token)
        given = [eid for eid in ids if eid is not None]
        mask = b"" if len(given) == len(ids) else bytes(49 if eid is not None else 48
                                                         for eid in ids)
        distinct = b"1" if len(set(given)) == len(given) else b"0"
        started = time.monotonic()
        argued = 0  # the field count `packed` and `in_fields` are for
        while True:
            fields = self._model_fields.get(name, self._fields)
            if fields != argued:
                packed, in_fields = digest_args(given, fields) if given else (b"", b"")
                argued = fields
            legacy = name in self._legacy
            args = [data, packed, self._token_ttl_ms, mask, fields, in_fields,
                    msgpack.packb(given) if legacy else b"", distinct]
            res = self._send_append(self._append, keys, args, name, data, started)
            if isinstance(res, AppendResult):
                return res
            if res[0] == -8:  # made again, in the log layout
                self._fields_models.discard(name)
                return None
            if res[0] == -4:  # the model has the previous layout's zset: send the ids too
                self._legacy.add(name)
            elif res[0] == -5:  # made with another field count
                self._model_fields[name] = int(res[1])
            else:
                break
        if res[0] == -1:
            self._not_found(name)
        if res[0] == -2:  # a resend of a script that ran or was fenced
            return _result(self._checked(name, res[1]), data)
        written, start, end, skipped, zset = res
        if not zset:
            self._legacy.discard(name)
        return _result(b"%d:%d:%d:%s" % (written, start, end, skipped), data)

    def _send_append(self, script: Any, keys: list[str], args: list[Any], name: str,
                     data: bytes, started: float) -> Any:
        """The append script's reply, or, if the call was cut off after it went out, the
        AppendResult of what it did (found out by its token, the last key)."""
        try:
            return script(keys=keys, args=args)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if _before_sending(exc):
                raise self._unavailable("append", exc) from exc
            deadline = started + self._append_time
            return _result(self._find_out(name, keys[-1], exc, deadline), data)
        except (redis.RedisError, RedisClusterException) as exc:
            # the server refused the script (OOM, READONLY, LOADING, ...): it did not run
            raise self._unavailable("append", exc) from exc

    def _find_out(self, name: str, token_key: str, cause: Exception,
                  deadline: float) -> bytes:
        """The record of an append that was cut off in flight, fencing it if it did not
        run; retried until ``deadline`` (at least once) while the server is out of reach."""
        pause = _RESOLVE_RETRY
        while True:
            try:
                record = self._fence(keys=[token_key], args=[int(1000 * _FENCE_TTL)])
                return self._checked(name, record)
            except (redis.RedisError, RedisClusterException) as exc:
                if time.monotonic() + pause >= deadline:
                    raise AppendOutcomeUnknown(
                        f"Redis at {self._where} did not confirm an append to {name!r} "
                        f"({type(cause).__name__}: {cause}) and stayed out of reach "
                        f"({type(exc).__name__}: {exc}): it may or may not have been "
                        "written") from exc
                time.sleep(pause)
                pause = min(2 * pause, 0.5)

    def _checked(self, name: str, record: bytes) -> bytes:
        if record == b"fenced":
            raise StoreUnavailable(
                f"Redis at {self._where} did not answer an append to {name!r} in time; it "
                "was fenced and will never be written")
        return bytes(record)

    def _unavailable(self, what: str, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(
            f"Redis at {self._where} unavailable ({what}): {type(exc).__name__}: {exc}")

    def set_pin(self, name: str, candidate: int | None, token: int | None = None) -> int:
        keys = self._keys(name, "config", "meta", "pins", "lease")
        token = check_token(token)
        with self._guard("set_pin"):
            at = self._set_pin(keys=keys, args=[-1 if candidate is None else int(candidate),
                                                "" if token is None else token])
        if at == -1:
            self._not_found(name)
        if at == -3:
            self._lease_lost(name, "set_pin", token)
        return int(at)

    def read_pins(self, name: str) -> list[tuple[int, int | None]]:
        keys = self._keys(name, "config", "pins")
        with self._guard("read_pins"):
            raw = self._read_pins(keys=keys)
        if raw is None:
            self._not_found(name)
        out = []
        for item in raw:
            at, _, cand = (item.decode() if isinstance(item, bytes) else item).partition(":")
            out.append((int(at), None if int(cand) < 0 else int(cand)))
        return out

    def release_ids(self, name: str, start: int, end: int) -> None:
        keys = self._keys(name, "config", "ids", "meta")
        start = check_position(start, "start")
        end = check_position(end, "end")
        with self._guard("release_ids"):
            res = self._release_ids(keys=keys, args=[start, end, uuid.uuid4().hex])
        if res == -1:
            self._not_found(name)

    def read_log(self, name: str, after: int, limit: int | None = None) -> list[LogEntry]:
        keys = self._keys(name, "config", "log")
        after = check_position(after, "after")
        count = "" if limit is None else str(check_position(limit, "limit"))
        with self._guard("read_log"):
            rows = self._read_log(keys=keys, args=[f"{after + 1}-0", count])
        if rows is None:
            self._not_found(name)
        return [_entry(eid, fields) for eid, fields in rows]

    def log_bounds(self, name: str) -> tuple[int, int, int]:
        keys = self._keys(name, "config", "meta", "log")
        with self._guard("log_bounds"):
            res = self._bounds(keys=keys)
        if res is None:
            self._not_found(name)
        n, first, end = res
        return int(n), int(first), int(end)

    def save_checkpoint(self, name: str, version: int, blob: bytes,
                        token: int | None = None) -> bool:
        keys = self._keys(name, "config", "meta", "ckpt", "lease", "pub")
        version = check_position(version, "version")
        token = check_token(token)
        with self._guard("save_checkpoint"):
            res = self._save_ckpt(keys=keys, args=[version, bytes(blob), repr(time.time()),
                                                   "" if token is None else token])
        if res == -1:
            self._not_found(name)
        if res == -3:
            self._lease_lost(name, "save_checkpoint", token)
        if res == -2:
            raise ValueError(f"checkpoint version {version} is beyond the log end of {name!r}")
        return bool(res)

    def load_checkpoint(self, name: str) -> Checkpoint | None:
        keys = self._keys(name, "config", "ckpt")
        with self._guard("load_checkpoint"):
            res = self._load_ckpt(keys=keys)
        if res is None:
            self._not_found(name)
        if not res:
            return None
        version, blob, created_at = res
        return Checkpoint(version=int(version), blob=bytes(blob), created_at=float(created_at))

    def publish_delta(self, name: str, base: int, version: int, blob: bytes,
                      token: int | None = None) -> bool:
        keys = self._keys(name, "config", "meta", "ckpt", "lease", "pub")
        base, version = check_delta_versions(base, version)
        token = check_token(token)
        with self._guard("publish_delta"):
            res = self._publish_delta(keys=keys, args=[base, version, bytes(blob),
                                                       "" if token is None else token])
        if res == -1:
            self._not_found(name)
        if res == -3:
            self._lease_lost(name, "publish_delta", token)
        if res == -2:
            raise ValueError(f"delta version {version} is beyond the log end of {name!r}")
        return bool(res)

    def read_deltas(self, name: str, after: int) -> list[Delta]:
        keys = self._keys(name, "config", "pub")
        after = check_position(after, "after")
        with self._guard("read_deltas"):
            res = self._read_deltas(keys=keys, args=[after])
        if res is None:
            self._not_found(name)
        out = []
        for entry_id, fields in res:
            f = dict(zip(fields[::2], fields[1::2], strict=True))
            out.append(Delta(base=int(f[b"b"]), version=int(bytes(entry_id).split(b"-")[0]),
                             blob=bytes(f[b"d"])))
        return out

    def publication_version(self, name: str) -> int:
        keys = self._keys(name, "config", "ckpt", "pub")
        with self._guard("publication_version"):
            res = self._pub_version(keys=keys)
        if res == -1:
            self._not_found(name)
        return int(res)

    def trim(self, name: str, upto: int, keep_ids: int, token: int | None = None) -> None:
        keys = self._keys(name, "config", "log", "ids", "ckpt", "lease", "meta", "dedup",
                          "dlog")
        upto = check_position(upto, "upto")
        keep_ids = check_position(keep_ids, "keep_ids")
        token = check_token(token)
        fence = "" if token is None else token
        res = 2
        while res == 2:
            with self._guard("trim"):
                res = self._trim(keys=keys, args=[upto, keep_ids, _TRIM_SLICE, fence,
                                                  _SWEEP_FIELDS, uuid.uuid4().hex])
        if res == -1:
            self._not_found(name)
        if res == -3:
            self._lease_lost(name, "trim", token)

    # -- leases and the replica registry ---------------------------------------------

    def acquire_lease(self, name: str, replica: str, ttl: float) -> Lease | None:
        keys = self._keys(name, "config", "lease", "lease:last")
        replica = check_replica(replica)
        ms = check_ttl(ttl)
        with self._guard("acquire_lease"):
            res = self._acquire(keys=keys, args=[replica, ms])
        if res is None:
            self._not_found(name)
        if not res[0]:
            return None
        return Lease(holder=replica, token=int(res[1]), ttl=ms / 1000)

    def renew_lease(self, name: str, replica: str, token: int, ttl: float) -> bool:
        (lease,) = self._keys(name, "lease")
        replica = check_replica(replica)
        token = check_position(token, "token")
        ms = check_ttl(ttl)
        with self._guard("renew_lease"):
            return bool(self._renew(keys=[lease], args=[replica, token, ms]))

    def release_lease(self, name: str, replica: str, token: int) -> bool:
        (lease,) = self._keys(name, "lease")
        replica = check_replica(replica)
        token = check_position(token, "token")
        with self._guard("release_lease"):
            return bool(self._release(keys=[lease], args=[replica, token]))

    def get_lease(self, name: str) -> Lease | None:
        keys = self._keys(name, "config", "lease")
        with self._guard("get_lease"):
            res = self._get_lease(keys=keys)
        if res is None:
            self._not_found(name)
        if not res:
            return None
        token, _, holder = bytes(res[0]).decode().partition(":")
        return Lease(holder=holder, token=int(token), ttl=int(res[1]) / 1000)

    def checkpoint_version(self, name: str) -> int:
        keys = self._keys(name, "config", "ckpt")
        with self._guard("checkpoint_version"):
            res = self._ckpt_version(keys=keys)
        if res == -1:
            self._not_found(name)
        return int(res)

    def announce_replica(self, replica: str, ttl: float) -> list[str]:
        replica = check_replica(replica)
        ms = check_ttl(ttl)
        with self._guard("announce_replica"):
            live = self._announce(keys=[self._registry], args=[replica, ms])
        return sorted(bytes(r).decode() for r in live)

    def withdraw_replica(self, replica: str) -> None:
        replica = check_replica(replica)
        with self._guard("withdraw_replica"):
            self._r.zrem(self._registry, replica)
            self._r.delete(self._wake_key(replica))

    def _wake_key(self, replica: str) -> str:
        return f"{self._prefix}:wake:{replica}"

    def wake(self, replica: str, names: Sequence[str]) -> None:
        replica = check_replica(replica)
        names = [check_name(n) for n in names]
        if not names:
            return
        with self._guard("wake"):
            self._wake(keys=[self._wake_key(replica)], args=[_WAKE_TTL_MS, *names])

    def woken(self, replica: str) -> list[str]:
        replica = check_replica(replica)
        with self._guard("woken"):
            names = self._r.spop(self._wake_key(replica), _WOKEN_MAX)
        return sorted(bytes(n).decode() for n in names or ())

    # -- impressions -----------------------------------------------------------------

    def keep_impressions(self, name: str, items: Sequence[tuple[str, bytes]], shown_at: float,
                         expires_at: float, max_pending: int) -> int:
        return self.keep_impression_groups(name, [(items, shown_at, expires_at)],
                                           max_pending)[0]

    def keep_impression_groups(
        self, name: str,
        groups: Sequence[tuple[Sequence[tuple[str, bytes]] | PackedItems, float, float]],
        max_pending: int,
    ) -> list[int]:
        keys = self._keys(name, "config", *_IMP_KEYS)
        args: list[Any] = [check_position(max_pending, "max_pending"), _EXPIRE_SLICE]
        for group in groups:  # all checked before anything is sent
            packed, shown, expires = check_keep_group(*group)
            pairs = packed.pairs()
            flat = [x for item_id, payload in pairs
                    for x in (item_id, _record(payload, shown, expires))]
            args += [repr(shown), repr(expires), msgpack.packb(flat, use_bin_type=False)]
        with self._guard("keep_impressions"):
            kept = self._keep_imp(keys=keys, args=args)
        if kept == -1:
            self._not_found(name)
        return [int(k) for k in kept]

    def get_impressions(self, name: str, ids: Sequence[str], now: float) -> dict[str, Impression]:
        keys = self._keys(name, "config", "imp")
        wanted = _check_ids(ids)
        t = check_time(now, "now")
        with self._guard("get_impressions"):
            recs = self._get_imp(keys=keys, args=[msgpack.packb(wanted, use_bin_type=False)])
        if recs is None:
            self._not_found(name)
        out = {}
        for item_id, rec in zip(wanted, recs, strict=True):
            if rec is not None:
                imp = _impression(rec)
                if imp.expires_at > t:
                    out[item_id] = imp
        return out

    def claim_impressions(self, name: str, ids: Sequence[str], from_status: Sequence[str],
                          to_status: str, now: float) -> list[str]:
        return self._claim(name, ids, from_status, to_status, now, False)[1]

    def take_impressions(self, name: str, ids: Sequence[str], from_status: Sequence[str],
                         to_status: str, now: float) -> tuple[dict[str, Impression], list[str]]:
        return self._claim(name, ids, from_status, to_status, now, True)

    def _claim(self, name: str, ids: Sequence[str], from_status: Sequence[str], to_status: str,
               now: float, records: bool) -> tuple[dict[str, Impression], list[str]]:
        """The claim script: the ids moved, and with ``records`` the unexpired impressions
        among ``ids`` as they were before."""
        keys = self._keys(name, "config", *_IMP_KEYS)
        wanted = _check_ids(ids)
        sources = _check_statuses(from_status, "from_status")
        to = _status_index(to_status, "to_status")
        t = check_time(now, "now")
        with self._guard("take_impressions" if records else "claim_impressions"):
            res = self._claim_imp(keys=keys, args=[
                repr(t), _EXPIRE_SLICE, to, ",".join(str(_status_index(s, "")) for s in sources),
                msgpack.packb(wanted, use_bin_type=False), "1" if records else "0"])
        if res is None:
            self._not_found(name)
        found: dict[str, Impression] = {}
        if not records:
            return found, [bytes(m).decode() for m in res]
        moved, *slices = res
        for item_id, rec in zip(wanted, (r for part in slices for r in part), strict=True):
            if rec is not None:
                imp = _impression(rec)
                if imp.expires_at > t:
                    found[item_id] = imp
        return found, [bytes(m).decode() for m in moved]

    def due_impressions(self, name: str, statuses: Sequence[str], shown_before: float,
                        now: float, limit: int) -> list[tuple[str, Impression]]:
        keys = self._keys(name, "config", *_IMP_KEYS)
        wanted = _check_statuses(statuses, "statuses")
        before = check_time(shown_before, "shown_before")
        t = check_time(now, "now")
        n = check_position(limit, "limit")
        with self._guard("due_impressions"):
            res = self._due_imp(keys=keys, args=[
                repr(before), repr(t), n, ",".join(str(_status_index(s, "")) for s in wanted)])
        if res is None:
            self._not_found(name)
        found = [(bytes(i).decode(), _impression(rec)) for i, rec in zip(res[::2], res[1::2],
                                                                          strict=True)]
        found.sort(key=lambda x: (x[1].shown_at, x[0]))
        return found[:n]

    def count_impressions(self, name: str, now: float) -> dict[str, int]:
        keys = self._keys(name, "config", *_IMP_KEYS)
        t = check_time(now, "now")
        with self._guard("count_impressions"):
            res = self._count_imp(keys=keys, args=[repr(t)])
        if res is None:
            self._not_found(name)
        return {s: int(n) for s, n in zip(IMPRESSION_STATUSES, res, strict=True)}

    def close(self) -> None:
        self._r.close()
        if self._w is not self._r:
            self._w.close()


def _result(record: bytes, payload: bytes) -> AppendResult:
    """An AppendResult from an append's record ``written:start:end:skip``."""
    written, start, end, skipped = record.split(b":", 3)
    skip = tuple(int(i) for i in skipped.split(b",")) if skipped else ()
    if written == b"0":
        return AppendResult(entry=None, duplicates=skip, version=int(start))
    entry = LogEntry(start=int(start), end=int(end), payload=payload, skip=skip)
    return AppendResult(entry=entry, duplicates=skip, version=int(end))


def _record(payload: bytes, shown_at: float, expires_at: float) -> bytes:
    """A pending impression's record, msgpack [payload, shown_at, expires_at, "pending"]:
    the bytes ``msgpack.packb`` gives with ``use_bin_type=False``, put together here (one
    join an item, not a packer call)."""
    n = len(payload)
    if n < 32:
        head = bytes((0x94, 0xA0 | n))
    elif n < 1 << 16:  # (no str 8 in the raw spec that use_bin_type=False follows)
        head = b"\x94\xda" + n.to_bytes(2, "big")
    else:
        head = b"\x94\xdb" + n.to_bytes(4, "big")
    return b"".join((head, payload, b"\xcb", struct.pack(">d", shown_at), b"\xcb",
                     struct.pack(">d", expires_at), b"\xa7pending"))


def _impression(rec: bytes) -> Impression:
    """An Impression from its record: msgpack [payload, shown_at, expires_at, status]."""
    payload, shown_at, expires_at, status = msgpack.unpackb(rec, raw=True)
    return Impression(payload=bytes(payload), shown_at=float(shown_at),
                      expires_at=float(expires_at), status=bytes(status).decode())


def _check_ids(ids: Sequence[str]) -> list[str]:
    """The distinct ids in order, each a str (TypeError otherwise)."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"ids must be a sequence of str, not a {type(ids).__name__}")
    out = list(ids)
    for i, item_id in enumerate(out):
        if not isinstance(item_id, str):
            raise TypeError(f"impression id {i} must be a str; got {type(item_id).__name__}")
    return list(dict.fromkeys(out))


def _status_index(status: str, what: str) -> int:
    """The 1-based index of a status in IMPRESSION_STATUSES (ValueError if none)."""
    if status not in IMPRESSION_STATUSES:
        raise ValueError(f"{what or 'a status'} must be one of {IMPRESSION_STATUSES}; "
                         f"got {status!r}")
    return IMPRESSION_STATUSES.index(status) + 1


def _check_statuses(statuses: Sequence[str], what: str) -> list[str]:
    """The distinct statuses, each of IMPRESSION_STATUSES (ValueError otherwise)."""
    if isinstance(statuses, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of statuses, not a {type(statuses).__name__}")
    out = list(dict.fromkeys(statuses))
    for s in out:
        _status_index(s, what)
    return out


def _before_sending(exc: Exception) -> bool:
    """Whether redis-py failed while connecting, before the command went out (its
    connect errors say so: "Error 111 connecting to ...", "Timeout connecting to
    server"). Anything else may have reached the server; when unsure, the caller finds
    out, which is slower but never wrong."""
    return "connecting to" in str(exc)


def _query_timeout(url: str, default: float) -> float:
    """The ``socket_timeout`` of a URL's query (which redis-py lets win), else ``default``."""
    given = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("socket_timeout")
    return float(given[-1]) if given else default


def _with_query(url: str, **params: str) -> str:
    """``url`` with these query parameters set (replacing any given)."""
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
             if k not in params]
    return urllib.parse.urlunsplit(parts._replace(
        query=urllib.parse.urlencode([*query, *params.items()])))


def _socket_timeout(client: Any) -> float:
    """The client's socket timeout in seconds (5 if it cannot be read)."""
    kwargs = client.get_connection_kwargs() if hasattr(client, "get_connection_kwargs") else {}
    timeout = kwargs.get("socket_timeout")
    return float(timeout) if timeout else 5.0


def _entry(eid: bytes, fields: list[bytes]) -> LogEntry:
    f = dict(zip(fields[::2], fields[1::2], strict=True))
    skipped = f[b"k"]
    return LogEntry(
        start=int(f[b"s"]),
        end=int(eid.split(b"-", 1)[0]),
        payload=bytes(f[b"p"]),
        skip=tuple(int(i) for i in skipped.split(b",")) if skipped else (),
    )


def _describe(client: Any) -> str:
    """host:port (or the socket path) of a client, for error messages; never the password."""
    if isinstance(client, redis.RedisCluster):
        node = client.get_default_node()  # type: ignore[no-untyped-call]
        return f"cluster {node.host}:{node.port}" if node is not None else "cluster"
    kwargs = client.get_connection_kwargs() if hasattr(client, "get_connection_kwargs") else {}
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
