"""aucstream: streaming online AUC maximisation, served over HTTP.

The learners are :mod:`aucstream.models` (numpy + numba, no I/O); the HTTP service is
:mod:`aucstream.service` (``aucstream serve``).

>>> import aucstream
>>> aucstream.__version__.count(".") >= 2
True
"""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("aucstream")
except metadata.PackageNotFoundError:  # a checkout used without installing it
    __version__ = "0+unknown"

__all__ = ["__version__"]
