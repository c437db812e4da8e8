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

Two events are not mechanisms but parts of a guarantee: :class:`RenyiGuaranteeEvent` (an RDP
bound proved in closed form by a paper's theorem) and :class:`SamplingFailureEvent` (a
data-independent event of small probability on which a stated sensitivity bound may fail; its
probability adds to delta).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, ClassVar

from privopt._validate import (
    check_count,
    check_nonnegative,
    check_positive,
    check_probability,
    check_sample_rate,
)
from privopt.accounting.shuffling import shuffled_gaussian_guarantee

__all__ = [
    "ApproxDPEvent",
    "GaussianEvent",
    "Neighbouring",
    "PoissonSampledGaussianEvent",
    "PrivacyEvent",
    "PrivacyUnit",
    "RenyiGuaranteeEvent",
    "SampledGaussianEvent",
    "SamplingFailureEvent",
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
            Neighbouring.ADD_REMOVE: (
                "datasets differ by adding or removing one record; the number of records N is "
                "then private, so nothing released may depend on it (privopt's algorithms use "
                "zero-out instead)"
            ),
            Neighbouring.REPLACE_ONE: (
                "datasets of the same public size N differ by replacing one record "
                "(sensitivities include the factor 2 of replacement)"
            ),
            Neighbouring.ZERO_OUT: (
                "datasets of the same public size N differ in one record replaced by a null "
                "record that contributes zero (Kairouz et al. 2021); accounted like add/remove"
            ),
        }[self]

    @property
    def contribution_factor(self) -> float:
        """What the relation does to a clipped contribution's l2 sensitivity: 2 for replace-one
        (a record of norm <= G replaced by another moves a sum by up to 2 G), 1 for zero-out
        and add/remove (one contribution of norm <= G appears or vanishes). The only place
        this factor is written."""
        return 2.0 if self is Neighbouring.REPLACE_ONE else 1.0

    @classmethod
    def parse(cls, value: Neighbouring | str) -> Neighbouring:
        if isinstance(value, Neighbouring):
            return value
        try:
            return cls(str(value).lower().replace("_", "-"))
        except ValueError:
            options = ", ".join(m.value for m in cls)
            raise ValueError(f"Expected neighbouring in ({options}), got {value!r}.") from None


class PrivacyUnit(StrEnum):
    """What one neighbouring step changes: one ``record`` (the default everywhere), or every
    record of one ``user`` (user-level DP: records grouped by a user id; the clipping bounds a
    user's whole contribution to a release, whatever its number of records).

    The relations and their accounting are the same with the user as the unit (a dataset is a
    multiset of users, each contributing one clipped quantity of norm <= G per release it takes
    part in; N is the number of users), so user-level events are the record-level events of the
    same plan over users (McMahan, Ramage, Talwar & Zhang 2018, "Learning Differentially Private
    Recurrent Language Models", arXiv:1710.06963, Sec. 2 and Thm 1). The unit only changes what
    the claim protects, and how the report names the relation: ``"user-level zero-out"``.
    """

    RECORD = "record"
    USER = "user"

    def relation_name(self, neighbouring: Neighbouring) -> str:
        """The relation as a report names it: ``"zero-out"`` or ``"user-level zero-out"``."""
        relation = Neighbouring.parse(neighbouring)
        return relation.value if self is PrivacyUnit.RECORD else f"user-level {relation.value}"

    def relation_description(self, neighbouring: Neighbouring) -> str:
        """The relation in words, with this unit."""
        relation = Neighbouring.parse(neighbouring)
        if self is PrivacyUnit.RECORD:
            return relation.description
        return {
            Neighbouring.ADD_REMOVE: (
                "datasets differ by adding or removing all the records of one user; the number "
                "of users N is then private"
            ),
            Neighbouring.REPLACE_ONE: (
                "datasets of the same public number of users N differ in all the records of "
                "one user, replaced by another user's records (a user's clipped contribution "
                "of norm <= G moves a sum by up to 2 G)"
            ),
            Neighbouring.ZERO_OUT: (
                "datasets of the same public number of users N differ in all the records of "
                "one user, replaced by a null user that contributes zero (Kairouz et al. 2021's "
                "zero-out with the user as the unit); accounted like add/remove of one user"
            ),
        }[relation]

    @classmethod
    def parse(cls, value: PrivacyUnit | str) -> PrivacyUnit:
        if isinstance(value, PrivacyUnit):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ValueError(
                f"Expected the privacy unit 'record' or 'user', got {value!r}."
            ) from None


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

    def _check_fields(self, **checks: Callable[[str, Any], Any]) -> None:
        """Replace each named field by ``check(name, value)`` (in order; frozen-safe)."""
        for name, check in checks.items():
            object.__setattr__(self, name, check(name, getattr(self, name)))


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
        self._check_fields(sensitivity=check_nonnegative, std=check_positive, count=check_count)

    @property
    def mu(self) -> float:
        return math.sqrt(self.count) * self.sensitivity / self.std

    @property
    def rho(self) -> float:
        ratio = self.sensitivity / self.std  # ratio * ratio overflows to inf, never raises
        return self.count * (ratio * ratio) / 2.0


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
        self._check_fields(
            noise_multiplier=check_positive, sample_rate=check_sample_rate, count=check_count
        )


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
    #: FMT21 is a replace-one bound; zero-out (a record replaced by a null record of the same
    #: domain) is a special replacement, so the bound holds for it too
    relations: ClassVar[frozenset[Neighbouring]] = frozenset(
        {Neighbouring.REPLACE_ONE, Neighbouring.ZERO_OUT}
    )

    def __post_init__(self) -> None:
        self._check_fields(noise_multiplier=check_positive, num_records=check_count)

    def epsilon(self, delta: float) -> float:
        """Central epsilon at ``delta`` by FMT21 (raises outside the validity region)."""
        return shuffled_gaussian_guarantee(self.noise_multiplier, self.num_records, delta).epsilon


