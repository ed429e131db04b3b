"""Service configuration: one settings class, read from ``AUCSTREAM_*`` environment variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "get_settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AUCSTREAM_", extra="ignore")

    # Storage: Redis when a URL is given, else the embedded SQLite store in data_dir.
    redis_url: str | None = Field(None, description="redis://host:port/db; unset = SQLite")
    redis_prefix: str = Field("aucstream", description="prefix of every Redis key")
    data_dir: Path = Field(Path("./data"), description="directory of the SQLite store")

    # HTTP server (used by `aucstream serve`).
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    workers: int = Field(1, ge=1, le=64)

    # Durability and recovery.
    checkpoint_every: int = Field(10_000, ge=1, description="events between checkpoints")
    checkpoint_interval: float = Field(30.0, gt=0, description="seconds between checkpoints")
    dedup_window: int = Field(
        100_000, ge=0, description="events whose ids are remembered for retries, at least"
    )
    log_retention: int = Field(
        0, ge=0, description="events of log kept behind the latest checkpoint (audit, replay)"
    )
    sync_interval: float = Field(
        1.0, gt=0, description="seconds between catching up with the log (other replicas)"
    )
    snapshot_interval: float = Field(
        0.2, ge=0, description="seconds between scoring-snapshot copies under load"
    )

    # Scale-out: each model is learned by one owner replica (a lease in the store);
    # the other replicas serve what the owner publishes.
    replica_id: str | None = Field(
        None, description="this replica's name; unset = the host name (with one worker) or "
        "host:pid (with several)"
    )
    lease_ttl: float = Field(
        3.0, gt=0, description="seconds an owner's lease lasts unless renewed; a replica "
        "killed hard gives its models up this long after its last renewal"
    )
    max_staleness: float = Field(
        1.0, gt=0, description="seconds a follower's scores may lag its owner's at most"
    )
    publish_interval: float = Field(
        0.1, gt=0, description="seconds between an owner's publications of a changing "
        "model to its followers (a delta of what changed; every so often the whole state)"
    )
    follow_interval: float = Field(
        0.02, gt=0, description="seconds between an owner's checks for models whose log "
        "another replica appended to (which wakes it) and a waiting follower's looks for a "
        "publication, while there are several replicas (wake-ups that were lost are covered "
        "by the sync loop's look at every model each sync_interval)"
    )

    # Request limits.
    max_events_per_request: int = Field(10_000, ge=1)
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="bytes")
    max_feature_value: float = Field(
        1e12, gt=0, description="bound on |value| of every feature value in /learn and "
        "/score (larger → 422): far above any sane raw feature, far below what overflows "
        "a learner's arithmetic (products of four values stay finite)"
    )
    header_timeout: float = Field(
        10.0, gt=0, description="seconds for a request's headers to arrive in full (else 408)"
    )
    body_timeout: float = Field(
        30.0, gt=0, description="seconds for a request's body to arrive in full (else 408)"
    )
    max_connections: int = Field(
        1024, ge=1, description="open connections per worker; more are refused (503)"
    )

    # Resources and store outcomes.
    max_models: int = Field(1000, ge=1, description="models one store holds at most")
    append_resolve_timeout: float = Field(
        10.0, ge=0, description="seconds spent finding out whether an append cut off in "
        "flight (a Redis timeout) was written, before answering 504 outcome_unknown"
    )

    # Auth: comma-separated bearer keys. Write keys may do everything; read keys may
    # list, inspect and score. Unset = no auth.
    api_keys: str | None = None
    read_keys: str | None = None
    docs: bool = Field(True, description="serve /docs, /redoc and /openapi.json (they "
                       "describe the API, hold no data, and need no key)")

    # Observability.
    rolling_auc_window: int = Field(1000, ge=1, description="default window of rolling AUC")
    log_json: bool = False
    log_level: str = "info"
    otel: bool = Field(
        False, description="FastAPI's native OpenTelemetry spans and metrics (with a "
        "configured provider); off spares every request the check for a provider"
    )

    def write_key_set(self) -> frozenset[str]:
        return _keys(self.api_keys)

    def read_key_set(self) -> frozenset[str]:
        return _keys(self.read_keys)

    @property
    def auth_enabled(self) -> bool:
        return bool(self.write_key_set() or self.read_key_set())


@lru_cache(maxsize=64)  # read on every request that needs auth
def _keys(raw: str | None) -> frozenset[str]:
    return frozenset(k.strip() for k in (raw or "").split(",") if k.strip())


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read once (tests override the dependency)."""
    return Settings()
