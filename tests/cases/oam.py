from tests.helpers import Case

_SPARSE = {"storage": "sparse"}

CASES = {
    "oam_seq": Case(params={"C": 0.5, "capacity": 7}, sparse_params=_SPARSE),
    "oam_gra": Case(params={"C": 0.05, "capacity": 7}, sparse_params=_SPARSE),
    "foam": Case(params={"eta": 0.1, "capacity": 7, "n_components": 8}),
    # budget 30: kernel mode for the first ~40 events, then the Nyström map
    "noam": Case(params={"eta": 1.0, "capacity": 7, "budget": 30}),
}
