from tests.helpers import Case

_SPARSE = {"storage": "sparse"}

CASES = {
    "cbr_fifo": Case(params={"C": 0.5, "capacity": 7}),
    "cbr_rs": Case(params={"C": 0.5, "capacity": 7}),
    "cbr_diag_fifo": Case(params={"C": 0.5, "capacity": 7}, sparse_params=_SPARSE),
    "cbr_diag_rs": Case(params={"C": 0.5, "capacity": 7}, sparse_params=_SPARSE),
    "fcbr_fifo": Case(params={"C": 0.5, "capacity": 7, "n_components": 8}),
    "fcbr_rs": Case(params={"C": 0.5, "capacity": 7, "n_components": 8}),
}
