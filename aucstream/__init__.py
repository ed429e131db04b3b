"""aucstream: streaming online AUC maximisation, served over HTTP.

The learners are :mod:`aucstream.models` (numpy + numba, no I/O); the HTTP service is
:mod:`aucstream.service` (``aucstream serve``); :class:`aucstream.Client` (and
``AsyncClient``) speaks to it.

>>> import aucstream
>>> aucstream.__version__.count(".") >= 2
True
"""

from __future__ import annotations

import os
import sys
from importlib import metadata

try:
    __version__ = metadata.version("aucstream")
except metadata.PackageNotFoundError:  # a checkout used without installing it
    __version__ = "0+unknown"

__all__ = ["APIError", "AsyncClient", "Client", "__version__"]

_CLIENT_NAMES = {"APIError", "AsyncClient", "Client", "Conflict", "NotFound",
                 "OutcomeUnknown", "Unauthorized", "Unavailable", "ValidationFailed"}


def __getattr__(name: str) -> object:
    """The client on first use: ``import aucstream`` for the learners needs no httpx."""
    if name in _CLIENT_NAMES:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'aucstream' has no attribute {name!r}")


def _numba_cache_dir() -> None:
    """Keep numba's compiled kernels in a per-version user cache, unless NUMBA_CACHE_DIR
    says where (the Docker image and the test suite do).

    Numba's default, ``__pycache__`` beside the sources, checks a cached kernel against
    its source file's time stamp only: kernels cached by another version with the same
    file (one whose modules had other names, say) would be loaded and fail. Set before
    aucstream.models imports numba's dispatchers; numba caches of other packages in the
    same process go there too.
    """
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "aucstream", "numba", __version__)
    os.environ["NUMBA_CACHE_DIR"] = path
    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba imported first: its config has read the environment
        config.CACHE_DIR = path


_numba_cache_dir()
