"""PrivacyLedger: sequential and parallel composition, relations, reports."""

import json
import math

import pytest

from privopt.accounting import (
    DpAccountingAccountant,
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyLedger,
    SamplingFailureEvent,
    ShuffledGaussianEvent,
    ZCDPAccountant,
    gaussian_epsilon,
    gdp_epsilon,
    get_accountant,
    shuffled_gaussian_guarantee,
    zcdp_epsilon,
)


def test_empty_ledger_is_free():
    ledger = PrivacyLedger("add-remove")
    assert ledger.epsilon(1e-5) == 0.0
    assert ledger.rho == 0.0


def test_sequential_composition_is_exact_gdp():
    ledger = PrivacyLedger("zero-out")
    ledger.record(GaussianEvent(1.0, 2.0))
    ledger.record(GaussianEvent(1.0, 2.0))
    assert ledger.mu == pytest.approx(math.sqrt(0.5))
    assert ledger.rho == pytest.approx(0.25)
    assert ledger.epsilon(1e-5) == pytest.approx(gdp_epsilon(math.sqrt(0.5), 1e-5))
    assert ledger.epsilon(1e-5, "zcdp") == pytest.approx(zcdp_epsilon(0.25, 1e-5))


def test_parallel_composition_over_disjoint_batches():
    # DP-AMBSSGD shape (docs/theory/linear-regression-adaptive-clipping.md#ambssgd-privacy): every
    # batch costs rho = 1/(2 alpha^2) for the
    # gradient plus 1/(2 alpha^2) for DP-STAT; one pass gives rho = 1/alpha^2 in total.
    # alpha* for eps=1, delta=1e-6
    # (docs/theory/linear-regression-adaptive-clipping.md#ambssgd-privacy table)
    alpha = 7.5660
    ledger = PrivacyLedger("replace-one")
    for t in range(20):
        zeta = 1.0 + t  # thresholds vary per batch; rho does not
        ledger.record(
            GaussianEvent(2 * zeta / 50, 2 * zeta * alpha / 50, label="grad"), partition=t
        )
        ledger.record(GaussianEvent(1.0, alpha, label="dp-stat"), partition=t)
    assert ledger.num_partitions == 20
    assert ledger.rho == pytest.approx(1 / alpha**2, rel=1e-12)
    # alpha* solves the Bun–Steinke conversion exactly; the tight conversion is below it.
    assert ledger.epsilon(1e-6, ZCDPAccountant("bun-steinke")) == pytest.approx(1.0, abs=1e-4)
    assert ledger.epsilon(1e-6, "zcdp") < 1.0


def test_parallel_plus_shared_events():
    ledger = PrivacyLedger("add-remove")
    ledger.record(GaussianEvent(1.0, 3.0), partition="a")
    ledger.record(GaussianEvent(1.0, 1.0), partition="b")
    ledger.record(GaussianEvent(1.0, 2.0))  # touches everyone
    expected_mu = math.sqrt(1 / 4 + 1)
    assert ledger.mu == pytest.approx(expected_mu)
    assert ledger.epsilon(1e-5) == pytest.approx(gdp_epsilon(expected_mu, 1e-5))
    for name in ("pld", "rdp"):
        assert ledger.epsilon(1e-5, name) >= ledger.epsilon(1e-5) - 1e-9


def test_subsampled_events_use_pld_by_default():
    ledger = PrivacyLedger("add-remove")
    ledger.record(PoissonSampledGaussianEvent(1.0, 0.01, 1000))
    assert ledger.rho is None
    assert ledger.epsilon(1e-5) == pytest.approx(1.82824, abs=1e-3)
    assert ledger.report(1e-5).accountant == "pld"


def test_relation_mismatch_is_refused():
    with pytest.raises(ValueError, match="replace-one"):
        PrivacyLedger("replace-one").record(PoissonSampledGaussianEvent(1.0, 0.1))
    with pytest.raises(ValueError, match="add-remove"):
        PrivacyLedger("add-remove").record(ShuffledGaussianEvent(10.0, 10**5))
    with pytest.raises(ValueError, match="neighbouring"):
        PrivacyLedger("swap")
    with pytest.raises(TypeError):
        PrivacyLedger("add-remove").record("gaussian")  # type: ignore[arg-type]


def test_unsupported_accountant_names_the_event():
    ledger = PrivacyLedger("add-remove")
    ledger.record(PoissonSampledGaussianEvent(1.0, 0.1))
    with pytest.raises(ValueError, match="poisson-sampled-gaussian"):
        ledger.epsilon(1e-5, "gdp")


def test_shuffled_event_with_basic_composition():
    ledger = PrivacyLedger("replace-one")
    ledger.record(ShuffledGaussianEvent(15.0, 10**5))
    alone = ledger.epsilon(1e-6)
    assert alone == pytest.approx(shuffled_gaussian_guarantee(15.0, 10**5, 1e-6).epsilon)
    ledger.record(GaussianEvent(1.0, 30.0))
    expected = shuffled_gaussian_guarantee(15.0, 10**5, 5e-7).epsilon + gaussian_epsilon(30.0, 5e-7)
    assert ledger.epsilon(1e-6) == pytest.approx(expected)
    assert ledger.rho is None


def test_extend_merges_entries_and_assumptions():
    a = PrivacyLedger("add-remove", ["x in unit ball"])
    a.record(GaussianEvent(1.0, 2.0))
    b = PrivacyLedger("add-remove", ["y in [-1, 1]"])
    b.record(GaussianEvent(1.0, 2.0), partition=0)
    a.extend(b)
    assert len(a.entries) == 2
    assert a.assumptions == ("x in unit ball", "y in [-1, 1]")
    with pytest.raises(ValueError, match="merge"):
        a.extend(PrivacyLedger("replace-one"))


