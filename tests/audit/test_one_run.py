"""One-run auditing (Steinke-Nasr-Jagielski 2023; Mahloujifar et al. 2024) and the white-box
gradient canaries of the training core.

Golden values: docs/theory/torch-audits-selection-dask.md#audit-expectations (the note's own
scripts, an
ideal Gaussian at epsilon = 2, delta = 1e-5, m = 1000 canaries, expected counts): SNJ 74
guesses / 54 correct -> 0.54, f-DP 152 / 105 -> 0.75, perfect 500 / 500 -> 5.09, randomised
response 1000 / 881 -> 1.84.
"""

import numpy as np
import pytest
from scipy.stats import binom

from privopt.accounting import gdp_epsilon
from privopt.audit import audit_one_run, epsilon_one_run, one_run_p_value
from privopt.audit.registry import (
    CORE_AUDITS,
    WHITE_BOX_CONTROL_FACTOR,
    audit_algorithm,
    selftest,
)

DELTA = 1e-5


@pytest.mark.parametrize(
    ("guesses", "correct", "method", "expected"),
    [
        (74, 54, "steinke", 0.54),
        (152, 105, "fdp", 0.75),
        (500, 500, "steinke", 5.09),
        (1000, 881, "steinke", 1.84),
    ],
)
def test_bounds_match_the_notes_worked_example(guesses, correct, method, expected):
    bound = epsilon_one_run(1000, guesses, correct, delta=DELTA, method=method)
    assert bound == pytest.approx(expected, abs=0.006)  # the note prints two decimals


def test_p_value_without_delta_is_the_binomial_tail_and_delta_only_adds():
    q = np.exp(1.0) / (1 + np.exp(1.0))
    assert one_run_p_value(100, 50, 40, 1.0, 0.0) == pytest.approx(binom.sf(39, 50, q))
    assert one_run_p_value(100, 50, 40, 1.0, 1e-3) > one_run_p_value(100, 50, 40, 1.0, 0.0)
    assert one_run_p_value(100, 50, 0, 1.0, 0.0) == 1.0


def test_bound_grows_with_correct_guesses_and_no_signal_gives_zero():
    bounds = [epsilon_one_run(1000, 100, v, delta=DELTA) for v in (50, 70, 90, 100)]
    assert bounds[0] == 0.0
    assert bounds == sorted(bounds) and bounds[-1] > 3.0


@pytest.mark.parametrize(
    ("args", "message"),
    [((10, 5, 6), "correct <= guesses"), ((10, 11, 1), "correct <= guesses")],
)
def test_inconsistent_counts_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        epsilon_one_run(*args, delta=DELTA)


def test_audit_one_run_refuses_bad_inputs():
    with pytest.raises(ValueError, match="one score per canary"):
        audit_one_run(np.zeros(3), np.zeros(4, dtype=bool), delta=DELTA)
    with pytest.raises(ValueError, match="finite"):
        audit_one_run(np.array([np.nan, 1.0]), np.array([True, False]), delta=DELTA)
    with pytest.raises(ValueError, match="method"):
        epsilon_one_run(10, 5, 5, delta=DELTA, method="magic")


def test_selftest_accepts_the_correct_gaussian_and_catches_a_third_of_its_noise():
    # measured (seed 0, m = 2000): correct 1.03, broken 4.26 against the claim 2
    result = selftest()
    assert result["correct"]["epsilon_lower_bound"] <= result["correct"]["claimed_epsilon"]
    assert result["broken"]["epsilon_lower_bound"] > result["broken"]["claimed_epsilon"]


@pytest.mark.parametrize("name", ["dpsgd-fixed", "ftrl-blt"])
def test_core_audit_fast_sibling(name):
    # measured (seed 0, 1000 canaries, epsilon 2): dpsgd-fixed 0.15 / 2.44, ftrl-blt 0.36 / 2.67
    correct = audit_algorithm(name)
    assert correct["epsilon_lower_bound"] <= correct["claimed_epsilon"]
    broken = audit_algorithm(name, noise_factor=WHITE_BOX_CONTROL_FACTOR)
    assert broken["epsilon_lower_bound"] > broken["claimed_epsilon"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CORE_AUDITS))
def test_every_core_release_path_passes_and_its_planted_bug_is_caught(name):
    # two pooled runs (2000 canaries) for margin; measured bounds in TRUST.md
    correct = audit_algorithm(name, runs=2, seed=1)
    assert correct["epsilon_lower_bound"] <= correct["claimed_epsilon"]
    broken = audit_algorithm(name, runs=2, seed=1, noise_factor=WHITE_BOX_CONTROL_FACTOR)
    assert broken["epsilon_lower_bound"] > broken["claimed_epsilon"]


@pytest.mark.slow
def test_one_run_bound_is_valid_at_its_confidence_on_an_exact_gaussian():
    # 200 independent one-run audits of an exact mu-GDP mechanism (ideal scores), each tested
    # against the mechanism's own epsilon at 95%: the bound may exceed it in at most 5% of runs
    # (binomial 99.9% quantile of Bin(200, 0.05) is 20); observed rate is far lower, as the
    # one-run bounds are loose.
    mu, m = 1.0, 1000
    true_eps = gdp_epsilon(mu, DELTA)
    rng = np.random.default_rng(7)
    exceed = 0
    for _ in range(200):
        included = rng.random(m) < 0.5
        scores = mu * included + rng.standard_normal(m)
        exceed += audit_one_run(scores, included, delta=DELTA).epsilon_lower_bound > true_eps
    assert exceed <= 20
