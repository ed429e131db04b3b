from tests.helpers import Case

CASES = {
    # NAG's steps are bounded by η/s_i: nothing but an overflowing score breaks it
    "logistic_nag": Case(params={"eta": 0.5}),
    "adaoam": Case(params={"eta": 0.05, "delta": 0.5, "lam": 1e-3}),
    # A small η: the contract's rollback test learns a row with one value 4242, whose
    # exponential-loss step at η ≥ 2^−12 makes the next rows' e^{−y·f(x)} overflow.
    # η·λ < 1 holds at every edge of the other parameter's range (η ≤ 1024, λ ≤ 100).
    # The sparse layout's fold (σ < 1e-16) needs ~37/(ηλ) events: tests/test_uni_exp.py
    # exercises it with a raised threshold.
    "uni_exp": Case(params={"eta": 2.0**-14, "lam": 5e-4}, sparse_params={"storage": "sparse"}),
}
