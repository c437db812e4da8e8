"""The training core's one calibration with a GDP target (``mu=``) and with one partition's
releases composed (a tuple of events): closed form against a plain float64 reference,
verified through the ledger, refusals named."""

import math

import pytest

from privopt.accounting import (
    ApproxDPEvent,
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyLedger,
    gdp_mu,
)
from privopt.training import FixedBatches, TrainingPlan, calibrate_noise_multiplier
from privopt.training.calibrate import split_epsilon


@pytest.mark.parametrize("mu", [0.01, 0.5, 1.0, 7.3])
@pytest.mark.parametrize("sensitivity", [1.0, 2.0, 0.3])
def test_gdp_target_is_the_closed_form_rounded_toward_noise(mu, sensitivity):
    sigma = calibrate_noise_multiplier(lambda s: GaussianEvent(sensitivity, s), mu=mu)
    assert sigma == pytest.approx(sensitivity / mu, rel=1e-11)  # float64 reference
    assert sigma >= sensitivity / mu * (1 - 1e-15)
    assert GaussianEvent(sensitivity, sigma).mu <= mu


@pytest.mark.parametrize("mu", [0.2, 1.0, 3.0])
def test_a_partitions_releases_are_calibrated_together(mu):
    """Two Gaussian releases on one partition (count 5 at twice the std, then one step):
    the composed mu is sqrt(5 / (2 s)^2 + 1 / s^2), so s = sqrt(9 / 4) / mu."""

    def releases(s):
        return (GaussianEvent(1.0, 2.0 * s, count=5), GaussianEvent(1.0, s))

    sigma = calibrate_noise_multiplier(releases, mu=mu)
    assert sigma == pytest.approx(1.5 / mu, rel=1e-11)
    ledger = PrivacyLedger("replace-one")
    for event in releases(sigma):
        ledger.record(event)
    assert ledger.mu <= mu
    # the same releases to (epsilon, delta): the GDP conversion of their composed mu
    at_eps = calibrate_noise_multiplier(releases, 1.0, 1e-6, "replace-one")
    assert at_eps == pytest.approx(1.5 / gdp_mu(1.0, 1e-6), rel=1e-11)


def test_plan_calibrates_to_a_gdp_share():
    plan = TrainingPlan(1000, FixedBatches(100, epochs=2), clip_norm=1.0).calibrate(mu=0.8)
    assert plan.mu <= 0.8
    assert plan.mu == pytest.approx(0.8, rel=1e-12)
    # independent noise, two epochs: sensitivity sqrt(2) G (zero-out)
    assert plan.noise_multiplier == pytest.approx(math.sqrt(2.0) / 0.8, rel=1e-12)


def test_targets_are_refused_when_mixed_missing_or_not_gaussian():
    def factory(s):
        return GaussianEvent(1.0, s)

    with pytest.raises(ValueError, match="not both"):
        calibrate_noise_multiplier(factory, 1.0, 1e-6, mu=1.0)
    with pytest.raises(ValueError, match="epsilon and delta"):
        calibrate_noise_multiplier(factory, 1.0)
    with pytest.raises(ValueError, match="mu"):
        calibrate_noise_multiplier(factory, mu=0.0)
    with pytest.raises(ValueError, match="Gaussian events"):
        calibrate_noise_multiplier(lambda s: PoissonSampledGaussianEvent(s, 0.01, 10), mu=1.0)


@pytest.mark.parametrize(("epsilon", "count"), [(1.0, 4), (2.0, 8), (0.1, 3)])
def test_split_epsilon_is_the_largest_feasible_share(epsilon, count):
    """The per-release epsilon of ``count`` releases composing to (epsilon, delta): feasible,
    and 1e-9 more is not (the report's own composition decides)."""
    delta, each = 1e-5, 1e-5 / (2 * count)
    eps_c = split_epsilon(epsilon, delta, count, each)
    assert ApproxDPEvent(eps_c, each, count=count).composed_epsilon(delta) <= epsilon
    assert ApproxDPEvent(eps_c * (1 + 1e-9), each, count=count).composed_epsilon(delta) > epsilon
