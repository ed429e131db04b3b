"""The fault benchmark's audit: what the durable model holds, event by event.

Reads a model's whole log from the store (the benchmark's service keeps it: a huge
``AUCSTREAM_LOG_RETENTION``), decodes each entry (:func:`service.codec.decode_batch`),
drops the rows the store marked as duplicates (``skip``) and replays the entries in log
order into a fresh learner of the model's stored config, as the service's applier does
(``score_then_learn``; an entry whose learning raises ``models.NonFiniteError`` is
*refused*: skipped whole, as every replica skips it). Each learned row's marker (see
:mod:`loadtest._faults_load`) is then checked against the requests the clients made:

- **lost**: events of acknowledged requests whose marker is in no learned row;
- **learned twice**: markers in more than one learned row, for requests with ids and
  (separately, with the answers their attempts got) for requests without;
- **learned, never acknowledged**: learned although no attempt got a 200 (in flight
  when something broke; allowed);
- **learned despite a 4xx**: events of requests answered 4xx that are learned;
- the replayed learner's event count and scores, to compare with the service's
  recovered model.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aucstream.service.hosting import take_rows
from loadtest._faults_load import MARK, Req

__all__ = ["ModelAudit", "audit_model", "markers_of"]


def markers_of(X: Any, mark_index: int | None) -> np.ndarray:
    """Each row's marker (-1 where it cannot be read): ``x[0]`` of a dense batch, else
    the sum of the values at ``mark_index`` of a CSR batch."""
    if mark_index is None:
        v = np.asarray(X, dtype=np.float64)[:, 0]
    else:
        indptr, indices, values = X
        rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        at = indices == mark_index
        v = np.bincount(rows[at], weights=values[at], minlength=len(indptr) - 1)
    with np.errstate(invalid="ignore", over="ignore"):
        k = np.rint(v / MARK)
        ok = np.isfinite(k) & (k >= 1) & (np.abs(v / MARK - k) < 1e-3)
    return np.where(ok, k, -1).astype(np.int64)


@dataclass
class ModelAudit:
    name: str
    entries: int = 0
    refused_entries: int = 0  # entries the replay refused (non-finite), as the service does
    rows: int = 0  # rows replayed (skip excluded)
    learned: int = 0  # rows learned (refused entries excluded)
    unreadable: int = 0  # learned rows without a readable marker
    unknown: int = 0  # learned rows with a marker no request sent
    trimmed: bool = False  # the log no longer starts at 0: the audit is incomplete
    replay_error: str = ""  # the replay stopped: an entry the learner could not take
    acked: int = 0
    lost: int = 0
    lost_poison: int = 0  # of which events of poison requests (answered 200, not learned)
    twice_ids: int = 0
    twice_noids: int = 0
    twice_noids_after: Counter = field(default_factory=Counter)  # its attempts → events
    unacked_learned: int = 0
    learned_despite_4xx: int = 0
    lost_examples: list[str] = field(default_factory=list)
    scores: np.ndarray | None = None  # the replayed learner's scores of the probe items


def audit_model(store: Any, name: str, mark_index: int | None, reqs: list[Req],
                probe_items: list[dict[str, Any]] | None = None) -> ModelAudit:
    """Audit one model's log against the requests sent to it (``Req.model == name``)."""
    from aucstream import models
    from aucstream.service.codec import decode_batch
    from aucstream.service.hosting import HostedModel

    out = ModelAudit(name)
    config = store.get_config(name)
    # the learner the config builds, fed as the service's applier feeds it (a compact
    # hashed model through its column index)
    replica = HostedModel(config)
    encoder = replica.encoder
    refusal = getattr(models, "NonFiniteError", None)
    _, first, _ = store.log_bounds(name)
    out.trimmed = first != 0
    marks: list[np.ndarray] = []
    for entry in store.read_log(name, 0):
        out.entries += 1
        y, X = decode_batch(entry.payload)
        if entry.skip:
            keep = np.ones(y.shape[0], bool)
            keep[list(entry.skip)] = False
            y, X = y[keep], take_rows(X, keep)
        out.rows += y.shape[0]
        if not out.replay_error and y.shape[0]:
            try:
                replica._learn(X, y)
            except Exception as exc:
                if refusal is None or not isinstance(exc, refusal):
                    out.replay_error = (f"entry {entry.start}..{entry.end}: "
                                        f"{type(exc).__name__}: {exc}")
                out.refused_entries += 1
                continue
        marks.append(markers_of(X, mark_index))
    allm = np.concatenate(marks) if marks else np.zeros(0, np.int64)
    out.learned = int(allm.size)
    out.unreadable = int(np.count_nonzero(allm < 0))
    if probe_items is not None and not out.replay_error:
        out.scores = replica._make_snapshot().score(encoder.encode(probe_items, field="items"))
    mine = [r for r in reqs if r.model == name]
    top = max([r.k0 + r.n for r in mine] + [int(allm.max()) + 1 if allm.size else 1])
    counts = np.bincount(allm[allm >= 0], minlength=top)
    sent = np.zeros(top, bool)
    for r in mine:
        sent[r.k0:r.k0 + r.n] = True
        c = counts[r.k0:r.k0 + r.n]
        if r.final == "refused":
            out.learned_despite_4xx += int(np.count_nonzero(c))
        elif r.acked:
            out.acked += r.n
            missing = int(np.count_nonzero(c == 0))
            out.lost += missing
            out.lost_poison += missing if r.kind not in ("load", "probe") else 0
            if missing and len(out.lost_examples) < 5:
                out.lost_examples.append(f"{missing} of {r.kind} k={r.k0}+{r.n} ids={r.ids} "
                                         f"answers {'→'.join(r.statuses)}")
        else:
            out.unacked_learned += int(np.count_nonzero(c > 0))
        twice = int(np.count_nonzero(c > 1))
        if r.ids:
            out.twice_ids += twice
        elif twice:
            out.twice_noids += twice
            out.twice_noids_after["→".join(r.statuses)] += twice
    out.unknown = int(counts[~sent].sum())
    return out
