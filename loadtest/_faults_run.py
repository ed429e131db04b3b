"""One run of the fault benchmark: a store, a scenario, a fresh service, the audit.

Timeline of a run (``duration`` seconds of load, 16 clients by default):

- ``kill9``: the service is killed (SIGKILL) at 35 % and restarted at once; the time
  from the restart to ``/readyz`` 200 and to every model answering /score is measured.
- ``redis-kill``: redis-server is killed (SIGKILL) at 30 % and restarted 3 s later on
  the same port and AOF directory (``appendfsync always``).
- ``redis-stall``: redis-server is stopped (SIGSTOP) at 30 % for 8 s, then resumed.
- ``full-disk``: the store's directory (SQLite's data dir, Redis's AOF dir) lives on a
  small tmpfs; at 25 % a filler file takes all but a few MB, the load fills the rest;
  3 s after the disk is full the filler is deleted and the load goes on. A redis-server
  that exits meanwhile (Redis exits on an AOF write error under ``appendfsync always``)
  is restarted once space is back, as a supervisor would.
- ``poison``: no fault; every 4th request of each client is a poison input.
- ``poison-open``: the same with the feature-value bound opened
  (``AUCSTREAM_MAX_FEATURE_VALUE=1e308``), so that huge values reach the log and the
  applier must refuse them, under concurrency (the entry may be applied by another
  thread than the request that appended it).

Then the clients stop (retries drain for up to 30 s), the service is killed (SIGKILL)
and restarted once more — the acknowledged events must survive into the recovered
model — and every model must be ready, serve finite scores and learn. Finally the
service is stopped and the store's log is audited (:mod:`loadtest._faults_audit`).
A service that exits by itself during a run is noted and restarted.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from loadtest._faults_audit import ModelAudit, audit_model
from loadtest._faults_load import (
    DENSE,
    HASHED,
    MAX_BODY,
    MAX_EVENTS,
    POISON,
    Load,
    ModelSpec,
    marker_index,
    score_items,
)
from loadtest._faults_procs import MountRefused, RedisProc, ServiceProc, Tmpfs, wait_ready

__all__ = ["SCENARIOS", "Options", "Row", "run_one"]

SCENARIOS = ("kill9", "redis-kill", "redis-stall", "full-disk", "poison", "poison-open")
REDIS_ONLY = ("redis-kill", "redis-stall")
PREFIX = "faults"


@dataclass
class Options:
    duration: float = 20.0
    clients: int = 16
    batch: int = 25
    drain: float = 30.0
    disk_mb: int = 256
    headroom_mb: int = 4
    progress_every: float = 2.0
    models: tuple[ModelSpec, ...] = (HASHED, DENSE)


@dataclass
class Row:
    """What one scenario x store run measured."""

    store: str
    scenario: str
    skipped: str = ""
    error: str = ""  # the run itself broke (a process that would not start, ...)
    wall: float = 0.0
    slowest_ack: float = 0.0  # seconds, first attempt to 200, of the slowest acked request
    acked: int = 0
    lost: int = 0
    lost_poison: int = 0
    twice_ids: int = 0
    twice_noids: int = 0
    twice_noids_after: Counter = field(default_factory=Counter)
    unacked_learned: int = 0
    learned_despite_4xx: int = 0
    statuses: Counter = field(default_factory=Counter)  # every attempt's outcome
    unexpected: list[str] = field(default_factory=list)  # load requests answered 4xx/5xx
    poison: dict[str, Counter] = field(default_factory=dict)  # kind -> outcomes
    poison_bad_body: Counter = field(default_factory=Counter)  # kind -> 4xx without the body
    created: list[str] = field(default_factory=list)  # poison models the service created
    mid_ready: float | None = None
    mid_scoring: float | None = None
    final_ready: float | None = None
    final_scoring: float | None = None
    serving: list[str] = field(default_factory=list)  # problems; empty = every model fine
    model_vs_log: dict[str, int | None] = field(default_factory=dict)  # events - learned
    scores_match: dict[str, bool | None] = field(default_factory=dict)  # service vs replay
    service_scores: dict[str, list[float]] = field(default_factory=dict)
    live_events: dict[str, int] = field(default_factory=dict)  # before the final kill -9
    audits: list[ModelAudit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, *keys: str) -> int:
        return sum(self.statuses[k] for k in keys)


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def env_for(data_dir: Path, redis_url: str | None, open_bound: bool = False) -> dict[str, str]:
    env = {"AUCSTREAM_DATA_DIR": str(data_dir), "AUCSTREAM_LOG_RETENTION": "1000000000",
           "AUCSTREAM_CHECKPOINT_EVERY": "5000", "AUCSTREAM_CHECKPOINT_INTERVAL": "5",
           "AUCSTREAM_SYNC_INTERVAL": "0.2", "AUCSTREAM_LOG_LEVEL": "warning",
           "AUCSTREAM_MAX_BODY_BYTES": str(MAX_BODY),
           "AUCSTREAM_MAX_EVENTS_PER_REQUEST": str(MAX_EVENTS),
           "AUCSTREAM_REDIS_PREFIX": PREFIX}
    if redis_url:
        env["AUCSTREAM_REDIS_URL"] = redis_url
    if open_bound:
        env["AUCSTREAM_MAX_FEATURE_VALUE"] = "1e308"
    return env


def finite_scores(http: httpx.Client, name: str, spec: dict[str, Any]) -> str | None:
    """None if the model answers /score with finite scores, else what is wrong."""
    try:
        r = http.post("/score", json={"model": name, "items": score_items(spec)})
    except httpx.HTTPError as exc:
        return f"{name}: /score {type(exc).__name__}"
    if r.status_code != 200:
        return f"{name}: /score {r.status_code} {r.text[:120]}"
    scores = r.json().get("scores") or []
    if not scores or not all(isinstance(s, int | float) and math.isfinite(s) for s in scores):
        return f"{name}: scores {scores}"
    return None


def wait_scoring(url: str, models: tuple[ModelSpec, ...], since: float, timeout: float
                 ) -> float | None:
    """Seconds from ``since`` until every model serves finite scores (None: never)."""
    with httpx.Client(base_url=url, timeout=5.0) as http:
        while time.monotonic() - since < timeout:
            if all(finite_scores(http, m.name, m.features) is None for m in models):
                return time.monotonic() - since
            time.sleep(0.05)
    return None


class Run:
    def __init__(self, store: str, scenario: str, opts: Options, workdir: Path,
                 stack: contextlib.ExitStack) -> None:
        self.o = opts
        self.row = Row(store, scenario)
        self.workdir = workdir
        self.stack = stack
        self.disk: Tmpfs | None = None
        self.redis: RedisProc | None = None
        self.svc: ServiceProc
        self.load: Load
        self.t0 = 0.0
        self.restarting = False  # the injector is restarting the service itself
        self.full_disk = False  # Redis restarts wait for free space

    def note(self, msg: str) -> None:
        stamp = f"{time.monotonic() - self.t0:.1f}s: " if self.t0 else ""
        self.row.notes.append(stamp + msg)
        say(f"  [{self.row.store} {self.row.scenario}] {stamp}{msg}")

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        base = self.workdir
        if self.row.scenario == "full-disk":
            self.disk = Tmpfs(self.workdir / "disk", self.o.disk_mb)
            self.disk.mount()  # MountRefused: the caller skips the scenario
            self.stack.callback(self.disk.unmount)
            base = self.disk.path
        redis_url = None
        if self.row.store == "redis":
            self.redis = RedisProc(base / "redis", self.workdir)
            self.stack.callback(self.redis.kill9)
            self.redis.start()
            redis_url = self.redis.url
        self.data_dir = base / "data"
        self.svc = ServiceProc(self.workdir, env_for(self.data_dir, redis_url,
                                                     self.row.scenario == "poison-open"))
        self.stack.callback(self.svc.kill9)
        if self.svc.start() is None:
            raise RuntimeError(f"the service did not start:\n{self.svc.log_tail()}")
        with httpx.Client(base_url=self.svc.url, timeout=10) as http:
            for m in self.o.models:
                r = http.post("/models", json=m.create_body())
                if r.status_code != 201:
                    raise RuntimeError(f"creating {m.name}: {r.status_code} {r.text}")

    # ------------------------------------------------------------------ the run
    def run(self) -> Row:
        self.setup()
        poison_every = 4 if self.row.scenario.startswith("poison") else 0
        self.load = Load(self.svc.url, list(self.o.models), self.o.clients, self.o.batch,
                         poison_every, self.o.drain)
        self.stack.callback(self.load.abort)
        stop_progress = threading.Event()
        progress = threading.Thread(target=self._progress, args=(stop_progress,), daemon=True)
        self.load.start()
        self.t0 = self.load.started
        progress.start()
        try:
            getattr(self, "_" + self.row.scenario.replace("-", "_"))()
            self.until(1.0)
            self.note(f"load stops; retries drain (≤ {self.o.drain:g} s)")
            self.load.stop()
        finally:
            stop_progress.set()
        self.row.wall = time.monotonic() - self.t0
        self.final_restart()
        self.collect()
        return self.row

    def until(self, frac: float, also: Callable[[], bool] | None = None) -> None:
        """Wait until ``frac`` of the duration (or ``also()``), watching the processes."""
        end = self.t0 + frac * self.o.duration
        while time.monotonic() < end:
            self.watch()
            if also is not None and also():
                return
            time.sleep(0.05)

    def watch(self) -> None:
        if not self.restarting and not self.svc.alive():
            self.note(f"the service exited by itself ({self.svc.proc and self.svc.proc.returncode}"
                      f"): {self.svc.log_tail(3)!r}; restarting it")
            self.svc.spawn()
            wait_ready(self.svc.url, 120, self.svc.proc)
        if self.redis is not None and self.redis.exited_by_itself():
            self.note(f"redis-server exited by itself (code {self.redis.exits[-1]})")
        if (self.redis is not None and self.redis.proc is None and self.redis.exits
                and not self.full_disk):
            try:
                self.redis.start()
                self.note("redis-server restarted (supervisor)")
            except RuntimeError as exc:
                self.redis.exits.clear()  # not again and again
                self.redis.proc = None
                self.note(f"redis-server did not restart: {exc}")

    def _progress(self, stop: threading.Event) -> None:
        while not stop.wait(self.o.progress_every):
            acked, st = self.load.progress()
            errs = "  ".join(f"{k} {st[k]:,}" for k in ("500", "503", "504", "conn",
                                                         "dropped", "timeout") if st[k])
            say(f"  [{self.row.store} {self.row.scenario}] {time.monotonic() - self.t0:5.1f}s"
                f"  acked {acked:,} events  {errs}")

    # ------------------------------------------------------------------ faults
    def _kill9(self) -> None:
        self.until(0.35)
        self.note("kill -9 of the service; restart at once")
        self.restarting = True
        self.svc.kill9()
        since = time.monotonic()
        self.svc.spawn()
        self.row.mid_ready = wait_ready(self.svc.url, 120, self.svc.proc)
        self.row.mid_scoring = wait_scoring(self.svc.url, self.o.models, since, 120)
        self.restarting = False
        self.note(f"ready after {_secs(self.row.mid_ready)}, every model scoring after "
                  f"{_secs(self.row.mid_scoring)}")

    def _redis_kill(self) -> None:
        assert self.redis is not None
        self.until(0.3)
        self.note("kill -9 of redis-server; restart in 3 s")
        self.redis.kill9()
        time.sleep(3.0)
        self.redis.start()
        self.note("redis-server restarted (AOF loaded)")

    def _redis_stall(self) -> None:
        assert self.redis is not None
        self.until(0.3)
        self.note("SIGSTOP redis-server for 8 s")
        self.redis.pause()
        time.sleep(8.0)
        self.redis.resume()
        self.note("SIGCONT redis-server")

    def _full_disk(self) -> None:
        assert self.disk is not None
        self.until(0.25)
        self.full_disk = True
        size = self.disk.fill(self.o.headroom_mb << 20)
        self.note(f"filler of {size / 2**20:.0f} MB written, {self.disk.free_bytes() / 2**20:.1f}"
                  f" MB left on the {self.o.disk_mb} MB tmpfs")
        self.until(0.65, lambda: self.disk.free_bytes() < 256 << 10)  # type: ignore[union-attr]
        if self.disk.free_bytes() < 256 << 10:
            self.note("disk full; freeing it in 3 s")
            self.until(min(1.0, (time.monotonic() - self.t0 + 3.0) / self.o.duration))
        else:
            self.note(f"the disk did not fill ({self.disk.free_bytes() / 2**20:.1f} MB free)")
        self.disk.free_filler()
        self.full_disk = False
        self.note(f"filler deleted: {self.disk.free_bytes() / 2**20:.0f} MB free")

    def _poison(self) -> None:
        self.note("poison inputs: every 4th request of each client")

    def _poison_open(self) -> None:
        self.note("poison inputs: every 4th request of each client; value bound opened")

    # ------------------------------------------------------------------ afterwards
    def final_restart(self) -> None:
        self.watch()
        with httpx.Client(base_url=self.svc.url, timeout=30) as http:
            for m in self.o.models:  # what the live service holds, for the notes
                with contextlib.suppress(httpx.HTTPError, ValueError, TypeError, KeyError,
                                         AttributeError):
                    info = http.get(f"/models/{m.name}").json()
                    self.row.live_events[m.name] = sum(info["events"].values())
        self.note("kill -9 of the service; restart; every model must serve")
        self.restarting = True
        self.svc.kill9()
        since = time.monotonic()
        self.svc.spawn()
        self.row.final_ready = wait_ready(self.svc.url, 120, self.svc.proc)
        self.row.final_scoring = wait_scoring(self.svc.url, self.o.models, since, 60)
        self.note(f"ready after {_secs(self.row.final_ready)}, every model scoring after "
                  f"{_secs(self.row.final_scoring)}")
        if self.row.final_ready is None:
            self.row.serving.append("not ready within 120 s after the restart")
        with httpx.Client(base_url=self.svc.url, timeout=30) as http:
            try:
                listed = {m["name"]: m for m in http.get("/models").json()["models"]}
            except (httpx.HTTPError, ValueError, TypeError, KeyError) as exc:
                listed = {}
                self.row.serving.append(f"GET /models failed: {exc}")
            names = [m.name for m in self.o.models] + [b["name"] for b in self.load.created]
            for name in names:
                info = listed.get(name)
                if info is None:
                    self.row.serving.append(f"{name}: not listed by GET /models")
                    continue
                if info.get("status") != "serving":
                    self.row.serving.append(f"{name}: {info.get('status')} "
                                            f"{info.get('quarantine')}")
                problem = finite_scores(http, name, info.get("features") or {})
                if problem:
                    self.row.serving.append(problem)
            for m in self.o.models:  # the model keeps learning
                rec = self.load.learn(http, m, 5, ids=True, client=0, kind="probe", retry=False)
                if not rec.acked:
                    self.row.serving.append(f"{m.name}: learn after the restart "
                                            f"{rec.statuses} {rec.detail[:120]}")
            for m in self.o.models:
                try:
                    info = http.get(f"/models/{m.name}").json()
                    self.row.model_vs_log[m.name] = sum(info["events"].values())
                    r = http.post("/score", json={"model": m.name,
                                                  "items": score_items(m.features)})
                    self.row.service_scores[m.name] = r.json()["scores"]
                except (httpx.HTTPError, ValueError, TypeError, KeyError, AttributeError):
                    self.row.model_vs_log[m.name] = None
        self.restarting = False
        self.svc.stop()

    def collect(self) -> None:
        from aucstream.service.store import open_store

        row = self.row
        reqs = self.load.all_records()
        for r in reqs:
            row.statuses.update(r.statuses)
            if r.acked and r.kind == "load":
                row.slowest_ack = max(row.slowest_ack, r.seconds)
            if r.kind in POISON or r.kind.endswith(": learn"):
                row.poison.setdefault(r.kind, Counter()).update(r.statuses)
                if r.final == "refused" and not r.body_ok:
                    row.poison_bad_body[r.kind] += 1
            elif (r.final == "refused" or any(s.startswith("5") and s not in ("503", "504")
                                              for s in r.statuses)) and len(row.unexpected) < 8:
                row.unexpected.append(f"{r.kind} {'→'.join(r.statuses)} {r.detail[:150]}")
        row.created = [b["name"] for b in self.load.created]
        if self.redis is not None and not self.redis.alive():
            self.redis.start()
        say(f"  [{row.store} {row.scenario}] auditing the durable log (replay) ...")
        store = open_store(self.redis.url if self.redis else None, self.data_dir, prefix=PREFIX)
        try:
            for m in self.o.models:
                idx = marker_index(m.features["bits"]) if m.hashed else None
                a = audit_model(store, m.name, idx, reqs, score_items(m.features))
                row.audits.append(a)
                events = row.model_vs_log.get(m.name)
                row.model_vs_log[m.name] = None if events is None else events - a.learned
                served = row.service_scores.get(m.name)
                row.scores_match[m.name] = (None if served is None or a.scores is None else
                                            bool(np.array_equal(np.asarray(served, float),
                                                                a.scores)))
                live = row.live_events.get(m.name)
                probe = sum(r.n for r in reqs if r.model == m.name and r.kind == "probe"
                            and r.acked)
                if live is not None and live != a.learned - probe:
                    row.notes.append(f"{m.name}: before the final kill -9 the live model had "
                                     f"learned {live - (a.learned - probe):+d} events more "
                                     "than the replay of the log")
                if a.replay_error:
                    row.notes.append(f"{m.name}: the replay of the log stopped at "
                                     f"{a.replay_error}")
                if a.refused_entries:
                    row.notes.append(f"{m.name}: {a.refused_entries} log entries refused "
                                     "(non-finite), as the service's applier refuses them")
                if a.learned_despite_4xx:
                    row.notes.append(f"{m.name}: {a.learned_despite_4xx} events learned "
                                     "although their request was answered 4xx")
                if a.trimmed:
                    row.notes.append(f"{m.name}: the log was trimmed; the audit is partial")
        finally:
            store.close()
        for a in row.audits:
            row.acked += a.acked
            row.lost += a.lost
            row.lost_poison += a.lost_poison
            row.twice_ids += a.twice_ids
            row.twice_noids += a.twice_noids
            row.twice_noids_after.update(a.twice_noids_after)
            row.unacked_learned += a.unacked_learned
            for ex in a.lost_examples:
                row.notes.append(f"{a.name}: lost {ex}")
            row.learned_despite_4xx += a.learned_despite_4xx
            if a.unreadable or a.unknown:
                row.notes.append(f"{a.name}: {a.unreadable} log rows without a marker, "
                                 f"{a.unknown} with a marker no request sent")


def _secs(v: float | None) -> str:
    return "never" if v is None else f"{v:.1f} s"


def run_one(store: str, scenario: str, opts: Options, root: Path) -> Row:
    """Run one scenario on one store in ``root/<store>-<scenario>``; everything it
    started is stopped and unmounted before it returns or raises."""
    if scenario in REDIS_ONLY and store != "redis":
        return Row(store, scenario, skipped="Redis only")
    workdir = root / f"{store}-{scenario}"
    workdir.mkdir(parents=True, exist_ok=True)
    say(f"[{store} {scenario}] {opts.clients} clients, {opts.duration:g} s of load")
    with contextlib.ExitStack() as stack:
        run = Run(store, scenario, opts, workdir, stack)
        try:
            return run.run()
        except MountRefused as exc:
            say(f"  [{store} {scenario}] skipped: mount -t tmpfs refused: {exc}")
            return Row(store, scenario, skipped=f"mount -t tmpfs refused: {exc}")
        except Exception as exc:  # the run broke: reported as such, the others go on
            traceback.print_exc()
            run.row.error = f"{type(exc).__name__}: {str(exc)[:300]}"
            return run.row
