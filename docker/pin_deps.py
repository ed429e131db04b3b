"""Write docker/constraints.txt: the image's Python dependencies, pinned.

The closure of pyproject.toml's core dependencies (markers evaluated for this Python on
Linux, as in the image), at the versions installed here: run it in an environment where
the suite passes, then rebuild the image.

    python docker/pin_deps.py
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def closure() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned: dict[str, str] = {}
    stack = [Requirement(d) for d in deps]
    while stack:
        req = stack.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name in pinned:
            continue
        dist = metadata.distribution(req.name)
        pinned[name] = dist.version
        stack += [Requirement(r) for r in dist.requires or []]
    return dict(sorted(pinned.items()))


def main() -> int:
    lines = ["# The image's Python dependencies, pinned (pip install -c). Written by",
             "# `python docker/pin_deps.py` from an environment where the test suite passed",
             f"# (Python {sys.version.split()[0]}).",
             *(f"{name}=={version}" for name, version in closure().items())]
    (ROOT / "docker" / "constraints.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
