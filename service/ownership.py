"""Which replica learns which model: replica names and rendezvous placement.

Every model has one owner, the replica holding its lease in the store; the owner applies
the log, checkpoints and publishes, and every other replica serves what it publishes.
Placement is rendezvous hashing over the live replicas: each replica computes the same
preferred owner for a model from the same list, so models spread evenly and only the
models of a replica that joins or leaves move.
"""

from __future__ import annotations

import hashlib
import os
import socket

from .settings import Settings

__all__ = ["preferred_owner", "replica_id"]


def replica_id(settings: Settings) -> str:
    """This process's replica name: the setting, else the host name, with the process id
    when several workers share the host (each worker is a replica). A single-worker
    replica keeps its name across restarts, so that it takes its own leases back at once."""
    base = settings.replica_id or socket.gethostname()
    return f"{base}:{os.getpid()}" if settings.workers > 1 else base


def _weight(model: str, replica: str) -> bytes:
    return hashlib.blake2b(f"{model}\x00{replica}".encode(), digest_size=8).digest()


def preferred_owner(model: str, live: list[str]) -> str | None:
    """The live replica that should own ``model`` (None if none is live)."""
    return max(live, key=lambda r: _weight(model, r)) if live else None
