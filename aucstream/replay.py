"""``aucstream replay FILE --model M``: stream a file of labelled rows into a running
service, in order, with progress; resumable without learning a row twice.

Formats (by ``--format``, else the file's extension):

- ``csv`` — a header row; the ``--label`` column (default ``label``) holds 0/1, -1/+1 or
  true/false. Without ``--bits`` every other column is a number: a dense row. With
  ``--bits`` the other columns are named features (numbers as values, anything else as
  ``column=value``), hashed.
- ``libsvm`` (``.svm``, ``.libsvm``, ``.txt``) — ``label index:value ...``; dense rows of
  the largest index (a first pass finds it), or hashed feature names with ``--bits``.
- ``jsonl`` (``.jsonl``, ``.ndjson``) — one event per line, as ``POST /learn`` takes it.

A model that does not exist is created (``--learner``, default ``auto``) with the feature
spec the file implies. Every event gets the id ``<file name>-<row>`` (a JSON line's own
id is kept), so a batch retried after an error or a lost connection is never learned
twice. ``--resume`` continues an interrupted replay at the row the model's version says
was reached — assuming the replay is the model's only writer — so it stays exact even
after the service has forgotten old ids (its dedup window).
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["main", "read_events"]

_FORMATS = {".csv": "csv", ".svm": "libsvm", ".libsvm": "libsvm", ".txt": "libsvm",
            ".jsonl": "jsonl", ".ndjson": "jsonl"}
_TRUE = {"1", "+1", "1.0", "true", "True", "yes"}
_FALSE = {"0", "-1", "0.0", "-1.0", "false", "False", "no"}


class ReplayError(Exception):
    """A file or model the replay cannot use (one line for the user)."""


def _label(text: str, where: str) -> int:
    t = text.strip()
    if t in _TRUE:
        return 1
    if t in _FALSE:
        return 0
    raise ReplayError(f"{where}: the label {text!r} is not 0/1, -1/+1 or true/false")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def format_of(path: Path, given: str | None) -> str:
    if given:
        return given
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ReplayError(f"{path.name}: unknown extension; pass --format csv, libsvm or jsonl")
    return fmt


def read_events(path: Path, fmt: str, label: str = "label", hashed: bool = False,
                dim: int | None = None) -> Iterator[dict[str, Any]]:
    """The file's rows as events (without ids), in order."""
    if fmt == "jsonl":
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        event = json.loads(line)
                    except ValueError as exc:
                        raise ReplayError(f"{path.name}:{n}: not JSON ({exc})") from None
                    if not isinstance(event, dict):
                        raise ReplayError(f"{path.name}:{n}: not an event object")
                    yield event
        return
    if fmt == "csv":
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or label not in reader.fieldnames:
                raise ReplayError(f"{path.name}: no {label!r} column (--label names it)")
            columns = [c for c in reader.fieldnames if c != label]
            for n, row in enumerate(reader, 2):
                y = _label(row[label], f"{path.name}:{n}")
                if hashed:
                    feats: dict[str, Any] = {}
                    for c in columns:
                        v = row[c]
                        if v is None or v == "":
                            continue
                        num = _number(v)
                        feats[c] = num if num is not None else v
                    yield {"features": feats, "label": y}
                else:
                    x = [_number(row[c] or "") for c in columns]
                    if any(v is None for v in x):
                        raise ReplayError(f"{path.name}:{n}: a non-numeric value; pass "
                                          "--bits to hash named features")
                    yield {"x": x, "label": y}
        return
    if fmt == "libsvm":
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                parts = line.split("#", 1)[0].split()
                if not parts:
                    continue
                y = _label(parts[0], f"{path.name}:{n}")
                pairs = []
                for p in parts[1:]:
                    idx, _, val = p.partition(":")
                    v = _number(val)
                    if not idx.isdigit() or v is None:
                        raise ReplayError(f"{path.name}:{n}: {p!r} is not index:value")
                    pairs.append((int(idx), v))
                if hashed:
                    yield {"features": {str(i): v for i, v in pairs}, "label": y}
                else:
                    x = [0.0] * (dim or 0)
                    for i, v in pairs:
                        x[i - 1] = v
                    yield {"x": x, "label": y}
        return
    raise ReplayError(f"unknown format {fmt!r}")


def _libsvm_dim(path: Path) -> int:
    top = 0
    with path.open(encoding="utf-8") as f:
        for line in f:
            for p in line.split("#", 1)[0].split()[1:]:
                idx = p.partition(":")[0]
                if idx.isdigit():
                    top = max(top, int(idx))
    return top


