r"""Clip sources: where each step's clip threshold comes from, and what it releases.

The loop (:func:`privopt.training.iterate_rounds`) reads like the papers' pseudo-code::

    G_t   = source.threshold(t, w_t, rows, stat_rows)     public: fixed, or a recorded release
    g_t   = sum_{i in batch} clip_{G_t}(grad f(w_t; z_i))   privopt.clipping, through the model
    n_t   = source.noise(stream, G_t)                       the plan's stream, scaled
    w_t+1 = update(w_t, (g_t + n_t) / divisor)              post-processing

A threshold is public when the step uses it: a constant, or a function of releases made before
the step reads its gradient rows (each recorded with its own event, built from the plan's
fields by :meth:`PrivateThreshold.events`). When the threshold varies, the noise stream runs at
the **unit clip** and the step's noise is scaled by the threshold in force: the contributions
divided by G_t have norm <= 1 whatever G_t is, so the gradient release is the plan's
unit-clip event and the scaling is post-processing (the argument of
:mod:`privopt.training.adaptive`, step 2).

==============================  ==========================================================
source                          threshold G_t
==============================  ==========================================================
:class:`FixedClip`              the plan's clip norm G (the stream carries sigma G)
adaptive clipping               kappa_t from earlier noisy counts (Andrew et al. 2021;
                                :class:`~privopt.training.adaptive.AdaptiveClipController`)
:class:`DPStatThreshold`        Varshney et al. (2022): ``scale * DP-STAT(|<z_j, w_t> - t_j|)`` on
the
                                round's s stat rows (disjoint from its b gradient rows)
:class:`ResidualThreshold`      the DP-FTRL-Σ paper (Private Overparameterized Linear Regression,
anonymous submission): ``psi_t = C RESIDUALEST(estimating rows, w_t)`` (or a
                                fixed psi); tree nodes drawn at the running maximum psi_max
==============================  ==========================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from privopt._validate import check_count, check_positive
from privopt.accounting import ApproxDPEvent, GaussianEvent, PrivacyEvent
from privopt.clipping.dp_stat import check_margin, dp_stat
from privopt.noise import NoiseStream

__all__ = [
    "ClipSource",
    "DPStatThreshold",
    "FixedClip",
    "PrivateThreshold",
    "ResidualThreshold",
    "RowData",
    "ScaledIncrements",
]


@dataclass
class RowData:
    """The data handle of a run: row-index batches resolved by the model.

    ``X`` and ``y`` are arrays or any handle the model understands (the Dask backend's
    :class:`~privopt.distributed.methods.DaskLinearModel` resolves partitions); ``prepared`` is
    the model's per-row cache (row norms, or the Σ^-1 norms of the DP-FTRL-Σ paper's (Private
    Overparameterized Linear Regression, anonymous submission) clipping).
    """

    model: Any
    X: Any
    y: Any
    prepared: Any = None

    def gradient_sum(
        self, w: np.ndarray, rows: Any, clip: float | None, count: int
    ) -> tuple[np.ndarray, float]:
        """(sum of the ``count`` rows' clipped gradients, fraction clipped)."""
        if count == 0:  # an empty Poisson batch: only noise
            return np.zeros_like(w), 0.0
        return self.model.batch_gradient_sum(w, self.X, self.y, rows, clip, self.prepared)

    def residuals(self, w: np.ndarray, rows: Any) -> np.ndarray:
        """|<z_j, w> - t_j| over ``rows`` (DP-STAT's values); a model with
        ``batch_residuals(w, X, y, rows)`` resolves the rows on its own handle."""
        resolve = getattr(self.model, "batch_residuals", None)
        if resolve is not None:
            return np.abs(resolve(w, self.X, self.y, rows))
        return np.abs(self.model.residuals(w, self.X[rows], self.y[rows]))


class ClipSource(Protocol):
    """The run-time side of a clip rule (see the module table)."""

    def threshold(self, step: int, w: np.ndarray, data: RowData, stat_rows: Any) -> float:
        """G_t for step ``step``: public before the step's gradient rows are read."""

    def noise(self, stream: NoiseStream, clip: float) -> np.ndarray:
        """Step t's noise on the clipped sum."""

    def after_step(self, step: int, rows: int, fraction: float) -> None:
        """After the step (adaptive clipping releases its noisy count here)."""


class FixedClip:
    """A constant clip G; the stream already carries sigma G (``None``: no clipping, for
    non-private analysis objects only)."""

    def __init__(self, clip: float | None) -> None:
        self.clip = clip

    def threshold(self, step, w, data, stat_rows):
        return self.clip

    def noise(self, stream: NoiseStream, clip: float | None) -> np.ndarray:
        return stream.next()

    def after_step(self, step: int, rows: int, fraction: float) -> None:
        return None


class PrivateThreshold(Protocol):
    """A plan's private threshold rule (public description, frozen): its releases' events are
    built from its fields, and :meth:`start` gives the run-time :class:`ClipSource`."""

    def events(
        self, steps: int, partition: Callable[[int], Hashable]
    ) -> list[tuple[PrivacyEvent, Hashable]]: ...

    def start(self, rng: np.random.Generator) -> Any: ...

    def describe(self) -> str: ...


# -- Varshney et al. (2022): DP-STAT on each round's stat rows
# ---------------------------------------------------


@dataclass(frozen=True)
class DPStatThreshold:
    """zeta_t = ``scale`` * DP-STAT of |<z_j, w_t> - t_j| over round t's s stat rows.

    One DP-STAT release per round: K counts of sensitivity 1 with std alpha_s sqrt(K), i.e. the
    event ``GaussianEvent(1, alpha_s sqrt(K), count=K)`` on the round's partition (the stat
    rows are disjoint from the gradient rows and from every other round).
    """

    domain: float
    noise_multiplier: float
    queries: int = 20
    margin: float | str = "auto"
    scale: float = 1.0
    #: computed from each round's own stat rows (the plan requires Rounds with s > 0)
    needs_stat_rows: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_positive("domain", self.domain)
        check_positive("noise_multiplier", self.noise_multiplier)
        check_count("queries", self.queries)
        check_positive("scale", self.scale)
        check_margin(self.margin)

    @property
    def count_std(self) -> float:
        return self.noise_multiplier * math.sqrt(self.queries)

    def event(self) -> GaussianEvent:
        return GaussianEvent(
            1.0, self.count_std, count=self.queries, label="DP-STAT residual bound"
        )

    def events(self, steps, partition):
        return [(self.event(), partition(t)) for t in range(steps)]

    def start(self, rng: np.random.Generator) -> _DPStatSource:
        return _DPStatSource(self, rng)

    def describe(self) -> str:
        return (
            f"clip zeta_t = {self.scale:g} x DP-STAT (K = {self.queries} counts, std "
            f"{self.count_std:.4g}, domain {self.domain:g}) of the round's stat-row residuals at "
            "w_t; the gradient stream runs at the unit clip, scaled by zeta_t"
        )


class _DPStatSource:
    def __init__(self, rule: DPStatThreshold, rng: np.random.Generator) -> None:
        self.rule, self.rng = rule, rng
        self.gammas: list[float] = []
        self.thresholds: list[float] = []

    def threshold(self, step, w, data, stat_rows):
        rule = self.rule
        stat = dp_stat(
            data.residuals(w, stat_rows),
            domain=rule.domain,
            noise_multiplier=rule.noise_multiplier,
            rng=self.rng,
            queries=rule.queries,
            margin=rule.margin,
        )
        self.gammas.append(stat.gamma)
        self.thresholds.append(rule.scale * stat.gamma)
        return self.thresholds[-1]

    def noise(self, stream: NoiseStream, clip: float) -> np.ndarray:
        return stream.next() * clip  # unit-clip stream, scaled by the public zeta_t

    def after_step(self, step: int, rows: int, fraction: float) -> None:
        return None

    @property
    def scales(self) -> list[float]:
        return self.thresholds

    def extra(self) -> dict[str, np.ndarray]:
        return {"gamma": np.asarray(self.gammas)}


# -- the DP-FTRL-Σ paper (Private Overparameterized Linear Regression, anonymous submission):
# RESIDUALEST thresholds, tree nodes at the running maximum ---------------------------


@dataclass(frozen=True)
class ResidualThreshold:
    """The DP-FTRL-Σ paper's (Private Overparameterized Linear Regression, anonymous submission)
    psi_t = ``rule(t, w_t)`` (C l_t from RESIDUALEST, or a fixed public psi).

    Tree nodes completing at step t are drawn at psi_max = max_{s<=t} psi_s times the plan's
    std (Algorithm 1, line 7), so every node covers all of its leaves, in the Σ of
    ``covariance`` (the same Σ as the clipping norm). ``release`` is the event of one private
    estimate, charged ``ceil(T / every)`` times on ``partition`` (None: public estimating rows
    or a fixed psi; no cost). ``rule`` must read only rows disjoint from the training rows and
    public values; it is part of the run, not of the public description.
    """

    rule: Callable[[int, np.ndarray], float]
    every: int = 1
    release: ApproxDPEvent | None = None
    partition: Hashable = "estimating"
    covariance: Any = None
    text: str = "psi_t = C l_t from residual estimates"
    #: psi = +inf (no clipping) is accepted only by the non-private reduction (tau = 0)
    allow_infinite: bool = False

    def events(self, steps, partition):
        if self.release is None:
            return []
        count = math.ceil(steps / self.every)
        release = self.release
        event = ApproxDPEvent(release.epsilon, release.delta, count=count, label=release.label)
        return [(event, self.partition)]

    def open_stream(self, mechanism, dim, std, rng, noise_seed=None, options=None):
        """The tree's prefix-noise stream (in Σ) as per-step increments drawn at psi_max."""
        tree = getattr(mechanism, "tree", mechanism)
        source = {"rng": rng} if noise_seed is None else {"seed": noise_seed}
        inner = tree.noise_stream(dim, std, covariance=self.covariance, **source, **(options or {}))
        return ScaledIncrements(inner)

    def start(self, rng: np.random.Generator | None = None) -> _ResidualSource:
        return _ResidualSource(self)

    def describe(self) -> str:
        return self.text + "; tree nodes drawn at the running maximum psi_max"


class ScaledIncrements:
    """Per-step increments of a prefix-sum tree stream whose nodes are drawn at a scale.

    ``next_scaled(s)`` is P_t - P_{t-1}, P_t the noisy prefix of
    :meth:`privopt.noise.tree.TreeStream.next_scaled`: an SGD update on the increments is the
    FTRL update w_{t+1} = -eta (sum_{j<=t} g_j + P_t) (post-processing of the same nodes).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.previous = 0.0

    def next_scaled(self, scale: float) -> np.ndarray:
        current = self.inner.next_scaled(scale)
        out = current - self.previous
        self.previous = current
        return out


class _ResidualSource:
    def __init__(self, rule: ResidualThreshold) -> None:
        self.rule = rule
        self.psi_max = 0.0
        self.thresholds: list[float] = []
        self.scales: list[float] = []

    def threshold(self, step, w, data, stat_rows):
        psi = _checked_threshold(step, self.rule.rule(step, w), self.rule.allow_infinite)
        self.psi_max = max(self.psi_max, psi)
        self.thresholds.append(psi)
        self.scales.append(self.psi_max)
        return None if psi == math.inf else psi

    def noise(self, stream: Any, clip: float | None) -> np.ndarray | float:
        return 0.0 if stream is None else stream.next_scaled(self.psi_max)

    def after_step(self, step: int, rows: int, fraction: float) -> None:
        return None

    def extra(self) -> dict[str, np.ndarray]:
        return {}


def _checked_threshold(t: int, psi: Any, allow_infinite: bool) -> float:
    """psi_t from the threshold rule: finite and > 0 (+inf only without noise)."""
    try:
        psi = float(psi)
    except (TypeError, ValueError):
        raise ValueError(f"Expected threshold to be a real number, got {psi!r}.") from None
    if psi > 0 and (math.isfinite(psi) or (allow_infinite and psi == math.inf)):
        return psi
    raise ValueError(
        f"The threshold rule returned psi_{t} = {psi!r}; expected a finite psi > 0 (a zero, "
        "negative, NaN or infinite threshold removes the noise or the clipping; +inf is "
        "allowed only with tau = 0, the non-private SGD reduction). DP-FTRL-Σ diverged if the "
        "thresholds are estimated: use a smaller learning_rate."
    )
