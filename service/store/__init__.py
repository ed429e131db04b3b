"""The durable log and checkpoints: Redis when a URL is given, else embedded SQLite.

Redis and SQLite code lives here and nowhere else. Both stores implement
:class:`~service.store.base.Store` and pass the one contract suite in ``tests/store``.
"""

from __future__ import annotations

from pathlib import Path

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
    Store,
    StoreError,
    StoreUnavailable,
)
from aucstream.service.store.redis_store import RedisStore
from aucstream.service.store.sqlite_store import SqliteStore

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
    "RedisStore",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "open_store",
]


def open_store(redis_url: str | None, data_dir: str | Path, *, prefix: str = "aucstream",
               resolve_timeout: float = 10.0, dedup_window: int = 100_000) -> Store:
    """The store the settings ask for.

    ``redis_url`` set: a :class:`RedisStore` on it with keys under ``prefix`` (no network
    call yet; :meth:`~Store.ping` checks the server). Unset or empty: a
    :class:`SqliteStore` in ``<data_dir>/aucstream.sqlite3``, created with its directory
    if missing (``prefix`` is not used: the file holds one service's models).
    ``resolve_timeout``: see :class:`RedisStore` (SQLite always knows an append's outcome).
    ``dedup_window``: the ids a model remembers, which sizes a new Redis model's dedup
    hash (see :class:`RedisStore`).
    """
    if redis_url:
        return RedisStore.from_url(redis_url, prefix=prefix, resolve_timeout=resolve_timeout,
                                   dedup_window=dedup_window)
    return SqliteStore.in_dir(data_dir)
