"""The storage contract shared by the Redis store and the embedded SQLite store.

The durable log is the source of truth. Per model a store keeps:

- the model's configuration (a JSON-able dict, written once at creation);
- the event log: entries appended in one total order, each an opaque payload (an
  encoded batch of events) covering a contiguous range of event positions;
- recent event ids, so that a retried event is not learned twice (a store may remember an
  id by a 64-bit digest: an event is then taken for a duplicate also when its id's digest
  equals a remembered one's, about once in 2**64 / window events);
- the latest checkpoint: an opaque learner-state blob and the position it covers;
- the deltas published since that checkpoint (scale-out: what changed between two
  versions, for the replicas that follow the model).

Positions count learned events: an entry covers positions ``start + 1 .. end`` and the
model's *version* after applying it is ``end``. Events whose id was seen before are kept
in the payload but listed in ``skip`` and do not take a position; the other events of a
batch take the positions ``start + 1, start + 2, ...`` in batch order. A checkpoint at
version ``v`` includes every entry with ``end <= v``; start-up loads it and replays the
entries with ``end > v``.

Every method raises :class:`StoreUnavailable` when the backend cannot be reached or
fails and nothing was written, so the service can answer 503 ("nothing learned") instead
of dropping a write. An append whose outcome cannot be known (the connection was cut off
after the request was sent, and the backend stayed out of reach while the store tried
to find out) raises :class:`AppendOutcomeUnknown` instead: it may or may not be in the
log. Every method that names a model raises :class:`ModelNotFound` when it does not
exist (:meth:`Store.release_lease` excepted). A model that is deleted and created again
is a new model: its log starts again at position 0.

Ownership (scale-out, issue 15). Each model has at most one owner replica at a time,
holding the model's *lease* in the store for a time-to-live it renews. Each time the
lease changes hands (taken while free or expired) its *fencing token* grows by one; a
renewal by the holder keeps it. The owner's writes of derived state
(:meth:`Store.save_checkpoint`, :meth:`Store.publish_delta`, :meth:`Store.trim`,
:meth:`Store.set_pin`) pass its token, and the store performs such a *fenced* write only
if the lease is still held, unexpired, with exactly that token -- checked atomically
with the write -- else raises :class:`LeaseLost` and writes nothing. So an owner that
stalled past its lease (a GC pause, a partition) and was replaced cannot overwrite its
successor's state. Appends are not fenced: any replica may append, the log orders them.
Lease times are the backend's: the Redis server's clock, or ``time.time()`` of the
SQLite writer (all processes share the machine).

Tokens of a model name never decrease, not even across delete and re-create: a model's
first lease has token 1, and a re-created model's next token follows the deleted one's
last. (Were they to start at 1 again, a stale owner of the deleted model holding token 1
would pass fenced writes on the new model's token 1, and its renewal could not tell the
new model from the old.) So the same token from two :meth:`Store.acquire_lease` calls
means that nobody else held the lease in between; a new token means the caller must
reload the model's state from the store. The price: a store keeps one small record
(the last token) per model name ever leased, also after the model's deletion.

A replica id names one writer: the store cannot tell two processes with the same id
apart (both pass the fence of its token). A restarted process that reuses its
predecessor's id renews the predecessor's lease at once, same token -- right only once
the predecessor is gone, and the new process must load the model's state from the store.

Live replicas announce themselves in a registry (:meth:`Store.announce_replica`), so that
each can tell which others are alive (e.g. to spread models over them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = [
    "IMPRESSION_STATUSES",
    "AppendOutcomeUnknown",
    "AppendResult",
    "Checkpoint",
    "Delta",
    "Impression",
    "Lease",
    "LeaseLost",
    "LogEntry",
    "ModelExists",
    "ModelNotFound",
    "PackedItems",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "check_event_ids",
    "check_keep_group",
    "check_name",
    "check_position",
    "check_replica",
    "check_time",
    "check_token",
    "check_ttl",
]


class StoreError(Exception):
    """Base of the store's errors."""


