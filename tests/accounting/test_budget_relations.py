"""PrivacyBudget: relations converted by group privacy (issue 26 item 2), release and overflow
(issue 33 item 3)."""

import math

import pytest

from privopt import BudgetExceededError, PrivacyBudget
from privopt.accounting import (
    ApproxDPEvent,
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyLedger,
    SamplingFailureEvent,
    gdp_epsilon,
)
from privopt.accounting.budget import (
    compose_guarantees,
    convert_events,
    convert_guarantee,
    planned_guarantee,
)

DELTA = 1e-6


# -- the conversion, against closed forms -------------------------------------------------------
@pytest.mark.parametrize("eps,delta", [(0.1, 1e-9), (1.0, 1e-7), (3.0, 1e-8)])
def test_guarantee_conversion_is_group_privacy_of_size_two(eps, delta):
    assert convert_guarantee(eps, delta, "zero-out", "replace-one") == pytest.approx(
        (2 * eps, (1 + math.exp(eps)) * delta), rel=1e-12
    )
    assert convert_guarantee(eps, delta, "replace-one", "zero-out") == (eps, delta)
    assert convert_guarantee(eps, delta, "replace-one", "replace-one") == (eps, delta)
    with pytest.raises(ValueError, match="do not imply"):
        convert_guarantee(eps, delta, "add-remove", "replace-one")


def test_a_vacuous_conversion_leaves_no_guarantee():
    assert convert_guarantee(20.0, 1e-8, "zero-out", "replace-one") is None  # (1+e^20) 1e-8 > 1
    assert convert_guarantee(1000.0, 1e-9, "zero-out", "replace-one") is None  # no overflow
    with pytest.raises(ValueError, match="no replace-one guarantee"):
        convert_events([ApproxDPEvent(1000.0, 1e-9)], "zero-out", "replace-one")


@pytest.mark.parametrize("mu", [0.05, 0.3, 1.0])
def test_a_gaussian_doubles_its_sensitivity_and_its_mu(mu):
    event = GaussianEvent(1.5, 1.5 / mu, count=1)
    (converted,) = convert_events([event], "zero-out", "replace-one")
    assert converted == GaussianEvent(3.0, 1.5 / mu, 1, label=event.label)
    assert converted.mu == pytest.approx(2 * mu)
    ledger = PrivacyLedger("replace-one")
    ledger.record(converted)
    assert ledger.epsilon(DELTA) == pytest.approx(gdp_epsilon(2 * mu, DELTA), rel=1e-12)


def test_approx_dp_and_failures_convert_per_release():
    events = [ApproxDPEvent(0.5, 1e-8, count=3), SamplingFailureEvent(1e-9), GaussianEvent(1, 4)]
    out = convert_events(events, "zero-out", "replace-one")
    assert out[0] == ApproxDPEvent(1.0, (1 + math.exp(0.5)) * 1e-8, 3, label=events[0].label)
    assert out[1] == events[1]  # data-independent: the same probability under every relation
    assert out[2].sensitivity == 2.0
    assert convert_events(events, "replace-one", "zero-out") == tuple(events)


def _exact_replace_one_epsilon(q, sigma, steps, delta):
    """dp_accounting's PLD of Poisson-sampled Gaussian steps under replace-one (the truth)."""
    from dp_accounting import NeighboringRelation, dp_event
    from dp_accounting.pld import pld_privacy_accountant

    exact = pld_privacy_accountant.PLDAccountant(
        NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-3
    )
    exact.compose(
        dp_event.SelfComposedDpEvent(
            dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps
        )
    )
    return exact.get_epsilon(delta)


SAMPLED = PoissonSampledGaussianEvent(2.0, 0.1, 10)


def test_other_events_convert_through_their_own_curve_soundly():
    with pytest.raises(ValueError, match="delta"):
        convert_events([SAMPLED], "zero-out", "replace-one")
    (converted,) = convert_events([SAMPLED], "zero-out", "replace-one", delta=DELTA)
    zero_out = PrivacyLedger("zero-out")
    zero_out.record(SAMPLED)
    # (2 eps_L(d), (1 + e^eps_L(d)) d) with d <= DELTA / 2, hence eps_L(d) >= eps_L(DELTA / 2)
    assert converted.delta <= DELTA
    assert converted.epsilon >= 2 * zero_out.epsilon(DELTA / 2)
    eps_d = converted.epsilon / 2
    d = converted.delta / (1 + math.exp(eps_d))
    assert zero_out.epsilon(d) == pytest.approx(eps_d, rel=1e-9)
    # never below the exact replace-one accounting of the same steps
    assert converted.epsilon >= _exact_replace_one_epsilon(0.1, 2.0, 10, converted.delta)


# -- the budget: reserve and complete in its own relation ---------------------------------------
def _reserve(budget, eps, delta, relation="zero-out"):
    return budget.reserve(
        planned_guarantee(eps, delta, "fit"), neighbouring=relation, guarantee=(eps, delta)
    )


def test_a_zero_out_plan_is_converted_before_the_check():
    budget = PrivacyBudget(1.5, DELTA, neighbouring="replace-one")
    # (1, 1e-6) zero-out is (2, 3.7e-6) replace-one: refused before any data is read
    with pytest.raises(BudgetExceededError, match=r"counts double under replace-one"):
        _reserve(budget, 1.0, DELTA)
    assert budget.charges == () and budget.spent.epsilon == 0.0
    # at a looser budget delta the refusal is the converted epsilon itself: 2.0 > 1.5
    loose = PrivacyBudget(1.5, 1e-5, neighbouring="replace-one")
    with pytest.raises(BudgetExceededError, match=r"epsilon = 1\.99"):
        _reserve(loose, 1.0, DELTA)
    # (0.7, 1e-7) zero-out is (1.4, 3.0e-7) replace-one: accepted, charged about 1.4
    _reserve(budget, 0.7, 1e-7)
    assert 1.35 < budget.spent.epsilon <= 1.4 + 1e-9


