"""Evaluation harness: packaged real datasets (:mod:`bench.datasets`, ``python -m bench.fetch``)."""
