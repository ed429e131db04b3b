"""Load generation for a running aucstream service.

- :mod:`loadtest.feed`: deterministic ad-click-like (hashed) and dense event streams whose
  labels come from a hidden logistic model, so that AUC is learnable.
- :mod:`loadtest.bench_service`: the service benchmark (learn events/s end to end, learns
  lost under concurrency, score latency), ``python -m loadtest.bench_service``.
- :mod:`loadtest.replay`: replay a dataset of :mod:`bench.datasets` into a running service.
- ``loadtest/locustfile.py``: interactive load with locust.
"""
