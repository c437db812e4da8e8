"""Privacy events: immutable descriptions of what a private release did.

An event is data, separate from any accountant (the design of ``dp_accounting.dp_event``): it
records the mechanism, its sensitivity and noise, and how many times it ran. Algorithms build
events from the same fields they use to add noise, and record them in a
:class:`~privopt.accounting.ledger.PrivacyLedger`; accountants turn them into privacy numbers.
Meanings never change: new behaviour gets a new class.

Notation (the papers' symbols):

=====================  =================================================================
``sensitivity``        Delta, l2 sensitivity of the released quantity under the ledger's
                       neighbouring relation (computed by the algorithm, never assumed)
``std``                sigma, standard deviation of the Gaussian noise per coordinate
``noise_multiplier``   sigma / Delta (dimensionless)
``sample_rate``        q, Poisson inclusion probability of each record
``count``              number of identical, adaptively composed repetitions
=====================  =================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, ClassVar

from privopt._validate import check_count, check_nonnegative, check_positive, check_sample_rate
from privopt.accounting.shuffling import shuffled_gaussian_guarantee

__all__ = [
    "GaussianEvent",
    "Neighbouring",
    "PoissonSampledGaussianEvent",
    "PrivacyEvent",
    "ShuffledGaussianEvent",
]


class Neighbouring(StrEnum):
    """Neighbouring relation between datasets under which sensitivities are computed."""

    ADD_REMOVE = "add-remove"
    REPLACE_ONE = "replace-one"
    ZERO_OUT = "zero-out"

    @property
    def description(self) -> str:
        return {
            Neighbouring.ADD_REMOVE: "datasets differ by adding or removing one record",
            Neighbouring.REPLACE_ONE: (
                "datasets of equal size differ by replacing one record "
                "(sensitivities include the factor 2 of replacement)"
            ),
            Neighbouring.ZERO_OUT: (
                "datasets differ in one record whose contribution is replaced by zero "
                "(Kairouz et al. 2021); accounted like add/remove"
            ),
        }[self]

    @classmethod
    def parse(cls, value: Neighbouring | str) -> Neighbouring:
        if isinstance(value, Neighbouring):
            return value
        try:
            return cls(str(value).lower().replace("_", "-"))
        except ValueError:
            options = ", ".join(m.value for m in cls)
            raise ValueError(f"Expected neighbouring in ({options}), got {value!r}.") from None


_ALL_RELATIONS = frozenset(Neighbouring)


@dataclass(frozen=True)
class PrivacyEvent:
    """Base class of privacy events. Subclasses are frozen dataclasses."""

    #: short machine name of the mechanism, used in reports
    mechanism: ClassVar[str] = "event"
    #: neighbouring relations under which the event's analysis is valid
    relations: ClassVar[frozenset[Neighbouring]] = _ALL_RELATIONS

    def parameters(self) -> dict[str, Any]:
        """The event's fields except its label, as a plain dict."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "label"}


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """``count`` adaptive releases, each adding N(0, std^2 I) to a query of l2 ``sensitivity``.

    Exactly mu-GDP with mu = sqrt(count) * sensitivity / std, and rho-zCDP with
    rho = count * sensitivity^2 / (2 std^2). A zero sensitivity (a release that does not depend
    on the data) costs nothing.
    """

    sensitivity: float
    std: float
    count: int = 1
    label: str = "gaussian release"
    mechanism: ClassVar[str] = "gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sensitivity", check_nonnegative("sensitivity", self.sensitivity))
        object.__setattr__(self, "std", check_positive("std", self.std))
        object.__setattr__(self, "count", check_count("count", self.count))

    @property
    def mu(self) -> float:
        return math.sqrt(self.count) * self.sensitivity / self.std

    @property
    def rho(self) -> float:
        return self.count * self.sensitivity**2 / (2.0 * self.std**2)


@dataclass(frozen=True)
class PoissonSampledGaussianEvent(PrivacyEvent):
    """``count`` steps of the Poisson-subsampled Gaussian mechanism (DP-SGD).

    Each record joins each step independently with probability ``sample_rate``; the sum of
    clipped contributions gets N(0, (noise_multiplier * clip)^2 I). Accounted by ``dp_accounting``
    (RDP or PLD) under add/remove-one neighbours (zero-out is equivalent here).
    """

    noise_multiplier: float
    sample_rate: float
    count: int = 1
    label: str = "poisson-sampled gaussian"
    mechanism: ClassVar[str] = "poisson-sampled-gaussian"
    relations: ClassVar[frozenset[Neighbouring]] = frozenset(
        {Neighbouring.ADD_REMOVE, Neighbouring.ZERO_OUT}
    )

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "noise_multiplier", check_positive("noise_multiplier", self.noise_multiplier)
        )
        object.__setattr__(self, "sample_rate", check_sample_rate("sample_rate", self.sample_rate))
        object.__setattr__(self, "count", check_count("count", self.count))


@dataclass(frozen=True)
class ShuffledGaussianEvent(PrivacyEvent):
    """One pass over ``num_records`` shuffled records with a Gaussian local randomizer each.

    Each step adds N(0, (noise_multiplier * Delta)^2 I) where Delta is the replace-one sensitivity
    of one step; the order is a uniform, secret permutation. Only an (epsilon, delta) guarantee
    is known (FMT21 amplification by shuffling, see :mod:`privopt.accounting.shuffling`), so
    accountants combine it with other events by basic composition.
    """

    noise_multiplier: float
    num_records: int
    label: str = "shuffled gaussian steps"
    mechanism: ClassVar[str] = "shuffled-gaussian"
    relations: ClassVar[frozenset[Neighbouring]] = frozenset({Neighbouring.REPLACE_ONE})

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "noise_multiplier", check_positive("noise_multiplier", self.noise_multiplier)
        )
        object.__setattr__(self, "num_records", check_count("num_records", self.num_records))

    def epsilon(self, delta: float) -> float:
        """Central epsilon at ``delta`` by FMT21 (raises outside the validity region)."""
        return shuffled_gaussian_guarantee(self.noise_multiplier, self.num_records, delta).epsilon
