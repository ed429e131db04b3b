"""Every Prometheus metric the service exports, defined in one place.

Per-model series carry a ``model`` label and are removed when the model is deleted.

With several worker processes (``aucstream serve --workers N``) the CLI points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh folder, every worker writes its values there, and
``/metrics`` (:func:`exposition`) adds them up whichever worker answers: counters and
histograms sum over workers; a model's gauges (every worker is a replica of every model)
show the largest live value, the store's health the smallest. A deleted model's series
stay in the other workers' files until they restart.
"""

from __future__ import annotations

import contextlib
import os

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)

__all__ = ["Metrics", "exposition", "multiprocess_dir", "process_exited"]

# Gauges every worker holds for the same model: the largest live value.
_REPLICA = "livemax"


def multiprocess_dir() -> str | None:
    """The folder of prometheus_client's multiprocess mode, if it is on."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def exposition(registry: CollectorRegistry) -> bytes:
    """The text of /metrics: this process's registry, or every worker's values."""
    if multiprocess_dir() is None:
        return generate_latest(registry)
    merged = CollectorRegistry()
    multiprocess.MultiProcessCollector(merged)
    return generate_latest(merged)


def process_exited() -> None:
    """Multiprocess mode: drop this worker's live gauges (at its shutdown)."""
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(os.getpid())

# The *_created series double the exposition and nobody graphs them.
disable_created_metrics()

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0)


