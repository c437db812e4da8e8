"""A privacy budget that fits draw from: the composition of every charge stays within it.

A :class:`PrivacyBudget` of ``(epsilon, delta)`` holds the charges of the fits made against it
(an estimator's ``budget=``, :func:`privopt.training.run`'s ``budget=``). Before a fit touches its
data it asks :meth:`PrivacyBudget.reserve` (or :meth:`PrivacyBudget.charge` for an exact event
list); the reservation is refused with :class:`BudgetExceededError`, and nothing is recorded,
when the composition of what was spent and what is planned would exceed ``epsilon`` at the
budget's ``delta``. After the fit the reservation is completed with the fit's own ledger, so the
spend is composed from the events that ran.

How the spend is composed (every bound below is a valid upper bound on the privacy loss of
everything charged, so their minimum is one too, "the tightest valid"):

* **Events** (A): each fit is the list of groups a record can meet (its shared events plus one of
  its disjoint partitions, as in :class:`~privopt.accounting.PrivacyLedger`). Fits draw their
  partitions independently, so a record meets one group of every fit: the worst record's loss is
  the maximum, over one group per fit, of the composition of their events by the ledger's
  ``auto`` accountant (exact GDP for Gaussian releases, PLD or RDP for sampled ones, basic
  composition for curve-only events). Above :data:`MAX_GROUP_COMBINATIONS` combinations, a fit's
  groups are merged into one (sequential composition, an upper bound).
* **Guarantees** (G): a fit calibrated to ``(epsilon_i, delta_i)`` is, whatever it ran, a
  post-processing of the generic ``(epsilon_i, delta_i)`` randomised response (Kairouz, Oh &
  Viswanath 2015), so the fits compose as those mechanisms do: the minimum of the privacy-loss
  distribution composition (``dp_accounting``, pessimistic) and basic composition
  (``sum epsilon_i`` when ``sum delta_i <= delta``).
* **Certified** (C): the bound under which the last charge was accepted; later computations never
  raise the spend above it.

Neighbouring relations: a budget states one (default ``"zero-out"``, the relation of Poisson
DP-SGD). A charge analysed under the same relation, or under replace-one when the budget is
zero-out (a zero-out neighbour replaces a record by the null record, which every privopt
analysis admits as a record of the clipped domain), is accepted; any other is refused before the
fit runs.

Refitting charges again: a budget never assumes two fits are the same release.

>>> from privopt.accounting import GaussianEvent
>>> budget = PrivacyBudget(1.2, 1e-6)
>>> budget.charge([GaussianEvent(1.0, 5.0)], neighbouring="zero-out")
>>> round(budget.spent.epsilon, 4), budget.spent.delta
(0.8341, 1e-06)
>>> budget.charge([GaussianEvent(1.0, 5.0)], neighbouring="zero-out")
Traceback (most recent call last):
  ...
privopt.accounting.budget.BudgetExceededError: ...
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from privopt._validate import check_positive, check_probability
from privopt.accounting.events import ApproxDPEvent, Neighbouring, PrivacyEvent
from privopt.accounting.ledger import LedgerEntry, PrivacyLedger

__all__ = [
    "BudgetExceededError",
    "PrivacyBudget",
    "Reservation",
    "Spend",
    "compose_guarantees",
    "planned_guarantee",
]

#: Above this many combinations of per-fit groups, groups are merged per fit (an upper bound).
MAX_GROUP_COMBINATIONS = 256
#: Value discretisation of the PLD composition of (epsilon_i, delta_i) guarantees.
GUARANTEE_PLD_DISCRETIZATION = 1e-4


class BudgetExceededError(RuntimeError):
    """A fit would exceed its :class:`PrivacyBudget`; it was refused before reading the data."""


@dataclass(frozen=True)
class Spend:
    """An (epsilon, delta) pair: epsilon evaluated at the budget's delta."""

    epsilon: float
    delta: float


Group = tuple[PrivacyEvent, ...]


@dataclass
class _Charge:
    label: str
    relation: Neighbouring
    #: the groups a record can meet (one per partition, shared events in each)
    groups: tuple[Group, ...]
    #: an (epsilon, delta) the charge is known to satisfy, or None
    guarantee: tuple[float, float] | None
    pending: bool = False


