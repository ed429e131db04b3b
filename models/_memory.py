"""How many bytes of numpy arrays an object holds (for memory reports)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["array_bytes"]


def array_bytes(obj: Any) -> int:
    """Bytes of the numpy arrays among ``obj``'s attributes, and in dicts, lists or
    tuples among them, each array counted once (views count their base once)."""
    seen: set[int] = set()
    total = 0
    stack: list[Any] = list(vars(obj).values())
    while stack:
        v = stack.pop()
        if isinstance(v, np.ndarray):
            base = v if v.base is None or not isinstance(v.base, np.ndarray) else v.base
            if id(base) not in seen:
                seen.add(id(base))
                total += base.nbytes
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return total
