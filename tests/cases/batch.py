from tests.helpers import Case

# Windows of 7 rows per class and a solve every 5 events (and at 1, 2, 4): 120 events give
# ~25 warm-started solves on windows that wrap. FIFO rings, so that a row of a batch is
# always in the window of the next solve (the contract's poison rows must reach a solve;
# a reservoir may pass them by). tests/test_batch.py covers the reservoirs.
_WINDOW = {"C": 100.0, "capacity": 7, "buffer": "fifo", "retrain_every": 5}
# The Nyström learners: 8 landmarks fitted on the first 50 events (the contract's
# failure-injection batch, events 40-99, contains the switch), the window replayed into
# the FIFO rings and solved once, then a solve every 5 events.
_MAP = {"n_components": 8, "warmup": 50}

CASES = {
    "rank_svm": Case(params=_WINDOW, sparse_params={"storage": "sparse", "capacity": 60}),
    "fbam": Case(params={**_WINDOW, "n_components": 8}),
    "nbam": Case(params={**_WINDOW, **_MAP}),
    "nbauc": Case(params={**_WINDOW, **_MAP, "buffer": "reservoir"}),
}
