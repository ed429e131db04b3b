"""Processes and mounts of the fault benchmark: the service, a redis-server, a tmpfs.

Each object can be killed, stopped and resumed by the benchmark's fault injector, and
registers nothing global: :mod:`loadtest.faults` holds them in an ``ExitStack`` so that
every process and mount is released on success, failure or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from loadtest.bench_service import REPO, free_port

__all__ = ["MountRefused", "RedisProc", "ServiceProc", "Tmpfs", "wait_ready"]


def wait_ready(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None
               ) -> float | None:
    """Seconds until ``url/readyz`` answers 200 (None: not within ``timeout``, or the
    process exited)."""
    t0 = time.monotonic()
    with httpx.Client(base_url=url, timeout=2.0) as http:
        while time.monotonic() - t0 < timeout:
            if proc is not None and proc.poll() is not None:
                return None
            with contextlib.suppress(httpx.HTTPError):
                if http.get("/readyz").status_code == 200:
                    return time.monotonic() - t0
            time.sleep(0.05)
    return None


class ServiceProc:
    """``python -m aucstream.service.cli serve --port P`` (one worker) with ``AUCSTREAM_*`` env."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        base = {k: v for k, v in os.environ.items() if not k.startswith("AUCSTREAM_")}
        base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH"))
                                             if p)
        self.env = {**base, **env}
        self.log_path = workdir / "service.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "aucstream.service.cli", "serve", "--host", "127.0.0.1",
                 "--port", str(self.port)],
                cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def start(self, timeout: float = 120.0) -> float | None:
        """Spawn and wait for /readyz 200; the seconds it took (None: never ready)."""
        self.spawn()
        return wait_ready(self.url, timeout, self.proc)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 20 s)."""
        if self.alive():
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, n: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""


class RedisProc:
    """A throw-away redis-server on a free loopback port, AOF with ``appendfsync always``
    in ``data_dir`` (its log file in ``log_dir``, so that a full data disk still logs).
    Restartable on the same port and directory: the AOF brings the data back."""

    def __init__(self, data_dir: Path, log_dir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not on PATH (apt-get install redis-server)")
        self.binary = binary
        self.dir = data_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logfile = log_dir / "redis.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.exits: list[int] = []  # exit codes of ends the benchmark did not cause

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "always",
             "--save", "", "--daemonize", "no", "--maxmemory-policy", "noeviction",
             "--logfile", str(self.logfile)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):  # -LOADING while the AOF loads
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start; see {self.logfile}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited_by_itself(self) -> bool:
        """Whether the server ended without the benchmark asking (e.g. an AOF write
        error with ``appendfsync always`` makes Redis exit); remembers its exit code."""
        if self.proc is not None and self.proc.poll() is not None:
            self.exits.append(self.proc.returncode)
            self.proc = None
            return True
        return False

    def kill9(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)  # a stopped process dies only once resumed
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout
        for word in out.split():
            if word.startswith("v="):
                return word[2:]
        return "?"


class MountRefused(RuntimeError):
    """``mount -t tmpfs`` is not permitted here."""


class Tmpfs:
    """A small tmpfs at ``path`` (mounted on enter, unmounted on exit) and a filler file
    that takes all but ``headroom`` bytes of it, so that the load fills the rest."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path = path
        self.size_mb = size_mb
        self.mounted = False
        self.filler = path / "filler.bin"

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if os.name != "posix" or shutil.which("mount") is None:
            raise MountRefused("no mount command")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs",
                            str(self.path)], capture_output=True, text=True)
        if r.returncode != 0:
            raise MountRefused((r.stderr or r.stdout).strip() or f"exit {r.returncode}")
        self.mounted = True

    def unmount(self) -> None:
        if not self.mounted:
            return
        r = subprocess.run(["umount", str(self.path)], capture_output=True, text=True)
        if r.returncode != 0:  # still busy: detach now, freed when the last user closes
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
        self.mounted = False

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, headroom: int) -> int:
        """Write a filler file leaving ``headroom`` bytes free; its size."""
        size = max(0, self.free_bytes() - headroom)
        chunk = b"\0" * (1 << 20)
        written = 0
        with self.filler.open("wb", buffering=0) as f:
            while written < size:
                try:
                    n = f.write(chunk[:min(len(chunk), size - written)])
                except OSError:  # the load took the rest meanwhile
                    break
                if not n:
                    break
                written += n
        return written

    def free_filler(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()
