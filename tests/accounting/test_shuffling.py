"""Amplification by shuffling (FMT21): closed-form values of
docs/theory/linear-regression-adaptive-clipping.md#ssgd-privacy, validity region."""

import math

import pytest

from privopt.accounting import (
    gaussian_epsilon,
    shuffle_amplified_epsilon,
    shuffle_max_local_epsilon,
    shuffled_gaussian_guarantee,
)


@pytest.mark.parametrize(
    ("eps0", "n", "expected"), [(0.5, 10**5, 0.0319), (0.5, 10**6, 0.0099), (0.25, 10**5, 0.0144)]
)
def test_closed_form_values(eps0, n, expected):
    assert shuffle_amplified_epsilon(eps0, n, 1e-6) == pytest.approx(expected, abs=5e-5)


def test_validity_bound_formula_and_refusal():
    n, delta = 10**4, 1e-6
    bound = shuffle_max_local_epsilon(n, delta)
    assert bound == pytest.approx(math.log(n / (16 * math.log(4 / delta))))
    assert shuffle_amplified_epsilon(bound * 0.999, n, delta) < bound
    with pytest.raises(ValueError, match="epsilon0"):
        shuffle_amplified_epsilon(bound * 1.001, n, delta)


def test_amplification_is_below_local_epsilon_and_decreases_with_n():
    values = [shuffle_amplified_epsilon(0.5, n, 1e-6) for n in (10**4, 10**5, 10**6)]
    assert all(v < 0.5 for v in values)
    assert values[0] > values[1] > values[2]


def test_gaussian_guarantee_is_consistent():
    g = shuffled_gaussian_guarantee(15.0, 10**5, 1e-6)
    # eps0 is the exact Gaussian epsilon of one step at delta0.
    assert g.local_epsilon == pytest.approx(gaussian_epsilon(15.0, g.local_delta), rel=1e-9)
    # delta accounting of FMT21 Thm 3.8 fits in the budget.
    blowup = (math.exp(g.epsilon) + 1) * (1 + math.exp(-g.local_epsilon) / 2) * 1e5 * g.local_delta
    assert g.shuffle_delta + blowup <= 1e-6 * (1 + 1e-9)
    assert g.epsilon == pytest.approx(
        shuffle_amplified_epsilon(g.local_epsilon, 10**5, g.shuffle_delta)
    )
    # More noise, more privacy.
    assert shuffled_gaussian_guarantee(30.0, 10**5, 1e-6).epsilon < g.epsilon


def test_gaussian_guarantee_refuses_outside_region():
    with pytest.raises(ValueError, match="validity"):
        shuffled_gaussian_guarantee(1.0, 1000, 1e-6)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: shuffle_amplified_epsilon(0.0, 1000, 1e-6), "local_epsilon"),
        (lambda: shuffle_amplified_epsilon(0.5, 0, 1e-6), "num_records"),
        (lambda: shuffle_amplified_epsilon(0.5, 1000, 2.0), "delta"),
        (lambda: shuffled_gaussian_guarantee(-1.0, 1000, 1e-6), "noise_multiplier"),
    ],
)
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# -- the calibration route of ShuffledGaussianEvent (issue 28: the search lives here) ---------
def test_calibrate_shuffled_gaussian_is_the_smallest_verified_multiplier():
    from privopt.accounting import calibrate_shuffled_gaussian, shuffled_gaussian_guarantee

    alpha = calibrate_shuffled_gaussian(0.5, 100_000, 1e-6)
    assert shuffled_gaussian_guarantee(alpha, 100_000, 1e-6).epsilon <= 0.5
    assert shuffled_gaussian_guarantee(alpha * (1 - 1e-4), 100_000, 1e-6).epsilon > 0.5


def test_the_plan_calibration_routes_shuffled_events_through_it():
    from privopt.accounting import ShuffledGaussianEvent, calibrate_shuffled_gaussian
    from privopt.training import calibrate_noise_multiplier

    # the plan's multiplier s maps to the event's alpha = s / 2 (replace-one sensitivity 2G)
    sigma = calibrate_noise_multiplier(
        lambda s: ShuffledGaussianEvent(s / 2.0, 100_000), 0.5, 1e-6, "replace-one"
    )
    assert sigma == 2.0 * calibrate_shuffled_gaussian(0.5, 100_000, 1e-6)


def test_calibrate_shuffled_gaussian_refuses_above_the_validity_region():
    from privopt.accounting import calibrate_shuffled_gaussian, max_shuffled_gaussian_epsilon

    ceiling = max_shuffled_gaussian_epsilon(100_000, 1e-6)
    assert ceiling == pytest.approx(1.0941, abs=5e-4)
    with pytest.raises(ValueError, match=r"valid only up to epsilon=1\.09"):
        calibrate_shuffled_gaussian(1.2, 100_000, 1e-6)
