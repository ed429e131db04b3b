"""aucstream service: hosts ``models`` learners behind HTTP, durable in Redis or SQLite."""

if __name__ != "aucstream.service":  # imported from a checkout as a top-level package
    raise ImportError("This folder is the package aucstream.service: `from aucstream import "
                      "service` (after `pip install -e .`), not `import service`.")
