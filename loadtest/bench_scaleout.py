"""The scale-out benchmark (issue 15): learn events/s with one and two replicas, score
latency with followers serving, failover time after ``kill -9`` of an owner, and how stale
a follower's scores are.

Every replica is ``python -m aucstream.service.cli serve`` on loopback (one uvicorn
worker, its own ``AUCSTREAM_REPLICA_ID``), all on one throw-away store: a ``redis-server``
(AOF, ``appendfsync always``, :class:`loadtest.bench_service.RedisProcess`) and, for the
failover and staleness runs, a 3-master Redis Cluster (``tests/redis_servers.py``). The
load generator is :class:`loadtest.bench_service.Client` (aiohttp) in this process, but
for the score rows wrk (:mod:`loadtest.wrk`) when it is installed (``--score-client``):
the aiohttp client takes ~45 % of a core at 3,000 requests/s, which on two cores the
replicas being measured then lack.

1. **Learn throughput, four busy models** (``--learner``, hashed 2^20 ad-click events,
   batches of 500, ``--clients-per-model`` concurrent clients each): total events/s of one
   replica, then of two. The model names are chosen so that rendezvous placement gives
   each of two replicas two of them. Two routings: *owner* (a client sends a model's
   learns to its owner, as a router that knows the placement would) and *any* (each
   request goes to the next replica in turn, as a load balancer without affinity: half of
   them reach a follower, which appends and acknowledges once the owner's publication
   covers the batch). Rows are *pinned* (CPU affinity of every thread, as ``taskset``:
   see :func:`cpu_layout`), *unpinned*, or with ``--budget C`` *budget* rows (each replica
   in a cgroup with a CPU quota of C cores: :class:`CpuBudget`); ``--rounds`` interleaves
   one- and two-replica rows so that a change in the machine's other load hits both. Each
   row also says where the replicas' CPU went, by thread (event loop, request threads,
   follow loop, sync loop, lease keeper).
2. **Score latency** at 16 clients, 100 candidates: one replica, then two (8 clients on
   the owner, 8 on the follower).
3. **Idle models** (``--idle-models``): what models that nobody uses cost the replicas and
   the store (CPU, store commands/s) with one replica and with two.
4. **Failover**: a fresh model per repetition, owned by one of two replicas; the owner is
   killed with SIGKILL and a learn is sent to the survivor at once: the time until the
   survivor reports itself the owner, and until it acknowledges (200) that learn.
5. **Staleness**: a learn acknowledged by the owner at version v; then the follower's
   ``/score`` is polled (every 5 ms) until it reports at least v. Idle (only the probes
   learn) and under load (one client learning 500-event batches on the owner throughout).
   Also how long a learn sent to the follower waits for its acknowledgement.

``--set NAME=VALUE`` changes a service setting on every replica, ``--appendfsync`` the
store's AOF policy, and ``--extra-path DIR`` runs the replicas from a patched copy of the
package (A/B rows; the report names what changed).

Progress goes to stderr, a markdown report to stdout; ``--write`` puts it into
``bench/RESULTS.md`` between ``<!-- scaleout:start -->`` and ``<!-- scaleout:end -->``
under "## Scale-out". This is a benchmark, not a test: nothing in the test suite runs it.

    python -m loadtest.bench_scaleout --budget 0.25 --write  # everything (~35 min, root)
    python -m loadtest.bench_scaleout --quick                # a smoke run, no cluster
    python -m loadtest.bench_scaleout --only failover staleness --cluster
    python -m loadtest.bench_scaleout --only learn --modes pinned --set publish_interval=1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aucstream.service.ownership import preferred_owner
from loadtest import wrk
from loadtest.bench_service import (
    Client,
    LearnTally,
    RedisProcess,
    Scenario,
    ServiceProcess,
    code_version,
    cpu_model,
    create_model,
    learn_bodies,
    make_events,
    markdown_table,
    percentile,
    proc_cpu_seconds,
    say,
    score_bodies,
    self_cpu_seconds,
    send_learns,
    send_scores,
    summarize,
    write_marked,
)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "RESULTS.md"
HEADING = "## Scale-out"
START, END = "<!-- scaleout:start -->", "<!-- scaleout:end -->"
TARGET_RATIO = 1.6  # two replicas' learn events/s over one's (issue 15)
TARGET_SCORE_P99_MS = 10.0  # at 16 clients
REPLICAS = ("r0", "r1")
SCORE_CLIENTS = 16


# ---------------------------------------------------------------------------- pure helpers
def client_cpu_seconds() -> float:
    """CPU of this process and of its children that have exited (the wrk processes: the
    replicas and redis-servers are still running, so not counted)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return self_cpu_seconds() + r.ru_utime + r.ru_stime


def cpu_layout(cpus: Sequence[int], replicas: int) -> dict[str, frozenset[int] | None]:
    """Which CPUs each process may use: ``replica0``, ``replica1``, ... and ``load`` (the
    load generator and the store's servers). None = unpinned (every CPU).

    Each replica gets a core of its own when there are enough; the load gets the cores
    left over. With exactly as many cores as replicas the load floats over all of them
    (it then takes a share of the replicas' cores), and with fewer nothing is pinned.
    """
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1; got {replicas}")
    cpus = sorted(set(cpus))
    if len(cpus) < replicas:
        return {**{f"replica{i}": None for i in range(replicas)}, "load": None}
    out: dict[str, frozenset[int] | None] = {
        f"replica{i}": frozenset({cpus[i]}) for i in range(replicas)}
    rest = cpus[replicas:]
    out["load"] = frozenset(rest) if rest else None
    return out


def describe_layout(layout: dict[str, frozenset[int] | None], names: Sequence[str]) -> str:
    """``r0 → CPU 0, r1 → CPU 1, client + store → any`` for the report."""
    def cpus(c: frozenset[int] | None) -> str:
        return "any CPU" if c is None else "CPU " + ",".join(map(str, sorted(c)))

    parts = [f"{n} → {cpus(layout[f'replica{i}'])}" for i, n in enumerate(names)]
    return ", ".join([*parts, f"client + store → {cpus(layout['load'])}"])


def balanced_names(prefix: str, n: int, replicas: Sequence[str]) -> list[str]:
    """``n`` model names ``prefix-K`` whose preferred owners (the service's rendezvous
    placement over ``replicas``) are spread as evenly as possible; deterministic."""
    if n < 0:
        raise ValueError(f"n must be >= 0; got {n}")
    if not replicas:
        raise ValueError("replicas must not be empty")
    quota = {r: n // len(replicas) + (1 if i < n % len(replicas) else 0)
             for i, r in enumerate(replicas)}
    out: list[str] = []
    k = 0
    while len(out) < n:
        name = f"{prefix}-{k}"
        owner = preferred_owner(name, list(replicas))
        assert owner is not None
        if quota[owner] > 0:
            quota[owner] -= 1
            out.append(name)
        k += 1
    return out


def distribution(values: Sequence[float]) -> dict[str, float]:
    """n, min, p10, p50, p90, p99, max and mean (NaN for an empty sample)."""
    nan = float("nan")
    return {"n": len(values), "min": min(values) if values else nan,
            "p10": percentile(values, 10), "p50": percentile(values, 50),
            "p90": percentile(values, 90), "p99": percentile(values, 99),
            "max": max(values) if values else nan,
            "mean": sum(values) / len(values) if values else nan}


def histogram(values: Iterable[float], edges: Sequence[float]) -> list[int]:
    """Counts of ``values`` in [edges[i], edges[i+1]); below the first edge counts in the
    first bin, at or above the last in an extra last bin (len(edges) counts)."""
    if list(edges) != sorted(edges) or not edges:
        raise ValueError("edges must be a non-empty increasing sequence")
    counts = [0] * len(edges)
    for v in values:
        i = 0
        while i + 1 < len(edges) and v >= edges[i + 1]:
            i += 1
        counts[i] += 1
    return counts


def histogram_line(values: Sequence[float], edges: Sequence[float], unit: str,
                   scale: float = 1.0) -> str:
    """``[0, 0.1) s: 3 · [0.1, 0.2) s: 5 · ≥ 0.5 s: 1`` (empty bins left out)."""
    counts = histogram(values, edges)
    parts = []
    for i, c in enumerate(counts):
        if not c:
            continue
        lo = f"{edges[i] * scale:g}"
        if i + 1 < len(edges):
            parts.append(f"[{lo}, {edges[i + 1] * scale:g}) {unit}: {c}")
        else:
            parts.append(f"≥ {lo} {unit}: {c}")
    return " · ".join(parts) if parts else "(no samples)"