def _features_of(first: dict[str, Any], bits: int | None) -> dict[str, Any]:
    if "x" in first:
        return {"kind": "dense", "dim": len(first["x"])}
    return {"kind": "hashed", "bits": bits or 20}


class _Progress:
    def __init__(self, total: int | None, start: int) -> None:
        self.total, self.start, self.t0 = total, start, time.monotonic()
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def show(self, done: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < (0.2 if self.tty else 5.0):
            return
        self.last = now
        rate = (done - self.start) / max(now - self.t0, 1e-9)
        text = f"{done:,}"
        if self.total:
            left = (self.total - done) / rate if rate > 0 else 0.0
            text += f" / {self.total:,} rows ({100 * done / self.total:.0f} %), ETA {left:.0f} s"
        text += f", {rate:,.0f} rows/s"
        end = "\n" if final or not self.tty else ""
        print(("\r" if self.tty else "") + text, end=end, file=sys.stderr, flush=True)


def run(args: Any) -> int:
    import httpx

    try:
        return _run(args)
    except httpx.TransportError as exc:
        raise ReplayError(f"cannot reach {args.url}: {exc}") from None


def _run(args: Any) -> int:
    from aucstream.client import APIError, Client, NotFound

    path = Path(args.file)
    if not path.is_file():
        raise ReplayError(f"{path}: no such file")
    fmt = format_of(path, args.format)
    hashed = args.bits is not None
    dim = _libsvm_dim(path) if fmt == "libsvm" and not hashed else None
    events = read_events(path, fmt, args.label, hashed, dim)
    total = None
    if fmt != "jsonl" or args.limit is None:
        with path.open(encoding="utf-8") as f:
            total = sum(1 for line in f if line.strip()) - (1 if fmt == "csv" else 0)
    if args.limit is not None:
        total = min(total, args.limit) if total is not None else args.limit
    with Client(args.url, api_key=args.api_key, retries=args.retries) as c:
        start = 0
        try:
            info = c.get_model(args.model)
            if not args.resume:
                raise ReplayError(f"model {args.model!r} exists: --resume continues it at "
                                  f"its version ({info['version']:,})")
            start = int(info["version"])
        except NotFound:
            first = next(read_events(path, fmt, args.label, hashed, dim), None)
            if first is None:
                raise ReplayError(f"{path.name}: no rows") from None
            spec = _features_of(first, args.bits)
            c.create_model(args.model, args.learner, features=spec,
                           standardize=args.standardize and spec["kind"] == "dense")
        progress = _Progress(total, start)
        batch: list[dict[str, Any]] = []
        sent = start
        try:
            for row, event in enumerate(events):
                if args.limit is not None and row >= args.limit:
                    break
                if row < start:
                    continue
                event.setdefault("id", f"{path.name}-{row}")
                batch.append(event)
                if len(batch) == args.batch:
                    c.learn(args.model, batch)
                    sent += len(batch)
                    batch = []
                    progress.show(sent)
            if batch:
                c.learn(args.model, batch)
                sent += len(batch)
        except APIError as exc:
            raise ReplayError(f"row {sent}: {exc}") from None
        progress.show(sent, final=True)
        info = c.get_model(args.model)
        auc = info.get("rolling_auc")
        print(f"{args.model}: version {info['version']:,}, rolling AUC "
              f"{'n/a' if auc is None else f'{auc:.4f}'}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("replay", help="stream a CSV, LIBSVM or JSON-lines file into a model",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("file")
    p.add_argument("--model", required=True)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--api-key", default=None)
    p.add_argument("--format", choices=("csv", "libsvm", "jsonl"))
    p.add_argument("--label", default="label", help="CSV: the label column (default label)")
    p.add_argument("--bits", type=int, help="hash named features into 2^bits dimensions")
    p.add_argument("--learner", default="auto", help="for a new model (default auto)")
    p.add_argument("--standardize", action="store_true", help="a new dense model standardises")
    p.add_argument("--batch", type=int, default=500, help="events per request (500)")
    p.add_argument("--limit", type=int, help="stop after this many rows")
    p.add_argument("--retries", type=int, default=10, help="per request (503, lost connection)")
    p.add_argument("--resume", action="store_true",
                   help="continue an existing model at the row its version says")
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="aucstream")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *(argv or [])])
    try:
        return run(args)
    except ReplayError as exc:
        print(f"aucstream replay: {exc}", file=sys.stderr)
        return 2
