"""Per-learner test hooks for the contract suite, one module per family.

Each module defines ``CASES``: learner name -> :class:`tests.helpers.Case`. Every learner
in ``models.available()`` must have exactly one case; the contract suite checks that.
"""

from __future__ import annotations

import importlib
import pkgutil

from tests.helpers import Case


def all_cases() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, case in module.CASES.items():
            if name in cases:
                raise RuntimeError(f"two test cases for learner {name!r}")
            cases[name] = case
    return cases
