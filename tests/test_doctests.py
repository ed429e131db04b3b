"""The docstrings' examples, run as doctests (every module of the installed package)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import aucstream


def _modules() -> list[str]:
    names = ["aucstream"]
    for info in pkgutil.walk_packages(aucstream.__path__, "aucstream."):
        names.append(info.name)
    for pkg in ("aucstream.models", "aucstream.service"):
        mod = importlib.import_module(pkg)
        names.append(pkg)
        names += [i.name for i in pkgutil.walk_packages(mod.__path__, pkg + ".")]
    return sorted(set(names))


MODULES = _modules()


def test_every_module_is_found():
    assert {"aucstream.models.cbr", "aucstream.service.hosting",
            "aucstream.service.store.redis_store"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(module, name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed"
