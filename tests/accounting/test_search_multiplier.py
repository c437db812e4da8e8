"""smallest_feasible_multiplier: doubling then bisection, rounded toward more noise."""

import pytest

from privopt.accounting._search import smallest_feasible_multiplier


def test_finds_the_boundary_from_the_feasible_side():
    calls = []

    def excess(sigma):  # epsilon(sigma) = 3 / sigma, target 1: boundary at sigma = 3
        calls.append(sigma)
        return 3.0 / sigma - 1.0

    sigma = smallest_feasible_multiplier(excess, limit_exponent=6, rtol=1e-6)
    assert excess(sigma) <= 0.0
    assert sigma == pytest.approx(3.0, rel=2e-6)
    assert calls[:3] == [1.0, 2.0, 4.0]  # doubling from 1 until feasible


def test_already_feasible_at_one():
    sigma = smallest_feasible_multiplier(lambda s: 0.25 / s - 1.0, limit_exponent=6, rtol=1e-8)
    assert sigma == pytest.approx(0.25, rel=2e-8) and 0.25 / sigma <= 1.0


def test_unattainable_target():
    with pytest.raises(ValueError, match="No noise multiplier below 1e3 reaches the target"):
        smallest_feasible_multiplier(lambda s: 1.0, limit_exponent=3, rtol=1e-3)
