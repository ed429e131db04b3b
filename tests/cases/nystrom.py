from tests.helpers import Case

# 8 landmarks fitted on the first 50 events (the contract's failure-injection batch, events
# 40-99, contains the switch), then the window replayed; capacity 7: the reservoirs wrap.
_MAP = {"n_components": 8, "warmup": 50, "capacity": 7}

CASES = {
    "noam_seq": Case(params={"C": 0.5, **_MAP}),
    "noam_gra": Case(params={"C": 0.05, **_MAP}),
    # shrink every 4 pairs and average every 3: both schedules run within the case
    "nsauc": Case(params={"r_skip": 4, "a_skip": 3, **_MAP}),
}
