"""Throw-away redis-servers for the store tests: one server, or a small Redis Cluster.

Each server runs on a free port of 127.0.0.1 (never 6379) in its own directory, with AOF
on and ``appendfsync always``, so that stopping and restarting it tests what production
relies on. If ``redis-server`` is missing it is installed with apt-get (CI runs as root)
before giving up.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from aucstream.service.store import RedisStore

NO_RETRY = Retry(NoBackoff(), 0)  # redis-py's default retries back off for seconds


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], env=env, check=False, capture_output=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "redis-server"],
            env=env,
            check=False,
            capture_output=True,
        )
        found = shutil.which("redis-server")
        if found:
            return found
    pytest.fail("redis-server is not installed and could not be installed with apt-get")


def free_port(below: int = 65536) -> int:
    """A port of 127.0.0.1 free right now, below ``below`` (a cluster node's bus listens
    on its port + 10000, so its port must be at most 55535)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port < below:
            return port


class RedisServer:
    """One redis-server process on 127.0.0.1, restartable on the same port and data dir."""

    def __init__(self, workdir: Path, below: int = 65536) -> None:
        self.binary = redis_server_binary()
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.below = below
        self.port = free_port(below)
        self.proc: subprocess.Popen[bytes] | None = None
        self.extra: list[str] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        for _ in range(5):
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "--port", str(self.port),
                    "--bind", "127.0.0.1",
                    "--dir", str(self.dir),
                    "--appendonly", "yes",
                    "--appendfsync", "always",
                    "--save", "",
                    "--daemonize", "no",
                    "--logfile", str(self.dir / "redis.log"),
                    *self.extra,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            if self._wait_ready():
                return
            self.stop(kill=True)
            self.port = free_port(self.below)  # lost a race for the port: take another
        log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
        pytest.fail(f"redis-server did not start:\n{log}")

    def _wait_ready(self, timeout: float = 10.0) -> bool:
        client = redis.Redis(
            port=self.port, socket_connect_timeout=0.2, socket_timeout=1, retry=NO_RETRY
        )
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.RedisError:  # refused, or still loading the AOF
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM (clean shutdown) or SIGKILL (crash), and wait for the process to end."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2, retry=NO_RETRY)


class RedisCluster:
    """Three masters (no replicas) on free ports, each serving a third of the slots."""

    def __init__(self, workdir: Path, size: int = 3) -> None:
        # a node's bus listens on its port + 10000
        self.nodes = [RedisServer(workdir / f"node{i}", below=55536) for i in range(size)]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> None:
        for node in self.nodes:
            node.extra = [
                "--cluster-enabled", "yes",
                "--cluster-node-timeout", "2000",
                "--cluster-config-file", str(node.dir / "nodes.conf"),
            ]  # fmt: skip
            node.start()
        # What redis-cli --cluster create does, without its one-second polling.
        n = len(self.nodes)
        bounds = [16384 * i // n for i in range(n + 1)]
        for i, node in enumerate(self.nodes):
            c = node.client()
            try:
                c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)  # type: ignore[no-untyped-call]
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", bounds[i], bounds[i + 1] - 1)  # type: ignore[no-untyped-call]
                if i > 0:
                    c.execute_command("CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port)  # type: ignore[no-untyped-call]
            finally:
                c.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            states: list[bool] = []
            for node in self.nodes:
                c = node.client()
                try:
                    info = c.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
                    states.append(b"cluster_state:ok" in info and b"known_nodes:%d" % n in info)
                finally:
                    c.close()
            if all(states):
                return
            time.sleep(0.05)
        pytest.fail("the Redis Cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop(kill=True)


def fast_redis_store(url: str, prefix: str | None = None,
                     resolve_timeout: float = 1.0, dedup_layout: str = "log") -> RedisStore:
    """Short timeouts, so that tests of a dead server are fast."""
    return RedisStore.from_url(
        url, prefix=prefix or f"t{uuid.uuid4().hex[:12]}", socket_timeout=1.0,
        connect_timeout=0.5, resolve_timeout=resolve_timeout, dedup_layout=dedup_layout,
    )
