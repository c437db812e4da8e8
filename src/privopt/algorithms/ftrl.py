"""DP-FTRL with any correlated-noise mechanism (seed 001, Algorithm 1), batched and multi-epoch.

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

Privacy (zero-out neighbours, Kairouz et al. 2021; notes/001.md §3). The whole trajectory is a
post-processing of the single Gaussian mechanism ``C G + W`` (notes/001.md §2.2): a record
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
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt._validate import (
    check_count,
    check_design,
    check_finite,
    check_positive,
    check_probability,
)
from privopt.accounting import GaussianEvent, PrivacyLedger, gdp_epsilon, gdp_mu, zcdp_rho
from privopt.algorithms.result import FitResult, FitTrace
from privopt.clipping import clip_factors, row_norms
from privopt.noise import Mechanism, NoiseStream, Participation, as_step_noise

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


class FTRLModel:
    """Per-example gradients of a loss; subclasses give closed forms where they exist."""

    name = "model"

    def clipped_gradient_sum(
        self, w: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None
    ) -> tuple[np.ndarray, float]:
        """(sum_i clip(grad_i), fraction clipped) over the batch; ``clip=None`` disables it."""
        raise NotImplementedError


class _ResidualModel(FTRLModel):
    """Losses whose per-example gradient is r_i(w) x_i: norm |r_i| ||x_i||, no gradient matrix."""

    def residuals(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def clipped_gradient_sum(self, w, X, y, clip):
        r = self.residuals(w, X, y)
        if clip is None:
            return X.T @ r, 0.0
        factors = clip_factors(np.abs(r) * row_norms(X), clip)
        return X.T @ (r * factors), float(np.mean(factors < 1.0)) if r.size else 0.0


class LinearRegressionModel(_ResidualModel):
    """Squared loss 1/2 (<x, w> - y)^2: gradient (<x, w> - y) x."""

    name = "linear"

    def residuals(self, w, X, y):
        return X @ w - y


class LogisticRegressionModel(_ResidualModel):
    """Logistic loss with labels in {0, 1}: gradient (sigmoid(<x, w>) - y) x."""

    name = "logistic"

    def residuals(self, w, X, y):
        z = X @ w
        return np.exp(-np.logaddexp(0.0, -z)) - y  # sigmoid without overflow


@dataclass(frozen=True)
class GenericModel(FTRLModel):
    """Any model given a per-example gradient function ``grad_fn(w, X, y) -> (b, p)`` array."""

    grad_fn: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    name: str = "generic"

    def clipped_gradient_sum(self, w, X, y, clip):
        grads = np.asarray(self.grad_fn(w, X, y), dtype=float)
        if grads.ndim != 2 or grads.shape[0] != X.shape[0]:
            raise ValueError(
                f"grad_fn must return one gradient row per example, got shape {grads.shape}."
            )
        if clip is None:
            return grads.sum(axis=0), 0.0
        factors = clip_factors(row_norms(grads), clip)
        return (grads * factors[:, None]).sum(axis=0), float(np.mean(factors < 1.0))


_MODELS = {"linear": LinearRegressionModel, "logistic": LogisticRegressionModel}


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

    ``"gdp"``: sigma = s / gdp_mu(epsilon, delta), exact for this single Gaussian mechanism.
    ``"zcdp"``: sigma = s / sqrt(2 rho) with rho the largest zCDP rho meeting the target under
    the tight conversion (the paper's Theorem 1.1 route; slightly more noise).
    """
    sensitivity = mechanism.sensitivity(steps, participation)
    if calibration == "gdp":
        sigma = sensitivity / gdp_mu(epsilon, delta)
        # round toward privacy: the report's epsilon (GDP, inverted numerically) <= target
        while gdp_epsilon(sensitivity / sigma, delta) > epsilon:
            sigma *= 1.0 + 1e-12
        return sigma, sensitivity
    if calibration == "zcdp":
        return sensitivity / math.sqrt(2.0 * zcdp_rho(epsilon, delta)), sensitivity
    raise ValueError(f"Expected calibration in ('gdp', 'zcdp'), got {calibration!r}.")


def _learning_rate(schedule: float | Callable[[int], float], step: int) -> float:
    value = schedule(step) if callable(schedule) else schedule
    return check_positive("learning rate", value)


