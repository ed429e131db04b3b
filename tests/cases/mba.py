from tests.helpers import Case

# Exact mode (the default), ridge by Cholesky, forgetting on, re-solved every 16 events
# (and at 1, 2, 4, 8): 120 events give eleven solves. tests/test_mba.py runs the contract
# suite again on the other paths (elastic net, the sampled mode with wrapping reservoirs).
CASES = {
    "mba": Case(params={"solve_every": 16, "half_life": 40.0}),
}
