"""A privacy budget that fits draw from: the composition of every charge stays within it.

A :class:`PrivacyBudget` of ``(epsilon, delta)`` holds the charges of the fits made against it
(an estimator's ``budget=``, :func:`privopt.training.run`'s ``budget=``). Before a fit touches its
data it asks :meth:`PrivacyBudget.reserve` (or :meth:`PrivacyBudget.charge` for an exact event
list); the reservation is refused with :class:`BudgetExceededError`, and nothing is recorded,
when the composition of what was spent and what is planned would exceed ``epsilon`` at the
budget's ``delta``. After the fit the reservation is completed with the fit's own ledger, so the
spend is composed from the events that ran; a fit refused for a public reason before it read any
data value gives its reservation back with :meth:`Reservation.release`.

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
  raise the spend above it. It stays valid only while every completed fit honoured its plan
  (its ledger's epsilon at the planned delta within the planned epsilon, in a relation that
  implies the planned one); a completion that did not honour it withdraws (C), so the spend is
  then (A)/(G) of what ran, which may exceed ``epsilon``: it is reported, never hidden.

Spends past the float range are ``inf`` (a bound that overflows is no bound), never an
exception: ``inf`` is refused by :meth:`PrivacyBudget.reserve` like any spend above the budget.

Neighbouring relations: a budget states one (default ``"zero-out"``, the relation of Poisson
DP-SGD). A charge is accepted and converted to the budget's relation by
:func:`convert_events` / :func:`convert_guarantee`:

* the same relation, or replace-one on a zero-out budget: as is (a zero-out neighbour replaces a
  record by the null record, which every privopt analysis admits as a record of the clipped
  domain, so it is one particular replacement);
* zero-out on a replace-one budget: converted by **group privacy of size 2**. Replace-one
  neighbours D, D' differ in one record x -> x'; D -> D0 (x zeroed) -> D' is a chain of two
  zero-out steps. Hence an (epsilon, delta) zero-out guarantee is (2 epsilon, (1 + e^epsilon)
  delta) under replace-one (Dwork & Roth 2014, Theorem 2.2, with group size 2), a mu-GDP one is
  2 mu-GDP (Dong, Roth & Su 2022, Theorem 2.14), and a Gaussian release of l2 sensitivity s is a
  Gaussian release of sensitivity 2 s (triangle inequality, exact for Gaussians);
* add-remove only on an add-remove budget; any other pair is refused with ``ValueError``.

Concurrency: every check-and-spend (:meth:`PrivacyBudget.reserve`, :meth:`PrivacyBudget.charge`,
:meth:`Reservation.complete`, :meth:`Reservation.release`) and every read of the charges
(:attr:`PrivacyBudget.spent`, :attr:`PrivacyBudget.charges`) holds the budget's re-entrant lock,
so threads sharing one budget (joblib's threading backend, a service answering requests) can
never both be accepted when only one fits, and ``spent`` is the composition of what was
accepted. Across processes nothing can be shared by a lock, so a budget refuses to be pickled
at all, not only while a reservation is in flight: a copy in another process is a second,
independent allowance (joblib's process backends pickle an estimator, budget included, before
any reservation exists, and each worker would then spend the whole budget on its copy, none of
it reaching the original). Save a model with ``budget=None``. Within a process, ``copy.copy``
and ``copy.deepcopy`` return the budget itself, so a cloned estimator (``sklearn.base.clone``,
cross-validation, searches) draws from the same one.

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
import threading
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from privopt._validate import check_positive, check_probability
from privopt.accounting.events import (
    ApproxDPEvent,
    Neighbouring,
    PrivacyEvent,
)
from privopt.accounting.ledger import PrivacyLedger
from privopt.accounting.relations import (
    CompositionLedger,
    convert_events,
    convert_guarantee,
    convertible,
    implies,
    refuse_relation,
)

__all__ = [
    "BudgetExceededError",
    "PrivacyBudget",
    "Reservation",
    "Spend",
    "compose_guarantees",
    "convert_events",
    "convert_guarantee",
    "planned_guarantee",
]

#: Above this many combinations of per-fit groups, groups are merged per fit (an upper bound).
MAX_GROUP_COMBINATIONS = 256
#: Value discretisation of the PLD composition of (epsilon_i, delta_i) guarantees.
GUARANTEE_PLD_DISCRETIZATION = 1e-4
#: Share of the budget's delta that a group converted by its own curve (:func:`convert_events`
#: with ``delta``) may use, so that two such charges still compose at the budget's delta.
GROUP_CONVERSION_DELTA_SHARE = 0.5


class BudgetExceededError(RuntimeError):
    """A fit would exceed its :class:`PrivacyBudget`; it was refused before reading the data."""


@dataclass(frozen=True)
class Spend:
    """An (epsilon, delta) pair: epsilon evaluated at the budget's delta."""

    epsilon: float
    delta: float