def test_a_zero_out_fit_is_charged_its_replace_one_guarantee():
    budget = PrivacyBudget(1.5, DELTA, neighbouring="replace-one")
    reservation = _reserve(budget, 0.7, 1e-7)
    mu = 0.12
    assert gdp_epsilon(mu, 1e-7) <= 0.7  # the fit honours its zero-out plan
    ledger = PrivacyLedger("zero-out")
    ledger.record(GaussianEvent(1.0, 1.0 / mu))
    reservation.complete([ledger])
    assert budget.spent.epsilon == pytest.approx(gdp_epsilon(2 * mu, DELTA), rel=1e-9)


def test_a_fit_planned_replace_one_that_ran_zero_out_is_charged_what_ran():
    # issue 26's 'auto' case: planned replace-one (1, 1e-6), ran zero-out at mu; the planned
    # guarantee and the certified bound are withdrawn: the spend is 2 mu-GDP, above the budget
    budget = PrivacyBudget(1.5, DELTA, neighbouring="replace-one")
    reservation = _reserve(budget, 1.0, DELTA, relation="replace-one")
    assert budget.spent.epsilon <= 1.0
    mu = 0.2
    assert gdp_epsilon(mu, DELTA) <= 1.0
    ledger = PrivacyLedger("zero-out")
    ledger.record(GaussianEvent(1.0, 1.0 / mu))
    reservation.complete([ledger])
    assert budget.spent.epsilon == pytest.approx(gdp_epsilon(2 * mu, DELTA), rel=1e-9)
    assert budget.spent.epsilon > 1.5


def test_a_sampled_zero_out_fit_on_a_replace_one_budget_is_bounded_and_sound():
    budget = PrivacyBudget(10.0, DELTA, neighbouring="replace-one")
    reservation = _reserve(budget, 3.0, 1e-8)
    ledger = PrivacyLedger("zero-out")
    ledger.record(SAMPLED)
    assert ledger.epsilon(1e-8) <= 3.0  # the fit honours its plan
    reservation.complete([ledger])
    exact = _exact_replace_one_epsilon(0.1, 2.0, 10, DELTA)
    assert exact <= budget.spent.epsilon <= 6.0 + 1e-9


def test_replace_one_on_zero_out_is_accepted_as_is():
    budget = PrivacyBudget(3.0, DELTA)
    budget.charge([GaussianEvent(1.0, 4.0)], neighbouring="replace-one")
    assert budget.spent.epsilon == pytest.approx(gdp_epsilon(0.25, DELTA), rel=1e-12)


# -- release ------------------------------------------------------------------------------------
def test_a_released_reservation_gives_its_budget_back():
    # the case: a fit refused for a public reason kept 0.99 of (1.5, 1e-2)
    budget = PrivacyBudget(1.5, 1e-2)
    reservation = _reserve(budget, 0.99, 1e-3)
    with pytest.raises(BudgetExceededError):
        _reserve(budget, 0.99, 1e-3)
    reservation.release()
    assert budget.charges == () and budget.spent.epsilon == 0.0
    _reserve(budget, 0.99, 1e-3)  # the next valid fit is accepted
    with pytest.raises(RuntimeError, match="already completed or released"):
        reservation.release()
    with pytest.raises(RuntimeError, match="already completed or released"):
        reservation.complete([])


def test_completing_or_releasing_twice_raises():
    budget = PrivacyBudget(5.0, DELTA)
    done = _reserve(budget, 1.0, 1e-7)
    done.complete([])
    with pytest.raises(RuntimeError, match="already completed or released"):
        done.complete([])
    with pytest.raises(RuntimeError, match="already completed or released"):
        done.release()
    assert budget.charges == ("fit",)


# -- overflow -----------------------------------------------------------------------------------
def test_spends_past_the_float_range_are_refused_or_infinite_never_an_overflow():
    assert compose_guarantees([(1000.0, 1e-9)] * 2, DELTA) == 2000.0  # basic; PLD skipped
    budget = PrivacyBudget(1.5, DELTA)
    for _ in range(2):
        with pytest.raises(BudgetExceededError):
            budget.charge([ApproxDPEvent(1000.0, 1e-9)], neighbouring="zero-out")
        with pytest.raises(BudgetExceededError):
            _reserve(budget, 1000.0, 1e-9)
    large = PrivacyBudget(5000.0, DELTA)
    for _ in range(2):
        _reserve(large, 1000.0, 1e-9)  # accepted by basic composition of the guarantees
    assert large.spent.epsilon == pytest.approx(2000.0)
    on_replace_one = PrivacyBudget(5000.0, DELTA, neighbouring="replace-one")
    with pytest.raises(BudgetExceededError, match="epsilon = inf"):
        _reserve(on_replace_one, 1000.0, 1e-9)  # (1 + e^1000) delta: no guarantee left
    # a completed fit whose bound overflows is reported as inf, not raised
    reservation = _reserve(PrivacyBudget(5.0, DELTA), 1.0, 1e-7)
    ledger = PrivacyLedger("zero-out")
    ledger.record(GaussianEvent(1e200, 1e-200))
    reservation.complete([ledger])
    assert reservation.budget.spent.epsilon == math.inf
    assert "spent=inf" in repr(reservation.budget)
