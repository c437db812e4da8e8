"""Accountants: turn a sequence of privacy events into epsilon at a given delta.

Each accountant dispatches per event type through a table (no ``isinstance`` chains), and
``supports(event)`` is a dry run of composition. Four are offered:

==========  ===========================================  ====================================
name        events                                       guarantee
==========  ===========================================  ====================================
``gdp``     Gaussian                                     exact: mu = sqrt(sum mu_i^2)
``zcdp``    Gaussian                                     rho = sum rho_i, tight conversion
``pld``     Gaussian, Poisson-sampled Gaussian           dp_accounting PLD (pessimistic)
``rdp``     Gaussian, Poisson-sampled Gaussian,          dp_accounting RDP, improved conversion
            uniformly sampled Gaussian (replace-one)
==========  ===========================================  ====================================

Events that only have an (epsilon, delta) curve (shuffling amplification) are combined by the
ledger with basic composition; see :class:`~privopt.accounting.ledger.PrivacyLedger`.

Parallel composition: :meth:`Accountant.epsilon_parallel` answers for a record that is touched by
the ``shared`` events and by the events of at most one of several disjoint partitions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import dp_accounting

from privopt.accounting.events import (
    GaussianEvent,
    PoissonSampledGaussianEvent,
    PrivacyEvent,
    SampledGaussianEvent,
)
from privopt.accounting.gdp import gdp_epsilon
from privopt.accounting.subsampled import (
    DEFAULT_PLD_DISCRETIZATION,
    check_noise_multiplier,
    dp_accounting_epsilon,
    dpsgd_event,
)
from privopt.accounting.zcdp import zcdp_epsilon

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "DpAccountingAccountant",
    "GDPAccountant",
    "UnsupportedEventError",
    "ZCDPAccountant",
    "get_accountant",
]


class UnsupportedEventError(ValueError):
    """An accountant was asked to compose an event it cannot analyse."""


class Accountant(ABC):
    """Composes privacy events into epsilon(delta)."""

    name: ClassVar[str]
    description: ClassVar[str]

    @abstractmethod
    def _handlers(self) -> dict[type, Callable[[Any], Any]]:
        """Map from event type to its conversion for this accountant."""

    def supports(self, event: PrivacyEvent) -> bool:
        """Whether :meth:`epsilon` can compose ``event`` (a dry run; no state changes)."""
        return type(event) in self._handlers()

    def check(self, events: Sequence[PrivacyEvent]) -> None:
        """Raise :class:`UnsupportedEventError` naming the first event this accountant rejects."""
        for event in events:
            if not self.supports(event):
                raise UnsupportedEventError(
                    f"The {self.name!r} accountant cannot compose event {event!r} "
                    f"(mechanism {event.mechanism!r})."
                )

    def _convert(self, event: PrivacyEvent) -> Any:
        self.check([event])
        return self._handlers()[type(event)](event)

    @abstractmethod
    def epsilon(self, events: Sequence[PrivacyEvent], delta: float) -> float:
        """epsilon at ``delta`` of the adaptive composition of ``events``."""

    def epsilon_parallel(
        self,
        shared: Sequence[PrivacyEvent],
        partitions: Sequence[Sequence[PrivacyEvent]],
        delta: float,
    ) -> float:
        """epsilon when every record meets ``shared`` and at most one partition's events."""
        if not partitions:
            return self.epsilon(shared, delta)
        distinct = {tuple(group) for group in partitions}
        return max(self.epsilon([*shared, *group], delta) for group in distinct)


class _ScalarAccountant(Accountant):
    """An accountant whose composition is a monotone scalar (mu^2 or rho) adding over events."""

    @abstractmethod
    def _scalar_to_epsilon(self, total: float, delta: float) -> float: ...

    def total(self, events: Sequence[PrivacyEvent]) -> float:
        return float(sum(self._convert(e) for e in events))

    def epsilon(self, events: Sequence[PrivacyEvent], delta: float) -> float:
        return self._scalar_to_epsilon(self.total(events), delta)

    def epsilon_parallel(self, shared, partitions, delta):  # type: ignore[override]
        # epsilon is monotone in the additive scalar, so the worst partition is the largest.
        worst = max((self.total(group) for group in partitions), default=0.0)
        return self._scalar_to_epsilon(self.total(shared) + worst, delta)


class GDPAccountant(_ScalarAccountant):
    """Exact accountant for Gaussian releases: composition is sqrt(sum mu_i^2)-GDP."""

    name = "gdp"
    description = (
        "exact Gaussian differential privacy (Dong, Roth & Su 2019): adaptive composition of "
        "Gaussian releases is sqrt(sum mu_i^2)-GDP, converted with the exact GDP privacy profile"
    )

    def _handlers(self):
        return {GaussianEvent: lambda e: e.mu * e.mu}

    def _scalar_to_epsilon(self, total: float, delta: float) -> float:
        return 0.0 if total == 0.0 else gdp_epsilon(total**0.5, delta)