def test_report_states_everything_and_serialises():
    ledger = PrivacyLedger("replace-one", ["features clipped to l2 norm 1"])
    for t in range(3):
        ledger.record(GaussianEvent(0.1 * (t + 1), 0.5 * (t + 1), label="gradient"), partition=t)
    ledger.record(GaussianEvent(1.0, 5.0, label="threshold"))
    report = ledger.report(1e-6)
    data = json.loads(report.to_json())
    assert data["epsilon"] == pytest.approx(ledger.epsilon(1e-6))
    assert data["delta"] == 1e-6
    assert data["neighbouring"] == "replace-one"
    assert data["accountant"] == "gdp"
    assert data["rho"] == pytest.approx(ledger.rho)
    assert data["num_partitions"] == 3
    labels = {e["label"]: e for e in data["events"]}
    assert labels["gradient"]["releases"] == 3
    assert labels["gradient"]["partitions"] == 3
    assert labels["gradient"]["parameters"]["sensitivity"] == pytest.approx([0.1, 0.3])
    assert labels["threshold"]["partitions"] == 0
    assert "features clipped to l2 norm 1" in data["assumptions"]
    assert any("disjoint" in a for a in data["assumptions"])
    text = str(report)
    for needle in ("Privacy report", "replace-one", "gradient", "threshold", "gdp"):
        assert needle in text


# -- sampling failures with per-partition accountants (issue 12, item 5) ------------------------


def _sampled_with_failure(delta: float) -> PrivacyLedger:
    ledger = PrivacyLedger("zero-out")
    ledger.record(PoissonSampledGaussianEvent(1.0, 0.01, 1000), partition="a")
    ledger.record(SamplingFailureEvent(0.9 * delta), partition="a")
    return ledger


def test_a_disjoint_partition_does_not_erase_a_sampling_failure():
    # The per-partition ("auto": pld for "a", gdp for "b") path composed "a" at the full delta:
    # epsilon fell from 2.12 to 1.83 when the unrelated partition "b" was recorded.
    delta = 1e-5
    ledger = _sampled_with_failure(delta)
    alone = ledger.epsilon(delta)
    assert alone == pytest.approx(2.1245, abs=1e-3)  # "a" composed at delta - 0.9 delta
    ledger.record(GaussianEvent(1.0, 10.0), partition="b")  # a smaller loss than "a"'s
    report = ledger.report(delta)
    assert report.accountant == "auto: pld, gdp"
    assert report.epsilon >= alone
    assert report.epsilon == pytest.approx(alone, rel=1e-9)
    assert ledger.failure_probability == pytest.approx(0.9 * delta)
    # a disjoint partition with the larger loss takes over, at its own (full) delta
    ledger.record(GaussianEvent(1.0, 0.5), partition="c")
    assert ledger.epsilon(delta) == pytest.approx(gdp_epsilon(2.0, delta), rel=1e-12)


def test_failures_choose_no_accountant_and_cost_their_own_group():
    delta = 1e-6
    sampled = PoissonSampledGaussianEvent(1.0, 0.1, 5)
    ledger = PrivacyLedger("zero-out")
    ledger.record(GaussianEvent(sensitivity=1.0, std=1.0), partition="pre")
    ledger.record(SamplingFailureEvent(4e-7), partition="pre")  # stays exact GDP, at 6e-7
    ledger.record(sampled, partition="fit")
    pre = gaussian_epsilon(1.0, delta - 4e-7)
    fit = DpAccountingAccountant("pld").epsilon([sampled], delta)
    assert pre > fit  # the group with the failure decides
    report = ledger.report(delta)
    assert report.epsilon == pytest.approx(pre, rel=1e-12)
    assert report.accountant == "auto: gdp, pld"
    # a partition holding only a failure: nothing to compose (it used to divide by zero),
    # names no accountant, and still refuses a delta it does not exceed
    ledger.record(SamplingFailureEvent(5e-7), partition="audit")
    report = ledger.report(delta)
    assert report.epsilon == pytest.approx(pre, rel=1e-12)
    assert report.accountant == "auto: gdp, pld"
    with pytest.raises(ValueError, match="does not exceed"):
        ledger.epsilon(4.5e-7)


@pytest.mark.parametrize(
    "other",
    [PoissonSampledGaussianEvent(2.0, 0.1, 3), GaussianEvent(1.0, 20.0)],
    ids=["single-accountant", "per-partition"],
)
def test_both_paths_take_a_shared_failure_off_every_group(other):
    # Same shape; only whether "auto" accounts per partition differs (PLD for both groups, or
    # PLD beside GDP). The shared failure touches every record, so both groups lose it.
    delta = 1e-6
    sampled = PoissonSampledGaussianEvent(1.0, 0.1, 5)
    ledger = PrivacyLedger("zero-out")
    ledger.record(SamplingFailureEvent(5e-7))
    ledger.record(sampled, partition="a")
    ledger.record(other, partition="b")
    expected = max(
        DpAccountingAccountant("pld").epsilon([sampled], delta - 5e-7),
        get_accountant("auto", [other]).epsilon([other], delta - 5e-7),
    )
    assert ledger.epsilon(delta) == pytest.approx(expected, rel=1e-12)
    assert ledger.failure_probability == pytest.approx(5e-7)
    assert ledger.rho is None and ledger.mu is None  # a failure has no rho or mu form
