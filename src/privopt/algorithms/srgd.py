r"""Accelerated-DP-SRGD (Choquette-Choo, Ganesh & Thakurta 2025, Algorithm 1): single-epoch,
large-batch private optimisation.

Nesterov-accelerated (linear-coupling) projected gradient descent whose gradient estimate is a
*stochastic recursive gradient* (SRG), privatised by the binary tree mechanism on its prefix sums
(Choquette-Choo, Ganesh & Thakurta; docs/theory/single-epoch-srgd.md#algorithm). With ``C = B(0,
R)``, ``eta_t = t + 1``,
``tau_{t+1} = 2 / (t + 3)`` and T disjoint batches ``B_t`` of B records each::

    x_0 = z_0 = 0,  S_{-1} = 0
    for t = 0 .. T-1:
        Delta_t = (1/B) sum_{d in B_t} clip(eta_t grad f(x_t, d) - eta_{t-1} grad f(x_{t-1}, d))
        S_t     = S_{t-1} + Delta_t                      # = eta_t nabla_t (exact prefix sum)
        S^_t    = S_t + zeta_t                           # the tree's noisy prefix sum
        z_{t+1} = Pi_C(z_t - S^_t / beta)                # = Pi_C(z_t - (eta_t/beta) nabla_t + b_t)
        y_{t+1} = Pi_C(x_t - S^_t / (eta_t beta))        # = Pi_C(x_t - nabla_t/beta + b_t/eta_t)
        x_{t+1} = (1 - tau_{t+1}) y_{t+1} + tau_{t+1} z_{t+1}
    return y_T

so the paper's ``b_t`` is ``-zeta_t / beta``. ``eta_{-1} = 0``: at t = 0 the per-example term is
the plain gradient ("first gradient", clipped to ``clip_first``); for t >= 1 the per-example
weighted difference is clipped to ``clip_difference``. Differences are formed as
``eta_t (g_t - g_{t-1}) + g_{t-1}`` to avoid cancellation. Each record is in exactly one batch
and its gradient is evaluated at the two points ``x_t, x_{t-1}`` of that step only (2n - B
gradients in all). The **independent** variant (Theorem 15) replaces the SRG by the plain batch
mean ``nabla_t = (1/B) sum clip(grad f(x_t, d))`` with independent noise on each step.

On the training core (:mod:`privopt.training`) the fit reads: paper config
(:func:`srgd_parameters`) -> :class:`~privopt.training.TrainingPlan` (one pass of T disjoint
batches of B, clip ``clip_difference``, the tree as per-step increments, whose sum is the prefix
noise ``zeta_t``, or independent noise; SRGD's analysis :class:`SRGDAnalysis`) -> the one
calibration -> :func:`privopt.training.execute` with the SRG oracle
(:class:`~privopt.training.recursive.RecursiveGradient`, ``clip_first`` at t = 0) and the
linear coupling (:class:`~privopt.training.updates.LinearCoupling`, output ``y_T``).

The rest of the method lives beside this module (its public names are re-exported here):

* :mod:`privopt.algorithms.srgd_parameters`: :func:`srgd_parameters` (every public parameter
  and the exact noise, :class:`SRGDParameters`) and :class:`SRGDWarning`;
* :mod:`privopt.algorithms.srgd_presets`: the theorems' defaults for B, T, beta and the
  clipping thresholds (Theorem 14, Eq. 19);
* :mod:`privopt.algorithms.srgd_privacy`: why the release is exactly mu-GDP (zero-out or
  replace-one neighbours, tree sensitivity :func:`tree_leaf_levels`), the noise calibration
  and what the ledger records;
* :mod:`privopt.algorithms.srgd_gradients`: the gradient oracle (a privopt loss or a generic
  ``grad_fn``) and one step's clipped increment :func:`srgd_increment`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from privopt._validate import check_positive
from privopt.accounting import PrivacyLedger, gaussian_delta
from privopt.algorithms.result import FitResult, FitTrace, release_diagnostics
from privopt.algorithms.srgd_gradients import GradFn, resolve_problem, srgd_increment
from privopt.algorithms.srgd_parameters import SRGDParameters, SRGDWarning, srgd_parameters
from privopt.algorithms.srgd_privacy import (
    check_ledger,
    non_private_report,
    record_assumptions,
    srgd_plan,
    tree_leaf_levels,
)
from privopt.losses import LinearLoss
from privopt.training import execute
from privopt.training.averaging import Averager
from privopt.training.loop import iterate
from privopt.training.recursive import RecursiveGradient
from privopt.training.updates import LinearCoupling

# srgd_plan is importable here too; SRGDAnalysis lives in srgd_privacy (__all__ is pinned by
# tests/theory/test_module_layout.py)
__all__ = [
    "SRGDParameters",
    "SRGDStep",
    "SRGDWarning",
    "accelerated_dp_srgd",
    "srgd_increment",
    "srgd_parameters",
    "tree_leaf_levels",
]


@dataclass(frozen=True)
class SRGDStep:
    """What a callback sees after step t (all private outputs or post-processing of them).

    ``released`` is the noisy prefix sum ``S^_t`` (recursive) or the noisy batch gradient
    (independent); x, y, z are ``x_{t+1}, y_{t+1}, z_{t+1}``.
    """

    t: int
    released: np.ndarray
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray


class _Silent:
    """The stream of ``noise=False`` (testing only): no noise at all."""

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def next(self) -> np.ndarray:
        return np.zeros(self.dim)


class _Recorder:
    """Per-step public values (trace, callback) from the rule's observer: post-processing.
    With ``diagnostics`` also ``||zeta_t|| = ||S^_t - S_t||`` (non-private; S_t never released)."""

    def __init__(self, params, model, std, callback, diagnostics) -> None:
        self.params, self.model, self.std, self.callback = params, model, std, callback
        self.diagnostics, self.exact = diagnostics, 0.0
        self.recursive = params.variant == "recursive"
        self.stds: list[float] = []
        self.noise_norms: list[float] = []

    def __call__(self, t, released, x, y, z) -> None:
        if self.diagnostics:
            increment = self.model.log.last_sum / self.params.batch_size
            self.exact = self.exact + increment if self.recursive else increment
            self.noise_norms.append(float(np.linalg.norm(released - self.exact)))
        scale = math.sqrt((t + 1).bit_count()) / (t + 1) if self.recursive else 1.0
        self.stds.append(self.std * scale)  # std of the noise on nabla_t
        if self.callback is not None:
            self.callback(SRGDStep(t=t, released=released, x=x, y=y, z=z))


def accelerated_dp_srgd(
    X: np.ndarray,
    y: np.ndarray,
    loss_or_grad_fn: str | LinearLoss | GradFn,
    *,
    epsilon: float,
    delta: float,
    radius: float,
    rng: np.random.Generator,
    batch_size: int | None = None,
    steps: int | None = None,
    beta: float | None = None,
    setting: str = "general",
    variant: str = "recursive",
    clip_first: float | None = None,
    clip_difference: float | None = None,
    x_bound: float | None = None,
    y_bound: float | None = None,
    lipschitz: float | None = None,
    smoothness: float | None = None,
    dim: int | None = None,
    constants: str = "practical",
    z_step_scale: float = 1.0,
    ledger: PrivacyLedger | None = None,
    partition: Hashable | None = None,
    noise: bool = True,
    callback: Callable[[SRGDStep], None] | None = None,
    diagnostics: bool = False,
) -> FitResult:
    r"""Accelerated-DP-SRGD (Choquette-Choo, Ganesh & Thakurta 2025, Algorithm 1): one pass, T batch
    steps, output ``y_T``.

    Args:
        X, y: the private data, (n, k) and (n,).
        loss_or_grad_fn: a loss name or :class:`~privopt.losses.LinearLoss` (``x_bound``
            required; L and M default to the loss's constants on the ball), or a per-example
            gradient function ``grad_fn(w, X_batch, y_batch) -> (b, p)`` (give ``lipschitz``
            and ``smoothness``, or the parameters they determine; ``dim`` = p, default k).
        epsilon, delta: the target; noise is calibrated by exact mu-GDP.
        radius: R, the constraint set is the ball B(0, R).
        rng: randomness of the batch permutation and of the noise.
        batch_size, steps, beta, clip_first, clip_difference, setting, variant, constants: see
            :func:`srgd_parameters` (the defaults are derived there from public inputs).
        x_bound, y_bound: public data bounds for a privopt loss (checked on every record).
        lipschitz, smoothness: L and M (override the loss's constants; public).
        dim: number of parameters p of a generic ``grad_fn``.
        z_step_scale: multiplies the z step (1 = Algorithm 1 as printed; the proof uses 1/2,
            docs/theory/single-epoch-srgd.md#utility). Post-processing: privacy is unchanged.
        ledger, partition: record into this zero-out (or replace-one) ledger under this label.
        noise: **testing only**. ``False`` adds no noise: the run is NOT private, its report
            says epsilon = inf, and a ledger is refused.
        callback: called with an :class:`SRGDStep` after every step (it sees non-private
            per-step values: what it does with them is the caller's release).
        diagnostics: also return the non-private clip fractions, ``max_norm`` and
            ``noise_norm`` (warns; recorded in the report as non-private releases).

    Returns:
        :class:`FitResult` with ``coef = y_T``, the report, a trace (per-step clip threshold,
        std of the noise on ``nabla_t``; with ``diagnostics=True`` also the clip fraction and
        extras ``max_norm`` and ``noise_norm``: the largest unclipped per-example norm and
        ``||zeta_t||``, non-private) and ``info`` with every parameter, the paper's classical
        sigmas and their exact delta at epsilon, ``batch_assignment`` (batch of each record,
        -1 = dropped) and ``visits`` (how many steps evaluated each record's gradients: 0 or 1).
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"Expected rng to be a numpy Generator, got {type(rng).__name__}.")
    radius = check_positive("radius", radius)
    z_step_scale = check_positive("z_step_scale", z_step_scale)
    if noise not in (True, False):
        raise ValueError(f"Expected noise to be a bool, got {noise!r}.")
    if not noise and ledger is not None:
        raise ValueError("noise=False is a non-private testing mode; it cannot record to a ledger.")
    ledger = check_ledger(ledger) if noise else None
    neighbouring = "zero-out" if ledger is None else ledger.neighbouring.value
    gradient, X, y, p, L, M, description = resolve_problem(
        X, y, loss_or_grad_fn, x_bound, y_bound, radius, lipschitz, smoothness, dim
    )
    if clip_difference is None and beta is None and variant == "recursive" and M is None:
        raise ValueError(
            f"The smoothness M of the {description} is unknown or infinite (not 1-Hölder): "
            "Algorithm 1 needs an M-smooth loss. Use a smooth loss (logistic, squared, "
            "squared_hinge, huber) or give smoothness=, or beta= and clip_difference= "
            "explicitly (privacy holds through clipping for any loss)."
        )
    n = X.shape[0]
    params = srgd_parameters(
        n,
        p,
        epsilon,
        delta,
        radius,
        L,
        M,
        setting,
        variant=variant,
        batch_size=batch_size,
        steps=steps,
        beta=beta,
        clip_first=clip_first,
        clip_difference=clip_difference,
        constants=constants,
        neighbouring=neighbouring,
    )
    T = params.steps
    recursive = variant == "recursive"

    # paper config -> plan, calibrated once by srgd_parameters -> run (privopt.training)
    plan = srgd_plan(params)
    model = RecursiveGradient(gradient, first_clip=params.clip_first, recursive=recursive)
    recorder = _Recorder(params, model, params.sigma if noise else 0.0, callback, diagnostics)
    rule = LinearCoupling(params.beta, radius, T, z_step_scale, recursive, observer=recorder)
    w0 = np.zeros(p)
    if ledger is not None:
        y_out, _, _ = execute(
            plan, model, rule, X, y, rng=rng, ledger=ledger, partition=partition, w0=w0
        )
        record_assumptions(ledger, params)
        report = ledger.report(delta)
    else:  # noise=False (testing only): the plan's batches and iteration, no noise, no ledger
        schedule = plan.batches.schedule(n, rng)
        averager, silent = Averager("last", T, p), cast(Any, _Silent(p))
        y_out, _ = iterate(
            model, X, y, schedule, T, silent, plan.clip_norm, plan.divisor, rule, averager, w0
        )
        report = non_private_report(params.delta, neighbouring)

    sens, log = params.sensitivity, model.log
    info: dict[str, Any] = {
        **params.to_dict(),
        "problem": description,
        "noise": bool(noise),
        "z_step_scale": z_step_scale,
        "classical_delta": gaussian_delta(params.classical_sigma, params.epsilon, sens),
        "paper_budget_delta": gaussian_delta(params.paper_budget_sigma, params.epsilon, sens),
        "exact_delta": gaussian_delta(params.sigma, params.epsilon, sens),
        "batch_assignment": log.assignment,
        "visits": log.visits,
        "gradient_evaluations": log.evaluations,
    }
    first = np.arange(T) == 0 if recursive else np.ones(T, dtype=bool)
    trace = FitTrace(
        clip_threshold=np.where(first, params.clip_first, params.clip_difference or 0.0),
        clip_fraction=np.asarray(log.fractions),
        noise_std=np.asarray(recorder.stds),
        extra={"max_norm": np.asarray(log.largest), "noise_norm": np.asarray(recorder.noise_norms)},
    )
    if ledger is not None:
        trace, info = release_diagnostics(trace, info, diagnostics=diagnostics, ledger=ledger)
        report = ledger.report(delta)
    elif not diagnostics:
        trace, info = release_diagnostics(trace, info, diagnostics=False, ledger=None)
    return FitResult(y_out, 0.0, report, trace, "accelerated-dp-srgd", info)
