"""Restating a privacy guarantee under another neighbouring relation.

A budget states one relation; a fit may be analysed under another. Replace-one implies zero-out
as it stands (a null record is a record of the clipped domain); zero-out converts to replace-one
by group privacy of size 2 (:func:`convert_guarantee`, :func:`convert_events`); add-remove
converts only to itself.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence

from privopt._validate import check_positive, check_probability
from privopt.accounting.events import (
    ApproxDPEvent,
    GaussianEvent,
    Neighbouring,
    PrivacyEvent,
    SamplingFailureEvent,
)
from privopt.accounting.ledger import LedgerEntry, PrivacyLedger

__all__ = [
    "CompositionLedger",
    "convert_events",
    "convert_guarantee",
    "convertible",
    "group_delta",
    "implies",
    "refuse_relation",
]

#: Safety factors tried, in order, when a group's curve is converted (see :func:`convert_events`).
_CONVERSION_FACTORS = (1.05, 1.2, 2.0, 10.0, 1e3)


# -- converting between neighbouring relations -------------------------------------------------
def implies(relation: Neighbouring, target: Neighbouring) -> bool:
    """Whether a guarantee under ``relation`` is, as it stands, one under ``target``."""
    return relation is target or (
        relation is Neighbouring.REPLACE_ONE and target is Neighbouring.ZERO_OUT
    )


def convertible(source: Neighbouring, target: Neighbouring) -> bool:
    return implies(source, target) or (
        source is Neighbouring.ZERO_OUT and target is Neighbouring.REPLACE_ONE
    )


def refuse_relation(source: Neighbouring, target: Neighbouring, label: str) -> ValueError:
    return ValueError(
        f"{label} is accounted under {source.value!r} neighbours, which do not imply a "
        f"{target.value!r} guarantee (add-remove converts only to itself)."
    )


def group_delta(epsilon: float, delta: float) -> float:
    """(1 + e^epsilon) delta, the delta of group privacy of size 2 (inf past the float range)."""
    if epsilon > 700.0:
        return math.inf
    return (1.0 + math.exp(epsilon)) * delta


def convert_guarantee(
    epsilon: float,
    delta: float,
    from_relation: Neighbouring | str,
    to_relation: Neighbouring | str,
) -> tuple[float, float] | None:
    """An (epsilon, delta) guarantee under ``from_relation`` restated under ``to_relation``.

    Zero-out to replace-one is group privacy of size 2: replace-one neighbours D, D' (x -> x')
    are joined by D -> D0 -> D' (x zeroed, then x' put in), two zero-out steps, so for every
    event S, P[M(D) in S] <= e^eps (e^eps P[M(D') in S] + delta) + delta, i.e.
    (2 epsilon, (1 + e^epsilon) delta) (Dwork & Roth 2014, Theorem 2.2 and its (epsilon, delta)
    remark, here with the exact chain). Replace-one to zero-out and a relation to itself: as is.
    Returns None when the converted delta is not below 1 (no guarantee is left); raises
    ``ValueError`` for a pair that does not convert (add-remove with another relation).
    """
    source, target = Neighbouring.parse(from_relation), Neighbouring.parse(to_relation)
    epsilon = check_positive("epsilon", epsilon, allow_inf=True)
    delta = check_probability("delta", delta)
    if implies(source, target):
        return epsilon, delta
    if not convertible(source, target):
        raise refuse_relation(source, target, "the guarantee")
    converted = group_delta(epsilon, delta)
    if not converted < 1.0:
        return None
    return 2.0 * epsilon, converted


def convert_events(
    events: Iterable[PrivacyEvent],
    from_relation: Neighbouring | str,
    to_relation: Neighbouring | str,
    *,
    delta: float | None = None,
) -> tuple[PrivacyEvent, ...]:
    """Events of ONE mechanism (their adaptive composition) restated under ``to_relation``.

    * Same relation, or replace-one to zero-out: the events as they are (a zero-out neighbour is
      one particular replacement: the null record is a record of the clipped domain).
    * Zero-out to replace-one, every event convertible on its own (group privacy of size 2,
      each release conditioned on the previous outputs, then adaptive composition):

      - :class:`GaussianEvent` of l2 sensitivity s: the same Gaussian of sensitivity 2 s, since
        ||f(D) - f(D')|| <= ||f(D) - f(D0)|| + ||f(D0) - f(D')|| <= 2 s; exact: mu-GDP under
        zero-out is 2 mu-GDP under replace-one (Dong, Roth & Su 2022, group privacy, Thm 2.14);
      - :class:`ApproxDPEvent` (epsilon, delta) per release: (2 epsilon, (1 + e^epsilon)
        delta) per release (:func:`convert_guarantee`);
      - :class:`SamplingFailureEvent`: as is (a data-independent event has the same probability
        under every relation; on its complement the other events are converted as above).

    * Zero-out to replace-one with any other event (Poisson-sampled or shuffled Gaussians,
      closed-form RDP, ...): the whole mechanism is converted through its own curve. With
      eps_L(d) its epsilon at d under zero-out (the ledger's ``auto`` accountant), it is
      (eps_L(d), d)-DP for every d, hence (2 eps_L(d), (1 + e^eps_L(d)) d)-DP under
      replace-one. ``delta`` is required: d is the largest of a few candidates
      d = delta / ((1 + e^eps_L(delta / 2)) f) for which (1 + e^eps_L(d)) d <= delta, and the
      result is one :class:`ApproxDPEvent` (2 eps_L(d), (1 + e^eps_L(d)) d).

    Raises ``ValueError`` for a pair of relations that does not convert (add-remove with
    another), when ``delta`` is needed and missing, or when no finite bound results.
    """
    source, target = Neighbouring.parse(from_relation), Neighbouring.parse(to_relation)
    events = tuple(events)
    if not all(isinstance(e, PrivacyEvent) for e in events):
        raise TypeError("Expected PrivacyEvents to convert.")
    if implies(source, target):
        return events
    if not convertible(source, target):
        raise refuse_relation(source, target, "the events")
    if all(isinstance(e, (GaussianEvent, ApproxDPEvent, SamplingFailureEvent)) for e in events):
        return tuple(_double(e) for e in events)
    if delta is None:
        raise ValueError(
            "Converting these events to replace-one needs the delta of the converted "
            "guarantee (pass delta=...)."
        )
    return (_convert_by_curve(events, source, check_probability("delta", delta)),)


def _double(event: PrivacyEvent) -> PrivacyEvent:
    """One event converted from zero-out to replace-one on its own (see convert_events)."""
    if isinstance(event, GaussianEvent):
        return GaussianEvent(2.0 * event.sensitivity, event.std, event.count, label=event.label)
    if isinstance(event, ApproxDPEvent):
        converted = group_delta(event.epsilon, event.delta)
        if not converted < 1.0:
            raise ValueError(
                f"({event.epsilon:g}, {event.delta:g})-DP under zero-out leaves no replace-one "
                f"guarantee: (1 + e^epsilon) delta = {converted:g} is not below 1."
            )
        return ApproxDPEvent(2.0 * event.epsilon, converted, event.count, label=event.label)
    return event  # a SamplingFailureEvent


def _convert_by_curve(
    events: Sequence[PrivacyEvent], source: Neighbouring, delta: float
) -> ApproxDPEvent:
    """(2 eps_L(d), (1 + e^eps_L(d)) d) with (1 + e^eps_L(d)) d <= delta (convert_events)."""
    ledger = CompositionLedger(source)
    for event in events:
        ledger.record(event)

    def eps_at(d: float) -> float:
        try:
            return float(ledger.epsilon(d))
        except (ValueError, OverflowError):
            return math.inf

    first = eps_at(delta / 2.0)  # any valid d is <= delta / 2, so eps_L(d) >= first
    if not math.isfinite(first):
        raise ValueError("The events have no finite epsilon under zero-out at this delta.")
    for factor in _CONVERSION_FACTORS:
        d = delta / (group_delta(first, 1.0) * factor)
        eps = eps_at(d)
        converted = group_delta(eps, d)
        if math.isfinite(eps) and converted <= delta:
            return ApproxDPEvent(
                max(2.0 * eps, 1e-12), converted, label="zero-out fit converted to replace-one"
            )
    raise ValueError("The events' zero-out curve gives no replace-one bound at this delta.")


class CompositionLedger(PrivacyLedger):
    """A ledger that composes events already checked against the budget's relation.

    Each charge's relation was checked to imply the budget's when it was accepted, so every
    event's curve is a valid bound under the budget's relation; the per-event relation guard of
    :meth:`PrivacyLedger.record` (which refuses, e.g., a replace-one sampled event in a zero-out
    ledger) does not apply here.
    """

    def record(self, event: PrivacyEvent, *, partition: Hashable | None = None) -> None:
        self._entries.append(LedgerEntry(event, partition))