class StoreUnavailable(StoreError):
    """The backend cannot be reached or failed; nothing was written (certainly)."""


class AppendOutcomeUnknown(StoreError):
    """An append was cut off in flight and the store could not find out in time whether
    it was written: it may be in the log (and will then be learned) or not. Retry only
    with event ids, which make a retry safe."""


class ModelExists(StoreError):
    """A model of that name exists already."""


class ModelNotFound(StoreError):
    """No model of that name."""


class LeaseLost(StoreError):
    """A fenced write by a replica whose lease is gone (expired, or taken by another)."""


@dataclass(frozen=True)
class LogEntry:
    """One appended batch: events ``start + 1 .. end`` (``skip`` = duplicate indices)."""

    start: int
    end: int
    payload: bytes
    skip: tuple[int, ...] = ()


@dataclass(frozen=True)
class AppendResult:
    """What an append did: the entry written (None if every event was a duplicate)."""

    entry: LogEntry | None
    duplicates: tuple[int, ...]
    version: int  # the log's end position after this append


# An impression's life: shown ("pending"); then either labelled by a client ("labelled"),
# or claimed by the timeout sweep ("timing_out") and, once its negative is in the log,
# "timed_out". Nothing else moves it.
IMPRESSION_STATUSES = ("pending", "labelled", "timing_out", "timed_out")


@dataclass(frozen=True)
class Impression:
    """A scored item kept for its label: the encoded row, when it was shown, and its status."""

    payload: bytes
    shown_at: float  # unix seconds
    expires_at: float  # unix seconds
    status: str


@dataclass(frozen=True, eq=False)
class PackedItems:
    """One /score request's items to keep, packed: distinct ids in order, and their
    payloads one after another in ``blob``, item k's ending at ``ends[k]``.

    What the service hands a store (the payloads come out of one numba kernel as one
    buffer): 100 ``(id, bytes)`` pairs cut out of it, checked one by one, then joined
    again into the embedded store's one row per request cost a sixth of a kept /score
    request's time under the GIL. :meth:`of` packs such pairs (the first of each id).
    """

    ids: list[str]
    blob: bytes
    ends: np.ndarray  # int64, non-decreasing, the last == len(blob)

    def __post_init__(self) -> None:
        ids, ends = self.ids, self.ends
        if not isinstance(ids, list) or not all(type(i) is str for i in ids):
            raise TypeError("PackedItems.ids must be a list of str")
        if type(self.blob) is not bytes:
            raise TypeError(f"PackedItems.blob must be bytes; got {type(self.blob).__name__}")
        if not (isinstance(ends, np.ndarray) and ends.dtype == np.int64 and ends.ndim == 1
                and len(ends) == len(ids)):
            raise ValueError("PackedItems.ends must be a 1-D int64 array, one end per id")
        if len(ids) and (ends[0] < 0 or ends[-1] != len(self.blob)
                         or (len(ids) > 1 and (np.diff(ends) < 0).any())):
            raise ValueError("PackedItems.ends must be non-decreasing, from 0 to len(blob)")
        if len(set(ids)) != len(ids):
            raise ValueError("PackedItems.ids must be distinct")

    @classmethod
    def of(cls, items: Sequence[tuple[str, bytes]] | PackedItems) -> PackedItems:
        """Packed ``(id, payload)`` pairs (the first payload of a repeated id); ids must be
        str and payloads bytes-like (TypeError otherwise)."""
        if isinstance(items, PackedItems):
            return items
        first: dict[str, bytes] = {}
        for i, (item_id, payload) in enumerate(items):
            if not isinstance(item_id, str):
                raise TypeError(f"impression id {i} must be a str; "
                                f"got {type(item_id).__name__}")
            if type(payload) is not bytes:
                if isinstance(payload, str):
                    raise TypeError(f"impression payload {i} must be bytes; got str")
                payload = bytes(payload)
            if item_id not in first:  # a repeat is kept already: the first counts
                first[item_id] = payload
        ends = np.cumsum([len(p) for p in first.values()], dtype=np.int64)
        return cls(list(first), b"".join(first.values()), ends)

    def __len__(self) -> int:
        return len(self.ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PackedItems):
            return NotImplemented
        return (self.ids == other.ids and self.blob == other.blob
                and np.array_equal(self.ends, other.ends))

    __hash__ = None  # type: ignore[assignment]

    def payload(self, k: int) -> bytes:
        return self.blob[int(self.ends[k - 1]) if k else 0:int(self.ends[k])]

    def pairs(self) -> list[tuple[str, bytes]]:
        """The ``(id, payload)`` pairs."""
        blob, bounds = self.blob, self.ends.tolist()
        return [(i, blob[a:b]) for i, a, b in zip(self.ids, [0, *bounds], bounds,
                                                  strict=False)]


