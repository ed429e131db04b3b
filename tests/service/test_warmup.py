"""The start-up warm-up: a helper compiler process only when numba's cache is empty."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def _filled(cache: Path) -> bool:
    """``filled_cache()`` in a fresh process on the numba cache folder ``cache``."""
    out = subprocess.run(
        [sys.executable, "-c",
         "from aucstream.service.warmup import filled_cache; print(filled_cache())"],
        env={**os.environ, "NUMBA_CACHE_DIR": str(cache)}, capture_output=True, text=True,
        timeout=120, check=True)
    return {"True": True, "False": False}[out.stdout.strip()]


def test_a_filled_cache_is_told_from_an_empty_one(tmp_path: Path) -> None:
    assert _filled(tmp_path) is False  # nothing there: the probe kernel compiles
    assert _filled(tmp_path) is True  # the first process left it in the cache


def test_processes_warm_up_one_at_a_time(tmp_path: Path) -> None:
    """A second process (a worker of ``serve --workers 2``) waits for the first's warm-up
    instead of compiling everything at the same time; it then finds the cache filled."""
    script = (
        "import sys, time\n"
        "from aucstream.service import warmup\n"
        "warmup._start_helper = lambda: None\n"
        "warmup.warm_up = lambda *a, **k: print(time.time(), flush=True)\n"
        "warmup.warm_up_process()\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    from aucstream.service import warmup

    # (the cache folder named, not set in this process's environment: numba re-reads
    # it, and the suite's own cache folder must stay in place for what comes after)
    with warmup.one_at_a_time(str(tmp_path)):
        child = subprocess.Popen([sys.executable, "-c", script], env=env,
                                 stdout=subprocess.PIPE, text=True)
        # another cache folder is another lock: done while this one is held
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env={**env, "NUMBA_CACHE_DIR": str(tmp_path / "b")},
                       timeout=60, check=True)
        time.sleep(1)
        assert child.poll() is None  # still waiting
        released = time.time()
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0
    assert float(out.strip()) >= released
