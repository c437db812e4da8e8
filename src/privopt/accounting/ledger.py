"""The privacy ledger: every private release of a fit is recorded here, then composed.

Algorithms record one :class:`~privopt.accounting.events.PrivacyEvent` per release (gradient
noise, private thresholds, output noise, private statistics), tagged with the disjoint data
partition it touched, if any. The ledger answers epsilon(delta) and rho and produces the
:class:`~privopt.accounting.report.PrivacyReport` of the fit.

Composition rules
-----------------
* **Sequential**: events without a partition touch every record and compose adaptively.
* **Parallel** (McSherry 2009): events tagged ``partition=p`` touch only the records of part p,
  and parts are disjoint, so a record's privacy loss is that of the shared events plus the
  events of its own part. The ledger reports the worst part. One-pass algorithms that use each
  record in one batch only (DP-AMBSSGD, DP-FTRL-Σ estimation sets) rely on this.
* **Curve-only events** (shuffling amplification, closed-form RDP guarantees of a theorem) have
  no form an accountant composes; they are combined with the rest by basic composition: delta is
  split equally between the accountable part and each curve-only event, and the epsilons add.
* **Sampling failures**: a :class:`SamplingFailureEvent` of probability gamma (a data-independent
  event voiding a sensitivity bound) adds gamma to delta, so the other events are composed at
  delta minus the total failure probability. The total is per record, like everything else: the
  failures recorded without a partition plus those of the record's own partition. Every path of
  :meth:`PrivacyLedger.epsilon` (one accountant, or ``"auto"`` picking one per partition)
  composes the same groups, failures included, so adding an event, or a disjoint partition,
  never lowers the reported epsilon.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from privopt._validate import check_probability
from privopt.accounting.accountants import Accountant, get_accountant
from privopt.accounting.events import (
    ApproxDPEvent,
    GaussianEvent,
    Neighbouring,
    PrivacyEvent,
    PrivacyUnit,
    RenyiGuaranteeEvent,
    SamplingFailureEvent,
    ShuffledGaussianEvent,
)
from privopt.accounting.report import PrivacyReport, summarise_events

__all__ = ["LedgerEntry", "PrivacyLedger"]

#: Events that only offer epsilon(delta) from their own theorem.
_CURVE_ONLY = (ShuffledGaussianEvent, RenyiGuaranteeEvent, ApproxDPEvent)


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded release: the event and the disjoint partition it touched (None = all)."""

    event: PrivacyEvent
    partition: Hashable | None = None