@dataclass(frozen=True)
class SampledGaussianEvent(PrivacyEvent):
    """``count`` steps, each on ``sample_size`` records drawn uniformly without replacement.

    Draws are independent across steps (so one record may be used many times: sampling with
    replacement across steps, as in Wang et al.'s (2022) SGD with batch size 1). Each step releases
    a
    query of the sample with replace-one l2 sensitivity Delta plus N(0, (noise_multiplier *
    Delta)^2 I). Accounted by ``dp_accounting``'s RDP of the sampled-without-replacement
    Gaussian (Wang, Balle & Kasiviswanathan 2019), which is defined for replace-one neighbours.
    """

    noise_multiplier: float
    population: int
    sample_size: int = 1
    count: int = 1
    label: str = "uniformly sampled gaussian"
    mechanism: ClassVar[str] = "sampled-gaussian"
    relations: ClassVar[frozenset[Neighbouring]] = frozenset({Neighbouring.REPLACE_ONE})

    def __post_init__(self) -> None:
        self._check_fields(
            noise_multiplier=check_positive,
            population=check_count,
            sample_size=check_count,
            count=check_count,
        )
        if self.sample_size > self.population:
            raise ValueError(
                f"sample_size={self.sample_size} exceeds the population {self.population}."
            )


@dataclass(frozen=True)
class RenyiGuaranteeEvent(PrivacyEvent):
    """A closed-form (order, value)-RDP guarantee proved by a theorem (not by an accountant).

    Converted with the classical bound of Mironov (2017, Prop. 3), as the papers that state such
    guarantees do: epsilon(delta) = value + log(1 / delta) / (order - 1). Composed with other
    events by basic composition in the ledger.
    """

    order: float
    value: float
    label: str = "closed-form RDP guarantee"
    mechanism: ClassVar[str] = "rdp-guarantee"

    def __post_init__(self) -> None:
        order = check_positive("order", self.order)
        if not order > 1.0:
            raise ValueError(f"Expected an RDP order > 1, got {order!r}.")
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "value", check_nonnegative("value", self.value))

    def epsilon(self, delta: float) -> float:
        """epsilon at ``delta`` by the classical RDP-to-DP conversion."""
        return self.value + math.log(1.0 / delta) / (self.order - 1.0)


@dataclass(frozen=True)
class SamplingFailureEvent(PrivacyEvent):
    """A data-independent event of probability at most ``probability`` voiding a sensitivity bound.

    E.g. Wang et al.'s (2022) output perturbation: the stability bound holds unless the
    (data-independent)
    index sequence visits some record more often than a Chernoff bound allows. A mechanism that
    is (epsilon, delta')-DP on the complement is (epsilon, delta' + probability)-DP, so the
    ledger subtracts ``probability`` from delta before composing the other events.
    """

    probability: float
    label: str = "sampling failure"
    mechanism: ClassVar[str] = "sampling-failure"

    def __post_init__(self) -> None:
        probability = check_nonnegative("probability", self.probability)
        if not probability < 1.0:
            raise ValueError(f"Expected a failure probability in [0, 1), got {probability!r}.")
        object.__setattr__(self, "probability", probability)


@dataclass(frozen=True)
class ApproxDPEvent(PrivacyEvent):
    """``count`` adaptive releases, each (epsilon, delta)-DP by its own lemma (no finer form).

    E.g. the Karwa–Vadhan stability histogram of RESIDUALEST (Private Overparameterized Linear
    Regression, anonymous submission). The composition of the
    ``count`` releases is computed exactly as the privacy loss distribution of the generic
    (epsilon, delta)-DP mechanism self-composed ``count`` times (``dp_accounting``; the optimal
    composition of Kairouz, Oh & Viswanath 2015, never worse than the advanced composition), at
    the requested delta, which must exceed the mass ``1 - (1 - delta_0)^count`` of the
    releases' own deltas. Combined with other events by basic composition in the ledger.
    The analysis under the ledger's neighbouring relation is the recorder's responsibility.
    """

    epsilon: float
    delta: float
    count: int = 1
    label: str = "(epsilon, delta)-DP release"
    mechanism: ClassVar[str] = "approximate-dp"

    def __post_init__(self) -> None:
        self._check_fields(epsilon=check_positive, delta=check_probability, count=check_count)

    def composed_epsilon(self, delta: float) -> float:
        """epsilon at ``delta`` of the ``count``-fold composition (PLD, pessimistic)."""
        from dp_accounting.pld import common, privacy_loss_distribution

        delta = check_probability("delta", delta)
        floor = -math.expm1(self.count * math.log1p(-self.delta))  # 1 - (1 - delta_0)^count
        if delta < floor * (1.0 - 1e-9):
            raise ValueError(
                f"delta={delta:g} is below the {self.count} releases' own delta mass "
                f"{floor:g}; no (epsilon, delta) claim is possible."
            )
        pld = privacy_loss_distribution.from_privacy_parameters(
            common.DifferentialPrivacyParameters(self.epsilon, self.delta),
            value_discretization_interval=min(1e-4, self.epsilon / 100),
        )
        return float(pld.self_compose(self.count).get_epsilon_for_delta(delta))
