r"""Batch strategies: which records each step reads, and what the privacy event must know of it.

A strategy is a frozen, public description (no data). Given the public number of records N it
knows the number of steps, the public divisor of each step's clipped sum, and the participation
pattern or amplification that the plan's privacy event is built from; ``schedule(n, rng)`` draws
the secret batches.

==========================  ======================================  ==============================
strategy                    batches                                 what the event uses
==========================  ======================================  ==============================
:class:`PoissonSampling`    each record joins each step w.p. q      amplification by sampling (q)
:class:`CyclicPoisson\     L secret parts; step t samples part     ceil(T / L) sampled steps
Sampling`                   t mod L w.p. q (banded noise)           (``cyclic_poisson_event``)
:class:`FixedBatches`       a secret permutation cut into N // b    participations k = epochs,
                            batches, cycled in the same order       min-separation S = N // b
:class:`SampledWithout\     each step draws b of N uniformly        sampling without replacement
Replacement`                (independently across steps)            within a step (Wang et al. 2022)
:class:`SinglePass`         the first T batches of one shuffled     single participation
                            pass (Choquette-Choo, Ganesh & Thakurta 2025; the rest never read)
:class:`Rounds`             a secret permutation cut into T         one participation; round t is
                            disjoint rounds of s stat + b gradient  its own partition ("round",
                            rows (Varshney et al. 2022; or contiguous rounds)   t): parallel
                            composition
==========================  ======================================  ==============================

``FixedBatches(batch_size, epochs=1)`` is one shuffled pass of disjoint batches.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privopt._validate import check_count, check_positive, check_sample_rate
from privopt.accounting import (
    GaussianEvent,
    Neighbouring,
    PoissonSampledGaussianEvent,
    PrivacyEvent,
    SampledGaussianEvent,
)
from privopt.noise import Mechanism, Participation, cyclic_poisson_event

if TYPE_CHECKING:  # the plan calls its strategy; the strategy reads the plan's public fields
    from privopt.training.plan import TrainingPlan

#: indices of one-row sampling are drawn this many steps at a time
_INDEX_BLOCK = 4096

__all__ = [
    "BatchStrategy",
    "CyclicPoissonSampling",
    "FixedBatches",
    "PoissonSampling",
    "Round",
    "Rounds",
    "SampledWithoutReplacement",
    "SinglePass",
    "is_independent",
    "shuffled_pass",
]


def is_independent(mechanism: Mechanism) -> bool:
    """B = I: one fresh noise source per step (checked on the materialised decoder)."""
    b = mechanism.decoder_matrix(4)
    return b.shape == (4, 4) and bool(np.array_equal(b, np.eye(4)))


#: how a strategy's public field is checked (and replaced by its checked value), by field name:
#: the same field is validated alike in every strategy
_FIELD_CHECKS: dict[str, Callable[[Any], Any]] = {
    "sample_rate": lambda v: check_sample_rate("sample_rate", v),
    "num_steps": lambda v: check_count("steps", v),
    "groups": lambda v: check_count("groups", v),
    "batch_size": lambda v: check_count("batch_size", v),
    "epochs": lambda v: check_count("epochs", v),
    "sample_size": lambda v: check_count("sample_size", v),
    "num_rounds": lambda v: check_count("num_rounds", v),
    "stat_size": lambda v: check_count("stat_size", v, minimum=0),
}


def _records_per(n: int, k: int, name: str) -> int:
    """``n // k`` (parts of ``n`` records cut by ``k``), refused when ``k`` exceeds the records."""
    quotient = check_count("n", n) // k
    if quotient < 1:
        raise ValueError(f"{name}={k} is larger than the {n} records.")
    return quotient


