"""DP-FTRL with any correlated-noise mechanism (Choquette-Choo et al. 2024, Algorithm 1), batched
and multi-epoch.

::

    fix a secret permutation; split it into S = floor(N / b) batches; T = epochs * S steps
    for t = 0 .. T-1:                                    (step t uses batch t mod S)
        g_t = sum_{i in batch} clip_G(grad f(theta_t; z_i))            per-example clipping
        g~_t = (g_t + G sigma (B w)_t) / b + grad r(theta_t)           correlated noise
        theta_{t+1} = theta_t - lr_t * m_t,  m_t = momentum * m_{t-1} + g~_t

``(B w)_t`` comes from any :class:`privopt.noise.Mechanism` stream; B = I is DP-SGD without
amplification, nu-DP-FTRL, optimal CC, anti-PGD, the tree, restarts and dense B all plug in. The
regulariser is data-independent (not clipped, no noise); learning-rate schedules and momentum
are post-processing.

Privacy (zero-out neighbours, Kairouz et al. 2021; docs/theory/correlated-noise.md#privacy). The
whole trajectory is a
post-processing of the single Gaussian mechanism ``C G + W``
(docs/theory/correlated-noise.md#matrix-mechanism): a record
appears in one batch per epoch, at steps exactly S apart, so its contribution is k = epochs
participations with min-separation S, each of norm <= G. The l2 sensitivity is
``G * mechanism.sensitivity(T, Participation.multiple(S, k))`` (single participation when k = 1),
and the noise std is ``G sigma``: the fit is (s / sigma)-GDP, i.e. (s^2 / (2 sigma^2))-zCDP, with
s the mechanism's unit sensitivity. ``sigma`` is calibrated exactly from a target (epsilon,
delta) in GDP (default) or through rho-zCDP with the tight conversion. No privacy amplification
is used (the paper's DP-FTRL does not use it either).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from privopt._validate import check_count, check_design, check_positive, check_probability
from privopt.accounting import GaussianEvent, zcdp_rho
from privopt.noise import Mechanism, Participation, as_step_noise
from privopt.training import (
    SGD,
    Averager,
    FixedBatches,
    QuantileClipping,
    TrainingPlan,
    calibrate_noise_multiplier,
    iterate,
    open_stream,
    run,
)
from privopt.training.gradients import (
    FTRLModel,
    GenericModel,
    LinearRegressionModel,
    LogisticRegressionModel,
    as_model,
    parameter_count,
)
from privopt.training.result import FitResult

__all__ = [
    "FTRLModel",
    "GenericModel",
    "LinearRegressionModel",
    "LogisticRegressionModel",
    "calibrate_ftrl_noise",
    "dp_ftrl",
    "ftrl_participation",
    "noisy_ftrl",
]


def ftrl_participation(n: int, batch_size: int, epochs: int) -> tuple[int, Participation]:
    """(steps T, participation pattern) of fixed batches repeated for ``epochs`` epochs."""
    n = check_count("n", n)
    batch_size = check_count("batch_size", batch_size)
    epochs = check_count("epochs", epochs)
    per_epoch = n // batch_size
    if per_epoch < 1:
        raise ValueError(f"batch_size={batch_size} is larger than the {n} records.")
    steps = per_epoch * epochs
    if epochs == 1:
        return steps, Participation.single()
    return steps, Participation.multiple(per_epoch, epochs)


def calibrate_ftrl_noise(
    mechanism: Mechanism,
    steps: int,
    participation: Participation,
    epsilon: float,
    delta: float,
    calibration: str = "gdp",
) -> tuple[float, float]:
    """(sigma, unit sensitivity s) making DP-FTRL (epsilon, delta)-DP.

    Both routes are the training core's one calibration of the unit-clip event
    ``GaussianEvent(s, sigma)`` (:func:`privopt.training.calibrate_noise_multiplier`, verified,
    rounded toward more noise). ``"gdp"``: sigma = s / gdp_mu(epsilon, delta), exact for this
    single Gaussian mechanism. ``"zcdp"``: the target rho, the largest zCDP rho meeting
    (epsilon, delta) under the tight conversion (the paper's Theorem 1.1 route; slightly more
    noise), as the GDP target mu = sqrt(2 rho) (a Gaussian mechanism is (mu^2 / 2)-zCDP), i.e.
    sigma = s / sqrt(2 rho).
    """
    sensitivity = mechanism.sensitivity(steps, participation)

    def event(s: float) -> GaussianEvent:
        return GaussianEvent(sensitivity, s)

    if calibration == "gdp":
        return calibrate_noise_multiplier(event, epsilon, delta, "zero-out"), sensitivity
    if calibration == "zcdp":
        mu = math.sqrt(2.0 * zcdp_rho(epsilon, delta))
        return calibrate_noise_multiplier(event, neighbouring="zero-out", mu=mu), sensitivity
    raise ValueError(f"Expected calibration in ('gdp', 'zcdp'), got {calibration!r}.")


def _prepare(model, X, y, batch_size: int, epochs: int) -> tuple[FTRLModel, Any, Any]:
    model = as_model(model)
    X, y = check_design(X, y)
    ftrl_participation(X.shape[0], batch_size, epochs)  # validates the batch layout
    return model, X, y


def _initial_point(w0: np.ndarray | None, p: int) -> np.ndarray:
    start = np.zeros(p) if w0 is None else np.asarray(w0, dtype=float)
    if start.shape != (p,):
        raise ValueError(f"w0 must have shape ({p},), got {start.shape}.")
    if not np.all(np.isfinite(start)):
        raise ValueError("w0 must be finite.")
    return start


def dp_ftrl(
    X: np.ndarray,
    y: np.ndarray,
    *,
    mechanism: Mechanism,
    epsilon: float,
    delta: float,
    clip_norm: float,
    learning_rate: float | Callable[[int], float],
    rng: np.random.Generator,
    model: str | FTRLModel = "linear",
    batch_size: int = 1,
    epochs: int = 1,
    momentum: float = 0.0,
    regularizer_grad: Callable[[np.ndarray], np.ndarray] | None = None,
    w0: np.ndarray | None = None,
    calibration: str = "gdp",
    stream_options: dict[str, Any] | None = None,
    noise_seed: int | None = None,
    diagnostics: bool = False,
    adaptive_clipping: QuantileClipping | None = None,
) -> FitResult:
    """Train with DP-FTRL and return the last iterate, the privacy report and a trace.

    Args:
        X, y: the private data (y in {0, 1} for the logistic model).
        mechanism: the correlated-noise mechanism (B); e.g. ``privopt.noise.nu_dpftrl(0.01)``.
        epsilon, delta: the target; sigma is calibrated to it (see :func:`calibrate_ftrl_noise`).
        clip_norm: G, the per-example l2 clipping norm.
        learning_rate: a constant or a schedule ``step -> lr`` (post-processing).
        rng: randomness for the secret batch assignment and the noise stream's seed.
        model: ``"linear"``, ``"logistic"``, or an :class:`FTRLModel` (e.g. :class:`GenericModel`).
        batch_size, epochs: b and the number of passes; k = epochs participations, S = N // b
            steps apart (the min-separation sensitivity is used for k > 1).
        momentum: heavy-ball momentum in [0, 1) (post-processing).
        regularizer_grad: gradient of a data-independent regulariser (no clipping, no noise).
        w0: initial parameters (public), default zeros.
        calibration: ``"gdp"`` (exact) or ``"zcdp"``.
        stream_options: passed to ``mechanism.noise_stream`` (e.g. ``{"mode": "regenerate"}``).
        noise_seed: key of the counter-based noise source (default: drawn from ``rng``); with it
            the noise of step t is a pure function of (noise_seed, t), for reproducible runs;
            anyone who knows it can subtract the noise, so it must stay secret.
        diagnostics: also return the non-private per-step clip fractions (warns; recorded in
            the report as a non-private release).
        adaptive_clipping: a :class:`privopt.training.QuantileClipping` to learn the clip norm
            from noisy counts (``clip_norm`` is then the initial clip; the same epsilon:
            :mod:`privopt.training.adaptive`). Only with ``calibration="gdp"``.
    """
    clip_norm = check_positive("clip_norm", clip_norm)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    model, X, y = _prepare(model, X, y, batch_size, epochs)
    p = parameter_count(model, X, w0)
    start = _initial_point(w0, p)
    update = SGD(learning_rate, momentum, regularizer_grad)
    # paper config -> plan -> calibrate -> run
    plan = TrainingPlan(
        X.shape[0],
        FixedBatches(batch_size, epochs),
        clip_norm,
        mechanism=mechanism,
        neighbouring="zero-out",
        label="correlated noise C G + W",
        adaptive_clipping=adaptive_clipping,
    )
    if adaptive_clipping is not None and calibration != "gdp":
        raise ValueError("adaptive_clipping needs calibration='gdp' (the plan's own event).")
    if calibration == "gdp":
        plan = plan.calibrate(epsilon, delta)
    elif calibration == "zcdp":  # the paper's route (slightly more noise): rho as mu-GDP
        plan = plan.calibrate(mu=math.sqrt(2.0 * zcdp_rho(epsilon, delta)))
    else:
        raise ValueError(f"Expected calibration in ('gdp', 'zcdp'), got {calibration!r}.")
    per_epoch = X.shape[0] // batch_size
    fit = run(
        plan,
        model,
        update,
        X,
        y,
        rng=rng,
        delta=delta,
        w0=start,
        noise_seed=noise_seed,
        stream_options=stream_options,
        diagnostics=diagnostics,
        method="dp-ftrl",
        info={
            "unit_sensitivity": plan.unit_sensitivity,
            "participation": plan.participation,
            "unused_rows": X.shape[0] - per_epoch * batch_size,
        },
    )
    return fit


def noisy_ftrl(
    X: np.ndarray,
    y: np.ndarray,
    *,
    mechanism: Mechanism,
    noise_std: float,
    learning_rate: float | Callable[[int], float],
    rng: np.random.Generator,
    model: str | FTRLModel = "linear",
    batch_size: int = 1,
    epochs: int = 1,
    momentum: float = 0.0,
    regularizer_grad: Callable[[np.ndarray], np.ndarray] | None = None,
    w0: np.ndarray | None = None,
    noise_seed: int | None = None,
) -> np.ndarray:
    """Noisy-FTRL (Choquette-Choo et al.'s (2024) analysis object): DP-FTRL without clipping. **Not
    private.**

    The noise ``noise_std (B w)_t`` is added to the batch's gradient sum as in :func:`dp_ftrl`,
    but gradients are not clipped, so no privacy guarantee holds; used to study F_inf.
    """
    noise_std = check_positive("noise_std", noise_std)
    model, X, y = _prepare(model, X, y, batch_size, epochs)
    batches = FixedBatches(batch_size, epochs)
    schedule = batches.schedule(X.shape[0], rng)
    steps = batches.steps(X.shape[0])
    p = parameter_count(model, X, w0)
    start = _initial_point(w0, p)
    stream = open_stream(as_step_noise(mechanism), p, noise_std, rng, noise_seed)
    update = SGD(learning_rate, momentum, regularizer_grad)
    w, _ = iterate(
        model, X, y, schedule, steps, stream, None, batch_size, update, Averager("last", steps, p),
        start,
    )  # fmt: skip
    return w