@dataclass
class Reservation:
    """A planned fit's charge, held until :meth:`complete` replaces it by the fit's events.

    A reservation that is never completed (the fit raised) keeps its planned charge: a failure
    after the data was touched may itself depend on the data.
    """

    budget: PrivacyBudget
    _charge: _Charge = field(repr=False)

    def complete(self, ledgers: Sequence[PrivacyLedger]) -> None:
        """Replace the planned charge by the groups of the fit's ledger(s).

        The planned guarantee is kept for composition (G) only if every ledger honours it
        (epsilon at the planned delta no larger than planned); otherwise it is dropped.
        """
        if not self._charge.pending:
            raise RuntimeError("This reservation was already completed.")
        if not ledgers:
            self._charge.pending = False
            return
        for ledger in ledgers:
            self.budget._check_relation(ledger.neighbouring, self._charge.label)
        per_fit = [_groups(ledger.entries) for ledger in ledgers]
        self._charge.groups = _combine(per_fit)
        if self._charge.guarantee is not None:
            eps, delta = self._charge.guarantee
            if any(ledger.epsilon(delta) > eps * (1.0 + 1e-6) for ledger in ledgers):
                self._charge.guarantee = None
        self._charge.pending = False
        self.budget._version += 1


class PrivacyBudget:
    """A total ``(epsilon, delta)`` that fits draw from (see the module notes).

    Args:
        epsilon: the largest total epsilon, > 0.
        delta: the delta at which every spend is evaluated, in (0, 1).
        neighbouring: the relation of the total guarantee (``"zero-out"`` or ``"replace-one"``;
            ``"add-remove"`` for events analysed under it).

    Attributes:
        spent: :class:`Spend` of everything charged (epsilon at ``delta``; 0 when nothing was).
        remaining: ``epsilon - spent.epsilon`` at ``delta``: an indication only, since a
            further fit is accepted when the composition, not the difference, fits.
    """

    def __init__(
        self, epsilon: float, delta: float, neighbouring: Neighbouring | str = "zero-out"
    ) -> None:
        self.epsilon = check_positive("epsilon", epsilon)
        if not math.isfinite(self.epsilon):
            raise ValueError(f"Expected epsilon to be finite, got {epsilon!r}.")
        self.delta = check_probability("delta", delta)
        self.neighbouring = Neighbouring.parse(neighbouring)
        self._charges: list[_Charge] = []
        self._certified = 0.0
        self._version = 0
        self._cache: tuple[int, float] | None = None

    def __repr__(self) -> str:
        return (
            f"PrivacyBudget(epsilon={self.epsilon:g}, delta={self.delta:g}, "
            f"neighbouring={self.neighbouring.value!r}, spent={self.spent.epsilon:.6g})"
        )

    # -- charging ------------------------------------------------------------------------------
    def reserve(
        self,
        planned: PrivacyEvent | Iterable[PrivacyEvent],
        *,
        neighbouring: Neighbouring | str,
        label: str = "fit",
        guarantee: tuple[float, float] | None = None,
    ) -> Reservation:
        """Charge a planned fit before it reads its data, or raise :class:`BudgetExceededError`.

        ``planned``: events bounding the fit's privacy loss (composed sequentially), e.g. the
        fit's target as an :class:`~privopt.accounting.ApproxDPEvent`. ``guarantee``: an
        ``(epsilon, delta)`` the fit satisfies by construction (its calibration target).
        """
        events = (planned,) if isinstance(planned, PrivacyEvent) else tuple(planned)
        if not events or not all(isinstance(e, PrivacyEvent) for e in events):
            raise TypeError("Expected one or more PrivacyEvents to reserve.")
        relation = self._check_relation(Neighbouring.parse(neighbouring), label)
        if guarantee is not None:
            guarantee = (
                check_positive("epsilon", guarantee[0]),
                check_probability("delta", guarantee[1]),
            )
        charge = _Charge(label, relation, (events,), guarantee, pending=True)
        total = self._total([*self._charges, charge])
        if total > self.epsilon:
            raise BudgetExceededError(
                f"{label} would bring the spend of this budget to epsilon = {total:.6g} at "
                f"delta = {self.delta:g}, above its epsilon = {self.epsilon:g} (spent so far: "
                f"{self.spent.epsilon:.6g}). Nothing was read or recorded."
            )
        self._charges.append(charge)
        self._certified = total
        self._version += 1
        return Reservation(self, charge)

    def charge(
        self,
        events: Iterable[PrivacyEvent],
        *,
        neighbouring: Neighbouring | str,
        label: str = "release",
    ) -> None:
        """Charge releases whose events are known exactly in advance (e.g. a training plan's).

        Raises :class:`BudgetExceededError`, recording nothing, if they do not fit.
        """
        reservation = self.reserve(tuple(events), neighbouring=neighbouring, label=label)
        reservation._charge.pending = False

    def _check_relation(self, relation: Neighbouring, label: str) -> Neighbouring:
        ok = relation is self.neighbouring or (
            relation is Neighbouring.REPLACE_ONE and self.neighbouring is Neighbouring.ZERO_OUT
        )
        if not ok:
            raise ValueError(
                f"{label} is accounted under {relation.value!r} neighbours, which do not imply "
                f"this budget's {self.neighbouring.value!r} guarantee."
            )
        return relation

    # -- the spend -----------------------------------------------------------------------------
    @property
    def charges(self) -> tuple[str, ...]:
        """Labels of the charges, in order (a pending one is marked)."""
        return tuple(c.label + (" (planned)" if c.pending else "") for c in self._charges)

    @property
    def spent(self) -> Spend:
        if not self._charges:
            return Spend(0.0, 0.0)
        if self._cache is None or self._cache[0] != self._version:
            self._cache = (self._version, min(self._certified, self._total(self._charges)))
        return Spend(self._cache[1], self.delta)

    @property
    def remaining(self) -> Spend:
        return Spend(max(0.0, self.epsilon - self.spent.epsilon), self.delta)

    def _total(self, charges: Sequence[_Charge]) -> float:
        return min(self._events_bound(charges), self._guarantee_bound(charges))

    def _events_bound(self, charges: Sequence[_Charge]) -> float:
        """(A): the worst combination of one group per charge, each composed by a ledger."""
        per_charge = [c.groups for c in charges]
        if math.prod(len(g) for g in per_charge) > MAX_GROUP_COMBINATIONS:
            per_charge = [(tuple(e for g in groups for e in g),) for groups in per_charge]
        combos = {tuple(e for g in combo for e in g) for combo in itertools.product(*per_charge)}
        worst = 0.0
        for events in combos:
            ledger = _CompositionLedger(self.neighbouring)
            for event in events:
                ledger.record(event)
            try:
                worst = max(worst, ledger.epsilon(self.delta))
            except ValueError:  # an unsupported mix or a delta below a failure probability
                return math.inf
        return worst

    def _guarantee_bound(self, charges: Sequence[_Charge]) -> float:
        """(G): optimal composition of the charges' (epsilon_i, delta_i) guarantees."""
        pairs = [c.guarantee for c in charges]
        if any(p is None for p in pairs):
            return math.inf
        return compose_guarantees(pairs, self.delta)  # type: ignore[arg-type]


