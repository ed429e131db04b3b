"""The start-up warm-up: a helper compiler process only when numba's cache is empty."""

from __future__ import annotations

import os
import subprocess
import sys
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
