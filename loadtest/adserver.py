"""An ad server against aucstream: score → show → click later, on a real clock.

Creates a model with ``feedback``, then for ``--seconds`` scores slates of impressions
(items with ids, from :class:`loadtest.delays.DelayedClicks` with its delays scaled down
to seconds), shows every item, and posts each observed click as ``{"id", "label": 1}``
when its delay has passed; the service learns the unclicked ones as negatives after
``negative_after_s``. At the end it waits for the last timeouts and checks the books
against the model: every kept impression is resolved (labelled by a click in time, or
timed out), each timed-out impression is one negative, and each click the service
accepted is one positive (in time, or late: the late-positive rule) — nothing learned
twice, nothing lost.

    python -m loadtest.adserver --url http://127.0.0.1:8000 --seconds 20
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from .delays import DelayedClicks

__all__ = ["Books", "run"]


@dataclass
class Books:
    """What the driver did, and what it expects the model to have learned."""

    shown: int = 0
    kept: int = 0
    clicks_sent: int = 0
    clicks_accepted: int = 0
    unmatched: int = 0
    duplicates: int = 0
    late_clicks: int = 0  # sent (by this driver's clock) after their impression's timeout
    errors: list[str] = field(default_factory=list)

    def problems(self, info: dict[str, Any]) -> list[str]:
        """Where the model's books and the driver's disagree (empty: they balance)."""
        imp = info["feedback"]["impressions"]
        out = list(self.errors)
        if imp.get("pending", 0) or imp.get("timing_out", 0):
            out.append(f"unresolved impressions: {imp}")
        if imp.get("labelled", 0) + imp.get("timed_out", 0) != self.kept:
            out.append(f"{self.kept} kept, but {imp} resolved")
        want = {"positive": self.clicks_accepted, "negative": imp.get("timed_out", 0)}
        if info["events"] != want:
            out.append(f"learned {info['events']}, expected {want}")
        return out


def run(client: httpx.Client, *, model: str = "adserver", seconds: float = 10.0,
        slate: int = 20, rate: float = 200.0, timeout_s: float = 2.0, time_scale: float = 0.01,
        window_s: float | None = None, seed: int = 0, bits: int = 18,
        say: Any = print) -> tuple[Books, dict[str, Any]]:
    """Drive the service for ``seconds``; return the books and the model's final info.

    ``rate`` impressions per second are shown; click delays are the timeline's times
    ``time_scale`` (a 60 s mean delay becomes 0.6 s at 0.01); clicks later than
    ``window_s`` (default 20 × ``timeout_s``) are not attributed.
    """
    clicks = DelayedClicks(seed=seed, rate=rate, fast_mean_s=60.0 * time_scale,
                           slow_mean_s=3 * 3600.0 * time_scale,
                           window_s=20 * timeout_s if window_s is None else window_s)
    spec = {"name": model, "learner": "cbr_diag_fifo", "params": {"C": 1e-4},
            "features": {"kind": "hashed", "bits": bits},
            # impressions outlive the attribution window, so that the books can still be
            # read from their statuses at the end
            "feedback": {"window_s": 2 * clicks.window_s + timeout_s + 30.0,
                         "negative_after_s": timeout_s}}
    client.delete(f"/models/{model}")
    r = client.post("/models", json=spec)
    r.raise_for_status()
    books = Books()
    pending: list[tuple[float, str, float]] = []  # (due wall time, id, shown wall time)
    start = time.monotonic()
    i = 0
    while time.monotonic() - start < seconds:
        now = time.monotonic()
        target = int((now - start) * rate)
        if i < target:  # show the next slate
            imps = clicks.impressions(i, i + slate)
            items = [{"features": e["features"], "id": e["id"]} for e in imps]
            out = client.post("/score", json={"model": model, "items": items}).json()
            books.shown += len(items)
            books.kept += int(out.get("kept", 0))
            for e in imps:
                if e["click_at"] is not None:
                    delay = (e["click_at"] - e["shown_at"])
                    heapq.heappush(pending, (now + delay, e["id"], now))
            i += slate
        _send_due(client, model, pending, books, timeout_s, time.monotonic())
        if i >= target:
            time.sleep(0.005)
    deadline = time.monotonic() + clicks.window_s
    while pending and time.monotonic() < deadline:  # the clicks still to come
        _send_due(client, model, pending, books, timeout_s, time.monotonic())
        time.sleep(0.01)
    time.sleep(timeout_s + 1.0)  # the last timeouts fire, then a sync round counts them
    info = client.get(f"/models/{model}").json()
    say(f"shown {books.shown}, kept {books.kept}, clicks sent {books.clicks_sent} "
        f"({books.late_clicks} after their timeout), accepted {books.clicks_accepted}, "
        f"unmatched {books.unmatched}; learned {info['events']}, impressions "
        f"{info['feedback']['impressions']}")
    return books, info


def _send_due(client: httpx.Client, model: str, pending: list, books: Books,
              timeout_s: float, now: float) -> None:
    events = []
    while pending and pending[0][0] <= now and len(events) < 500:
        due, item_id, shown = heapq.heappop(pending)
        events.append({"id": item_id, "label": 1})
        if due - shown >= timeout_s:
            books.late_clicks += 1
    if not events:
        return
    r = client.post("/learn", json={"model": model, "events": events})
    if r.status_code != 200:
        books.errors.append(f"{r.status_code}: {r.text[:200]}")
        return
    body = r.json()
    books.clicks_sent += len(events)
    books.clicks_accepted += body["accepted"]
    books.unmatched += len(body.get("unmatched", []))
    books.duplicates += body["duplicates"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.adserver",
                                description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--api-key", default=None)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rate", type=float, default=200.0, help="impressions per second")
    p.add_argument("--timeout", type=float, default=2.0, help="negative_after_s")
    args = p.parse_args(argv)
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    with httpx.Client(base_url=args.url, headers=headers, timeout=30.0) as client:
        books, info = run(client, seconds=args.seconds, rate=args.rate, timeout_s=args.timeout)
    problems = books.problems(info)
    print("books balance" if not problems else f"books do not balance: {problems[:3]}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
