from tests.helpers import Case

_SPARSE = {"storage": "sparse"}
# Reservoirs of 7 that wrap, 3 pairs per event, shrink every 3 pairs and average every 4:
# the 120 events give ~330 pairs, so ASAM/SAM's η0 calibration (100 pairs) freezes.
_STREAM = {"capacity": 7, "pairs": 3, "r_skip": 3}

CASES = {
    "asam": Case(params={**_STREAM, "a_skip": 4, "lam": 1e-3}, sparse_params=_SPARSE),
    "sam": Case(params={**_STREAM, "lam": 1e-3}, sparse_params=_SPARSE),
    "psam": Case(params={**_STREAM, "a_skip": 4}, sparse_params=_SPARSE),
}
