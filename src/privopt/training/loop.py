"""The one private-training loop: every algorithm on the core is ``plan -> run``.

::

    for t, batch in enumerate(plan.batches.schedule(N, rng)):       secret batches (or rounds)
        G_t  = source.threshold(t, w_t, batch.stat)                 public: fixed, adaptive, or
                                                                    a recorded private release
        g_t  = sum_{i in batch} clip_{G_t}(grad f(w_t; z_i))        model.batch_gradient_sum
        g~_t = (g_t + (B z)_t sigma G_t) / divisor                  plan.mechanism's stream
        w_{t+1}, state = update(w_t, g~_t, state, t)                post-processing
    output = averaging of the iterates                             post-processing
    ledger.record(plan.recorded_events())                          the plan's events, nothing else

The noise is drawn only by the mechanism's stream (:mod:`privopt.noise`), keyed from ``rng`` or
by a caller's ``noise_seed`` (which must then stay secret), so independent noise and any
correlated mechanism are the same code path: swapping them is configuration. The clip sources
(fixed, quantile-adaptive, Varshney et al.'s (2022) DP-STAT per round, the DP-FTRL-Σ paper's
(Private Overparameterized Linear Regression, anonymous submission) RESIDUALEST) are in
:mod:`privopt.training.thresholds`.

A backend that loads rows elsewhere (Dask) calls :func:`iterate_rounds` with its own
:class:`~privopt.training.thresholds.RowData` (a model that resolves row-index batches on its
handle) and the plan's schedule: the batches, thresholds and noise are drawn in the same order,
so a seeded fit equals the in-memory one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt.accounting import Neighbouring, PrivacyBudget, PrivacyLedger
from privopt.noise import SECRET_SEED_ASSUMPTION, Mechanism, NoiseStream, independent
from privopt.noise.rng import derived_seed
from privopt.training.adaptive import AdaptiveClipController
from privopt.training.averaging import Averager
from privopt.training.batching import Round, Rounds
from privopt.training.gradients import GradientModel, as_model, parameter_count
from privopt.training.kernels import single_row_iterate, single_row_rule
from privopt.training.plan import TrainingPlan
from privopt.training.result import FitResult, FitTrace, release_diagnostics
from privopt.training.thresholds import ClipSource, FixedClip, RowData
from privopt.training.updates import UpdateRule

__all__ = ["StepInfo", "execute", "iterate", "iterate_rounds", "open_stream", "run"]


@dataclass(frozen=True)
class StepInfo:
    """What a callback sees after each step (public values, plus the step's parameters)."""

    step: int
    steps: int
    w: np.ndarray


def open_stream(
    mechanism: Mechanism,
    dim: int,
    std: float,
    rng: np.random.Generator,
    noise_seed: int | None = None,
    options: dict[str, Any] | None = None,
) -> NoiseStream:
    """The mechanism's noise stream, keyed by ``noise_seed`` (secret) or from ``rng``."""
    source = {"rng": rng} if noise_seed is None else {"seed": noise_seed}
    return mechanism.noise_stream(dim, std, **source, **(options or {}))


def iterate(
    model: GradientModel,
    X: np.ndarray,
    y: np.ndarray,
    schedule: Iterable[np.ndarray],
    steps: int,
    stream: NoiseStream,
    clip: float | None,
    divisor: float,
    update: UpdateRule,
    averager: Averager,
    w: np.ndarray,
    callback: Callable[[StepInfo], None] | None = None,
    single_row: bool = False,
    adaptive: ClipSource | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The iteration itself: clipped sum, the stream's noise, update, averaging, per step.

    No accounting happens here: :func:`run` wraps it with the plan's event. ``clip=None`` (no
    clipping) exists only for non-private analysis objects such as
    :func:`privopt.algorithms.noisy_ftrl`. Returns (averaged output, per-step clip fractions).
    ``single_row=True`` (every batch has one row) lets :mod:`privopt.training.kernels` run the
    same iteration on floats where the model and update allow it. ``adaptive`` is any clip
    source (:mod:`privopt.training.thresholds`): e.g. the quantile controller, whose clip at each
    step is kappa_t (a function of earlier releases), the stream (at the unit-clip std) scaled by
    kappa_t, each step's noisy count released after it. Both run :func:`iterate_rounds`.
    """
    prepared = model.prepare(X, y)
    rule = single_row_rule(model, update) if single_row and adaptive is None else None
    if rule is not None:  # the same iteration on floats (privopt.training.kernels)
        report = None if callback is None else (lambda t, v: callback(StepInfo(t, steps, v)))
        return single_row_iterate(
            model, X, y, schedule, steps, stream, clip, divisor, rule, averager, w, prepared, report
        )
    source = FixedClip(clip) if adaptive is None else adaptive
    data = RowData(model, X, y, prepared)
    return iterate_rounds(
        data, schedule, steps, stream, source, divisor, update, averager, w, callback
    )


def iterate_rounds(
    data: RowData,
    schedule: Iterable[Any],
    steps: int,
    stream: NoiseStream,
    source: ClipSource,
    divisor: float,
    update: UpdateRule,
    averager: Averager,
    w: np.ndarray,
    callback: Callable[[StepInfo], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The loop body, step by step as in the papers: threshold, clipped sum, noise, update.

    ``schedule`` yields each step's row indices (an array) or a
    :class:`~privopt.training.batching.Round` (gradient rows plus the stat rows of a private
    threshold); ``data`` resolves them (:class:`~privopt.training.thresholds.RowData`: arrays
    in memory, or a backend's handle). ``source`` gives G_t (public when it is used) and the
    step's noise from ``stream``. Returns (averaged output, per-step fractions clipped).
    """
    state = update.init(w)
    averager.begin(w)
    fractions = np.zeros(steps)
    for step, batch in enumerate(schedule):
        rows, stat = (batch.rows, batch.stat) if isinstance(batch, Round) else (batch, None)
        count = len(batch)
        clip = source.threshold(step, w, data, stat)  # public before the rows below are read
        total, fraction = data.gradient_sum(w, rows, clip, count)
        noise = source.noise(stream, clip)
        source.after_step(step, count, fraction)
        w, state = update.update(w, (total + noise) / divisor, state, step)
        averager.add(w, step)
        fractions[step] = fraction
        if callback is not None:
            callback(StepInfo(step, steps, w))
    return averager.result(w), fractions


def execute(
    plan: TrainingPlan,
    model: str | GradientModel,
    update: UpdateRule,
    X: np.ndarray,
    y: np.ndarray,
    *,
    rng: np.random.Generator,
    averaging: str = "last",
    ledger: PrivacyLedger,
    partition: Hashable | None = None,
    w0: np.ndarray | None = None,
    noise_seed: int | None = None,
    stream_options: dict[str, Any] | None = None,
    callback: Callable[[StepInfo], None] | None = None,
    diagnostics: bool = False,
    info: dict[str, Any] | None = None,
    budget: PrivacyBudget | None = None,
) -> tuple[np.ndarray, FitTrace, dict[str, Any]]:
    """Run ``plan`` and record its event in ``ledger``; returns (w, trace, info).

    :func:`run` without the report: for callers that compose the ledger further (an
    estimator's preprocessing and fit share one ledger and one report). Arguments as in
    :func:`run`; ``ledger`` is required.
    """
    if not isinstance(plan, TrainingPlan):
        raise TypeError(f"Expected a TrainingPlan, got {type(plan).__name__}.")
    model = as_model(model)
    n = X.shape[0]
    if n != plan.num_records:
        raise ValueError(f"The plan is for {plan.num_records} records but X has {n} rows.")
    if np.shape(y)[:1] != (n,):
        raise ValueError(f"X has {n} rows but y has shape {np.shape(y)}.")
    bound = plan.neighbouring is Neighbouring.REPLACE_ONE and ledger.neighbouring is (
        Neighbouring.ZERO_OUT
    )  # a null record is a valid record: replace-one events bound zero-out's
    if ledger.neighbouring is not plan.neighbouring and not bound:
        raise ValueError(
            f"The plan is accounted under {plan.neighbouring.value!r} neighbours but the ledger "
            f"uses {ledger.neighbouring.value!r}."
        )
    event = plan.event()  # fails before any data is read if the plan is not calibrated
    recorded = plan.recorded_events(partition)  # every release of the run, from the plan
    if budget is not None:  # issue 18: the plan's events are charged before any data is read
        # disjoint rounds compose in parallel: a record pays for one round's releases
        charged = [
            e for e, part in recorded
            if not plan.batches.disjoint_steps or part == Rounds.partition(0)
        ]  # fmt: skip
        budget.charge(charged, neighbouring=plan.neighbouring, label=f"training plan {event!r}")
    p = parameter_count(model, X, w0)
    w = np.zeros(p) if w0 is None else np.asarray(w0, dtype=float).copy()
    if w.shape != (p,) or not np.all(np.isfinite(w)):
        raise ValueError(f"w0 must be a finite array of shape ({p},).")
    steps, divisor = plan.steps, plan.divisor
    schedule = plan.batches.schedule(n, rng)  # FixedBatches draws its permutation here
    adaptive = None
    if plan.private_threshold is not None:  # a unit-clip stream scaled by each released G_t
        opener = getattr(plan.private_threshold, "open_stream", open_stream)
        stream = opener(plan.mechanism, p, plan.noise_std, rng, noise_seed, stream_options)
        adaptive = plan.private_threshold.start(rng)
    elif plan.adaptive_clipping is None:
        stream = open_stream(plan.mechanism, p, plan.noise_std, rng, noise_seed, stream_options)
    else:  # unit-clip gradient stream at sigma_g; the counts' own independent stream
        sigma_g = plan.gradient_noise_multiplier
        stream = open_stream(plan.mechanism, p, sigma_g, rng, noise_seed, stream_options)
        count_seed = None if noise_seed is None else derived_seed(noise_seed, "counts")
        counts = open_stream(independent(), 1, plan.count_noise_std, rng, count_seed)
        adaptive = AdaptiveClipController(
            plan.adaptive_clipping, plan.clip_norm, plan.divisor, counts
        )
    averager = Averager(averaging, steps, p)
    w, fractions = iterate(
        model,
        X,
        y,
        schedule,
        steps,
        stream,
        plan.clip_norm,
        divisor,
        update,
        averager,
        w,
        callback,
        single_row=plan.batches.rows_per_step == 1 and not plan.batches.disjoint_steps,
        adaptive=adaptive,
    )
    for release, part in recorded:
        ledger.record(release, partition=part)
    if bound:
        ledger.assume(f"the plan's replace-one events ({plan.label}) bound zero-out's")
    for text in plan.assumptions():
        ledger.assume(text)
    if noise_seed is not None:
        ledger.assume(SECRET_SEED_ASSUMPTION)
    extra: dict[str, np.ndarray] = {}
    if adaptive is None:
        clips = np.full(steps, plan.clip_norm)
        noise_std = np.full(steps, plan.noise_std / divisor)
    elif plan.private_threshold is not None:  # released thresholds, node scales: public
        clips = np.asarray(adaptive.thresholds, dtype=float)
        noise_std = np.asarray(adaptive.scales, dtype=float) * plan.noise_std / divisor
        extra = adaptive.extra()
    else:  # the clips in force and the noisy counts are public (released with noise)
        clips, released = adaptive.history()
        noise_std = clips * plan.gradient_noise_multiplier / divisor
        info = {**(info or {}), "released_counts": released, "final_clip": adaptive.estimate}
    trace = FitTrace(clips, fractions, noise_std, extra)
    details = {
        "plan": plan,
        "noise_multiplier": plan.noise_multiplier,
        "steps": steps,
        "divisor": divisor,
        "mechanism": plan.mechanism.name,
        "batches": plan.batches.name,
        "model": model.name,
        **(info or {}),
    }
    trace, details = release_diagnostics(trace, details, diagnostics=diagnostics, ledger=ledger)
    return w, trace, details


def run(
    plan: TrainingPlan,
    model: str | GradientModel,
    update: UpdateRule,
    X: np.ndarray,
    y: np.ndarray,
    *,
    rng: np.random.Generator,
    delta: float,
    averaging: str = "last",
    ledger: PrivacyLedger | None = None,
    partition: Hashable | None = None,
    w0: np.ndarray | None = None,
    noise_seed: int | None = None,
    stream_options: dict[str, Any] | None = None,
    callback: Callable[[StepInfo], None] | None = None,
    diagnostics: bool = False,
    method: str = "private-training",
    info: dict[str, Any] | None = None,
    budget: PrivacyBudget | None = None,
) -> FitResult:
    """Run ``plan`` on (X, y) and record its event; returns coefficients, report and trace.

    Args:
        plan: a calibrated :class:`TrainingPlan` (its ``num_records`` must be ``len(X)``).
        model: per-example gradients (``"linear"``, ``"logistic"`` or a GradientModel).
        update: the update rule (e.g. :class:`privopt.training.SGD`).
        X, y: the private data (one target per row; non-finite gradients are refused by the
            clipping).
        rng: randomness of the batches and (unless ``noise_seed``) of the noise stream's key.
        delta: the delta of the returned report.
        averaging: ``"last"``, ``"mean"`` or ``"tail"`` iterate.
        ledger, partition: record into this ledger (shared with preprocessing) under this
            partition label; default a new ledger with the plan's relation.
        w0: public initial parameters (default zeros).
        noise_seed: key of the counter-based noise source (secret; stated in the report).
        stream_options: passed to the mechanism's ``noise_stream``.
        callback: called with a :class:`StepInfo` after every step (progress).
        diagnostics: also return the non-private per-step clip fractions (warns; stated).
        method, info: the result's method name and extra configuration.
        budget: a :class:`~privopt.PrivacyBudget` charged with the plan's event before any
            data is read (:class:`~privopt.BudgetExceededError` if it does not fit).
    """
    ledger = ledger if ledger is not None else PrivacyLedger(plan.neighbouring)
    w, trace, details = execute(
        plan,
        model,
        update,
        X,
        y,
        rng=rng,
        averaging=averaging,
        ledger=ledger,
        partition=partition,
        w0=w0,
        noise_seed=noise_seed,
        stream_options=stream_options,
        callback=callback,
        diagnostics=diagnostics,
        info=info,
        budget=budget,
    )
    return FitResult(w, 0.0, ledger.report(delta), trace, method, details)