@dataclass(frozen=True)
class Checkpoint:
    """A learner-state blob that includes every entry with ``end <= version``."""

    version: int
    blob: bytes
    created_at: float  # unix seconds


@dataclass(frozen=True)
class Delta:
    """A publication of what changed from the state at ``base`` to the state at
    ``version`` (an opaque blob, :func:`service.codec.encode_delta`'s)."""

    base: int
    version: int
    blob: bytes


@dataclass(frozen=True)
class Lease:
    """A model's ownership lease: who holds it, its fencing token, and its time left."""

    holder: str  # replica id
    token: int  # fencing token: grows by one each time the lease changes hands
    ttl: float  # seconds left, as the store sees it


class Store(Protocol):
    """What the service needs from a backend. Both implementations pass tests/store."""

    def ping(self) -> None:
        """Raise StoreUnavailable if the backend cannot be reached."""

    def create_model(self, name: str, config: dict[str, Any],
                     start: tuple[int, bytes] | None = None) -> None:
        """Store a new model's config; raise ModelExists if the name is taken.

        ``start = (version, blob)`` creates it from a checkpoint (an imported model): its
        log begins at ``version``, as a log trimmed to its end does, with that checkpoint.
        """

    def get_config(self, name: str) -> dict[str, Any]:
        """The config given at creation; raise ModelNotFound."""

    def list_models(self) -> list[str]:
        """Names of all models, sorted."""

    def delete_model(self, name: str) -> None:
        """Remove config, log, ids and checkpoint; raise ModelNotFound."""

    def append(self, name: str, payload: bytes, event_ids: Sequence[str | None]) -> AppendResult:
        """Append one batch atomically; ``event_ids`` has one entry per event (None = no id).

        An id seen before for this model (within the dedup window, see :meth:`trim`), or
        repeated earlier in the same batch, marks that event as a duplicate: it is listed
        in ``skip`` and takes no position (the first occurrence wins). None never matches
        anything. If every event is a duplicate (or the batch is empty) nothing is
        appended and the result has ``entry=None`` and the unchanged version. Durable on
        return. Raise ModelNotFound if the model does not exist, StoreUnavailable if
        nothing was written, AppendOutcomeUnknown if that cannot be known.
        """

    def release_ids(self, name: str, start: int, end: int) -> None:
        """Forget the event ids recorded at positions ``start + 1 .. end`` (the events of
        an entry the model refused to learn), so that a corrected retry with the same
        ids is learned rather than taken for a duplicate. Ids of other positions stay.
        """

    def read_log(self, name: str, after: int, limit: int | None = None) -> list[LogEntry]:
        """Entries with ``end > after`` in log order (at most ``limit``).

        If the first entry returned has ``start > after`` the log was trimmed past
        ``after``: the caller cannot continue from there and must load the checkpoint.
        So must a caller that gets no entry while ``after`` is below the log end of
        :meth:`log_bounds`: the log was trimmed to its end.
        """

    def log_bounds(self, name: str) -> tuple[int, int, int]:
        """(number of entries, first retained entry's start, log end = latest version).

        An empty log (new, or trimmed to the end) gives ``(0, end, end)``.
        """

    def save_checkpoint(self, name: str, version: int, blob: bytes,
                        token: int | None = None) -> bool:
        """Keep ``blob`` as the checkpoint if ``version`` is newer than the stored one.

        Returns whether it was kept: checkpoints only move forward, an older or equal
        version is ignored (False). Raise ValueError if ``version`` is negative or beyond
        the log end. Durable on return. With ``token``: fenced (see the module
        docstring), LeaseLost if the lease is not held with that token.
        """

    def load_checkpoint(self, name: str) -> Checkpoint | None:
        """The latest checkpoint, or None."""

    def publish_delta(self, name: str, base: int, version: int, blob: bytes,
                      token: int | None = None) -> bool:
        """Keep ``blob``, what changed from the state at ``base`` to the state at
        ``version``, for followers (:meth:`read_deltas`), if ``version`` is newer than
        the stored checkpoint's and every kept delta's (True); else keep nothing (False).

        A checkpoint saved at a version drops the deltas up to that version, so a
        follower reads a checkpoint and then the deltas after it. Raise ValueError unless
        ``0 <= base < version`` and ``version`` is within the log. Durable on return. With
        ``token``: fenced (see the module docstring).
        """
        raise NotImplementedError

    def read_deltas(self, name: str, after: int) -> list[Delta]:
        """The kept deltas whose version is beyond ``after``, oldest first."""
        raise NotImplementedError

    def publication_version(self, name: str) -> int:
        """The newest of the checkpoint's version and the kept deltas' (0 if none): the
        followers' poll, which reads no blob. Raise ModelNotFound."""
        raise NotImplementedError

    def trim(self, name: str, upto: int, keep_ids: int, token: int | None = None) -> None:
        """Drop entries with ``end <= upto`` and ids of events at positions ``<= upto - keep_ids``.

        ``upto`` is first lowered to the stored checkpoint's version (nothing is trimmed
        without a checkpoint), so a trim can never drop an event that no checkpoint
        covers. The dedup window therefore always holds at least the ids of the
        ``keep_ids`` events before the checkpoint and of every event after it.

        With ``token``: fenced (see the module docstring). Ids go in slices, each a write
        of its own and each fenced: a trim whose lease is lost between two slices raises
        LeaseLost there, having done only what it did while it held the lease (the log
        and the ids up to a slice's end: what its successor's next trim would do too).
        """

    def set_pin(self, name: str, candidate: int | None, token: int | None = None) -> int:
        """Record that from the log's current end on, an 'auto' model serves ``candidate``
        (None: its own choice again); return that position. Atomic with appends: every
        entry appended later starts at or after it. Raise ModelNotFound. With ``token``:
        fenced (see the module docstring), LeaseLost if the lease is not held with it."""
        raise NotImplementedError

    def read_pins(self, name: str) -> list[tuple[int, int | None]]:
        """Every pin recorded, oldest first: (position, candidate or None)."""
        raise NotImplementedError

    # -- ownership: leases and fencing tokens (see the module docstring) ---------------

    def acquire_lease(self, name: str, replica: str, ttl: float) -> Lease | None:
        """Take or renew the model's ownership lease for ``ttl`` seconds (> 0).

        Atomically: if the lease is free or expired, ``replica`` takes it and the token
        grows by one; if ``replica`` holds it, its expiry moves to now + ttl and the
        token stays; if another replica holds it (unexpired), nothing changes. Returns
        the lease if ``replica`` holds it after the call, else None. Tokens never
        decrease for a model name (they survive expiry, release, and delete + re-create)
        and the first is 1. ``ttl`` has millisecond precision. Raise ModelNotFound,
        ValueError for a ``ttl`` that is not a positive finite number or an empty
        ``replica``.
        """
        raise NotImplementedError

    def renew_lease(self, name: str, replica: str, token: int, ttl: float) -> bool:
        """Extend the lease to now + ``ttl`` if ``replica`` holds it, unexpired, with
        ``token`` (True); else change nothing (False) — unlike :meth:`acquire_lease`, a
        free or lapsed lease is never taken, so a renewal racing a hand-over cannot take
        the lease back. A missing model gives False. Raise ValueError as acquire_lease."""
        raise NotImplementedError

    def release_lease(self, name: str, replica: str, token: int) -> bool:
        """Give the lease up if ``replica`` holds it with ``token`` (True), else nothing
        (False). The token is not reused: the next holder gets token + 1. A missing model
        gives False, not ModelNotFound: it has no lease to give up (a replica shutting
        down need not care that the model was deleted meanwhile)."""
        raise NotImplementedError

    def get_lease(self, name: str) -> Lease | None:
        """The unexpired lease, or None. Raise ModelNotFound."""
        raise NotImplementedError

    def checkpoint_version(self, name: str) -> int:
        """The stored checkpoint's version (0 if none): a cheap poll for followers, which
        reads no blob. Raise ModelNotFound."""
        raise NotImplementedError

    # -- the replica registry (one per store, not per model) --

    def announce_replica(self, replica: str, ttl: float) -> list[str]:
        """Record that ``replica`` is alive for the next ``ttl`` seconds; return every
        live replica id (unexpired), sorted, ``replica`` included. One round trip (one
        call per replica per sync round); replicas expired meanwhile are forgotten."""
        raise NotImplementedError

    def withdraw_replica(self, replica: str) -> None:
        """Forget ``replica`` (clean shutdown); nothing if it is not known."""
        raise NotImplementedError

    # -- wake-ups: a replica that appended to a model it does not own tells the owner --

    def wake(self, replica: str, names: Sequence[str]) -> None:
        """Tell ``replica`` that the logs of ``names`` grew. A hint, not a promise: an
        owner still looks at each model every sync_interval, so a wake-up that is lost
        (the waking replica died between its append and this call, the owner changed
        meanwhile) only delays. Wake-ups for a replica that is gone are dropped."""
        raise NotImplementedError

    def woken(self, replica: str) -> list[str]:
        """Take the names woken for ``replica`` since its last call, each once, sorted.
        Cheap when there are none: an owner asks every few tens of milliseconds."""
        raise NotImplementedError

    # -- impressions (models with feedback: scored items kept until their label comes) --

    def keep_impressions(self, name: str, items: Sequence[tuple[str, bytes]], shown_at: float,
                         expires_at: float, max_pending: int) -> int:
        """Keep each ``(id, payload)`` as an impression with status ``"pending"``, shown at
        ``shown_at`` and kept until ``expires_at`` (unix seconds). Expired impressions are
        dropped first. An id kept already (and not expired) is left exactly as it is: the
        first showing counts. Items are kept in order while the model holds fewer than
        ``max_pending`` unexpired impressions; the rest are not kept. Returns how many
        were newly kept. Atomic. Raise ModelNotFound, StoreUnavailable."""
        raise NotImplementedError

    def keep_impression_groups(
        self, name: str,
        groups: Sequence[tuple[Sequence[tuple[str, bytes]] | PackedItems, float, float]],
        max_pending: int,
    ) -> list[int]:
        """:meth:`keep_impressions` for several requests at once, in order: each group
        ``(items, shown_at, expires_at)`` is kept as that call would keep it after the
        groups before it, and its count returned. ``items`` may come packed
        (:class:`PackedItems`). A store may make them one write (the
        embedded store: one transaction, so concurrent /score requests share a commit);
        all or nothing is not promised. Raise as keep_impressions, before writing
        anything for an argument that call would refuse."""
        raise NotImplementedError

    def get_impressions(self, name: str, ids: Sequence[str], now: float) -> dict[str, Impression]:
        """The impressions among ``ids`` that are kept and not expired at ``now``."""
        raise NotImplementedError

    def claim_impressions(self, name: str, ids: Sequence[str], from_status: Sequence[str],
                          to_status: str, now: float) -> list[str]:
        """Atomically move every unexpired impression among ``ids`` whose status is in
        ``from_status`` to ``to_status``; return the ids moved, in the order given (each
        once). Statuses are short strings (IMPRESSION_STATUSES). Two concurrent claims
        of one impression from the same status: exactly one moves it."""
        raise NotImplementedError

    def take_impressions(self, name: str, ids: Sequence[str], from_status: Sequence[str],
                         to_status: str, now: float) -> tuple[dict[str, Impression], list[str]]:
        """:meth:`get_impressions` and :meth:`claim_impressions` in one atomic step: the
        unexpired impressions among ``ids`` as they were before (their old statuses), and
        the ids moved. (A label by id reads its impression and claims it in one round
        trip, and no sweep can claim it in between.)"""
        raise NotImplementedError

    def due_impressions(self, name: str, statuses: Sequence[str], shown_before: float,
                        now: float, limit: int) -> list[tuple[str, Impression]]:
        """Unexpired impressions with a status in ``statuses`` shown at or before
        ``shown_before``, oldest showing first (ties by id), at most ``limit``."""
        raise NotImplementedError

    def count_impressions(self, name: str, now: float) -> dict[str, int]:
        """Unexpired impressions by status (every status in IMPRESSION_STATUSES, 0 if none)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections."""


