"""A consumer of a Redis stream through a consumer group: what the stream ingester needs
from Redis (read new and stale entries, acknowledge, dead-letter, lag), on a single
server or a cluster. Every call raises StoreUnavailable when Redis fails."""

from __future__ import annotations

from typing import Any

import redis

from .redis_store import RedisStore

__all__ = ["StreamConsumer", "StreamEntry"]

StreamEntry = tuple[str, dict[bytes, bytes]]  # (entry id, fields)


def _entries(raw: Any) -> list[StreamEntry]:
    return [(eid.decode() if isinstance(eid, bytes) else eid, fields or {})
            for eid, fields in raw or [] if fields is not None]


class StreamConsumer:
    """``consumer`` in ``group`` on the stream ``key`` (one per ingesting model's owner)."""

    def __init__(self, store: RedisStore, key: str, group: str, consumer: str) -> None:
        self.store = store
        self.key = key
        self.group = group
        self.consumer = consumer

    def ensure_group(self, start: str) -> None:
        """Create the group if missing, at the stream's first entry ("earliest") or its
        end ("latest"); an existing group keeps its position."""
        with self.store._guard("xgroup create"):
            try:
                self.store._r.xgroup_create(self.key, self.group,
                                            id="0" if start == "earliest" else "$",
                                            mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def claim_stale(self, count: int, min_idle_ms: int) -> list[StreamEntry]:
        """Entries delivered to another consumer (a previous owner) and not acknowledged
        for ``min_idle_ms``: now this consumer's."""
        with self.store._guard("xautoclaim"):
            res = self.store._r.xautoclaim(self.key, self.group, self.consumer,
                                           min_idle_time=min_idle_ms, start_id="0-0",
                                           count=count)
        return _entries(res[1])

    def others_pending(self) -> bool:
        """Do other consumers of the group (previous owners) hold unacknowledged entries?"""
        with self.store._guard("xpending"):
            summary = self.store._r.xpending(self.key, self.group)
        for c in summary.get("consumers") or []:
            name = c["name"]
            if (name.decode() if isinstance(name, bytes) else name) != self.consumer \
                    and int(c["pending"]) > 0:
                return True
        return False

    def read(self, count: int, block_ms: int | None, pending: bool = False
             ) -> list[StreamEntry]:
        """New entries (``pending``: this consumer's delivered, unacknowledged ones)."""
        with self.store._guard("xreadgroup"):
            res = self.store._r.xreadgroup(self.group, self.consumer,
                                           {self.key: "0" if pending else ">"},
                                           count=count, block=None if pending else block_ms)
        return _entries(res[0][1]) if res else []

    def ack(self, ids: list[str]) -> None:
        if ids:
            with self.store._guard("xack"):
                self.store._r.xack(self.key, self.group, *ids)

    def dead_letter(self, dead_key: str, entry_id: str, error: str, events: bytes) -> None:
        """Keep an entry that cannot be learned, with its error, on ``dead_key``."""
        with self.store._guard("xadd dead letter"):
            self.store._r.xadd(dead_key, {"stream": self.key, "entry": entry_id,
                                          "error": error[:2000], "events": events})

    def lag(self) -> int | None:
        """Entries of the stream not yet delivered to the group (None if unknown)."""
        with self.store._guard("xinfo groups"):
            groups = self.store._r.xinfo_groups(self.key)
        for g in groups:
            name = g.get("name")
            if (name.decode() if isinstance(name, bytes) else name) == self.group:
                lag = g.get("lag")
                return None if lag is None else int(lag)
        return None
