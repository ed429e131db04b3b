"""The storage contract shared by the Redis store and the embedded SQLite store.

The durable log is the source of truth. Per model a store keeps:

- the model's configuration (a JSON-able dict, written once at creation);
- the event log: entries appended in one total order, each an opaque payload (an
  encoded batch of events) covering a contiguous range of event positions;
- recent event ids, so that a retried event is not learned twice;
- the latest checkpoint: an opaque learner-state blob and the position it covers.

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
exist. A model that is deleted and created again is a new model: its log starts again at
position 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "IMPRESSION_STATUSES",
    "AppendOutcomeUnknown",
    "AppendResult",
    "Checkpoint",
    "Impression",
    "LogEntry",
    "ModelExists",
    "ModelNotFound",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "check_event_ids",
    "check_name",
    "check_position",
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


@dataclass(frozen=True)
class Checkpoint:
    """A learner-state blob that includes every entry with ``end <= version``."""

    version: int
    blob: bytes
    created_at: float  # unix seconds


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

    def save_checkpoint(self, name: str, version: int, blob: bytes) -> bool:
        """Keep ``blob`` as the checkpoint if ``version`` is newer than the stored one.

        Returns whether it was kept: checkpoints only move forward, an older or equal
        version is ignored (False). Raise ValueError if ``version`` is negative or beyond
        the log end. Durable on return.
        """

    def load_checkpoint(self, name: str) -> Checkpoint | None:
        """The latest checkpoint, or None."""

    def trim(self, name: str, upto: int, keep_ids: int) -> None:
        """Drop entries with ``end <= upto`` and ids of events at positions ``<= upto - keep_ids``.

        ``upto`` is first lowered to the stored checkpoint's version (nothing is trimmed
        without a checkpoint), so a trim can never drop an event that no checkpoint
        covers. The dedup window therefore always holds at least the ids of the
        ``keep_ids`` events before the checkpoint and of every event after it.
        """

    def set_pin(self, name: str, candidate: int | None) -> int:
        """Record that from the log's current end on, an 'auto' model serves ``candidate``
        (None: its own choice again); return that position. Atomic with appends: every
        entry appended later starts at or after it. Raise ModelNotFound."""
        raise NotImplementedError

    def read_pins(self, name: str) -> list[tuple[int, int | None]]:
        """Every pin recorded, oldest first: (position, candidate or None)."""
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


def check_position(value: int, what: str) -> int:
    """A non-negative int (bool excluded), else ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative int; got {value!r}")
    return value