def parse_settings(items: Sequence[str]) -> dict[str, str]:
    """``["publish_interval=1.0"]`` -> ``{"publish_interval": "1.0"}`` (names lower case)."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip().lower().removeprefix("aucstream_")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_]*", name) or not value.strip():
            raise ValueError(f"--set takes NAME=VALUE (a service setting); got {item!r}")
        out[name] = value.strip()
    return out


def ratio_verdict(ratio: float, target: float = TARGET_RATIO) -> str:
    if ratio != ratio:
        return "n/a"
    return f"{ratio:.2f}× (≥ {target:g}×: {'met' if ratio >= target else 'NOT met'})"


def gauge(metrics_text: str, name: str) -> float | None:
    """The value of an unlabelled gauge in Prometheus text (the first sample), or None."""
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", metrics_text, re.M)
    return float(m.group(1)) if m else None


# Log lines about ownership (service/hosting.py's wording), as regular expressions.
LOG_SIGNS = {
    "taken": r": owned by this replica \(",
    "given up": r": no longer owned by this replica: ",
    "handed over": r": no longer owned by this replica: handed over to ",
    "lease lost": r": no longer owned by this replica: its lease was lost",
    "follower learn unpublished (10 s)": r"not published by its owner",
    "durable, not applied": r"not applied yet",
}


def count_signs(text: str) -> dict[str, int]:
    """How often each of :data:`LOG_SIGNS` occurs in a replica's log text."""
    return {k: len(re.findall(v, text)) for k, v in LOG_SIGNS.items()}


# A replica's threads by role (their Python names, as py-spy dump shows them).
THREAD_ROLES = {
    "MainThread": "event loop (HTTP)",
    "AnyIO worker thread": "request threads (parse, append, apply)",
    "aucstream-follow": "follow loop (publish, reload)",
    "aucstream-sync": "sync loop (place, checkpoint)",
    "aucstream-leases": "lease keeper",
}
_THREAD_LINE = re.compile(r'^Thread (?:0x[0-9a-fA-F]+|(\d+)) \([^)]*\): "(.*)"', re.M)


def parse_thread_names(dump: str) -> dict[int, str]:
    """Native thread id -> role, from ``py-spy dump`` text (unknown names: ``other``)."""
    return {int(tid): THREAD_ROLES.get(name, "other")
            for tid, name in _THREAD_LINE.findall(dump) if tid}


def role_cpu(before: dict[int, float], after: dict[int, float], roles: dict[int, str]
             ) -> dict[str, float]:
    """CPU seconds per role between two per-thread readings (threads started meanwhile
    count from zero; a thread without a known role counts as ``other``)."""
    out: dict[str, float] = {}
    for tid, t in after.items():
        role = roles.get(tid, "other")
        out[role] = out.get(role, 0.0) + t - before.get(tid, 0.0)
    return out


