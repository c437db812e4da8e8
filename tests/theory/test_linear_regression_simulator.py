"""The library's Monte-Carlo simulator of Noisy-FTRL agrees with the exact F_inf
(docs/theory/correlated-noise.md#exact-stationary-error)."""

import numpy as np
import pytest

from privopt.noise import independent, nu_dpftrl, optimal_cc
from privopt.theory import linear_regression_f_inf
from privopt.theory.simulation import simulate_linear_regression_f_inf


@pytest.mark.parametrize("mechanism", [independent(), nu_dpftrl(0.01)], ids=["sgd", "nu"])
def test_small_problem_against_the_exact_formula(mechanism):
    lam = np.array([1.0, 0.3, 0.1])
    sim = simulate_linear_regression_f_inf(
        mechanism, 0.1, lam, 1.0, sigma_sgd=0.5, rng=np.random.default_rng(3), chains=400
    )
    exact = linear_regression_f_inf(mechanism, 0.1, lam, 1.0, sigma_sgd=0.5)
    # Chains are independent: the standard error is honest; 4 of them plus 1% for the burn-in.
    assert abs(sim.mean - exact) < 4 * sim.std_error + 0.01 * exact
    assert sim.std_error < 0.03 * exact
    assert (sim.burn_in, sim.kept_steps) == (300, 200)  # 3 and 2 times 1 / (eta lambda_min)


def test_chain_groups_do_not_change_the_law():
    lam = np.array([1.0, 0.5])
    a = simulate_linear_regression_f_inf(
        independent(), 0.2, lam, 1.0, rng=np.random.default_rng(0), chains=64
    )
    b = simulate_linear_regression_f_inf(
        independent(),
        0.2,
        lam,
        1.0,
        rng=np.random.default_rng(1),
        chains=64,
        max_block_elements=200,
    )
    assert abs(a.mean - b.mean) < 4 * np.hypot(a.std_error, b.std_error)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"chains": 1}, "chains"),
        ({"mechanism": optimal_cc()}, "infinite anytime sensitivity"),
        ({"eta": 1.5}, "eta"),
    ],
)
def test_bad_input(kwargs, match):
    args = {"mechanism": independent(), "eta": 0.1, "eigenvalues": np.ones(2), "rho": 1.0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        simulate_linear_regression_f_inf(**args, rng=np.random.default_rng(0))
