"""PrivacyLedger.epsilon never decreases when an event is recorded (issue 12, item 5).

Recording a release can only add privacy loss: to the group of every record it touches (shared
events) or of the records of one partition; a new disjoint partition adds a group and leaves the
others alone. Whatever path ``epsilon`` takes (one accountant, or "auto" picking the tightest per
partition, sampling failures taken off delta, curve-only events splitting it), the reported
epsilon must therefore never go down.
"""

from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from privopt.accounting import (
    ApproxDPEvent,
    DpAccountingAccountant,
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyLedger,
    SamplingFailureEvent,
    get_accountant,
)
from privopt.accounting import ledger as ledger_module

DELTA = 1e-5

# Failure probabilities (fractions of DELTA) chosen so that no sum of up to five of them lands
# within 3% of DELTA: the remaining delta is then either gone (the ledger must refuse) or at
# least 3e-7, far above the ApproxDP events' own delta mass (2e-10), so no example sits on a
# numerical knife edge of the ValueError.
_FAILURES = (0.07, 0.3, 0.45)

_gaussian = st.builds(
    GaussianEvent,
    sensitivity=st.sampled_from([0.5, 1.0]),
    std=st.sampled_from([1.0, 2.0, 5.0]),
    count=st.integers(1, 2),
)
_sampled = st.builds(
    PoissonSampledGaussianEvent,
    noise_multiplier=st.sampled_from([1.0, 2.0]),
    sample_rate=st.sampled_from([0.01, 0.1]),
    count=st.integers(1, 3),
)
_failure = st.builds(
    SamplingFailureEvent, probability=st.sampled_from([f * DELTA for f in _FAILURES])
)
_approx = st.builds(
    ApproxDPEvent,
    epsilon=st.sampled_from([0.1, 0.5]),
    delta=st.just(1e-10),
    count=st.integers(1, 2),
)
# Failures and the two accountable kinds (which decide GDP vs PLD per group) twice as often as
# the curve-only ApproxDP events.
_events = st.one_of(_gaussian, _sampled, _failure, _gaussian, _sampled, _failure, _approx)
# Mostly partitioned: a shared sampled event makes every group PLD, so the per-partition path
# of "auto" (a GDP group beside a PLD one) needs events spread over partitions.
_partitions = st.sampled_from(["a", "b", "c", None])
_entries = st.lists(st.tuples(_events, _partitions), min_size=2, max_size=4)


def _coarse_auto(name, events=()):
    """``get_accountant`` with a 100x coarser PLD grid, to keep each example fast.

    The default PLD grid (1e-4) costs ~0.5 s per composition; 1e-2 costs ~10 ms. The grid is a
    parameter of the accountant, not of the ledger logic under test, and a coarser pessimistic
    PLD is still a valid (larger) upper bound, composed the same way.
    """
    acc = get_accountant(name, events)
    if isinstance(acc, DpAccountingAccountant) and acc.kind == "pld":
        return DpAccountingAccountant("pld", pld_discretization=1e-2)
    return acc


def _ledger(entries) -> PrivacyLedger:
    ledger = PrivacyLedger("zero-out")  # Poisson sampling needs add-remove or zero-out
    for event, partition in entries:
        ledger.record(event, partition=partition)
    return ledger


def _epsilon(ledger: PrivacyLedger) -> float | None:
    """epsilon at DELTA, or None after checking that a ledger whose failures use up DELTA
    refuses to answer (no (epsilon, delta) claim exists there)."""
    if ledger.failure_probability >= DELTA:
        with pytest.raises(ValueError, match="does not exceed"):
            ledger.epsilon(DELTA)
        return None
    return ledger.epsilon(DELTA)


@settings(max_examples=40, deadline=None)
# The shape, always tried: a failure beside sampled steps in "a", then an unrelated
# Gaussian partition, which turns "auto" per-partition (PLD for "a", GDP for "new"); that path
# used to drop the failure, and epsilon fell.
@example(
    entries=[
        (PoissonSampledGaussianEvent(1.0, 0.1, 3), "a"),
        (SamplingFailureEvent(0.45 * DELTA), "a"),
    ],
    extra=GaussianEvent(1.0, 5.0),
    extra_partition="new",
)
# ... and a shared failure, which every group must keep on both paths.
@example(
    entries=[
        (SamplingFailureEvent(0.3 * DELTA), None),
        (PoissonSampledGaussianEvent(1.0, 0.1, 3), "a"),
    ],
    extra=GaussianEvent(0.5, 5.0),
    extra_partition="b",
)
@given(
    entries=_entries,
    extra=_events,
    extra_partition=st.sampled_from(["new", "a", "b", "c", None]),
)
def test_recording_an_event_never_lowers_epsilon(entries, extra, extra_partition):
    with mock.patch.object(ledger_module, "get_accountant", _coarse_auto):
        before = _epsilon(_ledger(entries))
        after = _epsilon(_ledger([*entries, (extra, extra_partition)]))
    if before is None:
        # failures only accumulate per record, so the larger ledger must refuse too
        assert after is None
        return
    if after is None:
        return  # refusing is the largest possible answer
    # Relative slack 1e-9 for floating point only. No PLD tolerance is needed: a pessimistic
    # PLD composed with one more mechanism dominates the PLD without it (the extra output can
    # be ignored), and an exact GDP epsilon is below any valid bound, so also below the PLD of
    # a group that an added sampled event moves from GDP to PLD.
    assert after >= before * (1 - 1e-9)