class BatchStrategy(ABC):
    """Public description of how steps read records (see the module table).

    A strategy also owns its part of the privacy analysis: :meth:`event` builds the run's
    event from the plan's public fields, :meth:`check_plan` refuses the combinations its
    analysis does not cover, :meth:`noise_scale` scales the noise std. The plan calls them; it
    never switches on the strategy's type.
    """

    #: short name used in reports
    name: str = "batches"
    #: analysed with a private threshold per step (Varshney et al.'s (2022) DP-STAT, the DP-FTRL-Σ
    #: paper's (Private Overparameterized Linear Regression, anonymous submission) RESIDUALEST)
    admits_private_threshold: ClassVar[bool] = False
    #: analysed with quantile adaptive clipping (Andrew et al. 2021)
    admits_adaptive_clipping: ClassVar[bool] = False
    #: every step reads its own disjoint rows: step t is the data partition ``partition(t)``
    #: and the steps compose in parallel
    disjoint_steps: ClassVar[bool] = False
    #: the run is accounted as one Gaussian mechanism C G + W (correlated noise of any kind)
    accounts_correlated_noise: ClassVar[bool] = False

    def check_plan(self, plan: TrainingPlan, independent_noise: bool) -> None:
        """Refuse a plan (mechanism, relation, clip source) this strategy's analysis does not
        cover; public fields only. Default: nothing to refuse."""
        return None

    def event(self, plan: TrainingPlan, noise_multiplier: float) -> PrivacyEvent:
        """The run's privacy event at ``noise_multiplier`` (sigma), from the plan's fields.

        Default (a fixed participation pattern): the run is one Gaussian mechanism C G + W
        (Choquette-Choo et al. 2023, Sec. 2) with l2 sensitivity f G s, s the mechanism's unit
        sensitivity for the participation pattern and f the relation's contribution factor,
        and noise std sigma G.
        """
        return GaussianEvent(
            plan.sensitivity,
            noise_multiplier * plan.clip_norm,
            label=f"{plan.label} ({plan.mechanism.name})",
        )

    def noise_scale(self, plan: TrainingPlan) -> float:
        """Factor on the noise std sigma G of each step (1 unless the analysis rescales C)."""
        return 1.0

    def _check(self, *fields: str) -> None:
        """Replace each named field by its checked value (:data:`_FIELD_CHECKS`; frozen-safe)."""
        for field in fields:
            object.__setattr__(self, field, _FIELD_CHECKS[field](getattr(self, field)))

    @property
    def rows_per_step(self) -> int | None:
        """The number of rows of every batch when it is fixed (None when it varies)."""
        return None

    @abstractmethod
    def steps(self, n: int) -> int:
        """Number of steps T for ``n`` records."""

    @abstractmethod
    def divisor(self, n: float) -> float:
        """The public normaliser of a step's clipped sum (an expected or fixed batch size)."""

    @abstractmethod
    def schedule(self, n: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
        """The secret batches: one index array per step (drawn from ``rng``)."""

    def participation(self, n: int) -> Participation | None:
        """The participation pattern of one record (None when amplification is used instead)."""
        return None

    def describe(self, n: int) -> str:
        """One sentence for the report's assumptions."""
        return f"{self.name}: {self.steps(n)} steps"


@dataclass(frozen=True)
class PoissonSampling(BatchStrategy):
    """Each record joins each of ``steps`` steps independently with probability ``sample_rate``.

    The step's sum is divided by the expected batch size q N (public), never the realised size.
    """

    sample_rate: float
    num_steps: int
    name: str = "poisson sampling"

    admits_adaptive_clipping: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._check("sample_rate", "num_steps")

    @classmethod
    def from_epochs(
        cls,
        n: float,
        *,
        epochs: float,
        expected_batch: float | None = None,
        sample_rate: float | None = None,
    ) -> PoissonSampling:
        """K = ceil(epochs / q) steps at rate ``sample_rate``, or at q = min(1, expected_batch /
        n) (public n) when no rate is given."""
        epochs = check_positive("epochs", epochs)
        if sample_rate is not None:
            q = check_sample_rate("sample_rate", sample_rate)
        else:
            n = check_positive("n", n)
            q = min(1.0, check_positive("expected_batch", expected_batch) / n)
        # the 1e-9 keeps a float quotient such as 3 / 0.1 = 30.000000000000004 from adding a step
        return cls(q, max(1, math.ceil(epochs / q - 1e-9)))

    def steps(self, n: int) -> int:
        return self.num_steps

    def divisor(self, n: float) -> float:
        return self.sample_rate * n

    def schedule(self, n: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
        for _ in range(self.num_steps):
            # independent Bernoulli(q) inclusions have the law "size ~ Bin(n, q), then a uniform
            # subset of that size", which costs O(batch) instead of O(n)
            yield rng.choice(n, size=rng.binomial(n, self.sample_rate), replace=False)

    def check_plan(self, plan: TrainingPlan, independent_noise: bool) -> None:
        _refuse_correlated_noise(self, plan, independent_noise)
        _require_relation(self, plan, Neighbouring.ZERO_OUT, _POISSON_RELATION)

    def event(self, plan: TrainingPlan, noise_multiplier: float) -> PrivacyEvent:
        """T steps of the Poisson-subsampled Gaussian (Abadi et al. 2016; dp_accounting)."""
        return PoissonSampledGaussianEvent(
            noise_multiplier, self.sample_rate, count=self.num_steps, label=plan.label
        )

    def describe(self, n: int) -> str:
        return (
            f"Poisson sampling at rate q = {self.sample_rate:.6g} for {self.num_steps} steps "
            "(inclusions secret; sums divided by the expected batch q N)"
        )


@dataclass(frozen=True)
class CyclicPoissonSampling(BatchStrategy):
    """Records in ``groups`` secret equal parts of N // groups (the N mod groups left over are
    never read); step t includes each record of part ``t mod groups`` w.p. ``sample_rate``.

    The amplified batching of banded MF (Choquette-Choo, McKenna, McMahan, Rush & Thakurta 2023,
    arXiv:2306.08153, Thm 4): with an L-banded mechanism and L <= groups, the run is ceil(T /
    groups) Poisson-sampled Gaussian steps (:func:`privopt.noise.cyclic_poisson_event`). Sums
    are divided by the expected batch q (N // groups)."""

    groups: int
    sample_rate: float
    num_steps: int
    name: str = "cyclic poisson sampling"

    def __post_init__(self) -> None:
        self._check("groups", "sample_rate", "num_steps")

    def part_size(self, n: int) -> int:
        return _records_per(n, self.groups, "groups")

    def per_epoch(self, n: int) -> int:
        """Steps of one expected pass over the records: round(groups / q), in [1, T]."""
        return min(self.num_steps, max(1, round(self.groups / self.sample_rate)))

    def steps(self, n: int) -> int:
        return self.num_steps

    def divisor(self, n: float) -> float:
        return self.sample_rate * (int(n) // self.groups)

    def check_plan(self, plan: TrainingPlan, independent_noise: bool) -> None:
        bands = 1 if independent_noise else getattr(plan.mechanism, "bands", None)
        if bands is None or bands > self.groups:
            raise ValueError(
                "Cyclic Poisson sampling is analysed for banded mechanisms with at most "
                f"`groups` bands (got {plan.mechanism.name}, groups={self.groups}); "
                "use privopt.noise.optimize_banded_toeplitz or column_normalized_banded."
            )
        if plan.adaptive_clipping is not None:
            raise ValueError("Adaptive clipping is not analysed with cyclic Poisson sampling.")
        _require_relation(self, plan, Neighbouring.ZERO_OUT, _POISSON_RELATION)

    def event(self, plan: TrainingPlan, noise_multiplier: float) -> PrivacyEvent:
        """Independent noise: one part's ceil(T / groups) Poisson-sampled Gaussian steps;
        banded noise: :func:`privopt.noise.cyclic_poisson_event` (Choquette-Choo et al. 2023,
        Thm 4)."""
        steps = plan.steps
        if is_independent(plan.mechanism):  # B = I: one part's steps, DP-SGD's event
            count, q = math.ceil(steps / self.groups), self.sample_rate
            return PoissonSampledGaussianEvent(noise_multiplier, q, count, plan.label)
        return cyclic_poisson_event(
            plan.mechanism,
            steps,
            groups=self.groups,
            sample_rate=self.sample_rate,
            noise_multiplier=noise_multiplier,
            label=f"{plan.label} ({plan.mechanism.name}, cyclic Poisson)",
        )

    def noise_scale(self, plan: TrainingPlan) -> float:
        """The mechanism's largest column norm: the rescaled C has unit columns, as the
        amplification theorem needs."""
        return plan.mechanism.sensitivity(plan.steps)

    def schedule(self, n: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
        size = self.part_size(n)
        parts = rng.permutation(n)[: size * self.groups].reshape(self.groups, size)
        for t in range(self.num_steps):
            part = parts[t % self.groups]
            # Bernoulli(q) inclusions within the part, O(batch) as in PoissonSampling
            chosen = rng.choice(size, size=rng.binomial(size, self.sample_rate), replace=False)
            yield np.sort(part[chosen])

    def describe(self, n: int) -> str:
        return (
            f"cyclic Poisson sampling: {self.groups} secret parts of {self.part_size(n)} records, "
            f"step t samples part t mod {self.groups} at rate q = {self.sample_rate:.6g}, "
            f"{self.num_steps} steps (sums divided by the expected batch), accounted as "
            f"ceil(T / {self.groups}) Poisson-sampled Gaussian steps (cyclic_poisson_event)"
        )


@dataclass(frozen=True)
class FixedBatches(BatchStrategy):
    """A secret permutation cut into S = N // b batches of b, cycled for ``epochs`` epochs.

    Step t reads batch t mod S, so a record participates k = epochs times, exactly S steps
    apart: the min-separation pattern of correlated-noise mechanisms (single participation for
    one epoch). The N - S b left-over records are never read.
    """

    batch_size: int
    epochs: int = 1
    name: str = "fixed batches"
    admits_private_threshold: ClassVar[bool] = True
    admits_adaptive_clipping: ClassVar[bool] = True
    accounts_correlated_noise: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._check("batch_size", "epochs")

    @property
    def rows_per_step(self) -> int:
        return self.batch_size

    def per_epoch(self, n: int) -> int:
        return _records_per(n, self.batch_size, "batch_size")

    def steps(self, n: int) -> int:
        return self.epochs * self.per_epoch(n)

    def divisor(self, n: float) -> float:
        return float(self.batch_size)

    def participation(self, n: int) -> Participation:
        if self.epochs == 1:
            return Participation.single()
        return Participation.multiple(self.per_epoch(n), self.epochs)

    def distinct_batches(self, n: int) -> int:
        """How many distinct batches the permutation is cut into (S = N // b)."""
        return self.per_epoch(n)

    def batches(self, n: int, rng: np.random.Generator) -> list[np.ndarray]:
        """The distinct secret batches (sorted indices), drawn once."""
        order = rng.permutation(n)
        b, count = self.batch_size, self.distinct_batches(n)
        return list(np.sort(order[: count * b].reshape(count, b), axis=1))

    def schedule(self, n: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
        batches = self.batches(n, rng)  # the permutation is drawn now, before any noise key
        return (batches[t % len(batches)] for t in range(self.steps(n)))

    def describe(self, n: int) -> str:
        per_epoch = self.per_epoch(n)
        text = (
            f"fixed batches of {self.batch_size} from a secret permutation, {per_epoch} per "
            f"epoch, {self.epochs} epoch(s) in the same order"
        )
        if self.epochs > 1:
            text += f" (k = {self.epochs} participations, min-separation {per_epoch})"
        return text


def shuffled_pass(batch_size: int) -> FixedBatches:
    """One shuffled pass of disjoint batches (each record used at most once)."""
    return FixedBatches(batch_size, epochs=1)


@dataclass(frozen=True)
class SinglePass(FixedBatches):
    """The first ``num_steps`` of the ``N // b`` disjoint batches of a secret permutation, once.

    Choquette-Choo, Ganesh & Thakurta's (2025) single epoch with a given (B, T), ``B T <= N``: the
    records left over are never
    read. Single participation, like :func:`shuffled_pass`, whose permutation and batches
    (sorted indices) it shares; ``num_steps=None`` reads them all.
    """

    num_steps: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epochs != 1:
            raise ValueError("A single pass has one epoch.")
        if self.num_steps is not None:
            object.__setattr__(self, "num_steps", check_count("num_steps", self.num_steps))

    def steps(self, n: int) -> int:
        per_epoch = self.per_epoch(n)
        return per_epoch if self.num_steps is None else min(per_epoch, self.num_steps)

    def distinct_batches(self, n: int) -> int:
        return self.steps(n)

    def describe(self, n: int) -> str:
        steps = self.steps(n)
        return (
            f"one pass: {steps} disjoint batches of {self.batch_size} from a secret permutation "
            f"(each record read at most once; {n - steps * self.batch_size} never read)"
        )


@dataclass(frozen=True)
class SampledWithoutReplacement(BatchStrategy):
    """Each of ``steps`` steps draws ``sample_size`` of the N records uniformly without
    replacement, independently across steps (so a record may be used many times; Wang et al.
    (2022))."""

    sample_size: int
    num_steps: int
    name: str = "uniform sampling"

    def __post_init__(self) -> None:
        self._check("sample_size", "num_steps")

    def check_plan(self, plan: TrainingPlan, independent_noise: bool) -> None:
        _refuse_correlated_noise(self, plan, independent_noise)
        _require_relation(
            self,
            plan,
            Neighbouring.REPLACE_ONE,
            "Sampling without replacement is accounted under replace-one neighbours; use "
            "neighbouring='replace-one'.",
        )

    def event(self, plan: TrainingPlan, noise_multiplier: float) -> PrivacyEvent:
        """T steps of the uniformly sampled Gaussian (Wang, Balle & Kasiviswanathan 2019), whose
        multiplier is against the replace-one sensitivity f G: sigma / f."""
        return SampledGaussianEvent(
            noise_multiplier / plan.relation_factor,
            population=plan.num_records,
            sample_size=self.sample_size,
            count=self.num_steps,
            label=plan.label,
        )

    def steps(self, n: int) -> int:
        return self.num_steps

    def divisor(self, n: float) -> float:
        return float(self.sample_size)

    @property
    def rows_per_step(self) -> int:
        return self.sample_size

    def schedule(self, n: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
        if self.sample_size > n:
            raise ValueError(f"sample_size={self.sample_size} exceeds the {n} records.")
        if self.sample_size == 1:  # one uniform index per step, drawn in blocks (same law)
            for start in range(0, self.num_steps, _INDEX_BLOCK):
                block = rng.integers(0, n, size=min(_INDEX_BLOCK, self.num_steps - start))
                yield from block.reshape(-1, 1)
            return
        for _ in range(self.num_steps):
            yield rng.choice(n, size=self.sample_size, replace=False)

    def describe(self, n: int) -> str:
        return (
            f"{self.num_steps} steps, each on {self.sample_size} of the {n} records drawn "
            "uniformly without replacement (secret), independently across steps"
        )


@dataclass(frozen=True)
class Round:
    """One step's rows: the gradient rows and, for Varshney et al. (2022), the disjoint stat rows
    from which
    the step's private threshold is computed (index arrays, or slices of contiguous rows)."""

    rows: np.ndarray | slice
    stat: np.ndarray | slice | None = None

    def __len__(self) -> int:
        rows = self.rows
        return len(range(*rows.indices(rows.stop))) if isinstance(rows, slice) else len(rows)


@dataclass(frozen=True)
class Rounds(BatchStrategy):
    """Varshney et al.'s (2022) rounds: T disjoint rounds of ``stat_size`` stat rows +
    ``batch_size`` gradient
    rows, cut from a secret uniform permutation (``shuffle="rows"``, Algorithm 2) or contiguous
    in the given order (``shuffle="none"``, for rows whose order is already random and
    independent of the data). The N - T (s + b) rows left over are never read.

    Every record is in at most one round, so round t is its own data partition ``("round", t)``
    and the rounds compose in parallel; within a round the stat rows feed the threshold and the
    gradient rows the clipped sum. Rounds read their rows in sorted index order (the sums do not
    depend on the order within a round; sorted gathers stream through memory).
    """

    num_rounds: int
    batch_size: int
    stat_size: int = 0
    shuffle: str = "rows"
    name: str = "rounds"
    admits_private_threshold: ClassVar[bool] = True
    disjoint_steps: ClassVar[bool] = True

    def check_plan(self, plan: TrainingPlan, independent_noise: bool) -> None:
        if not independent_noise:
            raise ValueError(
                "Rounds compose in parallel only with independent noise; got "
                f"{plan.mechanism.name}."
            )

    def __post_init__(self) -> None:
        self._check("num_rounds", "batch_size", "stat_size")
        if self.shuffle not in ("rows", "none"):
            raise ValueError(f"Expected shuffle in ('rows', 'none'), got {self.shuffle!r}.")

    @property
    def records_needed(self) -> int:
        return self.num_rounds * (self.batch_size + self.stat_size)

    @property
    def rows_per_step(self) -> int:
        return self.batch_size

    def steps(self, n: int) -> int:
        return self.num_rounds

    def divisor(self, n: float) -> float:
        return float(self.batch_size)

    def participation(self, n: int) -> Participation:
        return Participation.single()

    @staticmethod
    def partition(step: int) -> tuple[str, int]:
        """The data partition of round ``step`` (disjoint rounds: parallel composition)."""
        return ("round", step)

    def rounds(self, n: int, rng: np.random.Generator) -> list[Round]:
        """The T rounds; with ``shuffle="rows"`` the permutation is drawn from ``rng`` now."""
        if self.records_needed > n:
            raise ValueError(
                f"{self.num_rounds} rounds of {self.stat_size} + {self.batch_size} rows need "
                f"{self.records_needed} rows, got {n}."
            )
        s, width = self.stat_size, self.stat_size + self.batch_size
        starts = range(0, self.records_needed, width)
        if self.shuffle == "none":  # contiguous rounds: views, no copies
            return [Round(slice(a + s, a + width), slice(a, a + s) if s else None) for a in starts]
        order = rng.permutation(n)  # secret; never released
        return [
            Round(np.sort(order[a + s : a + width]), np.sort(order[a : a + s]) if s else None)
            for a in starts
        ]

    def schedule(self, n: int, rng: np.random.Generator) -> Iterator[Round]:
        return iter(self.rounds(n, rng))  # drawn now, before any noise key

    def describe(self, n: int) -> str:
        how = "a secret permutation" if self.shuffle == "rows" else "contiguous rows as given"
        return (
            f"{self.num_rounds} disjoint rounds of {self.stat_size} threshold + "
            f"{self.batch_size} gradient rows from {how} (each record in at most one round: "
            "parallel composition over rounds)"
        )


_POISSON_RELATION = (
    "Poisson sampling is accounted under zero-out neighbours (dp_accounting's add/remove "
    "analysis); use neighbouring='zero-out'."
)


def _refuse_correlated_noise(strategy: BatchStrategy, plan: TrainingPlan, independent: bool):
    if not independent:
        raise ValueError(
            f"{plan.mechanism.name} noise with {strategy.name}: amplification by sampling is "
            "not analysed for correlated noise here; use FixedBatches."
        )


def _require_relation(strategy, plan: TrainingPlan, relation: Neighbouring, message: str):
    if plan.neighbouring is not relation:
        raise ValueError(message)
