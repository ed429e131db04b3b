import json

from tests.helpers import Case

# Small, sparse-capable candidates; short windows and an early start so that windows
# close, the ring wraps and the served candidate changes within the suite's streams.
_CANDIDATES = json.dumps([
    {"learner": "cbr_diag_fifo", "params": {"C": 0.1, "capacity": 6}},
    {"learner": "oam_seq", "params": {"C": 0.5, "capacity": 5}},
    {"learner": "solam", "params": {"zeta": 2.0, "R": 5.0}},
])

CASES = {
    "auto": Case(params={"candidates": _CANDIDATES, "block": 12, "windows": 3,
                         "min_events": 24, "margin": 0.0},
                 sparse_params={"storage": "sparse"}),
}