Group = tuple[PrivacyEvent, ...]


@dataclass(frozen=True)
class _Unbounded(PrivacyEvent):
    """A converted group with no finite (epsilon, delta) claim at the budget's delta."""

    reason: str = "no finite bound"
    label: str = "unbounded after conversion"
    mechanism = "unbounded"


@dataclass(eq=False)
class _Charge:
    label: str
    #: the relation the charge was stated in (its groups and guarantee are converted)
    relation: Neighbouring
    #: the groups a record can meet (one per partition, shared events in each), converted to
    #: the budget's relation
    groups: tuple[Group, ...]
    #: an (epsilon, delta) the charge is known to satisfy, converted, or None
    guarantee: tuple[float, float] | None
    #: the guarantee as stated, in ``relation`` (what a completed fit must honour)
    stated: tuple[float, float] | None = None
    #: whether the planned events are implied by the stated guarantee (one ApproxDPEvent at
    #: least as large), so that honouring the guarantee honours the plan
    plan_implied: bool = False
    pending: bool = False


@dataclass(eq=False)
class Reservation:
    """A planned fit's charge, held until :meth:`complete` replaces it by the fit's events.

    A reservation that is never completed (the fit raised) keeps its planned charge: a failure
    after the data was touched may itself depend on the data. A fit refused for a public reason
    before it read any data value gives the reservation back with :meth:`release`.
    """

    budget: PrivacyBudget
    _charge: _Charge = field(repr=False)

    def complete(self, ledgers: Sequence[PrivacyLedger]) -> None:
        """Replace the planned charge by the groups of the fit's ledger(s).

        Each ledger's events are converted to the budget's relation (module notes). The planned
        guarantee is kept for composition (G) only if every ledger honours it: analysed under a
        relation that implies the one it was stated in, with epsilon at the planned delta no
        larger than planned. Otherwise it is dropped, and so is the certified bound (C) unless
        the plan was the guarantee itself. Raises ``RuntimeError`` if the reservation was
        already completed or released.
        """
        budget, charge = self.budget, self._charge
        ledgers = list(ledgers)
        groups = None
        honoured = False
        if ledgers:
            for ledger in ledgers:
                if not convertible(ledger.neighbouring, budget.neighbouring):
                    raise refuse_relation(ledger.neighbouring, budget.neighbouring, charge.label)
            per_fit = [
                tuple(budget._convert(g, ledger.neighbouring) for g in _groups(ledger.entries))
                for ledger in ledgers
            ]
            groups = _combine(per_fit)
            honoured = charge.stated is not None and all(
                _honours(ledger, charge.relation, charge.stated) for ledger in ledgers
            )
        with budget._lock:
            if not charge.pending or not budget._holds(charge):
                raise RuntimeError("This reservation was already completed or released.")
            if groups is not None:
                charge.groups = groups
                if not honoured:
                    charge.guarantee = None
                if not (honoured and charge.plan_implied):
                    budget._certified = math.inf
            charge.pending = False
            budget._version += 1

    def release(self) -> None:
        """Remove the reservation entirely, as if it had never been made.

        Only for a fit refused BEFORE it read any data value (a check on public values: sizes,
        parameters, delta >= 1/N): a refusal after the data was touched may depend on the data,
        and releasing it would hide a release. Raises ``RuntimeError`` if the reservation was
        already completed or released.
        """
        budget, charge = self.budget, self._charge
        with budget._lock:
            if not charge.pending or not budget._holds(charge):
                raise RuntimeError("This reservation was already completed or released.")
            budget._charges = [c for c in budget._charges if c is not charge]
            charge.pending = False
            budget._version += 1


