"""Contract tests every accountant inherits, plus cross-checks between accountants."""

import pytest

from privopt.accounting import (
    DpAccountingAccountant,
    GaussianEvent,
    GDPAccountant,
    PoissonSampledGaussianEvent,
    ShuffledGaussianEvent,
    UnsupportedEventError,
    ZCDPAccountant,
    dpsgd_epsilon,
    gaussian_epsilon,
    get_accountant,
    zcdp_epsilon,
)

DELTA = 1e-5


class AccountantContract:
    """Invariants any accountant must satisfy, for every event kind it supports."""

    def make(self):
        raise NotImplementedError

    events = (
        GaussianEvent(sensitivity=1.0, std=4.0),
        GaussianEvent(sensitivity=2.0, std=9.0, count=3),
    )
    rel = 1e-9

    def test_empty_composition_costs_nothing(self):
        assert self.make().epsilon([], DELTA) == 0.0

    @pytest.mark.parametrize("k", [1, 2, 7])
    def test_composition_invariance_count_vs_copies(self, k):
        acc = self.make()
        for event in self.events:
            fields = event.parameters()
            base_count = fields.pop("count")
            by_count = type(event)(**fields, count=base_count * k)
            copies = [event] * k
            assert acc.epsilon([by_count], DELTA) == pytest.approx(
                acc.epsilon(copies, DELTA), rel=self.rel, abs=1e-6
            )

    def test_more_events_never_decrease_epsilon(self):
        acc = self.make()
        one = acc.epsilon(self.events[:1], DELTA)
        both = acc.epsilon(self.events, DELTA)
        assert both > one > 0

    def test_supports_is_a_dry_run_of_composition(self):
        acc = self.make()
        unsupported = ShuffledGaussianEvent(noise_multiplier=10.0, num_records=10**5)
        assert not acc.supports(unsupported)
        with pytest.raises(UnsupportedEventError, match="shuffled-gaussian"):
            acc.epsilon([unsupported], DELTA)
        for event in self.events:
            assert acc.supports(event)

    def test_parallel_takes_worst_partition(self):
        acc = self.make()
        shared = [self.events[0]]
        small, large = [self.events[0]], [self.events[1]]
        got = acc.epsilon_parallel(shared, [small, large, small], DELTA)
        assert got == pytest.approx(acc.epsilon([*shared, *large], DELTA), rel=self.rel)
        assert acc.epsilon_parallel(shared, [], DELTA) == acc.epsilon(shared, DELTA)

    def test_zero_sensitivity_is_free(self):
        acc = self.make()
        free = GaussianEvent(sensitivity=0.0, std=1.0)
        assert acc.epsilon([free, self.events[0]], DELTA) == pytest.approx(
            acc.epsilon([self.events[0]], DELTA), rel=self.rel
        )


class TestGDP(AccountantContract):
    def make(self):
        return GDPAccountant()

    def test_exact_single_gaussian(self):
        assert self.make().epsilon([GaussianEvent(1.0, 1.0)], DELTA) == pytest.approx(
            4.377178, 1e-6
        )


class TestZCDP(AccountantContract):
    def make(self):
        return ZCDPAccountant()

    def test_rho_sums(self):
        events = [GaussianEvent(1.0, 1.0), GaussianEvent(1.0, 1.0)]
        assert self.make().epsilon(events, DELTA) == pytest.approx(zcdp_epsilon(1.0, DELTA))


class TestPLD(AccountantContract):
    rel = 2e-3  # PLD discretisation: composing by count and by copies discretise differently
    events = (
        *AccountantContract.events,
        PoissonSampledGaussianEvent(noise_multiplier=1.0, sample_rate=0.01, count=100),
    )

    def make(self):
        return DpAccountingAccountant("pld")

    def test_matches_exact_gaussian(self):
        # PLD of one Gaussian agrees with the exact profile (peers.md §3.2: 4.377178).
        got = self.make().epsilon([GaussianEvent(1.0, 1.0)], DELTA)
        assert got == pytest.approx(gaussian_epsilon(1.0, DELTA), abs=2e-3)
        assert got >= gaussian_epsilon(1.0, DELTA) - 1e-9  # pessimistic estimate


class TestRDP(AccountantContract):
    events = (
        *AccountantContract.events,
        PoissonSampledGaussianEvent(noise_multiplier=1.0, sample_rate=0.01, count=100),
    )

    def make(self):
        return DpAccountingAccountant("rdp")

    def test_golden_dpsgd(self):
        event = PoissonSampledGaussianEvent(1.0, 0.01, 1000)
        assert self.make().epsilon([event], DELTA) == pytest.approx(2.101366525, rel=1e-8)
        assert self.make().epsilon([event], DELTA) == dpsgd_epsilon(1.0, 0.01, 1000, DELTA, "rdp")

    def test_rdp_of_gaussian_above_exact(self):
        # peers.md §3.2: RDP 4.728507 for the sigma=1 Gaussian.
        assert self.make().epsilon([GaussianEvent(1.0, 1.0)], DELTA) == pytest.approx(
            4.728507, abs=1e-5
        )


def test_auto_prefers_exact_gdp_for_gaussians_and_pld_otherwise():
    assert get_accountant("auto", [GaussianEvent(1.0, 2.0)]).name == "gdp"
    assert get_accountant("auto", [PoissonSampledGaussianEvent(1.0, 0.1)]).name == "pld"
    with pytest.raises(ValueError, match="accountant"):
        get_accountant("moments")


def test_accountants_are_ordered_gdp_pld_zcdp_rdp_on_gaussians():
    events = [GaussianEvent(1.0, 3.0, count=10)]
    gdp = GDPAccountant().epsilon(events, DELTA)
    pld = DpAccountingAccountant("pld").epsilon(events, DELTA)
    zcdp = ZCDPAccountant().epsilon(events, DELTA)
    assert gdp <= pld + 1e-9
    assert pld < zcdp
    assert gdp == pytest.approx(pld, abs=5e-3)


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: GaussianEvent(sensitivity=-1.0, std=1.0), "sensitivity"),
        (lambda: GaussianEvent(sensitivity=1.0, std=0.0), "std"),
        (lambda: GaussianEvent(sensitivity=1.0, std=1.0, count=0), "count"),
        (lambda: PoissonSampledGaussianEvent(1.0, sample_rate=0.0), "sample_rate"),
        (lambda: PoissonSampledGaussianEvent(float("inf"), 0.1), "noise_multiplier"),
        (lambda: ShuffledGaussianEvent(1.0, num_records=-5), "num_records"),
    ],
)
def test_event_validation(make, name):
    with pytest.raises(ValueError, match=name):
        make()