class PrivacyLedger:
    """Records the private releases of one fit and composes them.

    Args:
        neighbouring: the neighbouring relation under which every recorded sensitivity was
            computed ("add-remove", "replace-one" or "zero-out").
        assumptions: statements the privacy claim relies on (e.g. "features bounded by R in l2
            are enforced by clipping"), carried into the report.
        unit: the privacy unit, ``"record"`` (default) or ``"user"`` (every sensitivity is
            that of one user's whole contribution; the report names the relation
            ``"user-level zero-out"``, :class:`~privopt.accounting.events.PrivacyUnit`).

    >>> ledger = PrivacyLedger("replace-one")
    >>> ledger.record(GaussianEvent(sensitivity=1.0, std=1.0, label="mean"))
    >>> round(ledger.epsilon(1e-5), 6)
    4.377178
    """

    def __init__(
        self,
        neighbouring: Neighbouring | str,
        assumptions: Iterable[str] = (),
        *,
        unit: PrivacyUnit | str = PrivacyUnit.RECORD,
    ) -> None:
        self.neighbouring = Neighbouring.parse(neighbouring)
        self.unit = PrivacyUnit.parse(unit)
        self._entries: list[LedgerEntry] = []
        self._assumptions: list[str] = []
        self._disclosures: list[str] = []
        for text in assumptions:
            self.assume(text)

    # -- recording -----------------------------------------------------------------------------
    def record(self, event: PrivacyEvent, *, partition: Hashable | None = None) -> None:
        """Record ``event``; ``partition`` names the disjoint part of the data it touched."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"Expected a PrivacyEvent, got {type(event).__name__}.")
        if self.neighbouring not in event.relations:
            allowed = ", ".join(sorted(r.value for r in event.relations))
            raise ValueError(
                f"Event {event.mechanism!r} is analysed under ({allowed}) neighbours, but this "
                f"ledger uses {self.neighbouring.value!r}."
            )
        if partition is not None:
            hash(partition)  # fail early on unhashable partition labels
        self._entries.append(LedgerEntry(event, partition))

    def assume(self, text: str) -> None:
        """Add an assumption the privacy claim relies on (shown in the report)."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("Expected a non-empty assumption string.")
        if text not in self._assumptions:
            self._assumptions.append(text)

    def disclose(self, text: str) -> None:
        """Record a release made WITHOUT a private mechanism, on the caller's explicit request.

        E.g. ``diagnostics=True`` (clip fractions). Such a release is not covered by the
        ledger's epsilon; the report lists it under ``non_private_releases``.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("Expected a non-empty description of the non-private release.")
        if text not in self._disclosures:
            self._disclosures.append(text)

    @property
    def disclosures(self) -> tuple[str, ...]:
        """The non-private releases recorded by :meth:`disclose`."""
        return tuple(self._disclosures)

    def extend(self, other: PrivacyLedger) -> None:
        """Append another ledger's entries and assumptions (same neighbouring relation)."""
        if other.neighbouring is not self.neighbouring:
            raise ValueError(
                f"Cannot merge a {other.neighbouring.value!r} ledger into a "
                f"{self.neighbouring.value!r} ledger."
            )
        if other.unit is not self.unit:
            raise ValueError(
                f"Cannot merge a ledger whose privacy unit is the {other.unit.value} into one "
                f"whose unit is the {self.unit.value}."
            )
        for entry in other.entries:
            self.record(entry.event, partition=entry.partition)
        for text in other.assumptions:
            self.assume(text)
        for text in other.disclosures:
            self.disclose(text)

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        return tuple(self._entries)

    @property
    def assumptions(self) -> tuple[str, ...]:
        return tuple(self._assumptions)

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return tuple(e.event for e in self._entries)

    # -- composition ---------------------------------------------------------------------------
    def _split(self) -> tuple[list[PrivacyEvent], list[list[PrivacyEvent]]]:
        """(shared events, one event list per partition), every recorded event included.

        Sampling failures are kept with the events they belong to: a failure recorded for a
        partition voids that partition's bounds, and one recorded without a partition voids
        everyone's. Nothing here may drop them, or the delta they cost is silently lost.
        """
        shared: list[PrivacyEvent] = []
        parts: dict[Hashable, list[PrivacyEvent]] = {}
        for entry in self._entries:
            if entry.partition is None:
                shared.append(entry.event)
            else:
                parts.setdefault(entry.partition, []).append(entry.event)
        return shared, list(parts.values())

    def _groups(self) -> list[list[PrivacyEvent]]:
        """What one record can meet: the shared events plus one partition's (failures too)."""
        shared, parts = self._split()
        return [[*shared, *p] for p in parts] or [shared]

    @property
    def failure_probability(self) -> float:
        """Largest sampling-failure probability one record's releases carry (added to delta)."""
        return max(_failure(group) for group in self._groups())

    @property
    def num_partitions(self) -> int:
        return len({e.partition for e in self._entries if e.partition is not None})

    def _gaussian_only(self) -> bool:
        return all(isinstance(e, GaussianEvent) for e in self.events)

    @property
    def rho(self) -> float | None:
        """rho-zCDP of the fit (parallel over partitions), or None if an event has no zCDP form.

        None as well when a sampling failure is recorded: its probability adds to delta, which a
        bare rho cannot carry, so reporting rho would silently drop it.
        """
        if not self._gaussian_only():
            return None
        shared, parts = self._split()
        worst = max((sum(e.rho for e in p) for p in parts), default=0.0)
        return float(sum(e.rho for e in shared) + worst)

    @property
    def mu(self) -> float | None:
        """mu-GDP of the fit (parallel over partitions), or None if an event is not Gaussian.

        None as well when a sampling failure is recorded (see :attr:`rho`).
        """
        if not self._gaussian_only():
            return None
        shared, parts = self._split()
        worst = max((sum(e.mu * e.mu for e in p) for p in parts), default=0.0)
        return math.sqrt(sum(e.mu * e.mu for e in shared) + worst)

    def resolve_accountant(self, accountant: str | Accountant = "auto") -> Accountant:
        """The accountant that :meth:`epsilon` uses, validated against the recorded events."""
        accountable = _accountable(self.events)
        acc = (
            accountant
            if isinstance(accountant, Accountant)
            else get_accountant(accountant, accountable)
        )
        acc.check(accountable)
        return acc

    def _per_partition_accountants(
        self, accountant: str | Accountant
    ) -> list[tuple[Accountant, list[PrivacyEvent]]] | None:
        """For ``"auto"`` over partitions whose tightest accountants differ: (accountant, group).

        Parallel composition bounds each record's loss by its own group (shared events plus its
        partition's), so each group may use the tightest accountant valid for it (e.g. exact GDP
        for Gaussian-only preprocessing parts, PLD or RDP for a part with sampled steps).

        The groups are those of :meth:`_groups`, sampling failures included: a group's failure
        probability is part of its (epsilon, delta) claim (it is taken off delta before
        composing), so a group without it would claim delta for releases that only hold at
        delta minus the failure. The accountant is chosen from the group's accountable events
        only (a failure or a curve-only event is no reason to leave GDP for RDP), and groups
        with no accountable events (only failures or curve-only guarantees) use no accountant,
        so they neither force nor name one.
        """
        if accountant != "auto" or not self.num_partitions:
            return None
        groups = self._groups()
        chosen = [get_accountant("auto", _accountable(group)) for group in groups]
        names = {a.name for a, g in zip(chosen, groups, strict=True) if _accountable(g)}
        if len(names) <= 1:
            # One accountant fits every group: :meth:`resolve_accountant` picks the same one from
            # all events (each event is in some group), and the single-accountant path applies.
            return None
        return list(zip(chosen, groups, strict=True))

    def epsilon(self, delta: float, accountant: str | Accountant = "auto") -> float:
        """epsilon at ``delta`` of everything recorded (0 for an empty ledger).

        The worst group of :meth:`_groups` (parallel composition): for each group, delta minus
        its sampling-failure probability, split by basic composition between its accountable
        events and its curve-only events (see the module notes).
        """
        delta = check_probability("delta", delta)
        per_partition = self._per_partition_accountants(accountant)
        if per_partition:
            return max(_group_epsilon(a, group, delta) for a, group in per_partition)
        acc = self.resolve_accountant(accountant)
        if any(isinstance(e, (*_CURVE_ONLY, SamplingFailureEvent)) for e in self.events):
            return max(_group_epsilon(acc, group, delta) for group in self._groups())
        # Nothing to take off delta or to split it with, so every group is composed by the
        # accountant alone, which does the same maximum over groups (GDP and zCDP in a single
        # conversion of the largest partition's scalar).
        shared, parts = self._split()
        return acc.epsilon_parallel(shared, parts, delta)

    def report(self, delta: float, accountant: str | Accountant = "auto") -> PrivacyReport:
        """The privacy report of the fit at ``delta``."""
        per_partition = self._per_partition_accountants(accountant)
        if per_partition:
            epsilon = self.epsilon(delta, accountant)
            used = [a for a, group in per_partition if _accountable(group)]
            names = list(dict.fromkeys(a.name for a in used))
            descriptions = list(dict.fromkeys(a.description for a in used))
            name = "auto: " + ", ".join(names)
            description = (
                "per partition, the tightest valid accountant (" + "; ".join(descriptions) + ")"
            )
        else:
            acc = self.resolve_accountant(accountant)
            epsilon = self.epsilon(delta, acc)
            name, description = acc.name, acc.description
        parts = self.num_partitions
        composition = "sequential (adaptive) composition of all events"
        if parts:
            composition = (
                f"parallel composition over {parts} disjoint data partitions, each record "
                "touched by the shared events and by its own partition's events"
            )
        if any(isinstance(e, _CURVE_ONLY) for e in self.events):
            composition += "; curve-only events (their own theorem) joined by basic composition"
        if self.failure_probability > 0.0:
            composition += (
                f"; delta includes a sampling-failure probability of {self.failure_probability:g}"
            )
        assumptions = list(self._assumptions)
        if parts:
            assumptions.append(
                "partitions are disjoint and chosen independently of the data values"
            )
        return PrivacyReport(
            epsilon=epsilon,
            delta=delta,
            rho=self.rho,
            mu=self.mu,
            accountant=name,
            accountant_description=description,
            neighbouring=self.unit.relation_name(self.neighbouring),
            neighbouring_description=self.unit.relation_description(self.neighbouring),
            composition=composition,
            num_partitions=parts,
            events=summarise_events(self._entries),
            assumptions=tuple(assumptions),
            non_private_releases=tuple(self._disclosures),
            privacy_unit=self.unit.value,
        )


