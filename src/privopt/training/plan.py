"""The training plan: one frozen object that owns batching, clipping, noise and the privacy event.

Every field the accountant needs is a field of the plan, and :meth:`TrainingPlan.event` builds
the privacy event from exactly those fields; the loop (:func:`privopt.training.run`) reads the
same fields to draw batches, clip and add noise. So the report can never disagree with what ran
(jax_privacy's ``DPExecutionPlan`` has the same aim).

Notation (papers' symbols):

======================  ==================================================================
``num_records``         N, the number of records; public under every relation privopt uses
``batches``             the batch strategy (:mod:`privopt.training.batching`)
``clip_norm``           G, the per-example l2 clipping norm
``noise_multiplier``    sigma: the noise on each step's clipped sum has std sigma G (per
                        coordinate, per noise source of the mechanism)
``mechanism``           B = C^-1 of the correlated noise (:mod:`privopt.noise`); independent
                        noise (DP-SGD) is the identity
``neighbouring``        replace-one or zero-out (both keep N fixed, so N is public)
======================  ==================================================================

Privacy events (the sensitivities are computed, never assumed):

* Poisson sampling, independent noise: ``PoissonSampledGaussianEvent(sigma, q, T)`` (zero-out;
  dp_accounting's add/remove analysis covers it). Amplification by sampling is not analysed for
  correlated noise here, so that combination is refused.
* Fixed batches, any mechanism: the run is one Gaussian mechanism ``C G + W``
(docs/theory/correlated-noise.md
  §2.2) with l2 sensitivity ``f G s``, where s is the mechanism's unit sensitivity for the
  batches' participation pattern and f = 1 (zero-out) or 2 (replace-one), and noise std sigma G.
* Sampling without replacement, independent noise, replace-one: ``SampledGaussianEvent`` with
  noise multiplier sigma / 2 (replace-one sensitivity 2 G), accounted by dp_accounting's RDP.
* Rounds (Varshney et al. 2022), independent noise: each round is one Gaussian step on its own
disjoint
  rows, recorded per partition ``("round", t)`` (parallel composition) by
  :meth:`TrainingPlan.recorded_events`, after the round's private threshold release.
* A private threshold (:mod:`privopt.training.thresholds`): the gradient stream runs at the
  unit clip (``clip_norm=1``), so ``event()`` does not depend on the released thresholds; the
  threshold's own releases are events built from its fields.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Protocol

from privopt._validate import check_count, check_positive
from privopt.accounting import (
    GaussianEvent,
    Neighbouring,
    PrivacyEvent,
)
from privopt.noise import (
    Mechanism,
    Participation,
    as_step_noise,
    independent,
)
from privopt.training.adaptive import (
    QuantileClipping,
    adjusted_gradient_multiplier,
    warn_if_costly,
)
from privopt.training.batching import BatchStrategy, Rounds, is_independent
from privopt.training.calibrate import calibrate_noise_multiplier
from privopt.training.thresholds import PrivateThreshold

__all__ = ["PlanAnalysis", "TiedThreshold", "TrainingPlan"]


class PlanAnalysis(Protocol):
    """A paper's own analysis of a plan's mechanism (e.g. Varshney et al.'s (2022) shuffling, Wang
    et al.'s (2022)
    Theorem 11, Choquette-Choo, Ganesh & Thakurta's (2025) two clip levels): the privacy event of
    ``plan`` at noise multiplier
    ``multiplier``, built from the plan's fields only (and refusing a plan it does not cover).
    It may also state the plan's assumptions (``assumptions(plan) -> list[str]``)."""

    def event(self, plan: TrainingPlan, multiplier: float) -> PrivacyEvent: ...


class TiedThreshold(Protocol):
    """A private threshold whose noise is a fixed multiple of the plan's, so that one
    calibration sets both (Varshney et al.'s (2022) DP-AMBSSGD splits each round's GDP budget
    between DP-STAT and the gradient step at a fixed ratio). ``at_noise(multiplier)`` is the
    threshold rule at the plan's noise multiplier; an uncalibrated plan holds the tied rule and
    :meth:`TrainingPlan.calibrate` replaces it by ``at_noise(sigma)``, calibrating one round's
    releases (the threshold's, then the gradient step's) together. Rounds only: their releases
    share the round's partition, and rounds compose in parallel."""

    def at_noise(self, multiplier: float) -> PrivateThreshold: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class TrainingPlan:
    """Batches, clipping, noise and neighbouring relation of one private training run.

    Build it with a noise multiplier, or with ``noise_multiplier=None`` and then
    :meth:`calibrate` (which returns a new plan). Fields are documented in the module table.

    >>> from privopt.training import FixedBatches
    >>> from privopt.noise import nu_dpftrl
    >>> plan = TrainingPlan(1000, FixedBatches(100, epochs=2), clip_norm=1.0,
    ...                     mechanism=nu_dpftrl(0.1)).calibrate(epsilon=2.0, delta=1e-6)
    >>> plan.steps, round(plan.event().mu / 1.0, 6) == round(plan.mu, 6)
    (20, True)
    """

    num_records: int
    batches: BatchStrategy
    clip_norm: float
    noise_multiplier: float | None = None
    mechanism: Mechanism = field(default_factory=independent)
    neighbouring: Neighbouring = Neighbouring.ZERO_OUT
    #: public size used for the sampling divisor when the realised N is not the public one
    public_records: float | None = None
    label: str = "training steps"
    #: an alternative analysis of this same mechanism (e.g. a paper's theorem): an object with
    #: ``event(plan, noise_multiplier) -> PrivacyEvent`` built from the plan's fields; None
    #: for the standard accounting of the module table
    analysis: PlanAnalysis | None = None
    #: quantile-based adaptive clipping (:mod:`privopt.training.adaptive`); ``clip_norm`` is
    #: then the initial clip kappa_0 and the event is that of a fixed unit clip
    adaptive_clipping: QuantileClipping | None = None
    #: a private threshold per step (:mod:`privopt.training.thresholds`: Varshney et al.'s (2022)
    #: DP-STAT,
    #: the DP-FTRL-Σ paper's (Private Overparameterized Linear Regression, anonymous submission)
    #: RESIDUALEST); ``clip_norm`` is then 1 (the unit clip of the gradient stream)
    #: and the threshold's own releases are events built from its fields
    private_threshold: PrivateThreshold | TiedThreshold | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_records", check_count("num_records", self.num_records))
        if not isinstance(self.batches, BatchStrategy):
            raise ValueError(f"Expected a BatchStrategy, got {type(self.batches).__name__}.")
        object.__setattr__(self, "clip_norm", check_positive("clip_norm", self.clip_norm))
        if self.noise_multiplier is not None:
            object.__setattr__(
                self, "noise_multiplier", check_positive("noise_multiplier", self.noise_multiplier)
            )
        if not isinstance(self.mechanism, Mechanism):
            raise ValueError(
                f"Expected a privopt.noise Mechanism, got {type(self.mechanism).__name__}."
            )
        # a prefix-sum mechanism (tree) adds its increments to a per-step update
        object.__setattr__(self, "mechanism", as_step_noise(self.mechanism))
        relation = Neighbouring.parse(self.neighbouring)
        if relation is Neighbouring.ADD_REMOVE:
            raise ValueError(
                "neighbouring='add-remove' makes N private, but a plan uses N (steps, sampling "
                "rate, divisor); use 'zero-out' (the same epsilon for Poisson sampling) or "
                "'replace-one'."
            )
        object.__setattr__(self, "neighbouring", relation)
        if self.public_records is not None:
            object.__setattr__(
                self, "public_records", check_positive("public_records", self.public_records)
            )
        self._check_combination()

    def _check_combination(self) -> None:
        """Refuse what no analysis covers: the clip source's own rules here, the batch
        strategy's in :meth:`~privopt.training.batching.BatchStrategy.check_plan`."""
        if self.private_threshold is not None:
            if self.adaptive_clipping is not None or self.analysis is not None:
                raise ValueError("A private threshold uses the plan's own analysis, alone.")
            if self.clip_norm != 1.0:
                raise ValueError(
                    "With a private threshold the gradient stream runs at the unit clip: "
                    f"use clip_norm=1.0, got {self.clip_norm!r}."
                )
            if not self.batches.admits_private_threshold:
                raise ValueError("Private thresholds are analysed for rounds and fixed batches.")
            if self._tied_threshold() is not None:
                if self.noise_multiplier is not None:
                    raise ValueError(
                        "A threshold tied to the plan's noise is set by plan.calibrate(...): "
                        "build the plan with noise_multiplier=None."
                    )
                if not self.batches.disjoint_steps:
                    raise ValueError(
                        "A threshold tied to the plan's noise is calibrated with one round's "
                        "releases: use Rounds."
                    )
            if getattr(self.private_threshold, "needs_stat_rows", False) and not (
                getattr(self.batches, "stat_size", 0) > 0
            ):
                raise ValueError(
                    "This threshold is computed from each round's own stat rows: use "
                    "Rounds(..., stat_size > 0)."
                )
        if self.adaptive_clipping is not None:
            if not isinstance(self.adaptive_clipping, QuantileClipping):
                raise ValueError(
                    "adaptive_clipping must be a QuantileClipping, got "
                    f"{type(self.adaptive_clipping).__name__}."
                )
            if not self.batches.admits_adaptive_clipping:
                raise ValueError(
                    "Adaptive clipping is analysed for Poisson sampling and fixed batches."
                )
            if self.analysis is not None:
                raise ValueError("Adaptive clipping uses the plan's own analysis.")
        self.batches.check_plan(self, is_independent(self.mechanism))

    # -- derived public quantities --------------------------------------------------------------
    @property
    def steps(self) -> int:
        return self.batches.steps(self.num_records)

    @property
    def divisor(self) -> float:
        """Public normaliser of each step's clipped sum."""
        return self.batches.divisor(self.public_records or self.num_records)

    @property
    def participation(self) -> Participation | None:
        return self.batches.participation(self.num_records)

    @property
    def noise_std(self) -> float:
        """Std of the noise on each step's clipped sum (per coordinate and noise source); under
        cyclic Poisson sampling, times the mechanism's largest column norm (so the rescaled C
        has unit columns, as the amplification theorem needs)."""
        return self._require_noise() * self.clip_norm * self.batches.noise_scale(self)

    @property
    def count_noise_std(self) -> float:
        """sigma_b of adaptive clipping's centred count (0 without adaptive clipping)."""
        if self.adaptive_clipping is None:
            return 0.0
        return self.adaptive_clipping.count_std(self.divisor)

    @property
    def gradient_noise_multiplier(self) -> float:
        """The multiplier of the noise on the (unit-clip) gradient stream: the plan's own, or
        under adaptive clipping sigma_g = (z^-2 - (s_I / (2 sigma_b s_C))^2)^(-1/2)
        (:mod:`privopt.training.adaptive`, step 4), so that gradients and counts together
        spend exactly the plan's event."""
        z = self._require_noise()
        if self.adaptive_clipping is None:
            return z
        if self.participation is None:  # Poisson sampling (amplified, no pattern)
            ratio = 1.0  # both streams are per-step independent noise on one sample
        else:
            ratio = independent().sensitivity(self.steps, self.participation) / (
                self.unit_sensitivity
            )
        sigma_g = adjusted_gradient_multiplier(z, self.count_noise_std, ratio)
        warn_if_costly(sigma_g, z)
        return sigma_g

    def component_events(self) -> tuple[PrivacyEvent, ...]:
        """The releases of an adaptive plan as separate Gaussian mechanisms (fixed batches):
        the unit-clip gradient stream and the count stream. Their exact GDP composition is
        ``event()``'s mu: a brute-force check of the adjustment (tests)."""
        if self.adaptive_clipping is None or self.participation is None:
            return (self.event(),)
        f = self.relation_factor
        s_i = independent().sensitivity(self.steps, self.participation)
        return (
            GaussianEvent(f * self.unit_sensitivity, self.gradient_noise_multiplier),
            GaussianEvent(f * s_i / 2.0, self.count_noise_std),
        )

    @property
    def relation_factor(self) -> float:
        """Factor of the neighbouring relation on a clipped contribution: 2 for replace-one
        (:attr:`~privopt.accounting.Neighbouring.contribution_factor`)."""
        return self.neighbouring.contribution_factor

    @functools.cached_property
    def unit_sensitivity(self) -> float:
        """The mechanism's sensitivity per unit contribution for the batches' participation
        pattern (fixed batches only); computed once per plan (calibration asks many times)."""
        if self.participation is None:
            raise ValueError(f"{self.batches.name} is accounted with amplification, not as C G.")
        return self.mechanism.sensitivity(self.steps, self.participation)

    @property
    def sensitivity(self) -> float:
        """l2 sensitivity of the whole run as one Gaussian mechanism (fixed batches only)."""
        return self.relation_factor * self.clip_norm * self.unit_sensitivity

    @property
    def mu(self) -> float | None:
        """mu-GDP of the run when it is one Gaussian mechanism (else None)."""
        event = self.event()
        return event.mu if isinstance(event, GaussianEvent) else None

    def _require_noise(self) -> float:
        if self.noise_multiplier is None:
            raise ValueError("The plan has no noise multiplier yet: call plan.calibrate(...).")
        return self.noise_multiplier

    # -- the privacy event ----------------------------------------------------------------------
    def event(self) -> PrivacyEvent:
        """The privacy event of this plan, built from its fields only."""
        sigma = self._require_noise()
        return self._event(sigma)

    def _event(self, sigma: float) -> PrivacyEvent:
        """The analysis's event if the plan has one (a paper's theorem for this mechanism),
        else the batch strategy's (:meth:`~privopt.training.batching.BatchStrategy.event`)."""
        if self.analysis is not None:
            return self.analysis.event(self, sigma)
        return self.batches.event(self, sigma)

    def recorded_events(
        self, partition: Hashable | None = None
    ) -> list[tuple[PrivacyEvent, Hashable | None]]:
        """Every event of a run of this plan with its data partition, from the plan's fields.

        Rounds (:class:`~privopt.training.batching.Rounds`): round t's releases (its private
        threshold's, then the gradient step's ``event()``) on the partition ``("round", t)``,
        composed in parallel. Other strategies: ``event()`` on ``partition``, and a private
        threshold's releases on their own partitions (e.g. the DP-FTRL-Σ paper's (Private
        Overparameterized Linear Regression, anonymous submission) estimating rows).
        """
        event = self.event()
        steps = self.steps
        extra = (
            []
            if self.private_threshold is None
            else self.private_threshold.events(steps, Rounds.partition)
        )
        if not self.batches.disjoint_steps:
            return [(event, partition), *extra]
        by_round: dict[Hashable, list[PrivacyEvent]] = {}
        for release, part in extra:
            by_round.setdefault(part, []).append(release)
        out: list[tuple[PrivacyEvent, Hashable | None]] = []
        for t in range(steps):
            part = Rounds.partition(t)
            out += [(release, part) for release in by_round.pop(part, [])]
            out.append((event, part))
        return out + [(e, p) for p, events in by_round.items() for e in events]

    def calibrate(
        self,
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: str = "auto",
        *,
        mu: float | None = None,
        rtol: float = 1e-5,
    ) -> TrainingPlan:
        """A new plan whose noise makes this run alone (epsilon, delta)-DP, or mu-GDP with
        ``mu=`` (a GDP budget share; Gaussian events only), verified and rounded toward more
        noise (see :func:`privopt.training.calibrate_noise_multiplier`; ``rtol``: the
        tolerance of its searches, erring toward more noise). A
        :class:`TiedThreshold` is calibrated with the gradient step (one round's releases) and
        replaced by its rule at the calibrated noise.

        >>> from privopt.training import FixedBatches
        >>> plan = TrainingPlan(100, FixedBatches(10), clip_norm=1.0).calibrate(mu=0.5)
        >>> plan.noise_multiplier, plan.mu
        (2.0, 0.5)
        """
        tied = self._tied_threshold()
        factory = self._event if tied is None else self._round_events
        sigma = calibrate_noise_multiplier(
            factory, epsilon, delta, self.neighbouring, accountant, mu=mu, rtol=rtol
        )
        if tied is None:
            return dataclasses.replace(self, noise_multiplier=sigma)
        return dataclasses.replace(
            self, noise_multiplier=sigma, private_threshold=tied.at_noise(sigma)
        )

    def _tied_threshold(self) -> TiedThreshold | None:
        return self.private_threshold if hasattr(self.private_threshold, "at_noise") else None

    def _round_events(self, sigma: float) -> tuple[PrivacyEvent, ...]:
        """One round's releases at multiplier ``sigma``: the tied threshold's, then the
        gradient step's (in :meth:`recorded_events`' order)."""
        rule = self._tied_threshold().at_noise(sigma)
        return (*(e for e, _ in rule.events(1, Rounds.partition)), self._event(sigma))

    def assumptions(self) -> list[str]:
        """What the plan's privacy claim relies on, in words (for the report).

        An ``analysis`` with its own ``assumptions(plan)`` states the clipping and sensitivity
        lines itself (e.g. Choquette-Choo, Ganesh & Thakurta's (2025) two clip levels), instead of
        the generic ones below.
        """
        own = getattr(self.analysis, "assumptions", None)
        out = [
            "the number of records N is public",
            f"per-example gradients clipped to l2 norm {self.clip_norm:g}"
            if self.adaptive_clipping is None and self.private_threshold is None
            else "per-example gradients clipped to the adaptive norm kappa_t"
            if self.private_threshold is None
            else "per-example gradients clipped to a threshold released before the step",
            self.batches.describe(self.num_records),
        ]
        if own is not None:
            return [out[0], out[2], *own(self)]
        if self.analysis is not None:
            out.append(f"privacy analysed by {type(self.analysis).__name__}")
        if self.private_threshold is not None:
            out.append(self.private_threshold.describe())
        if self.adaptive_clipping is not None:
            out.append(
                self.adaptive_clipping.describe()
                + f"; initial clip {self.clip_norm:g}; gradients and counts together spend "
                "the event of a fixed unit clip (privopt.training.adaptive)"
            )
        if self.batches.accounts_correlated_noise:
            out.append(
                f"correlated noise {self.mechanism.name}: sensitivity "
                f"{self.sensitivity:.6g} = {self.relation_factor:g} G x the mechanism's unit "
                f"sensitivity for this participation pattern"
            )
        return out