def check_name(name: str) -> str:
    """Reject what no store can hold as a model name: empty or with control characters."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a model name must be a non-empty string; got {name!r}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise ValueError(f"a model name must not contain control characters; got {name!r}")
    return name


def check_event_ids(event_ids: Sequence[str | None]) -> list[str | None]:
    """The ids as a list, each a str or None (TypeError otherwise)."""
    ids = list(event_ids)
    for i, eid in enumerate(ids):
        if eid is not None and not isinstance(eid, str):
            raise TypeError(f"event id {i} must be a str or None; got {type(eid).__name__}")
    return ids


def check_replica(replica: str) -> str:
    """A replica id: a non-empty str without control characters (ValueError otherwise)."""
    if not isinstance(replica, str) or not replica:
        raise ValueError(f"a replica id must be a non-empty string; got {replica!r}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in replica):
        raise ValueError(f"a replica id must not contain control characters; got {replica!r}")
    return replica


def check_ttl(ttl: float) -> int:
    """A lease or registry time-to-live in seconds, as whole milliseconds (at least 1);
    ValueError unless a positive finite number."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise ValueError(f"ttl must be a number of seconds; got {ttl!r}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"ttl must be a positive finite number of seconds; got {ttl!r}")
    return max(1, math.ceil(round(ttl * 1000, 6)))  # (0.7 s is 700.0000000000001 ms)