def _loop(
    model: FTRLModel,
    X: np.ndarray,
    y: np.ndarray,
    batches: list[np.ndarray],
    steps: int,
    stream: NoiseStream,
    clip: float | None,
    learning_rate,
    momentum: float,
    regularizer_grad,
    w0: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    w = w0.copy()
    velocity = np.zeros_like(w)
    fractions = []
    for step in range(steps):
        batch = batches[step % len(batches)]
        xb, yb = X[batch], y[batch]
        total, fraction = model.clipped_gradient_sum(w, xb, yb, clip)
        direction = (total + stream.next()) / batch.size
        if regularizer_grad is not None:
            direction = direction + regularizer_grad(w)
        velocity = momentum * velocity + direction
        w = w - _learning_rate(learning_rate, step) * velocity
        fractions.append(fraction)
    return w, velocity, fractions


def _prepare(model, X, y, batch_size, epochs, rng, momentum):
    if isinstance(model, str):
        if model not in _MODELS:
            raise ValueError(f"Expected model in {tuple(_MODELS)} or an FTRLModel, got {model!r}.")
        model = _MODELS[model]()
    if not isinstance(model, FTRLModel):
        raise TypeError(f"Expected an FTRLModel, got {type(model).__name__}.")
    X, y = check_design(X, y)
    momentum = check_finite("momentum", momentum)
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"Expected momentum in [0, 1), got {momentum!r}.")
    steps, participation = ftrl_participation(X.shape[0], batch_size, epochs)
    order = rng.permutation(X.shape[0])  # secret, fixed for all epochs
    per_epoch = X.shape[0] // batch_size
    batches = [np.sort(order[i * batch_size : (i + 1) * batch_size]) for i in range(per_epoch)]
    return model, X, y, steps, participation, batches, momentum


def _parameter_count(model: FTRLModel, X: np.ndarray, w0: np.ndarray | None) -> int:
    """p: the features' count for the linear models; w0's length for a generic model."""
    if isinstance(model, GenericModel) and w0 is not None:
        return int(np.asarray(w0).size)
    return X.shape[1]


def _initial_point(w0: np.ndarray | None, p: int) -> np.ndarray:
    start = np.zeros(p) if w0 is None else np.asarray(w0, dtype=float)
    if start.shape != (p,):
        raise ValueError(f"w0 must have shape ({p},), got {start.shape}.")
    if not np.all(np.isfinite(start)):
        raise ValueError("w0 must be finite.")
    return start


def _noise_stream(mechanism, p, std, rng, noise_seed, options) -> NoiseStream:
    source = {"rng": rng} if noise_seed is None else {"seed": noise_seed}
    return mechanism.noise_stream(p, std, **source, **(options or {}))


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
            the noise of step t is a pure function of (noise_seed, t), for reproducible runs.
    """
    clip_norm = check_positive("clip_norm", clip_norm)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    mechanism = as_step_noise(mechanism)  # a prefix-sum mechanism (tree) adds its increments
    model, X, y, steps, participation, batches, momentum = _prepare(
        model, X, y, batch_size, epochs, rng, momentum
    )
    sigma, unit_sensitivity = calibrate_ftrl_noise(
        mechanism, steps, participation, epsilon, delta, calibration
    )
    # verify on the event actually recorded (both scaled by the clip norm): round toward privacy
    while gdp_epsilon((clip_norm * unit_sensitivity) / (clip_norm * sigma), delta) > epsilon:
        sigma *= 1.0 + 1e-12
    ledger = PrivacyLedger("zero-out")
    ledger.record(
        GaussianEvent(
            clip_norm * unit_sensitivity,
            clip_norm * sigma,
            label=f"correlated noise C G + W ({mechanism.name})",
        )
    )
    ledger.assume(f"per-example gradients clipped to l2 norm {clip_norm:g}")
    ledger.assume(
        f"each record is in one batch per epoch: {participation.kind} participation"
        + (
            f" (k = {participation.participations}, min-separation {participation.min_sep})"
            if participation.kind == "multiple"
            else ""
        )
    )
    p = _parameter_count(model, X, w0)
    start = _initial_point(w0, p)
    stream = _noise_stream(mechanism, p, clip_norm * sigma, rng, noise_seed, stream_options)
    w, _, fractions = _loop(
        model,
        X,
        y,
        batches,
        steps,
        stream,
        clip_norm,
        learning_rate,
        momentum,
        regularizer_grad,
        start,
    )
    trace = FitTrace(
        clip_threshold=np.full(steps, clip_norm),
        clip_fraction=np.asarray(fractions),
        noise_std=np.full(steps, clip_norm * sigma / batch_size),
    )
    info = {
        "noise_multiplier": sigma,
        "unit_sensitivity": unit_sensitivity,
        "steps": steps,
        "participation": participation,
        "mechanism": mechanism.name,
        "model": model.name,
        "unused_rows": X.shape[0] - len(batches) * batch_size,
    }
    return FitResult(w, 0.0, ledger.report(delta), trace, "dp-ftrl", info)


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
    """Noisy-FTRL (seed 001's analysis object): DP-FTRL without clipping. **Not private.**

    The noise ``noise_std (B w)_t`` is added to the batch's gradient sum as in :func:`dp_ftrl`,
    but gradients are not clipped, so no privacy guarantee holds; used to study F_inf.
    """
    noise_std = check_positive("noise_std", noise_std)
    model, X, y, steps, _, batches, momentum = _prepare(
        model, X, y, batch_size, epochs, rng, momentum
    )
    p = _parameter_count(model, X, w0)
    start = _initial_point(w0, p)
    stream = _noise_stream(as_step_noise(mechanism), p, noise_std, rng, noise_seed, None)
    w, _, _ = _loop(
        model,
        X,
        y,
        batches,
        steps,
        stream,
        None,
        learning_rate,
        momentum,
        regularizer_grad,
        start,
    )
    return w
