"""Fixtures shared by the whole suite: throw-away redis-servers on free ports."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the default, pyproject.toml): one worker per core, at most four. The
    suite spends most of its time in one process at a time (a test's server, its
    redis-servers, numba's compiler): on two cores two workers took a cold run from
    6:12 to about 4:00. Each worker starts its own redis-servers and imports numba
    (~1 GB of RSS), so more than four would mostly cost memory. ``-n 0`` runs the tests
    in this process (for a debugger, or ``-x`` on one test)."""
    return max(1, min(os.cpu_count() or 1, 4))


def _numba_cache_keyed_on_sources() -> None:
    """Point numba's on-disk cache at a folder named by a hash of every source file that
    uses numba. Numba checks a cached kernel against its own file only: a kernel that
    inlines a helper from another module would keep the helper's old code after an edit.
    A new key on any edit makes the run compile afresh. Set before numba is imported
    (servers the tests start inherit it); other keys' folders are removed.
    AUCSTREAM_TEST_NUMBA_CACHE_DIR names a folder to use instead, untouched (for
    several people testing one checkout at once, who would remove each other's)."""
    own = os.environ.get("AUCSTREAM_TEST_NUMBA_CACHE_DIR")
    if own:  # a developer's own folder, e.g. one per concurrent checkout user; kept as is
        os.environ["NUMBA_CACHE_DIR"] = own
        return
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted([*root.glob("models/**/*.py"), *root.glob("service/**/*.py")]):
        text = path.read_bytes()
        if b"numba" in text:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + text)
    base = root / ".numba-cache"
    here = base / digest.hexdigest()[:16]
    here.mkdir(parents=True, exist_ok=True)
    for other in base.iterdir():
        if other != here:
            shutil.rmtree(other, ignore_errors=True)
    os.environ["NUMBA_CACHE_DIR"] = str(here)


_numba_cache_keyed_on_sources()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Fill numba's cache before the tests start (in the controller only, or the one
    process with ``-n 0``): every learner's kernels, compiled by the service's own warm-up
    (this process and a helper on two cores, a second with the cache filled). Without
    it, the workers' first tests each compiled what they needed, the same kernels
    several times over, while a test's server compiled everything again."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller did it
        return
    import subprocess
    import sys
    import time

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter is not None else print
    say(f"numba cache {os.environ['NUMBA_CACHE_DIR']}: warming up (about a minute on an "
        "empty cache)")
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "from aucstream.service.warmup import "
                    "warm_up_process; warm_up_process()"], check=False, timeout=900)
    say(f"kernels ready in {time.monotonic() - started:.1f}s")

# after the cache folder is set: this imports aucstream, which would otherwise point numba
# at the user cache (and numba reads its configuration once, when first imported)
from tests.redis_servers import RedisCluster, RedisServer  # noqa: E402


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the whole session (tests keep apart by key prefix)."""
    server = RedisServer(tmp_path_factory.mktemp("redis-shared"))
    server.start()
    yield server
    server.stop(kill=True)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One 3-master cluster for the whole session (tests keep apart by key prefix)."""
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, to stop, kill, pause and restart."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        server.resume()  # in case a test left it stopped
    server.stop(kill=True)


