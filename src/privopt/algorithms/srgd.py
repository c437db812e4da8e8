r"""Accelerated-DP-SRGD (seed 004, Algorithm 1): single-epoch, large-batch private optimisation.

Nesterov-accelerated (linear-coupling) projected gradient descent whose gradient estimate is a
*stochastic recursive gradient* (SRG), privatised by the binary tree mechanism on its prefix sums
(Choquette-Choo, Ganesh & Thakurta; notes/004.md §2). With ``C = B(0, R)``, ``eta_t = t + 1``,
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
from typing import Any

import numpy as np

from privopt._validate import check_positive
from privopt.accounting import PrivacyLedger, gaussian_delta
from privopt.algorithms.result import FitResult, FitTrace, release_diagnostics
from privopt.algorithms.srgd_gradients import GradFn, resolve_problem, srgd_increment
from privopt.algorithms.srgd_parameters import SRGDParameters, SRGDWarning, srgd_parameters
from privopt.algorithms.srgd_privacy import (
    check_ledger,
    non_private_report,
    record_release,
    tree_leaf_levels,
)
from privopt.losses import LinearLoss
from privopt.noise import TreeAggregation
from privopt.noise.rng import gaussian_noise

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


def _project(w: np.ndarray, radius: float) -> np.ndarray:
    norm = float(np.linalg.norm(w))
    return w if norm <= radius else w * (radius / norm)


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
    r"""Accelerated-DP-SRGD (seed 004, Algorithm 1): one pass, T batch steps, output ``y_T``.

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
            notes/004.md §4). Post-processing: privacy is unchanged.
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
    B, T, beta_ = params.batch_size, params.steps, params.beta
    recursive = variant == "recursive"

    order = rng.permutation(n)  # data-independent; the guarantee does not rely on its secrecy
    assignment = np.full(n, -1, dtype=int)
    assignment[order[: B * T]] = np.repeat(np.arange(T), B)
    visits = np.zeros(n, dtype=int)
    tree = TreeAggregation()
    stream = tree.noise_stream(p, params.sigma, rng=rng) if noise and recursive else None

    x = np.zeros(p)
    z = np.zeros(p)
    y_out = np.zeros(p)
    x_prev: np.ndarray | None = None
    prefix = np.zeros(p)
    clip_thresholds, fractions, stds, max_norms, noise_norms = [], [], [], [], []
    evaluations = 0
    for t in range(T):
        rows = np.sort(order[t * B : (t + 1) * B])
        visits[rows] += 1
        eta = float(t + 1)
        t_srg = t if recursive else 0  # the independent variant's estimate restarts every step
        increment, fraction, largest = srgd_increment(
            gradient,
            x,
            x_prev,
            t_srg,
            X[rows],
            y[rows],
            clip_first=params.clip_first,
            clip_difference=params.clip_difference,
            batch_size=B,
        )
        evaluations += B if t_srg == 0 else 2 * B
        clip_thresholds.append(params.clip_first if t_srg == 0 else params.clip_difference)
        if recursive:
            prefix = prefix + increment  # S_t = eta_t nabla_t
            zeta = stream.next() if stream is not None else np.zeros(p)
            released = prefix + zeta  # S^_t, the tree's noisy prefix sum
            z_new = _project(z - z_step_scale * released / beta_, radius)
            y_new = _project(x - released / (eta * beta_), radius)
            stds.append(params.sigma * math.sqrt((t + 1).bit_count()) / eta if noise else 0.0)
        else:
            zeta = gaussian_noise(rng, params.sigma, p) if noise else np.zeros(p)
            released = increment + zeta  # the noisy batch gradient nabla^_t
            z_new = _project(z - z_step_scale * eta * released / beta_, radius)
            y_new = _project(x - released / beta_, radius)
            stds.append(params.sigma if noise else 0.0)
        tau = 2.0 / (t + 3.0)
        x_prev, x = x, (1.0 - tau) * y_new + tau * z_new
        z, y_out = z_new, y_new
        fractions.append(fraction)
        max_norms.append(largest)
        noise_norms.append(float(np.linalg.norm(zeta)))
        if callback is not None:
            callback(SRGDStep(t=t, released=released, x=x, y=y_out, z=z))

    if ledger is not None:
        record_release(ledger, params, partition)
        report = ledger.report(delta)
    else:
        report = non_private_report(params.delta, neighbouring)

    sens = params.sensitivity
    info: dict[str, Any] = {
        **params.to_dict(),
        "problem": description,
        "noise": bool(noise),
        "z_step_scale": z_step_scale,
        "classical_delta": gaussian_delta(params.classical_sigma, params.epsilon, sens),
        "paper_budget_delta": gaussian_delta(params.paper_budget_sigma, params.epsilon, sens),
        "exact_delta": gaussian_delta(params.sigma, params.epsilon, sens),
        "batch_assignment": assignment,
        "visits": visits,
        "gradient_evaluations": evaluations,
    }
    trace = FitTrace(
        clip_threshold=np.asarray(clip_thresholds, dtype=float),
        clip_fraction=np.asarray(fractions),
        noise_std=np.asarray(stds),
        extra={"max_norm": np.asarray(max_norms), "noise_norm": np.asarray(noise_norms)},
    )
    if ledger is not None:
        trace, info = release_diagnostics(trace, info, diagnostics=diagnostics, ledger=ledger)
        report = ledger.report(delta)
    elif not diagnostics:
        trace, info = release_diagnostics(trace, info, diagnostics=False, ledger=None)
    return FitResult(y_out, 0.0, report, trace, "accelerated-dp-srgd", info)