def _accountable(events: Sequence[PrivacyEvent]) -> list[PrivacyEvent]:
    """The events an accountant composes (not curve-only guarantees, not sampling failures)."""
    return [e for e in events if not isinstance(e, (*_CURVE_ONLY, SamplingFailureEvent))]


def _failure(events: Sequence[PrivacyEvent]) -> float:
    return float(sum(e.probability for e in events if isinstance(e, SamplingFailureEvent)))


def _group_epsilon(acc: Accountant, events: Sequence[PrivacyEvent], delta: float) -> float:
    """epsilon of one record's group: delta minus its failure probability, then composition."""
    failure = _failure(events)
    if failure > 0.0:
        if not failure < delta:
            raise ValueError(
                f"delta={delta:g} does not exceed the recorded sampling-failure probability "
                f"{failure:g}; no (epsilon, delta) claim is possible."
            )
        delta -= failure
    return _basic_composition(
        acc, [e for e in events if not isinstance(e, SamplingFailureEvent)], delta
    )


def _curve_epsilon(event: PrivacyEvent, delta: float) -> float:
    if isinstance(event, ApproxDPEvent):
        return event.composed_epsilon(delta)
    return event.epsilon(delta)  # type: ignore[attr-defined]


def _basic_composition(acc: Accountant, events: Sequence[PrivacyEvent], delta: float) -> float:
    """Basic composition of the accountable events and each curve-only event, splitting delta.

    A group with nothing to compose (a partition that only records a sampling failure) costs
    nothing.
    """
    curve = [e for e in events if isinstance(e, _CURVE_ONLY)]
    rest = [e for e in events if not isinstance(e, _CURVE_ONLY)]
    shares = len(curve) + (1 if rest else 0)
    if shares == 0:
        return 0.0
    share = delta / shares
    total = sum(_curve_epsilon(e, share) for e in curve)
    if rest:
        total += acc.epsilon(rest, share)
    return float(total)