def _conversion_note(
    relation: Neighbouring,
    target: Neighbouring,
    stated: tuple[float, float] | None,
    converted: tuple[float, float] | None,
) -> str:
    """The part of a refusal that says how a charge in another relation was counted."""
    if implies(relation, target):
        return ""
    note = f"; a {relation.value} charge counts double under {target.value}"
    if stated is not None:
        after = "no guarantee" if converted is None else f"({converted[0]:g}, {converted[1]:.3g})"
        note += f": ({stated[0]:g}, {stated[1]:g}) becomes {after}"
    return note


def _honours(ledger: PrivacyLedger, relation: Neighbouring, stated: tuple[float, float]) -> bool:
    """Whether the ledger proves the stated (epsilon, delta) under ``relation``."""
    if not implies(ledger.neighbouring, relation):
        return False
    epsilon, delta = stated
    try:
        return bool(ledger.epsilon(delta) <= epsilon * (1.0 + 1e-6))
    except (ValueError, OverflowError):
        return False


class PrivacyBudget:
    """A total ``(epsilon, delta)`` that fits draw from (see the module notes).

    Args:
        epsilon: the largest total epsilon, > 0.
        delta: the delta at which every spend is evaluated, in (0, 1).
        neighbouring: the relation of the total guarantee (``"zero-out"`` or ``"replace-one"``;
            ``"add-remove"`` for events analysed under it). Zero-out charges on a replace-one
            budget are converted by group privacy of size 2 (module notes).

    Attributes:
        spent: :class:`Spend` of everything charged (epsilon at ``delta``; 0 when nothing was;
            ``inf`` when no finite bound is known).
        remaining: ``epsilon - spent.epsilon`` at ``delta``: an indication only, since a
            further fit is accepted when the composition, not the difference, fits.

    Thread-safe (one re-entrant lock around every check-and-spend and every read of the
    charges); not picklable, and copies are the budget itself (module notes).
    """

    def __init__(
        self, epsilon: float, delta: float, neighbouring: Neighbouring | str = "zero-out"
    ) -> None:
        self.epsilon = check_positive("epsilon", epsilon)
        if not math.isfinite(self.epsilon):
            raise ValueError(f"Expected epsilon to be finite, got {epsilon!r}.")
        self.delta = check_probability("delta", delta)
        self.neighbouring = Neighbouring.parse(neighbouring)
        self._lock = threading.RLock()
        self._charges: list[_Charge] = []
        self._certified = 0.0
        self._version = 0
        self._cache: tuple[int, float] | None = None

    def __repr__(self) -> str:
        return (
            f"PrivacyBudget(epsilon={self.epsilon:g}, delta={self.delta:g}, "
            f"neighbouring={self.neighbouring.value!r}, spent={self.spent.epsilon:.6g})"
        )

    # -- one allowance per process -------------------------------------------------------------
    def __getstate__(self):
        raise TypeError(
            "A PrivacyBudget cannot be pickled: a copy in another process would spend "
            "independently of this one; fit in threads (joblib prefer='threads') or sequentially, "
            "and set budget=None on a model before saving it."
        )

    def __copy__(self) -> PrivacyBudget:
        return self

    def __deepcopy__(self, memo: dict) -> PrivacyBudget:
        return self

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
        ``(epsilon, delta)`` the fit satisfies by construction (its calibration target). Both
        are stated under ``neighbouring`` and converted to the budget's relation before the
        check (zero-out on a replace-one budget: (2 epsilon, (1 + e^epsilon) delta), module
        notes). The check and the spend are one atomic step.
        """
        events = (planned,) if isinstance(planned, PrivacyEvent) else tuple(planned)
        if not events or not all(isinstance(e, PrivacyEvent) for e in events):
            raise TypeError("Expected one or more PrivacyEvents to reserve.")
        relation = Neighbouring.parse(neighbouring)
        if not convertible(relation, self.neighbouring):
            raise refuse_relation(relation, self.neighbouring, label)
        stated = converted = None
        if guarantee is not None:
            stated = (
                check_positive("epsilon", guarantee[0]),
                check_probability("delta", guarantee[1]),
            )
            converted = convert_guarantee(*stated, relation, self.neighbouring)
        plan_implied = (
            stated is not None
            and len(events) == 1
            and isinstance(events[0], ApproxDPEvent)
            and events[0].count == 1
            and events[0].epsilon >= stated[0]
            and events[0].delta >= stated[1]
        )
        charge = _Charge(
            label,
            relation,
            (self._convert(events, relation),),
            converted,
            stated=stated,
            plan_implied=plan_implied,
            pending=True,
        )
        with self._lock:
            total = self._total([*self._charges, charge])
            if not total <= self.epsilon:
                raise BudgetExceededError(
                    f"{label} would bring the spend of this budget to epsilon = {total:.6g} at "
                    f"delta = {self.delta:g}, above its epsilon = {self.epsilon:g} (spent so "
                    f"far: {self.spent.epsilon:.6g}"
                    + _conversion_note(relation, self.neighbouring, stated, converted)
                    + "). Nothing was read or recorded."
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

        Converted to the budget's relation like :meth:`reserve`; raises
        :class:`BudgetExceededError`, recording nothing, if they do not fit.
        """
        reservation = self.reserve(tuple(events), neighbouring=neighbouring, label=label)
        with self._lock:
            reservation._charge.pending = False

    def _convert(self, events: Sequence[PrivacyEvent], relation: Neighbouring) -> Group:
        """One group of events in ``relation`` as a group under the budget's relation."""
        try:
            return convert_events(
                events,
                relation,
                self.neighbouring,
                delta=self.delta * GROUP_CONVERSION_DELTA_SHARE,
            )
        except (ValueError, OverflowError) as error:
            if not convertible(relation, self.neighbouring):
                raise
            return (_Unbounded(str(error)),)

    def _holds(self, charge: _Charge) -> bool:
        return any(c is charge for c in self._charges)

    # -- the spend -----------------------------------------------------------------------------
    @property
    def charges(self) -> tuple[str, ...]:
        """Labels of the charges, in order (a pending one is marked)."""
        with self._lock:
            return tuple(c.label + (" (planned)" if c.pending else "") for c in self._charges)

    @property
    def spent(self) -> Spend:
        with self._lock:
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
            if any(isinstance(e, _Unbounded) for e in events):
                return math.inf
            ledger = CompositionLedger(self.neighbouring)
            for event in events:
                ledger.record(event)
            try:
                worst = max(worst, ledger.epsilon(self.delta))
            except (ValueError, OverflowError):  # an unsupported mix, a delta below a failure
                return math.inf  # probability, or a bound past the float range
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
    the generic (epsilon_i, delta_i) mechanisms (``dp_accounting``, pessimistic). An epsilon_i
    past the range of ``exp`` skips the PLD (basic composition, or inf, remains): never an
    exception.
    """
    from dp_accounting.pld import common, privacy_loss_distribution

    if not pairs:
        return 0.0
    best = math.inf
    if sum(d for _, d in pairs) <= delta:
        best = float(sum(e for e, _ in pairs))
    if len(pairs) > 1:
        try:
            pld = None
            for eps, dlt in pairs:
                one = privacy_loss_distribution.from_privacy_parameters(
                    common.DifferentialPrivacyParameters(eps, dlt),
                    value_discretization_interval=GUARANTEE_PLD_DISCRETIZATION,
                )
                pld = one if pld is None else pld.compose(one)
            best = min(best, float(pld.get_epsilon_for_delta(delta)))
        except (OverflowError, ValueError):  # exp(epsilon_i) past the float range
            pass
    return best


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