# ---------------------------------------------------------------------------- processes
def set_affinity(pid: int, cpus: frozenset[int] | None) -> None:
    """Pin every thread of ``pid`` to ``cpus`` (None: every CPU), as ``taskset -a -p``;
    threads started later inherit it from the thread that starts them."""
    mask = set(range(os.cpu_count() or 1)) if cpus is None else set(cpus)
    for _ in range(3):  # a thread started while we pin is pinned on the next pass
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return
        for tid in tids:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, mask)


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU seconds of each thread of ``pid`` (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                f = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
                out[int(tid)] = (int(f[11]) + int(f[12])) / ticks
    return out


def thread_roles(pid: int) -> dict[int, str]:
    """The roles of ``pid``'s threads (py-spy dump); empty without py-spy."""
    exe = shutil.which("py-spy")
    if exe is None:
        return {}
    try:
        out = subprocess.run([exe, "dump", "--pid", str(pid), "--nonblocking"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_thread_names(out)


class CpuBudget:
    """A CPU-time budget for some processes: a cgroup with a CFS quota of ``cores`` CPUs'
    worth of time per 100 ms (Linux, root; cgroup v1's ``cpu`` controller or v2). Unlike
    pinning it fits two replicas with a budget each *and* the load on two cores."""

    PERIOD_US = 100_000

    def __init__(self, name: str, cores: float) -> None:
        if cores <= 0:
            raise ValueError(f"cores must be > 0; got {cores}")
        v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
        if (v1 / "cpu.cfs_quota_us").exists():
            self.root, self.v2 = v1, False
        elif "cpu" in _read(v2 / "cgroup.subtree_control").split():
            self.root, self.v2 = v2, True
        else:
            raise SystemExit("--budget needs a cgroup 'cpu' controller (v1 at "
                             "/sys/fs/cgroup/cpu, or v2 with cpu in subtree_control)")
        self.cores = cores
        self.path = self.root / f"aucstream-bench-{os.getpid()}-{name}"
        try:
            self.path.mkdir(exist_ok=True)
            quota = int(cores * self.PERIOD_US)
            if self.v2:
                (self.path / "cpu.max").write_text(f"{quota} {self.PERIOD_US}")
            else:
                (self.path / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
                (self.path / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError as exc:
            raise SystemExit(f"--budget: cannot set up {self.path}: {exc} (root needed)"
                             ) from exc

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def release(self, pid: int) -> None:
        """Move ``pid`` back to the root group (no quota)."""
        with contextlib.suppress(OSError):
            (self.root / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        for pid in _read(self.path / "cgroup.procs").split():
            self.release(int(pid))
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class Replica(ServiceProcess):
    """One ``aucstream serve`` process, a replica named ``name`` of the shared store."""

    def __init__(self, workdir: Path, store_url: str, name: str, *, log_level: str,
                 env: dict[str, str] | None = None, extra_path: str | None = None) -> None:
        super().__init__(workdir, store_url, log_level=log_level, extra_path=extra_path)
        self.name = name
        self.env = {"AUCSTREAM_REPLICA_ID": name, **(env or {})}
        self.log_path = workdir / f"{name}.log"
        self.log_offset = 0  # where the current phase's log text starts

    def command(self) -> list[str]:
        # ServiceProcess drops AUCSTREAM_* from the environment; env(1) execs the service,
        # so the process id stays the server's. With an extra path the replica starts in
        # it: ``python -m`` puts the working directory first on sys.path, before
        # PYTHONPATH, and the repository's own aucstream/ would win otherwise.
        chdir = [f"--chdir={self.extra_path}"] if self.extra_path else []
        return ["env", *chdir, *(f"{k}={v}" for k, v in self.env.items()),
                *super().command()]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_since_mark(self) -> str:
        with contextlib.suppress(OSError), self.log_path.open("rb") as f:
            f.seek(self.log_offset)
            return f.read().decode(errors="replace")
        return ""

    def mark_log(self) -> None:
        with contextlib.suppress(OSError):
            self.log_offset = self.log_path.stat().st_size

    def pin(self, cpus: frozenset[int] | None) -> None:
        if self.alive:
            set_affinity(self.pid, cpus)


class StoreServers:
    """The store: one redis-server, or a 3-master cluster; their pids for pinning."""

    def __init__(self, kind: str, workdir: Path, appendfsync: str = "always") -> None:
        self.kind = kind
        self.appendfsync = appendfsync
        self.workdir = workdir / kind  # its data: one store per phase, none shared
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._single: RedisProcess | None = None
        self._cluster: Any = None

    def start(self) -> None:
        if self.kind == "redis":
            self._single = RedisProcess(self.workdir)
            self._single.start()
        else:
            from tests.redis_servers import RedisCluster

            self._cluster = RedisCluster(self.workdir)
            self._cluster.start()
        if self.appendfsync != "always":  # the servers start with "always"
            import redis

            for port in self.ports():
                r = redis.Redis(port=port, socket_timeout=5)
                try:
                    r.config_set("appendfsync", self.appendfsync)
                finally:
                    r.close()

    def ports(self) -> list[int]:
        if self._single is not None:
            return [self._single.port]
        return [n.port for n in self._cluster.nodes]

    @property
    def url(self) -> str:
        return self._single.url if self._single is not None else self._cluster.url

    @property
    def label(self) -> str:
        if self._single is not None:
            return (f"Redis {self._single.version()} (one server, AOF, appendfsync "
                    f"{self.appendfsync})")
        return f"Redis Cluster (3 masters, no replicas, AOF, appendfsync {self.appendfsync})"

    def pids(self) -> list[int]:
        if self._single is not None and self._single.proc is not None:
            return [self._single.proc.pid]
        if self._cluster is not None:
            return [n.proc.pid for n in self._cluster.nodes if n.proc is not None]
        return []

    def cpu_seconds(self) -> float:
        return sum(proc_cpu_seconds(p) for p in self.pids())

    def stats(self, *keys: str) -> list[int]:
        """INFO stats counters summed over the store's servers."""
        import redis

        out = [0] * len(keys)
        for port in self.ports():
            r = redis.Redis(port=port, socket_timeout=5)
            try:
                info = r.info("stats")
            finally:
                r.close()
            for i, k in enumerate(keys):
                out[i] += int(info[k])
        return out

    def net_bytes(self) -> tuple[int, int]:
        """Bytes the store's servers received and sent so far."""
        got, sent = self.stats("total_net_input_bytes", "total_net_output_bytes")
        return got, sent

    def stop(self) -> None:
        if self._single is not None:
            self._single.stop()
        if self._cluster is not None:
            self._cluster.stop()


# ---------------------------------------------------------------------------- HTTP helpers
class Spread:
    """A load balancer without affinity: each request to the next client in turn; keeps
    each client's latencies of successful (200) requests."""

    def __init__(self, clients: Sequence[Client]) -> None:
        self.clients = list(clients)
        self._next = 0
        self.latencies: dict[str, list[float]] = {c.base: [] for c in self.clients}

    async def request(self, method: str, path: str, body: bytes | None = None
                      ) -> tuple[int, bytes]:
        client = self.clients[self._next % len(self.clients)]
        self._next += 1
        t0 = time.perf_counter()
        status, raw = await client.request(method, path, body)
        if status == 200:
            self.latencies[client.base].append(time.perf_counter() - t0)
        return status, raw


async def get_json(client: Client, path: str) -> Any:
    status, body = await client.json("GET", path)
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {body}")
    return body


async def owners(clients: dict[str, Client], name: str) -> dict[str, str | None]:
    """Each replica's view of the model's owner (None: no owner, or not loaded yet)."""
    out: dict[str, str | None] = {}
    for rname, c in clients.items():
        status, body = await c.json("GET", f"/models/{name}")
        out[rname] = body.get("owner") if status == 200 else None
    return out


async def until(check: Any, timeout: float, what: str, pause: float = 0.05) -> Any:
    """Await ``check()`` until it returns something true; RuntimeError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s: {what}")
        await asyncio.sleep(pause)


async def agreed_owner(clients: dict[str, Client], name: str, timeout: float = 60.0,
                       want: str | None = None) -> str:
    """The owner every replica names (and ``want``, if given), once they agree."""
    async def check() -> str | None:
        seen = set((await owners(clients, name)).values())
        if len(seen) == 1 and None not in seen:
            owner = seen.pop()
            return owner if want is None or owner == want else None
        return None
    return await until(check, timeout, f"the replicas agree on the owner of {name}")


async def live_replicas(client: Client) -> int:
    status, raw = await client.request("GET", "/metrics")
    value = gauge(raw.decode(errors="replace"), "aucstream_replicas") if status == 200 else None
    return int(value or 0)


async def all_see(clients: dict[str, Client], n: int, timeout: float = 30.0) -> None:
    async def check() -> bool:
        return all([await live_replicas(c) == n for c in clients.values()])
    await until(check, timeout, f"every replica sees {n} live replicas", pause=0.1)


# ---------------------------------------------------------------------------- the run
@dataclass
class Options:
    learner: str
    models: int
    events: int
    batch: int
    clients_per_model: int
    rounds: int
    bits: int
    score_requests: int
    candidates: int
    failovers: int
    samples: int
    stores: list[str]
    only: list[str]
    log_level: str
    extra_path: str | None = None  # prepended to the replicas' PYTHONPATH (A/B a patch)
    settings: dict[str, str] = field(default_factory=dict)  # service settings to override
    appendfsync: str = "always"  # the store's AOF policy
    idle_models: list[int] = field(default_factory=lambda: [4, 100])
    idle_seconds: float = 10.0
    budget: float | None = None  # cores of CPU time per replica in the 'budget' rows
    modes: list[str] = field(default_factory=lambda: ["pinned", "unpinned"])
    score_client: str = "python"  # the score rows' load generator: python (aiohttp) or wrk
    score_seconds: float = 4.0  # per score row with wrk (it runs for a time, not a count)


@dataclass
class Results:
    learn: list[dict[str, Any]] = field(default_factory=list)
    score: list[dict[str, Any]] = field(default_factory=list)
    failover: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    staleness: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    follower_learns: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    idle: list[dict[str, Any]] = field(default_factory=list)
    signs: dict[str, dict[str, int]] = field(default_factory=dict)  # phase -> log counts
    labels: dict[str, str] = field(default_factory=dict)  # store kind -> label


class Bench:
    def __init__(self, opts: Options, workdir: Path) -> None:
        self.o = opts
        self.workdir = workdir
        self.res = Results()
        self.cpus = sorted(os.sched_getaffinity(0))
        self.offset = 0  # stream position of the next fresh events (unique ids)
        self.budgets: dict[str, CpuBudget] = {}
        self.modes = list(opts.modes)

    # ------------------------------------------------------------------ plumbing
    def replicas(self, store: StoreServers, phase: str, env: dict[str, str] | None = None
                 ) -> list[Replica]:
        d = self.workdir / f"replicas-{phase}-{store.kind}"
        d.mkdir(exist_ok=True)
        settings = {f"AUCSTREAM_{k.upper()}": v for k, v in self.o.settings.items()}
        return [Replica(d, store.url, n, log_level=self.o.log_level,
                        env={**settings, **(env or {})}, extra_path=self.o.extra_path)
                for n in REPLICAS]

    def start(self, r: Replica) -> float:
        t0 = time.perf_counter()
        r.start()
        took = time.perf_counter() - t0
        say(f"  {r.name} ready in {took:.1f}s at {r.url} (log {r.log_path})")
        return took

    def place(self, mode: str, running: Sequence[Replica], store: StoreServers) -> str:
        """Put the processes where a row's ``mode`` says; returns it in words.
        ``pinned``: CPU affinity (:func:`cpu_layout`); ``budget``: each replica in a cgroup
        with ``--budget`` cores of CPU time, nothing pinned; ``unpinned``: neither."""
        names = [r.name for r in running]
        layout = self._unpinned(len(running))
        if mode == "pinned":
            layout = cpu_layout(self.cpus, len(running))
        for i, r in enumerate(running):
            r.pin(layout[f"replica{i}"])
        for pid in store.pids():
            set_affinity(pid, layout["load"])
        set_affinity(os.getpid(), layout["load"])
        if mode == "budget":
            for r in running:
                self.budget(r.name).add(r.pid)
            return ", ".join([*(f"{n} → {self.o.budget:g} core" for n in names),
                              "client + store → any CPU, no quota"])
        return describe_layout(layout, names)

    def unplace(self, running: Sequence[Replica], store: StoreServers) -> None:
        self.place("unpinned", running, store)
        for r in running:
            if r.name in self.budgets and r.alive:
                self.budgets[r.name].release(r.pid)

    def budget(self, name: str) -> CpuBudget:
        if name not in self.budgets:
            self.budgets[name] = CpuBudget(name, self.o.budget)
        return self.budgets[name]

    @staticmethod
    def _unpinned(replicas: int) -> dict[str, frozenset[int] | None]:
        return {f"replica{i}": None for i in range(replicas)} | {"load": None}

    def collect_signs(self, phase: str, running: Iterable[Replica]) -> None:
        """Ownership log lines of a whole phase (each phase has its own log files)."""
        total: Counter = Counter()
        for r in running:
            with contextlib.suppress(OSError):
                total.update(count_signs(r.log_path.read_text(errors="replace")))
        self.res.signs[phase] = dict(total)

    def fresh(self, sc: Scenario, seed: int, n: int) -> list[dict[str, Any]]:
        events = make_events(sc, seed, self.offset, n)
        self.offset += n
        return events

    async def run(self) -> None:
        o = self.o
        if {"learn", "score"} & set(o.only):
            try:
                await self.scale_phase()
            finally:
                for b in self.budgets.values():
                    b.close()
        if "idle" in o.only:
            await self.idle_phase()
        for kind in o.stores:
            if {"failover", "staleness"} & set(o.only):
                await self.ownership_phase(kind)

    # ------------------------------------------------------------------ learn and score
    async def scale_phase(self) -> None:
        o = self.o
        store = StoreServers("redis", self.workdir / "scale", self.o.appendfsync)
        store.start()
        self.res.labels["redis"] = store.label
        r0, r1 = self.replicas(store, "scale")
        sc = Scenario(o.learner, {"kind": "hashed", "bits": o.bits}, f"hashed 2^{o.bits}")
        names = balanced_names(f"busy-{o.learner}", o.models, REPLICAS)
        score_model = f"score-{o.learner}"
        try:
            say(f"[scale] store {store.label}; starting {r0.name}")
            self.start(r0)
            async with Client(r0.url, 64) as c0:
                for m in names:
                    await create_model(c0, m, sc.learner, sc.features)
                await self.warm(c0, sc, names)
                if "score" in o.only:
                    await create_model(c0, score_model, sc.learner, sc.features)
                    await send_learns(c0, learn_bodies(score_model, self.fresh(sc, 3, 20_000),
                                                       o.batch), 2)
            for rnd in range(1, o.rounds + 1):
                if r1.alive:
                    say(f"[scale] round {rnd}: stopping {r1.name} (SIGTERM: it gives its "
                        "leases up)")
                    r1.stop()
                async with Client(r0.url, 64) as c0:  # fresh connections every round
                    one = {r0.name: c0}
                    await all_see(one, 1)
                    await self.settle(one, names, want=r0.name)
                    for mode in self.modes:
                        if "learn" in o.only:
                            await self.learn_row(rnd, [r0], store, sc, names, one, "owner",
                                                 mode)
                    if "score" in o.only and rnd == 1:
                        for mode in self.modes:
                            await self.score_row([r0], store, [c0], score_model, sc, mode)
                say(f"[scale] round {rnd}: starting {r1.name}")
                self.start(r1)
                async with Client(r0.url, 64) as c0, Client(r1.url, 64) as c1:
                    two = {r0.name: c0, r1.name: c1}
                    await all_see(two, 2)
                    for m in names:
                        await agreed_owner(two, m, want=preferred_owner(m, list(REPLICAS)))
                    if rnd == 1:
                        await self.warm(c1, sc, names)  # the follower's learn path too
                    for mode in self.modes:
                        if "learn" in o.only:
                            for routing in ("owner", "any"):
                                await self.learn_row(rnd, [r0, r1], store, sc, names, two,
                                                     routing, mode)
                    if "score" in o.only and rnd == 1:
                        owner = await agreed_owner(two, score_model)
                        await self.wait_version(two, score_model)
                        ordered = [two[owner]] + [c for n, c in two.items() if n != owner]
                        for mode in self.modes:
                            await self.score_row([r0, r1], store, ordered, score_model, sc,
                                                 mode)
        finally:
            self.collect_signs("learn and score", (r0, r1))
            for r in (r0, r1):
                r.stop()
            store.stop()
            set_affinity(os.getpid(), None)

    async def warm(self, client: Client, sc: Scenario, names: Sequence[str]) -> None:
        for m in names:
            await send_learns(client, learn_bodies(m, self.fresh(sc, 7, 4 * self.o.batch),
                                                   self.o.batch), 1)

    async def settle(self, clients: dict[str, Client], names: Sequence[str],
                     want: str | None) -> None:
        for m in names:
            await agreed_owner(clients, m, want=want)

    async def wait_version(self, clients: dict[str, Client], name: str,
                           timeout: float = 30.0) -> int:
        """Until every replica serves the same version of ``name``."""
        async def check() -> int | None:
            vs = {(await get_json(c, f"/models/{name}"))["version"] for c in clients.values()}
            return vs.pop() if len(vs) == 1 else None
        return await until(check, timeout, f"every replica serves the same version of {name}")

    async def learn_row(self, rnd: int, running: list[Replica], store: StoreServers,
                        sc: Scenario, names: list[str], clients: dict[str, Client],
                        routing: str, mode: str) -> None:
        o = self.o
        say(f"[learn] round {rnd}: {len(running)} replica(s), routing {routing}, {mode}; "
            f"serialising {o.models} x {o.events:,} events ...")
        bodies = {m: learn_bodies(m, self.fresh(sc, 11 + i, o.events), o.batch)
                  for i, m in enumerate(names)}
        live = {r.name: clients[r.name] for r in running}
        owner = {m: await agreed_owner(live, m) for m in names}
        before = {m: (await get_json(live[owner[m]], f"/models/{m}"))["version"] for m in names}
        spreads = {m: Spread(list(live.values())) for m in names}
        for r in running:
            r.mark_log()
        where = self.place(mode, running, store)
        roles = {r.name: thread_roles(r.pid) for r in running}
        await asyncio.sleep(0.5)  # let the placement take effect, the loops settle
        threads0 = {r.name: thread_cpu_seconds(r.pid) for r in running}
        cpu0 = {r.name: r.cpu_seconds() for r in running}
        s0, c0, n0 = store.cpu_seconds(), self_cpu_seconds(), store.net_bytes()
        t0 = time.perf_counter()

        async def one(m: str) -> LearnTally:
            target: Any = live[owner[m]] if routing == "owner" else spreads[m]
            return await send_learns(target, bodies[m], o.clients_per_model)

        tallies = await asyncio.gather(*(one(m) for m in names))
        wall = time.perf_counter() - t0
        cpu1 = {r.name: r.cpu_seconds() for r in running}
        threads1 = {r.name: thread_cpu_seconds(r.pid) for r in running}
        s1, c1, n1 = store.cpu_seconds(), self_cpu_seconds(), store.net_bytes()
        for r in running:  # request threads started during the row are named now
            roles[r.name] = {**thread_roles(r.pid), **roles[r.name]}
        self.unplace(running, store)
        after = {}
        for m in names:
            after[m] = (await get_json(live[owner[m]], f"/models/{m}"))["version"]
        accepted = sum(t.accepted for t in tallies)
        applied = sum(after[m] - before[m] for m in names)
        statuses: Counter = Counter()
        for t in tallies:
            statuses.update(t.statuses)
        lat = [x for t in tallies for x in t.latencies]
        owner_lat: list[float] = []
        follower_lat: list[float] = []
        if routing == "any":
            for m in names:
                for base, xs in spreads[m].latencies.items():
                    is_owner = base == live[owner[m]].base
                    (owner_lat if is_owner else follower_lat).extend(xs)
        signs: Counter = Counter()
        by_role: Counter = Counter()
        for r in running:
            signs.update(count_signs(r.log_since_mark()))
            by_role.update(role_cpu(threads0[r.name], threads1[r.name], roles[r.name]))
        row = {
            "round": rnd, "replicas": len(running), "routing": routing, "mode": mode,
            "layout": where,
            "events": accepted, "wall": wall, "events_s": accepted / wall,
            "lat": summarize(lat), "owner_lat": summarize(owner_lat),
            "follower_lat": summarize(follower_lat),
            "cpu": {n: (cpu1[n] - cpu0[n]) / wall for n in cpu0},
            "store_cpu": (s1 - s0) / wall, "client_cpu": (c1 - c0) / wall,
            "store_in_mb_s": (n1[0] - n0[0]) / wall / 1e6,
            "store_out_mb_s": (n1[1] - n0[1]) / wall / 1e6, "lost": max(0, accepted - applied),
            "extra": max(0, applied - accepted), "statuses": dict(statuses),
            "owners": Counter(owner.values()), "signs": dict(signs),
            "roles": dict(by_role) if any(roles.values()) else {},
        }
        cpu_total = sum(row["cpu"].values())
        row["events_per_cpu_s"] = accepted / (cpu_total * wall) if cpu_total > 0 else float("nan")
        self.res.learn.append(row)
        say(f"  {row['events_s']:,.0f} events/s over {wall:.1f}s (owners {dict(row['owners'])}; "
            f"replica CPU {', '.join(f'{n} {v:.0%}' for n, v in row['cpu'].items())}; store "
            f"{row['store_cpu']:.0%}, client {row['client_cpu']:.0%}; "
            f"{row['events_per_cpu_s']:,.0f} events per replica CPU-second; p50/p99 "
            f"{row['lat']['p50']:.0f}/{row['lat']['p99']:.0f} ms; statuses {dict(statuses)}; "
            f"lost {row['lost']}, extra {row['extra']}; log {row['signs']})")

    async def score_row(self, running: list[Replica], store: StoreServers,
                        targets: list[Client], name: str, sc: Scenario, mode: str) -> None:
        o = self.o
        bodies = score_bodies(name, make_events(sc, 5, 0, 64 * o.candidates), o.candidates)
        for c in targets:
            await send_scores(c, bodies, 1, 50)  # warm-up
        where = self.place(mode, running, store)
        await asyncio.sleep(0.5)
        per_target = SCORE_CLIENTS // len(targets)
        per_client = max(1, o.score_requests // SCORE_CLIENTS)
        cpu0 = {r.name: r.cpu_seconds() for r in running}
        c0, t0 = client_cpu_seconds(), time.perf_counter()
        if o.score_client == "wrk":
            runs = await wrk.run_score_load([c.base for c in targets], bodies, per_target,
                                            o.score_seconds)
            wall = max(r.seconds for r in runs)  # wrk's own run time, not its start-up
            per = [r.latencies_s() for r in runs]
            requests = sum(r.requests for r in runs)
            errors = sum(sum(r.errors.values()) for r in runs)
            say(f"[score] wrk: {requests:,} requests, {sum(map(len, per)):,} latency samples")
        else:
            outs = await asyncio.gather(*(send_scores(c, bodies, per_target, per_client)
                                          for c in targets))
            wall = time.perf_counter() - t0
            per = [ls for ls, _ in outs]
            requests = sum(map(len, per))
            errors = sum(v for _, st in outs for k, v in st.items() if k != 200)
        cpu1 = {r.name: r.cpu_seconds() for r in running}
        c1 = client_cpu_seconds()
        self.unplace(running, store)
        lat = [x for ls in per for x in ls]
        row = {"replicas": len(running), "mode": mode, "layout": where,
               "lat": summarize(lat), "rps": requests / wall, "errors": errors,
               "per_target": [summarize(ls) for ls in per],
               "cpu": {n: (cpu1[n] - cpu0[n]) / wall for n in cpu0},
               "client_cpu": (c1 - c0) / wall}
        self.res.score.append(row)
        say(f"[score] {len(running)} replica(s), {mode}: "
            f"{row['rps']:,.0f} requests/s, p50 {row['lat']['p50']:.2f} ms, p99 "
            f"{row['lat']['p99']:.2f} ms, errors {errors}; replica CPU "
            f"{', '.join(f'{n} {v:.0%}' for n, v in row['cpu'].items())}, client "
            f"{row['client_cpu']:.0%}")

    # ------------------------------------------------------------------ idle cost
    async def idle_phase(self) -> None:
        """What idle models cost: the replicas' and the store's CPU and the store's
        commands/s with N models that nobody uses, one replica and then two."""
        o = self.o
        store = StoreServers("redis", self.workdir / "idle", self.o.appendfsync)
        store.start()
        r0, r1 = self.replicas(store, "idle")
        sc = Scenario(o.learner, {"kind": "hashed", "bits": o.bits}, "")
        created = 0
        try:
            self.start(r0)
            for n in sorted(o.idle_models):
                if r1.alive:
                    r1.stop()
                async with Client(r0.url, 16) as c0:
                    await all_see({r0.name: c0}, 1)
                    say(f"[idle] creating models {created}..{n - 1} (500 events each)")
                    for k in range(created, n):
                        await create_model(c0, f"idle-{k}", sc.learner, sc.features)
                        await send_learns(c0, learn_bodies(f"idle-{k}", self.fresh(sc, 41, 500),
                                                           500), 1)
                    created = n
                    await self.owned_total({r0.name: c0}, n)
                    await self.idle_row(n, [r0], store)
                self.start(r1)
                async with Client(r0.url, 16) as c0, Client(r1.url, 16) as c1:
                    two = {r0.name: c0, r1.name: c1}
                    await all_see(two, 2)
                    await self.owned_total(two, n)
                    await self.idle_row(n, [r0, r1], store)
        finally:
            self.collect_signs("idle models", (r0, r1))
            for r in (r0, r1):
                r.stop()
            store.stop()

    async def owned_total(self, clients: dict[str, Client], n: int, timeout: float = 120.0
                          ) -> None:
        """Until the replicas own ``n`` models between them (placement settled)."""
        async def check() -> bool:
            total = 0.0
            for c in clients.values():
                _, raw = await c.request("GET", "/metrics")
                total += gauge(raw.decode(errors="replace"), "aucstream_owned_models") or 0.0
            return int(total) == n
        await until(check, timeout, f"the replicas own {n} models between them", pause=0.5)
        await asyncio.sleep(2 * 1.0)  # a couple of sync rounds after the last move

    async def idle_row(self, n: int, running: list[Replica], store: StoreServers) -> None:
        keys = ("total_commands_processed",)
        cpu0 = {r.name: r.cpu_seconds() for r in running}
        s0, (k0,), t0 = store.cpu_seconds(), store.stats(*keys), time.perf_counter()
        await asyncio.sleep(self.o.idle_seconds)
        wall = time.perf_counter() - t0
        cpu1 = {r.name: r.cpu_seconds() for r in running}
        s1, (k1,) = store.cpu_seconds(), store.stats(*keys)
        row = {"models": n, "replicas": len(running),
               "cpu": {k: (cpu1[k] - cpu0[k]) / wall for k in cpu0},
               "store_cpu": (s1 - s0) / wall, "commands_s": (k1 - k0) / wall}
        self.res.idle.append(row)
        say(f"[idle] {n} idle models, {len(running)} replica(s): replica CPU "
            f"{', '.join(f'{k} {v:.1%}' for k, v in row['cpu'].items())}; redis-server "
            f"{row['store_cpu']:.1%}, {row['commands_s']:,.0f} commands/s")

    # ------------------------------------------------------------------ failover, staleness
    async def ownership_phase(self, kind: str) -> None:
        o = self.o
        store = StoreServers(kind, self.workdir / "ownership", self.o.appendfsync)
        say(f"[{kind}] starting the store")
        store.start()
        self.res.labels[kind] = store.label
        group = self.replicas(store, "ownership")
        try:
            for r in group:
                self.start(r)
            if "staleness" in o.only:
                await self.staleness(kind, group)
            if "failover" in o.only:
                await self.failovers(kind, group)
        finally:
            self.collect_signs(f"{kind}: failover and staleness", group)
            for r in group:
                r.stop()
            store.stop()

    async def staleness(self, kind: str, group: list[Replica]) -> None:
        o = self.o
        sc = Scenario(o.learner, {"kind": "hashed", "bits": o.bits}, "")
        name = f"stale-{o.learner}"
        rng = random.Random(15)
        async with Client(group[0].url, 16) as a, Client(group[1].url, 16) as b:
            clients = {group[0].name: a, group[1].name: b}
            await all_see(clients, 2)
            await create_model(a, name, sc.learner, sc.features)
            owner_name = await agreed_owner(clients, name)
            owner, follower = (a, b) if owner_name == group[0].name else (b, a)
            await send_learns(owner, learn_bodies(name, self.fresh(sc, 21, 2000), 500), 1)
            await self.wait_version(clients, name)
            probe = score_bodies(name, make_events(sc, 4, 0, 1), 1)[0]
            out: dict[str, list[float]] = {}
            follower_learns: dict[str, list[float]] = {}
            for mode in ("idle", "under load"):
                stop = asyncio.Event()
                load_task = None
                if mode == "under load":
                    load_task = asyncio.create_task(self._background_learns(owner, name, sc,
                                                                            stop))
                    await asyncio.sleep(1.0)
                values: list[float] = []
                for k in range(o.samples):
                    await asyncio.sleep(rng.uniform(0.0, 0.5))  # off the loops' beat
                    status, raw = await owner.request(
                        "POST", "/learn", learn_bodies(name, self.fresh(sc, 22, 100), 100)[0])
                    t_ack = time.perf_counter()
                    if status != 200:
                        say(f"  probe learn answered {status}: {raw[:200]!r}")
                        continue
                    version = json.loads(raw)["version"]
                    while True:
                        st, body = await score_once(follower, probe)
                        if st == 200 and body["version"] >= version:
                            break
                        if time.perf_counter() - t_ack > 30:
                            raise RuntimeError("the follower never caught up")
                        await asyncio.sleep(0.005)
                    values.append(time.perf_counter() - t_ack)
                    if k % 10 == 9:
                        say(f"  [{kind} staleness, {mode}] {k + 1}/{o.samples}: median "
                            f"{1000 * percentile(values, 50):.0f} ms")
                # a learn sent to the follower: acknowledged once the owner's publication
                # covers it and the follower has loaded it
                waits: list[float] = []
                for _ in range(o.samples):
                    await asyncio.sleep(rng.uniform(0.0, 0.5))
                    body = learn_bodies(name, self.fresh(sc, 24, 100), 100)[0]
                    t0 = time.perf_counter()
                    status, raw = await follower.request("POST", "/learn", body)
                    if status == 200:
                        waits.append(time.perf_counter() - t0)
                    else:
                        say(f"  follower learn answered {status}: {raw[:200]!r}")
                stop.set()
                if load_task is not None:
                    await load_task
                out[mode] = values
                follower_learns[mode] = waits
                d, w = distribution(values), distribution(waits)
                say(f"[{kind} staleness, {mode}] n {d['n']}: p50 {1000 * d['p50']:.0f} ms, "
                    f"p90 {1000 * d['p90']:.0f} ms, max {1000 * d['max']:.0f} ms; a learn on "
                    f"the follower: p50 {1000 * w['p50']:.0f} ms, max {1000 * w['max']:.0f} ms")
            self.res.staleness[kind] = out
            self.res.follower_learns[kind] = follower_learns

    async def _background_learns(self, client: Client, name: str, sc: Scenario,
                                 stop: asyncio.Event) -> None:
        while not stop.is_set():
            await client.request("POST", "/learn",
                                 learn_bodies(name, self.fresh(sc, 23, 500), 500)[0])

    async def failovers(self, kind: str, group: list[Replica]) -> None:
        rows: list[dict[str, Any]] = []
        for k in range(self.o.failovers):
            row = await self.failover_once(kind, group, k)
            rows.append(row)
            say(f"  [{kind} failover {k + 1}/{self.o.failovers}] killed {row['victim']}: "
                f"{row['survivor']} owns after {row['own']:.2f}s, acknowledged a learn after "
                f"{row['ack']:.2f}s (version {row['version']}, statuses {row['statuses']}); "
                f"restarted in {row['restart']:.1f}s")
        self.res.failover[kind] = rows

    async def failover_once(self, kind: str, group: list[Replica], k: int) -> dict[str, Any]:
        """Create a model, learn on it, kill its owner, time the survivor's takeover."""
        sc = Scenario(self.o.learner, {"kind": "hashed", "bits": self.o.bits}, "")
        name = f"failover-{k}"
        by_name = {r.name: r for r in group}
        async with Client(group[0].url, 8) as a, Client(group[1].url, 8) as b:
            clients = {group[0].name: a, group[1].name: b}
            await all_see(clients, 2)
            await create_model(a, name, sc.learner, sc.features)
            victim = by_name[await agreed_owner(clients, name)]
            survivor = next(r for r in group if r is not victim)
            sclient = clients[survivor.name]
            await send_learns(clients[victim.name],
                              learn_bodies(name, self.fresh(sc, 31, 500), 500), 1)
            base = await self.wait_version(clients, name)
            await asyncio.sleep(random.Random(k).uniform(0.0, 1.0))  # off the lease beat
            assert victim.proc is not None
            t0 = time.perf_counter()
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            t_dead = time.perf_counter() - t0

            async def owned() -> float:
                async def check() -> bool:
                    st, info = await sclient.json("GET", f"/models/{name}")
                    return st == 200 and info.get("owner") == survivor.name
                await until(check, 60, f"{survivor.name} owns {name}", pause=0.01)
                return time.perf_counter() - t0

            async def acked() -> tuple[float, int, Counter]:
                statuses: Counter = Counter()
                while True:
                    body = learn_bodies(name, self.fresh(sc, 32, 100), 100)[0]
                    try:
                        st, raw = await sclient.request("POST", "/learn", body)
                    except Exception as exc:  # a transport error: retry
                        statuses[type(exc).__name__] += 1
                        await asyncio.sleep(0.05)
                        continue
                    statuses[st] += 1
                    if st == 200:
                        return time.perf_counter() - t0, json.loads(raw)["version"], statuses
                    if time.perf_counter() - t0 > 60:
                        raise RuntimeError(f"no learn acknowledged: {dict(statuses)}")
                    # 202: durable, not applied in time; the next batch is a new learn

            t_own, (t_ack, version, statuses) = await asyncio.gather(owned(), acked())
        restart = self.start(victim)
        async with Client(survivor.url, 4) as c:
            await c.request("DELETE", f"/models/{name}")
        return {"k": k, "victim": victim.name, "survivor": survivor.name, "own": t_own,
                "ack": t_ack, "dead": t_dead, "version": version, "base": base,
                "statuses": dict(statuses), "restart": restart}


async def score_once(client: Client, body: bytes) -> tuple[int, Any]:
    status, raw = await client.request("POST", "/score", body)
    return status, (json.loads(raw) if status == 200 else None)


# ---------------------------------------------------------------------------- report
def learn_ratios(rows: Sequence[dict[str, Any]]) -> list[tuple[int, str, str, float]]:
    """(round, mode, routing, two-replica events/s ÷ one replica's) for every two-replica
    row that has a one-replica row of the same round and mode (pinned, budget, ...)."""
    one = {(r["round"], r["mode"]): r["events_s"] for r in rows if r["replicas"] == 1}
    out = []
    for r in rows:
        base = one.get((r["round"], r["mode"]))
        if r["replicas"] == 2 and base:
            out.append((r["round"], r["mode"], r["routing"], r["events_s"] / base))
    return out


def budget_remark(res: Results, o: Options) -> str:
    """Whether the quota bound: every budgeted replica got at least 90 % of it."""
    got = [v for r in res.learn + res.score if r["mode"] == "budget" for v in r["cpu"].values()]
    if not got or not o.budget:
        return ""
    low = min(got)
    if low >= 0.9 * o.budget:
        return (f" (here every budgeted replica got {low:.0%}-{max(got):.0%} of a core: the "
                f"quota of {o.budget:g} bound in every budget row)")
    return (f" (here budgeted replicas got {low:.0%}-{max(got):.0%} of a core against a "
            f"quota of {o.budget:g}: where they got less, other load decided, not the quota)")


def learn_section(res: Results, o: Options) -> list[str]:
    rows = []
    ratios = {(rnd, m, rt): x for rnd, m, rt, x in learn_ratios(res.learn)}
    for r in res.learn:
        ratio = (ratios.get((r["round"], r["mode"], r["routing"])) if r["replicas"] == 2
                 else None)
        lat = f"{r['lat']['p50']:.0f} / {r['lat']['p99']:.0f}"
        if r["routing"] == "any":
            lat += (f" (owner {r['owner_lat']['p50']:.0f} / {r['owner_lat']['p99']:.0f}, "
                    f"follower {r['follower_lat']['p50']:.0f} / "
                    f"{r['follower_lat']['p99']:.0f})")
        not_ok = {k: v for k, v in r["statuses"].items() if k != 200}
        rows.append((
            r["round"], r["replicas"], r["routing"], r["layout"], float(r["events_s"]),
            "" if ratio is None else f"{ratio:.2f}×", lat,
            ", ".join(f"{v:.0%}" for v in r["cpu"].values()), float(r["events_per_cpu_s"]),
            f"{r['client_cpu']:.0%}", f"{r['store_cpu']:.0%}",
            f"{r['store_in_mb_s']:.1f} / {r['store_out_mb_s']:.1f}",
            f"{r['lost']} / {r['extra']}", ", ".join(f"{k}: {v}" for k, v in not_ok.items()),
            r["signs"].get("lease lost", 0) + r["signs"].get("handed over", 0)))
    out = [f"### Learn throughput, {o.models} busy models", "",
           f"{o.learner} on hashed ad-click events (2^{o.bits}), {o.models} models "
           f"(placed two per replica when there are two), {o.events:,} events per model and "
           f"row in batches of {o.batch}, {o.clients_per_model} concurrent clients per model "
           f"({o.models * o.clients_per_model} in all). 'vs 1' divides by the one-replica row "
           "of the same round and placement. 'replica CPU' is each replica's share of a core "
           "during the row (a pinned replica can use one core at most, a budgeted one its "
           "quota); 'store in / out' is what redis-server received and sent (INFO stats: "
           "appends and publications in; log reads, publications to followers out). "
           "Latencies are per request, in ms.", "",
           markdown_table(["round", "replicas", "routing", "placement", "events/s", "vs 1",
                           "p50 / p99 ms", "replica CPU", "events per replica CPU-s",
                           "client CPU", "store CPU", "store in / out MB/s", "lost / extra",
                           "not 200", "ownership moves"], rows)]
    ratios_by_mode: dict[str, list[float]] = {}
    for _, mode, routing, x in learn_ratios(res.learn):
        if routing == "owner":
            ratios_by_mode.setdefault(mode, []).append(x)
    if ratios_by_mode:
        out += ["", "Two replicas over one, owner routing: " + "; ".join(
            f"{mode} {', '.join(f'{x:.2f}×' for x in xs)} (median "
            f"{ratio_verdict(percentile(xs, 50))})" for mode, xs in ratios_by_mode.items())
            + "."]
    proj = []
    for mode in dict.fromkeys(r["mode"] for r in res.learn):
        eff1 = [r["events_per_cpu_s"] for r in res.learn
                if r["replicas"] == 1 and r["mode"] == mode]
        eff2 = [r["events_per_cpu_s"] for r in res.learn
                if r["replicas"] == 2 and r["mode"] == mode and r["routing"] == "owner"]
        if eff1 and eff2:
            e1, e2 = percentile(eff1, 50), percentile(eff2, 50)
            proj.append(f"{mode}: {e1:,.0f} alone, {e2:,.0f} as one of two → "
                        f"{2 * e2 / e1:.2f}×")
    if proj:
        out += ["", "Events learned per replica CPU-second (medians; owner routing), and what "
                "two replicas would learn over one if each kept a core of its own busy with "
                "that efficiency (the client and the store elsewhere) — an estimate from CPU "
                "accounting, not a measurement: " + "; ".join(proj) + "."]
    out += cpu_by_role(res.learn)
    return out


def cpu_by_role(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A table of the replicas' CPU per 1,000 events learned, by thread role."""
    with_roles = [r for r in rows if r.get("roles")]
    if not with_roles:
        return []
    roles = [*THREAD_ROLES.values(), "other"]
    table = []
    for r in with_roles:
        per = 1e6 / max(r["events"], 1)  # CPU-ms per 1,000 events
        total = sum(r["roles"].values())
        table.append((r["round"], r["replicas"], r["routing"], r["mode"],
                      *(f"{r['roles'].get(k, 0.0) * per:.2f}" for k in roles),
                      f"{total * per:.2f}"))
    return ["", "Where the replicas' CPU went, in CPU-ms per 1,000 events learned (both "
            "replicas together; each thread's /proc time, the threads told apart by py-spy "
            "dump):", "",
            markdown_table(["round", "replicas", "routing", "placement", *roles, "total"],
                           table)]


def score_section(res: Results, o: Options) -> list[str]:
    if not res.score:
        return []
    base = {r["mode"]: r["rps"] for r in res.score if r["replicas"] == 1}
    rows = []
    for r in res.score:
        b = base.get(r["mode"])
        ok = r["lat"]["p99"] <= TARGET_SCORE_P99_MS
        per = " / ".join(f"{d['p99']:.1f}" for d in r["per_target"])
        rows.append((r["replicas"], r["layout"], float(r["rps"]),
                     "" if not b else f"{r['rps'] / b:.2f}×", f"{r['lat']['p50']:.2f}",
                     f"{r['lat']['p99']:.2f}", per, f"{r['lat']['max']:.1f}",
                     ", ".join(f"{v:.0%}" for v in r["cpu"].values()),
                     f"{r['client_cpu']:.0%}", r["errors"],
                     f"p99 ≤ {TARGET_SCORE_P99_MS:g} ms: {'met' if ok else 'NOT met'}"))
    if o.score_client == "wrk":
        load = (f"for {o.score_seconds:g} s per row, measured by wrk (one process per "
                "replica, one thread, a keep-alive connection per client; latencies from "
                "wrk's own histogram; 'client CPU' is the wrk processes' and this "
                "process's)")
    else:
        load = (f"{o.score_requests:,} requests per row measured by the client (aiohttp, in "
                "the benchmark's process)")
    return ["", f"### Score latency, {SCORE_CLIENTS} clients", "",
            f"{o.candidates} candidates per request, {load}, after 50 per replica to warm "
            "up; with two replicas 8 clients score on the owner and 8 on the follower ('p99 "
            "by replica': owner / follower). No learning meanwhile.", "",
            markdown_table(["replicas", "placement", "requests/s", "vs 1", "p50 ms", "p99 ms",
                            "p99 by replica", "max ms", "replica CPU", "client CPU",
                            "errors", "target"], rows)]


def idle_section(res: Results, o: Options) -> list[str]:
    if not res.idle:
        return []
    rows = [(r["models"], r["replicas"], ", ".join(f"{v:.1%}" for v in r["cpu"].values()),
             f"{r['store_cpu']:.1%}", float(r["commands_s"])) for r in res.idle]
    return ["", "### What idle models cost", "",
            f"Models that nobody uses (each learned 500 events once), measured over "
            f"{o.idle_seconds:g} s after placement settled: the replicas' and redis-server's "
            "CPU and the commands redis-server processed per second. With two replicas "
            "each replica's sync loop looks at every model each sync_interval (1 s), every "
            "follower at each publication every max_staleness / 2, and each owner takes "
            "its wake-ups every follow_interval (0.02 s).", "",
            markdown_table(["models", "replicas", "replica CPU", "redis-server CPU",
                            "store commands/s"], rows)]


def failover_section(res: Results) -> list[str]:
    if not res.failover:
        return []
    rows = []
    hist = []
    edges = [0, 1, 2, 3, 4, 5, 6, 8, 10]
    for kind, runs in res.failover.items():
        for key, what in (("own", "until the survivor owns the model"),
                          ("ack", "until the survivor acknowledges a learn")):
            d = distribution([r[key] for r in runs])
            rows.append((res.labels.get(kind, kind), what, d["n"], f"{d['min']:.2f}",
                         f"{d['p10']:.2f}", f"{d['p50']:.2f}", f"{d['p90']:.2f}",
                         f"{d['max']:.2f}", f"{d['mean']:.2f}"))
        statuses: Counter = Counter()
        for r in runs:
            statuses.update(r["statuses"])
        hist.append(f"- {res.labels.get(kind, kind)}, until acknowledged: "
                    f"{histogram_line([r['ack'] for r in runs], edges, 's')}; answers to the "
                    f"survivor's learns: {dict(statuses)}; the killed replica restarted in "
                    f"{percentile([r['restart'] for r in runs], 50):.1f} s (median).")
    return ["", "### Failover: kill -9 of an owner", "",
            "Two replicas; per repetition a fresh model, 500 events learned through its owner "
            "and published to the follower, a random pause of 0-1 s, then SIGKILL of the "
            "owner (t = 0) and at once a 100-event learn sent to the survivor (a new one "
            "after any 202). The survivor's GET /models/{name} is polled every 10 ms. The "
            "killed replica is restarted before the next repetition. lease_ttl 3 s (renewed "
            "every 1 s), sync_interval 1 s: the defaults. Seconds:", "",
            markdown_table(["store", "from the kill", "n", "min", "p10", "p50", "p90", "max",
                            "mean"], rows), "", *hist]


def staleness_section(res: Results) -> list[str]:
    if not res.staleness:
        return []
    rows = []
    hist = []
    edges = [0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0]
    for kind, modes in res.staleness.items():
        for mode, values in modes.items():
            d = distribution(values)
            ms = {k: 1000 * v for k, v in d.items() if k != "n"}
            rows.append((res.labels.get(kind, kind), mode, d["n"], f"{ms['min']:.0f}",
                         f"{ms['p10']:.0f}", f"{ms['p50']:.0f}", f"{ms['p90']:.0f}",
                         f"{ms['p99']:.0f}", f"{ms['max']:.0f}", f"{ms['mean']:.0f}"))
            hist.append(f"- {res.labels.get(kind, kind)}, {mode}: "
                        f"{histogram_line(values, edges, 'ms', 1000)}")
    learns = []
    for kind, modes in res.follower_learns.items():
        for mode, values in modes.items():
            d = distribution(values)
            ms = {k: 1000 * v for k, v in d.items() if k != "n"}
            learns.append((res.labels.get(kind, kind), mode, d["n"], f"{ms['min']:.0f}",
                           f"{ms['p10']:.0f}", f"{ms['p50']:.0f}", f"{ms['p90']:.0f}",
                           f"{ms['p99']:.0f}", f"{ms['max']:.0f}", f"{ms['mean']:.0f}"))
    return ["", "### Follower staleness", "",
            "From the owner's acknowledgement of a 100-event learn (version v) until the "
            "follower's /score reports at least v (polled every 5 ms; samples 0-0.5 s apart "
            "at random). 'under load': one client learning 500-event batches on the owner "
            "throughout. publish_interval 0.1 s, max_staleness 1 s (followers reload every "
            "0.5 s unless a learn waits), follow_interval 0.02 s: the defaults. Under load "
            "the owner's answer can reach the client after its publication has reached the "
            "follower (values near 0). Milliseconds:",
            "", markdown_table(["store", "owner", "n", "min", "p10", "p50", "p90", "p99", "max",
                                "mean"], rows), "", *hist,
            *(["", "A 100-event learn sent to the follower, from the request to its 200 (the "
               "follower appends, the owner applies and publishes, the follower loads the "
               "publication and answers), at random intervals of 0-0.5 s, same two loads. "
               "Milliseconds:", "",
               markdown_table(["store", "owner", "n", "min", "p10", "p50", "p90", "p99",
                               "max", "mean"], learns)] if learns else [])]


def signs_section(res: Results) -> list[str]:
    if not res.signs:
        return []
    keys = list(LOG_SIGNS)
    rows = [(phase, *(counts.get(k, 0) for k in keys)) for phase, counts in res.signs.items()]
    return ["", "Ownership lines in the replicas' logs, per phase ('taken' counts every "
            "placement and takeover; 'given up' includes clean shutdowns):", "",
            markdown_table(["phase", *keys], rows)]


def report(res: Results, o: Options, command: str, load: tuple[Sequence[float],
           Sequence[float]], code: str, client_kind: str) -> str:
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    la = [", ".join(f"{x:.2f}" for x in xs) for xs in load]
    stores = "; ".join(f"{k}: {v}" for k, v in res.labels.items())
    if o.extra_path:
        code += f" (the replicas ran the package found first on {o.extra_path})"
    if o.settings:
        code += "; settings changed from their defaults: " + ", ".join(
            f"{k} = {v}" for k, v in o.settings.items())
    out = [f"{when}; `{command}`; {code}; {cpu_model()}, {os.cpu_count()} cores, Python "
           f"{platform.python_version()}; client {client_kind} in the benchmark's process; "
           f"stores: {stores}. Each replica is one `aucstream serve` process (one worker). "
           f"Load average (1, 5, 15 min) before: {la[0]}; after: {la[1]} — other jobs "
           "shared the machine when the load average is above ~1, and every number here is "
           "then depressed (the CPU columns show what each process got).", "",
           "Placement: *pinned* sets the CPU affinity of every thread, as `taskset -a -p`: "
           "with two cores, one replica gets core 0 while the client and redis-server get "
           "core 1, but two replicas take a core each and the client and redis-server must "
           "float over both, taking part of the replicas' cores; so the pinned two-replica "
           "rows understate what two replicas with a core each would do. *budget* (with "
           "`--budget C`) puts each replica in its own cgroup with a CFS quota of C cores and "
           "pins nothing, so one and two replicas get the same budget per replica and two "
           "replicas, redis-server and the client fit in two cores (C ≤ 0.5). *unpinned*: "
           "the scheduler decides. Other users' processes were not kept off any core, and a "
           "quota is a cap, not a guarantee: the 'replica CPU' column says what each got"
           f"{budget_remark(res, o)}.", ""]
    out += learn_section(res, o) if res.learn else []
    out += score_section(res, o)
    out += idle_section(res, o)
    out += failover_section(res)
    out += staleness_section(res)
    out += signs_section(res)
    return "\n".join(out)


# ---------------------------------------------------------------------------- main
PARTS = ("learn", "score", "idle", "failover", "staleness")
MODES = ("pinned", "unpinned", "budget")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_scaleout",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--learner", default="solam", help="learner of the busy models")
    p.add_argument("--models", type=int, default=4, help="busy models")
    p.add_argument("--events", type=int, default=100_000, help="events per model and row")
    p.add_argument("--batch", type=int, default=500, help="events per learn request")
    p.add_argument("--clients-per-model", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2,
                   help="one-replica / two-replica rounds, interleaved")
    p.add_argument("--bits", type=int, default=20, help="hash bits")
    p.add_argument("--score-requests", type=int, default=10_000, help="per score row")
    p.add_argument("--candidates", type=int, default=100)
    p.add_argument("--score-client", choices=("auto", "python", "wrk"), default="auto",
                   help="the score rows' load generator: this process's aiohttp client, or "
                   "one wrk process per replica (C: a fifth of the client CPU, which on a "
                   "small machine the replicas then have; Debian: apt-get install wrk); "
                   "auto: wrk when it is on the PATH")
    p.add_argument("--score-seconds", type=float, default=4.0,
                   help="seconds per score row with --score-client wrk")
    p.add_argument("--failovers", type=int, default=30, help="kill -9 repetitions per store")
    p.add_argument("--samples", type=int, default=40,
                   help="staleness samples per store and load")
    p.add_argument("--idle-models", type=int, nargs="+", default=[4, 100],
                   help="model counts of the idle-cost rows")
    p.add_argument("--idle-seconds", type=float, default=10.0, help="per idle-cost row")
    p.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--cluster", action="store_true",
                   help="also run failover and staleness on a 3-master Redis Cluster "
                   "(the default, except with --quick)")
    p.add_argument("--no-cluster", action="store_true", help="single redis-server only")
    p.add_argument("--budget", type=float, metavar="CORES",
                   help="add 'budget' rows: each replica in a cgroup with a CPU quota of "
                   "CORES (root, cgroup cpu controller); 0.5 fits two replicas and the load "
                   "on two cores")
    p.add_argument("--modes", nargs="+", choices=MODES,
                   help="placements of the learn and score rows (default: pinned unpinned, "
                   "and budget with --budget)")
    p.add_argument("--log-level", default="info", help="the replicas' log level")
    p.add_argument("--appendfsync", choices=("always", "everysec", "no"), default="always",
                   help="the store's AOF fsync policy (always: as the service benchmark, "
                   "every acknowledged learn on disk)")
    p.add_argument("--set", dest="settings", action="append", default=[],
                   metavar="NAME=VALUE", help="a service setting for every replica, e.g. "
                   "publish_interval=1.0 (AUCSTREAM_PUBLISH_INTERVAL); repeatable")
    p.add_argument("--extra-path", help="a directory whose packages the replicas import "
                   "first (they start in it; e.g. a copy of aucstream/ with a patch to try; "
                   "the report then says so)")
    p.add_argument("--workdir", type=Path, help="keep the stores' data and the replicas' "
                   "logs here (default: a temporary directory, removed at the end)")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--write", action="store_true", help=f"update {RESULTS.relative_to(REPO)}")
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.quick:
        args.events, args.rounds, args.score_requests = 5_000, 1, 800
        args.failovers, args.samples = 2, 6
        args.idle_models, args.idle_seconds = [4, 20], 3.0
    try:
        args.settings = parse_settings(args.settings)
    except ValueError as exc:
        p.error(str(exc))
    if args.modes is None:
        args.modes = ["pinned", "unpinned"] + (["budget"] if args.budget else [])
    if "budget" in args.modes and not args.budget:
        p.error("the budget placement needs --budget CORES")
    cluster = args.cluster or not (args.quick or args.no_cluster)
    args.stores = ["redis", "cluster"] if cluster and not args.no_cluster else ["redis"]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m loadtest.bench_scaleout " + " ".join(
        sys.argv[1:] if argv is None else argv)
    opts = Options(learner=args.learner, models=args.models, events=args.events,
                   batch=args.batch, clients_per_model=args.clients_per_model,
                   rounds=args.rounds, bits=args.bits, score_requests=args.score_requests,
                   candidates=args.candidates, failovers=args.failovers,
                   samples=args.samples, stores=args.stores, only=args.only,
                   log_level=args.log_level, budget=args.budget, modes=args.modes,
                   idle_models=args.idle_models, idle_seconds=args.idle_seconds,
                   extra_path=args.extra_path, settings=args.settings,
                   appendfsync=args.appendfsync, score_client=args.score_client,
                   score_seconds=args.score_seconds)
    if opts.score_client == "auto":
        opts.score_client = "wrk" if wrk.available() else "python"
    if opts.score_client == "wrk" and not wrk.available():
        raise SystemExit("--score-client wrk: wrk is not on the PATH (Debian: apt-get "
                         "install wrk)")
    load0 = os.getloadavg()
    say(f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; {cpu_model()}, "
        f"{os.cpu_count()} cores; parts {' '.join(opts.only)}; stores {' '.join(opts.stores)}")
    code = code_version()
    with contextlib.ExitStack() as stack:
        if args.workdir is not None:
            args.workdir.mkdir(parents=True, exist_ok=True)
            tmp = str(args.workdir)
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="aucstream-scaleout-"))
        bench = Bench(opts, Path(tmp))
        try:
            asyncio.run(bench.run())
        except BaseException:
            say(f"failed; the replicas' logs are in {tmp} until this exits:")
            for log in sorted(Path(tmp).rglob("r?.log")):
                say(f"--- {log} (tail)\n" + log.read_text(errors="replace")[-3000:])
            raise
    load1 = os.getloadavg()
    client_kind = "aiohttp"
    with contextlib.suppress(ImportError):
        import aiohttp

        client_kind = f"aiohttp {aiohttp.__version__}"
    if opts.score_client == "wrk":
        client_kind += f" (score rows: {wrk.version()}, one process per replica)"
    text = report(bench.res, opts, command.strip(), (load0, load1), code, client_kind)
    print(text)
    if args.write:
        write_marked(args.results, START, END, HEADING, text)
        say(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
