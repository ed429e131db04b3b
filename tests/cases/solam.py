from tests.helpers import Case

CASES = {
    "solam": Case(params={"zeta": 2.0, "R": 5.0}, sparse_params={"storage": "sparse"}),
    "opauc": Case(params={"eta": 0.05, "lam": 1e-3}),
}
