"""Events added for Wang et al. (2022): uniformly sampled Gaussian steps, closed-form RDP guarantees
and
sampling failures (their composition in the ledger)."""

import math

import dp_accounting
import pytest

from privopt.accounting import (
    GaussianEvent,
    PrivacyLedger,
    RenyiGuaranteeEvent,
    SampledGaussianEvent,
    SamplingFailureEvent,
    gaussian_epsilon,
)
from privopt.accounting.accountants import DpAccountingAccountant, get_accountant
from privopt.accounting.subsampled import REPLACE_ONE_RDP_ORDERS


def _ledger(*events, relation="replace-one"):
    ledger = PrivacyLedger(relation)
    for event in events:
        ledger.record(event)
    return ledger


def test_sampled_gaussian_matches_dp_accounting_replace_one_rdp():
    event = SampledGaussianEvent(noise_multiplier=2.0, population=1000, count=5000)
    direct = dp_accounting.rdp.RdpAccountant(
        orders=list(REPLACE_ONE_RDP_ORDERS),
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
    )
    direct.compose(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.SampledWithoutReplacementDpEvent(
                1000, 1, dp_accounting.GaussianDpEvent(2.0)
            ),
            5000,
        )
    )
    ledger = _ledger(event)
    assert ledger.epsilon(1e-6) == pytest.approx(direct.get_epsilon(1e-6), rel=1e-12)
    assert ledger.report(1e-6).accountant == "rdp"  # auto: PLD cannot compose it
    full = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    )  # dp_accounting's default orders (up to 1024): the sparse set costs at most a little
    full.compose(direct.ledger)
    assert full.get_epsilon(1e-6) <= ledger.epsilon(1e-6) <= 1.02 * full.get_epsilon(1e-6)


def test_sampled_gaussian_is_rdp_only_and_replace_one_only():
    event = SampledGaussianEvent(noise_multiplier=1.0, population=10)
    assert not DpAccountingAccountant("pld").supports(event)
    assert DpAccountingAccountant("rdp").supports(event)
    assert get_accountant("auto", [event]).name == "rdp"
    with pytest.raises(ValueError, match="replace-one"):
        PrivacyLedger("add-remove").record(event)
    with pytest.raises(ValueError, match="exceeds the population"):
        SampledGaussianEvent(noise_multiplier=1.0, population=3, sample_size=4)


def test_sampled_gaussian_monotone_in_steps_population_and_noise():
    def eps(**kw):
        args = {"noise_multiplier": 2.0, "population": 500, "count": 1000} | kw
        return _ledger(SampledGaussianEvent(**args)).epsilon(1e-6)

    base = eps()
    assert eps(count=2000) > base
    assert eps(population=1000) < base
    assert eps(noise_multiplier=3.0) < base


def test_renyi_guarantee_uses_the_classical_conversion():
    event = RenyiGuaranteeEvent(order=21.0, value=0.3)
    assert event.epsilon(1e-5) == pytest.approx(0.3 + math.log(1e5) / 20.0)
    assert _ledger(event).epsilon(1e-5) == pytest.approx(event.epsilon(1e-5))
    with pytest.raises(ValueError, match="order > 1"):
        RenyiGuaranteeEvent(order=1.0, value=0.1)


def test_sampling_failure_is_taken_off_delta():
    gaussian = GaussianEvent(sensitivity=0.5, std=2.0)
    ledger = _ledger(gaussian, SamplingFailureEvent(probability=5e-7))
    expected = gaussian_epsilon(2.0, 1e-6 - 5e-7, 0.5)
    assert ledger.epsilon(1e-6) == pytest.approx(expected, rel=1e-9)
    assert ledger.epsilon(1e-6) > _ledger(gaussian).epsilon(1e-6)
    assert ledger.rho is None and ledger.mu is None  # the failure has no zCDP form
    report = ledger.report(1e-6)
    assert "sampling-failure probability of 5e-07" in report.composition
    with pytest.raises(ValueError, match="does not exceed"):
        ledger.epsilon(5e-7)
    with pytest.raises(ValueError, match="failure probability"):
        SamplingFailureEvent(probability=1.0)


def test_auto_accounts_each_partition_with_its_tightest_accountant():
    gaussian = GaussianEvent(sensitivity=1.0, std=4.0)
    sampled = SampledGaussianEvent(noise_multiplier=1.0, population=1000, count=1000)
    ledger = PrivacyLedger("replace-one")
    ledger.record(gaussian, partition="preprocessing")
    ledger.record(sampled, partition="fit")
    expected = max(
        gaussian_epsilon(4.0, 1e-6, 1.0),  # exact GDP for the Gaussian-only part
        DpAccountingAccountant("rdp").epsilon([sampled], 1e-6),
    )
    assert ledger.epsilon(1e-6) == pytest.approx(expected, rel=1e-12)
    # RDP for everything would be looser on the Gaussian part
    assert DpAccountingAccountant("rdp").epsilon([gaussian], 1e-6) > gaussian_epsilon(4.0, 1e-6)
    report = ledger.report(1e-6)
    assert report.accountant == "auto: gdp, rdp" and report.epsilon == ledger.epsilon(1e-6)
    assert "per partition" in report.accountant_description
    # an explicit accountant is used for every partition
    assert ledger.epsilon(1e-6, "rdp") >= ledger.epsilon(1e-6)


def test_a_partition_s_sampling_failure_does_not_touch_other_partitions():
    gaussian = GaussianEvent(sensitivity=1.0, std=5.0)
    ledger = PrivacyLedger("replace-one")
    ledger.record(gaussian, partition="preprocessing")
    ledger.record(GaussianEvent(sensitivity=0.1, std=5.0), partition="fit")
    ledger.record(SamplingFailureEvent(probability=5e-7), partition="fit")
    fit = gaussian_epsilon(5.0, 1e-6 - 5e-7, 0.1)
    preprocessing = gaussian_epsilon(5.0, 1e-6, 1.0)  # its delta is intact
    assert ledger.epsilon(1e-6) == pytest.approx(max(fit, preprocessing), rel=1e-9)
    assert ledger.failure_probability == 5e-7


def test_approx_dp_event_composes_by_the_privacy_loss_distribution():
    from privopt.accounting import ApproxDPEvent

    one = ApproxDPEvent(epsilon=0.5, delta=1e-7)
    assert one.composed_epsilon(1e-7) == pytest.approx(0.5, rel=1e-3)
    # 1024 calls at Theorem 4.1's budget (docs/theory/overparameterised-regression.md#composition
    # item 3): the PLD gives ~0.381, the
    # advanced composition the paper uses ~0.51 (0.412 with a coarser 1e-4 discretisation).
    eps0 = 1.0 / math.sqrt(8 * 1024 * math.log(2 / 1e-5))
    many = ApproxDPEvent(epsilon=eps0, delta=1e-5 / 2048, count=1024)
    pld = many.composed_epsilon(1e-5)
    drv = math.sqrt(2 * 1024 * math.log(2 / 1e-5)) * eps0 + 1024 * eps0 * math.expm1(eps0)
    assert pld == pytest.approx(0.3808, abs=2e-3) and pld < drv < 1024 * eps0
    ledger = _ledger(many)
    assert ledger.epsilon(1e-5) == pytest.approx(pld)
    with pytest.raises(ValueError, match="delta mass"):
        many.composed_epsilon(1e-6)