def compose_guarantees(pairs: Sequence[tuple[float, float]], delta: float) -> float:
    """epsilon at ``delta`` of mechanisms that are each (epsilon_i, delta_i)-DP (inf if none).

    The minimum of basic composition (when ``sum delta_i <= delta``) and the PLD composition of
    the generic (epsilon_i, delta_i) mechanisms (``dp_accounting``, pessimistic).
    """
    from dp_accounting.pld import common, privacy_loss_distribution

    if not pairs:
        return 0.0
    best = math.inf
    if sum(d for _, d in pairs) <= delta:
        best = float(sum(e for e, _ in pairs))
    if len(pairs) > 1:
        pld = None
        for eps, dlt in pairs:
            one = privacy_loss_distribution.from_privacy_parameters(
                common.DifferentialPrivacyParameters(eps, dlt),
                value_discretization_interval=GUARANTEE_PLD_DISCRETIZATION,
            )
            pld = one if pld is None else pld.compose(one)
        best = min(best, float(pld.get_epsilon_for_delta(delta)))
    return best


class _CompositionLedger(PrivacyLedger):
    """A ledger that composes events already checked against the budget's relation.

    Each charge's relation was checked to imply the budget's when it was accepted, so every
    event's curve is a valid bound under the budget's relation; the per-event relation guard of
    :meth:`PrivacyLedger.record` (which refuses, e.g., a replace-one sampled event in a zero-out
    ledger) does not apply here.
    """

    def record(self, event: PrivacyEvent, *, partition: Hashable | None = None) -> None:
        self._entries.append(LedgerEntry(event, partition))


def _groups(entries) -> tuple[Group, ...]:
    """The distinct groups of one ledger: shared events plus one partition's events."""
    shared: list[PrivacyEvent] = []
    parts: dict[Hashable, list[PrivacyEvent]] = {}
    for entry in entries:
        if entry.partition is None:
            shared.append(entry.event)
        else:
            parts.setdefault(entry.partition, []).append(entry.event)
    groups = [tuple(shared + p) for p in parts.values()] or [tuple(shared)]
    return tuple(dict.fromkeys(groups))


def _combine(per_fit: Sequence[tuple[Group, ...]]) -> tuple[Group, ...]:
    """Groups of several ledgers of one fit (independent partitions): one group of each."""
    if len(per_fit) == 1:
        return per_fit[0]
    if math.prod(len(g) for g in per_fit) > MAX_GROUP_COMBINATIONS:
        return (tuple(e for groups in per_fit for g in groups for e in g),)
    return tuple(
        dict.fromkeys(tuple(e for g in combo for e in g) for combo in itertools.product(*per_fit))
    )


def planned_guarantee(epsilon: float, delta: float, label: str) -> ApproxDPEvent:
    """The planned event of a fit calibrated to (epsilon, delta): the generic such mechanism."""
    return ApproxDPEvent(epsilon, delta, label=label)