class Metrics:
    """The service's metric objects, on their own registry (one per app instance)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.rolling_auc = Gauge(
            "aucstream_rolling_auc", "Exact AUC of the model's prequential scores over its "
            "rolling window (NaN while a class is missing from the window)", ["model"],
            registry=r, multiprocess_mode=_REPLICA)
        self.log_loss = Gauge(
            "aucstream_log_loss", "Mean log loss of the probabilities /score gives, over the "
            "calibration's window of test-then-train pairs (NaN before any)", ["model"],
            registry=r, multiprocess_mode=_REPLICA)
        self.impressions = Gauge(
            "aucstream_impressions", "Scored items kept for their label (models with "
            "feedback), by status: pending, labelled, timing_out, timed_out",
            ["model", "status"], registry=r, multiprocess_mode=_REPLICA)
        self.served_auc = Gauge(
            "aucstream_served_auc", "AUC of the scores served to kept items (models with "
            "feedback) against the labels they got, over the model's rolling window; this "
            "process's joins and timeouts (NaN while a class is missing)", ["model"],
            registry=r, multiprocess_mode=_REPLICA)
        self.request_auc = Gauge(
            "aucstream_request_auc", "Mean AUC within recent /score requests of a model with "
            "feedback, once all their items have labels (group AUC; this process's view; "
            "NaN before any)", ["model"], registry=r, multiprocess_mode=_REPLICA)
        self.impressions_kept = Counter(
            "aucstream_impressions_kept", "Scored items kept for their label by requests to "
            "this process", ["model"], registry=r)
        self.labels_joined = Counter(
            "aucstream_labels_joined", "Labels by id joined with a kept item, by requests to "
            "this process (late positives included)", ["model"], registry=r)
        self.labels_unmatched = Counter(
            "aucstream_labels_unmatched", "Labels by id with no kept item (unknown or expired)",
            ["model"], registry=r)
        self.timeout_negatives = Counter(
            "aucstream_timeout_negatives", "Impressions learned as negatives after their "
            "timeout, by this process's sweeps", ["model"], registry=r)
        self.label_delay = Histogram(
            "aucstream_label_delay_seconds", "Seconds from an item's scoring to its label",
            ["model"], buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86_400),
            registry=r)
        self.events_learned = Counter(
            "aucstream_events_learned", "Events learned from requests to this process, by "
            "label (replicas and workers each count their own: the sum is the total)",
            ["model", "label"], registry=r)
        self.duplicates = Counter(
            "aucstream_duplicate_events", "Events skipped because their id was seen before",
            ["model"], registry=r)
        self.learn_latency = Histogram(
            "aucstream_learn_latency_seconds", "POST /learn latency (validation to ack)",
            ["model"], buckets=_LATENCY_BUCKETS, registry=r)
        self.score_latency = Histogram(
            "aucstream_score_latency_seconds", "POST /score latency", ["model"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.errors = Counter(
            "aucstream_request_errors", "Requests answered with an error, by reason",
            ["reason"], registry=r)
        self.buffer_fill = Gauge(
            "aucstream_buffer_fill", "Rows held in the model's class buffer",
            ["model", "label"], registry=r, multiprocess_mode=_REPLICA)
        self.version = Gauge(
            "aucstream_model_version", "Events applied to the model", ["model"], registry=r,
            multiprocess_mode=_REPLICA)
        self.checkpoint_age = Gauge(
            "aucstream_checkpoint_age_seconds", "Seconds since the model's last checkpoint",
            ["model"], registry=r, multiprocess_mode=_REPLICA)
        self.checkpoint_version = Gauge(
            "aucstream_checkpoint_version", "Model version covered by the last checkpoint",
            ["model"], registry=r, multiprocess_mode=_REPLICA)
        self.log_entries = Gauge(
            "aucstream_log_entries", "Entries in the model's durable log (since its last trim)",
            ["model"], registry=r, multiprocess_mode=_REPLICA)
        self.refused = Counter(
            "aucstream_refused_events", "Events of log entries the model refused to learn "
            "because they would make its state non-finite", ["model"], registry=r)
        self.promotions = Counter(
            "aucstream_promotions", "Times an 'auto' model's serving candidate changed, "
            "counted by the process whose request brought the change", ["model"],
            registry=r)
        self.serving_candidate = Gauge(
            "aucstream_serving_candidate", "Index of the candidate an 'auto' model scores "
            "with", ["model"], registry=r, multiprocess_mode=_REPLICA)
        self.candidate_quality = Gauge(
            "aucstream_candidate_quality", "AUC of each candidate's test-then-train scores "
            "within the recent windows ('auto' models; NaN before the first window with "
            "both classes)", ["model", "candidate"], registry=r, multiprocess_mode=_REPLICA)
        self._candidates: dict[str, set[str]] = {}  # candidate labels set, per model
        self.models = Gauge("aucstream_models", "Models hosted", registry=r,
                            multiprocess_mode=_REPLICA)
        self.replicas = Gauge(
            "aucstream_replicas", "Live replicas (processes) sharing the store, as last "
            "announced", registry=r, multiprocess_mode=_REPLICA)
        self.owned_models = Gauge(
            "aucstream_owned_models", "Models this process owns (learns, checkpoints and "
            "publishes); the others it serves from their owners' publications", registry=r,
            multiprocess_mode="livesum")
        self.ingest_entries = Counter(
            "aucstream_ingest_entries", "Stream entries this process's ingesters handled, "
            "by outcome (learned, or dead_letter: kept on the dead-letter stream with their "
            "error)", ["model", "outcome"], registry=r)
        self.ingest_events = Counter(
            "aucstream_ingest_events", "Events learned from stream entries by this process's "
            "ingesters (duplicates by id excluded)", ["model"], registry=r)
        self.ingest_lag = Gauge(
            "aucstream_ingest_lag", "Entries of a model's stream not yet delivered to its "
            "consumer group, as its owner last read", ["model"], registry=r,
            multiprocess_mode=_REPLICA)
        self.quarantined = Gauge(
            "aucstream_quarantined_models", "Models that could not be recovered or applied "
            "(their requests answer 503; GET /models/{name} says why)", registry=r,
            multiprocess_mode=_REPLICA)
        self.store_up = Gauge(
            "aucstream_store_up", "1 if the last store operation succeeded", registry=r,
            multiprocess_mode="livemin")

    def set_candidate_quality(self, model: str, candidate: str, value: float) -> None:
        self._candidates.setdefault(model, set()).add(candidate)
        self.candidate_quality.labels(model, candidate).set(value)

    def forget(self, model: str) -> None:
        """Drop every series of a deleted model."""
        for metric in (self.rolling_auc, self.log_loss, self.learn_latency, self.score_latency,
                       self.version, self.checkpoint_age, self.checkpoint_version, self.log_entries,
                       self.duplicates, self.refused, self.promotions,
                       self.serving_candidate, self.impressions_kept, self.labels_joined,
                       self.labels_unmatched, self.timeout_negatives, self.label_delay,
                       self.served_auc, self.request_auc, self.ingest_events,
                       self.ingest_lag):
            with contextlib.suppress(KeyError):
                metric.remove(model)
        for candidate in self._candidates.pop(model, ()):
            with contextlib.suppress(KeyError):
                self.candidate_quality.remove(model, candidate)
        for status in ("pending", "labelled", "timing_out", "timed_out"):
            with contextlib.suppress(KeyError):
                self.impressions.remove(model, status)
        for outcome in ("learned", "dead_letter"):
            with contextlib.suppress(KeyError):
                self.ingest_entries.remove(model, outcome)
        for label in ("negative", "positive"):
            for metric in (self.events_learned, self.buffer_fill):
                with contextlib.suppress(KeyError):
                    metric.remove(model, label)
