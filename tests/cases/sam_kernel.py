from tests.helpers import Case

# 8 landmarks (Nyström) or 8 Fourier features, the map fixed on the first 50 events (the
# contract's failure-injection batch, events 40-99, contains the switch), then the window
# replayed; reservoirs of 7 that wrap, 3 pairs per event, shrink every 3 pairs and
# average every 4: the 120 events give ~330 pairs, so ASAM's η0 calibration (100 pairs)
# freezes within the case. tests/test_sam_kernel.py runs FASAM with a fixed bandwidth
# (no warm-up) through the split and save/restore checks.
_STREAM = {"capacity": 7, "pairs": 3, "r_skip": 3, "a_skip": 4}
_MAP = {"n_components": 8, "warmup": 50}

CASES = {
    "nasam": Case(params={**_STREAM, **_MAP, "lam": 1e-3}),
    "npsam": Case(params={**_STREAM, **_MAP}),
    "fasam": Case(params={**_STREAM, **_MAP, "lam": 1e-3}),
}