def check_token(token: int | None) -> int | None:
    """A fencing token: None (no fence) or a non-negative int (ValueError otherwise)."""
    return None if token is None else check_position(token, "token")


def check_position(value: int, what: str) -> int:
    """A non-negative int (bool excluded), else ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative int; got {value!r}")
    return value


def check_delta_versions(base: int, version: int) -> tuple[int, int]:
    """A delta's (base, version): positions with base < version, else ValueError."""
    base = check_position(base, "base")
    version = check_position(version, "version")
    if base >= version:
        raise ValueError(f"a delta's base ({base}) must be before its version ({version})")
    return base, version


def check_time(value: float, what: str) -> float:
    """Unix seconds as a finite float (TypeError, ValueError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds; got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite; got {value!r}")
    return float(value)


def check_keep_group(items: Sequence[tuple[str, bytes]] | PackedItems, shown_at: float,
                     expires_at: float) -> tuple[PackedItems, float, float]:
    """One keep's arguments checked: the items packed (the first of each id), shown_at,
    expires_at (after shown_at)."""
    packed = PackedItems.of(items)
    shown = check_time(shown_at, "shown_at")
    expires = check_time(expires_at, "expires_at")
    if expires <= shown:
        raise ValueError(f"expires_at ({expires!r}) must be after shown_at ({shown!r})")
    return packed, shown, expires
