"""Compile (or load from numba's on-disk cache) every learner's kernels ahead of traffic.

Run once per process at start-up (``/readyz`` waits for it), and at image build time
(``python -m aucstream.service.warmup``) so that containers start with a filled cache.

On an empty cache compiling takes tens of seconds of one core. :func:`warm_up_process`
then starts a helper process that compiles the learners in order into the cache while
this process goes through them from the other end: each learner is compiled by one of
the two and loaded from the cache by the other, so a cold start takes about half as long
on two cores. With a filled cache (a probe kernel is loaded, not compiled) the helper
stops at once, and this process is done in about a second.

The processes of one installation warm up one at a time (a file lock): the workers of
``serve --workers N`` start together, and each compiling every kernel with its own
helper put 2N compilers on the machine's cores (two workers on two cores, cold: over
120 s to ready, against ~50 s for one). The first compiles; the others then load.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
from numba import njit
from numba.core import event

from aucstream import models
from aucstream.models._sparse import dense_to_csr
from aucstream.models.calibration import PlattCalibrator
from aucstream.models.preprocessing import StandardScaler

from . import fastjson
from .encoding import EncodedBatch, FeatureEncoder
from .feature_index import FeatureIndex
from .feedback import impressions_of
from .ingest import is_one_array
from .store.digest_table import DigestTable
from .store.id_digests import digest_args, id_digests, id_digests_128
from .store.id_window import IdWindow

__all__ = ["filled_cache", "warm_up"]

log = logging.getLogger("aucstream.warmup")


def warm_up(names: list[str] | None = None, extras: bool = True,
            stop: Callable[[], bool] | None = None) -> float:
    """Run the service's other kernels (``extras``: JSON fast path, hashing, scaler,
    rolling AUC), then every learner in ``names`` (default all) once on a tiny stream,
    dense and sparse where accepted; ``stop()`` true between learners ends it early."""
    started = time.monotonic()
    if extras:
        _warm_extras()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 4))
    y = np.array([0, 1] * 4)
    # a tiny budget so that NOAM switches to its Nyström map within the warm-up stream
    extra = {"noam": {"budget": 2, "capacity": 2}}
    for name in names or models.available():
        if stop is not None and stop():
            break
        cls = models.base._lookup(name)
        storages = ("dense", "sparse") if "storage" in cls.param_table else (None,)
        for storage in storages:
            params = {} if storage is None else {"storage": storage}
            lrn = models.create(name, n_features=4, **params, **extra.get(name, {}))
            lrn.score_then_learn(X, y)
            lrn.learn(X, y)
            lrn.score(X)
            lrn.snapshot().score(X)
            if lrn.accepts_sparse:  # 'auto' decides by its candidates
                lrn.score_then_learn(dense_to_csr(X), y)
                lrn.score(dense_to_csr(X))
                unsorted = (np.array([0, 2]), np.array([3, 1]), np.array([1.0, 2.0]))
                lrn.score(unsorted)  # canonicalises the row
    elapsed = time.monotonic() - started
    log.info("kernels ready in %.1fs", elapsed)
    return elapsed


def _warm_extras() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 4))
    y = np.array([0, 1] * 4)
    scaler = StandardScaler(4)
    scaler.transform(scaler.learn_transform(X))
    rolling = models.RollingAUC(4)
    rolling.update(X[:, 0], y)
    models.RollingAUC.from_state(rolling.get_state())
    # /score's probabilities: the first fit comes at 100 pairs
    calibration = PlattCalibrator()
    calibration.update(np.tile(X[:, 0], 13), np.tile(y, 13))
    calibration.predict(X[:, 0])
    FeatureEncoder({"kind": "hashed", "bits": 8}).encode([{"features": {"a": "b", "c": 1.0}}])
    hashed = b'{"model": "w", "events": [{"features": {"a": "b", "n": {"c": 1.5}}, "label": 1}]}'
    dense = b'{"model": "w", "events": [{"x": [1.0, 2], "label": 0, "id": "e"}]}'
    fastjson.model_name(hashed)
    fastjson.parse_learn(hashed, {"kind": "hashed", "bits": 8}, 10)
    fastjson.parse_learn(dense, {"kind": "dense", "dim": 2}, 10)
    fastjson.parse_score(b'{"model": "w", "items": [{"x": [1, 2]}], "top_k": 1}',
                         {"kind": "dense", "dim": 2}, 10)
    # compact hashed models' column index, and stream entries' shape check
    index = FeatureIndex()
    csr = (np.array([0, 2, 3]), np.array([7, 3, 7]), np.array([1.0, 2.0, 3.0]))
    index.assign(csr)
    index.frozen().lookup(csr, 2)
    FeatureIndex(index.columns()[:1]).extend_to(index.columns())  # a follower's load
    is_one_array(b"[]")
    digest_args(["e"], 2)  # the Redis store's appends (fields and log layouts)
    window = IdWindow()
    digests = id_digests(["e", "f"])
    window.keep(digests)
    window.record(digests, np.array([1, 2]))
    window.forget(1, [(0, 1)])
    window.record(id_digests(["g"] * 600), np.arange(3, 603))  # a rebuild
    table = DigestTable()  # the embedded store's impression index
    table.put(id_digests_128([f"i{k}" for k in range(20)]), np.arange(20))  # (grows once)
    table.get(id_digests_128(["i1"]))
    impressions_of(EncodedBatch(n=1, indptr=csr[0][:2], indices=csr[1], values=csr[2]),
                   ["i"], np.zeros(1), 1)  # kept /score items' payloads


_DONE = threading.Event()
_ONCE = threading.Lock()


def warmed() -> bool:
    """Whether this process has compiled (or loaded) every kernel."""
    return _DONE.is_set()


@njit(cache=True)
def _probe(x: int) -> int:
    return x + 1


def filled_cache() -> bool:
    """Whether numba's cache was filled by an earlier warm-up of this installation (a
    restart, an image built with the warm-up): whether a kernel of this module is loaded
    from it rather than compiled. Call once per process."""
    compiles = _Compiles()
    with event.install_listener("numba:compile", compiles):
        _probe(1)
    return compiles.count == 0


class _Compiles(event.Listener):
    """Counts numba's compilations (a kernel loaded from the cache is not one)."""

    def __init__(self) -> None:
        self.count = 0

    def on_start(self, ev: event.Event) -> None:
        self.count += 1

    def on_end(self, ev: event.Event) -> None:
        pass