class ZCDPAccountant(_ScalarAccountant):
    """rho-zCDP accountant with the tight (or Bun–Steinke) conversion."""

    name = "zcdp"

    def __init__(self, conversion: str = "tight") -> None:
        self.conversion = conversion

    @property
    def description(self) -> str:  # type: ignore[override]
        return (
            "rho-zCDP (Bun & Steinke 2016): rho adds over compositions; converted to "
            f"(epsilon, delta) with the {self.conversion} conversion"
        )

    def _handlers(self):
        return {GaussianEvent: lambda e: e.rho}

    def _scalar_to_epsilon(self, total: float, delta: float) -> float:
        return zcdp_epsilon(total, delta, conversion=self.conversion)  # type: ignore[arg-type]


class DpAccountingAccountant(Accountant):
    """RDP or PLD accounting delegated to ``dp_accounting`` (add/remove-one relation).

    Gaussian events are passed as ``GaussianDpEvent(std / sensitivity)``: their sensitivity is
    already computed under the ledger's relation, so the unit-sensitivity Gaussian is exact.
    """

    def __init__(self, kind: str, pld_discretization: float = DEFAULT_PLD_DISCRETIZATION) -> None:
        if kind not in ("pld", "rdp"):
            raise ValueError(f"Expected kind in ('pld', 'rdp'), got {kind!r}.")
        self.kind = kind
        self.pld_discretization = pld_discretization

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.kind

    @property
    def description(self) -> str:  # type: ignore[override]
        if self.kind == "pld":
            return (
                "privacy loss distribution via dp_accounting "
                f"(pessimistic estimate, value discretisation {self.pld_discretization:g})"
            )
        return (
            "Rényi DP via dp_accounting (default orders; orders <= 128 for replace-one sampled "
            "events; improved RDP-to-DP conversion)"
        )

    def _handlers(self):
        handlers = {
            GaussianEvent: _gaussian_dp_event,
            PoissonSampledGaussianEvent: lambda e: dpsgd_event(
                e.noise_multiplier, e.sample_rate, e.count
            ),
        }
        if self.kind == "rdp":  # dp_accounting's PLD has no sampling-without-replacement
            handlers[SampledGaussianEvent] = _sampled_gaussian_dp_event
        return handlers

    def epsilon(self, events: Sequence[PrivacyEvent], delta: float) -> float:
        converted = [c for c in (self._convert(e) for e in events) if c is not None]
        if not converted:
            return 0.0
        # Sampled-without-replacement events exist only in replace-one ledgers (the event
        # refuses other relations); Gaussian events carry their own sensitivity either way.
        replace_one = any(isinstance(e, SampledGaussianEvent) for e in events)
        return dp_accounting_epsilon(
            dp_accounting.ComposedDpEvent(converted),
            delta,
            self.kind,
            self.pld_discretization,
            replace_one=replace_one,
        )


def _gaussian_dp_event(event: GaussianEvent) -> dp_accounting.DpEvent | None:
    if event.sensitivity == 0.0:
        return None
    multiplier = check_noise_multiplier(event.std / event.sensitivity, "std / sensitivity")
    return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(multiplier), event.count)


def _sampled_gaussian_dp_event(event: SampledGaussianEvent) -> dp_accounting.DpEvent:
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(
            event.population,
            event.sample_size,
            dp_accounting.GaussianDpEvent(event.noise_multiplier),
        ),
        event.count,
    )


#: Accountant names accepted by the ledger, the CLI and the estimators.
ACCOUNTANTS = ("auto", "gdp", "zcdp", "pld", "rdp")


def get_accountant(name: str, events: Sequence[PrivacyEvent] = ()) -> Accountant:
    """Resolve an accountant name; ``"auto"`` picks the tightest valid one for ``events``.

    ``auto`` uses the exact GDP accountant when every event is a Gaussian release, otherwise
    PLD when it supports every event, otherwise RDP.
    """
    if name == "auto":
        if all(isinstance(e, GaussianEvent) for e in events):
            return GDPAccountant()
        pld = DpAccountingAccountant("pld")
        if all(pld.supports(e) for e in events):
            return pld
        return DpAccountingAccountant("rdp")
    if name == "gdp":
        return GDPAccountant()
    if name == "zcdp":
        return ZCDPAccountant()
    if name in ("pld", "rdp"):
        return DpAccountingAccountant(name)
    raise ValueError(f"Expected accountant in {ACCOUNTANTS}, got {name!r}.")