def warm_up_process() -> None:
    """Warm up this process once (later calls wait for the first); with a helper compiler
    process where there is a second core and the cache is empty; after any other process
    of this installation that is warming up (:func:`one_at_a_time`)."""
    with _ONCE:
        if _DONE.is_set():  # (no wait for other processes' warm-ups)
            return
        with one_at_a_time():
            # The helper starts first, so that a cold start does not wait for the look at
            # the cache; with a filled cache it would only load kernels a second time
            # until this process is done (~1 s of CPU per start), so it stops at once.
            helper = _start_helper()
            if helper is not None and filled_cache():
                helper.terminate()
                helper.wait()
                helper = None
            try:
                # The helper goes through the learners in order; this process first does
                # the rest (about as long), then the learners from the other end, loading
                # what the helper has compiled meanwhile.
                warm_up(models.available()[::-1] if helper is not None else None)
            finally:
                if helper is not None and helper.poll() is None:
                    helper.terminate()  # it has nothing left that this process needs
                _DONE.set()


@contextlib.contextmanager
def one_at_a_time(cache_dir: str | None = None) -> Iterator[None]:
    """Hold the warm-up lock of this installation and numba cache folder (``cache_dir``,
    default ``$NUMBA_CACHE_DIR``): an exclusive ``flock``, so a process killed while
    holding it frees it. Taken before the look at the cache: that look compiles a probe
    kernel, after which the cache looks filled to every other process although the rest
    is still being compiled."""
    if cache_dir is None:
        cache_dir = os.environ.get("NUMBA_CACHE_DIR", "")
    where = f"{os.path.dirname(os.path.abspath(__file__))}|{cache_dir}"
    key = hashlib.blake2b(where.encode(), digest_size=8).hexdigest()
    path = os.path.join(tempfile.gettempdir(), f"aucstream-warmup-{key}.lock")
    try:
        lock = open(path, "a")  # noqa: SIM115 (held across the yield)
    except OSError as exc:  # no writable temporary folder: warm up unco-ordinated
        log.debug("no warm-up lock at %s: %s", path, exc)
        yield
        return
    with lock:
        waited = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        waited = time.monotonic() - waited
        if waited > 1:
            log.info("waited %.1fs for another process's warm-up", waited)
        yield


def _start_helper() -> subprocess.Popen | None:
    """The helper compiler process (it also stops by itself once its parent is gone)."""
    if (os.cpu_count() or 1) < 2:
        return None
    names = ",".join(models.available())
    try:
        helper = subprocess.Popen([sys.executable, "-m", "aucstream.service.warmup",
                                   "--learners", names, "--no-extras", "--quiet",
                                   "--parent", str(os.getpid())],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:  # no processes to spare: compile here alone
        return None
    atexit.register(lambda: helper.poll() is None and helper.terminate())
    return helper


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m aucstream.service.warmup",
                                description="Fill numba's cache with every kernel.")
    p.add_argument("--learners", help="comma-separated, in this order (default: all)")
    p.add_argument("--no-extras", action="store_true",
                   help="learners only (not the JSON fast path, hashing, scaler, AUC)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--parent", type=int, help="stop when this process is gone (a helper "
                   "of a service that was stopped or killed)")
    args = p.parse_args(argv)
    names = args.learners.split(",") if args.learners else None
    orphaned = None if args.parent is None else (lambda: os.getppid() != args.parent)
    elapsed = warm_up(names, extras=not args.no_extras, stop=orphaned)
    if not args.quiet:
        print(f"warmed up {'every learner' if names is None else ', '.join(names)} "
              f"in {elapsed:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
