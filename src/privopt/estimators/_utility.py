"""Can this private fit learn anything? Checks from public quantities only, and their warning.

A private fit always returns coefficients and a valid privacy report, even when its noise
swamps the signal or its optimiser cannot move: "silent garbage". Every check here reads only
public quantities (N, d, epsilon, delta, the public or privately released bounds, the calibrated
noise scale, the step count and learning rate), never the data, so a warning costs no privacy.

Checks (each returns a reason and a fix, or None):

* :func:`noise_to_signal`: the calibrated noise on the quantity an algorithm averages against
  the largest signal it can carry; above :data:`NOISE_TO_SIGNAL_LIMIT` the released direction is
  mostly noise.
* :func:`optimisation_progress`: ``eta * curvature * steps``: a gradient method that cannot
  cover the distance from w = 0 to the solution returns roughly w = 0 (the mean predictor).
* :func:`check_binary_labels`: labels must be exactly two values, mapped the way the loss
  expects ({-1, +1} for margin losses); {0, 1} given where {-1, +1} is expected is an error,
  not a silent fit of a constant.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

__all__ = [
    "NOISE_TO_SIGNAL_LIMIT",
    "PROGRESS_LIMIT",
    "UtilityWarning",
    "check_binary_labels",
    "noise_to_signal",
    "optimisation_progress",
    "output_noise_reasons",
    "sgd_noise_ratio",
    "warn_if_useless",
    "warn_if_worse_than_mean",
]

#: above this ratio of noise norm to the largest signal norm the fit is mostly noise
NOISE_TO_SIGNAL_LIMIT = 1.0
#: below this value of eta * curvature * steps the iterate barely leaves its start
PROGRESS_LIMIT = 1.0


class UtilityWarning(UserWarning):
    """A private fit whose configuration cannot learn much (the reason and a fix are given).

    Derived from public quantities only, so the warning itself releases nothing private.
    """


def noise_to_signal(noise_std: float, dimension: int, signal_norm: float) -> float:
    """Expected norm of N(0, noise_std^2 I_dimension) over ``signal_norm`` (inf for no signal)."""
    if not signal_norm > 0:
        return math.inf
    return float(noise_std) * math.sqrt(dimension) / float(signal_norm)


def sgd_noise_ratio(
    step_noise_std: float,
    learning_rate: float,
    curvature: float,
    tail_steps: float,
    dimension: int,
    signal_scale: float,
) -> float:
    """Prediction noise of a tail-averaged SGD iterate over the targets' scale.

    With iterate noise of std s per coordinate and step on a quadratic with step eta, a
    direction of curvature L holds stationary variance s^2 / (2 eta L) in the coefficient, i.e.
    s^2 / (2 eta) in the prediction (whatever L); averaging K steps whose correlation time is
    1 / (eta L) divides it by about K eta L / 2 (never by less than 1), with L the typical
    curvature given. Summed over ``dimension`` directions, over ``signal_scale``.
    """
    eta = float(learning_rate)
    rate = min(eta * float(curvature), 1.0)
    if not (rate > 0 and signal_scale > 0):
        return math.inf
    variance = dimension * step_noise_std**2 / (2.0 * eta) / max(1.0, tail_steps * rate / 2.0)
    return math.sqrt(variance) / float(signal_scale)


def optimisation_progress(learning_rate: float, curvature: float, steps: float) -> float:
    """eta * L * K: the share of the way to the solution a gradient method can travel along a
    direction of curvature L in K steps is 1 - (1 - eta L)^K, small when this is below 1."""
    return float(learning_rate) * float(curvature) * float(steps)


def output_noise_reasons(noise_std: float, dimension: int, radius: float) -> list[str]:
    """Output perturbation (Wang et al. (2022) Alg. 1): the released w~ = w + N(0, s^2 I_d) with
    ||w||
    <= radius; when s sqrt(d) exceeds the radius the noise is larger than any model the
    constraint set holds, and w~ is mostly noise (R^2 -15 to -43 measured for
    DPSGDRegressor(perturbation="output") on CCPP before issue 16)."""
    ratio = noise_to_signal(noise_std, dimension, radius)
    if ratio > NOISE_TO_SIGNAL_LIMIT:
        return [
            f"the output noise (norm about {noise_std * math.sqrt(dimension):.3g}) is "
            f"{ratio:.3g} times the radius {radius:.3g} of the parameter set"
        ]
    return []


def warn_if_useless(estimator: str, reasons: list[str], fixes: list[str], stacklevel: int = 3):
    """Emit one :class:`UtilityWarning` naming the estimator, every reason and every fix."""
    if not reasons:
        return
    text = (
        f"{estimator}: this configuration is unlikely to learn more than a constant: "
        + "; ".join(reasons)
        + ". Fix: "
        + "; or ".join(dict.fromkeys(fixes))
        + "."
    )
    warnings.warn(text, UtilityWarning, stacklevel=stacklevel)


#: the fit is "not expected to beat the intercept-only model" when its private R^2 is at most
#: this many standard errors (of the release noise) above zero
R2_MARGIN_SES = 2.0


def warn_if_worse_than_mean(
    estimator, method: str, r2: float | None, se: float | None, n: int, stacklevel: int = 3,
    fallback: str | None = None,
) -> None:  # fmt: skip
    """A :class:`UtilityWarning` when a fit's private R^2 (a released value:
    :func:`privopt.releases.fit_quality.private_r2`) is not above zero by R2_MARGIN_SES
    standard errors, with the numbers and what would help (post-processing: no privacy
    cost); always when ``fallback`` (why the fit fell back from the usual bounds, see
    :mod:`privopt.estimators._bounds_ladder`) is given, with the same numbers (``r2`` None: the
    intercept-only model, whose R^2 is at most 0 by construction)."""
    if fallback is None and not r2 - R2_MARGIN_SES * se <= 0.0:
        return
    bounds = "public bounds" if estimator.feature_bounds is not None else "no public bounds"
    worse = "the fit is not expected to beat predicting the mean: its"
    verdict = f"{fallback}; its" if fallback else worse
    quality = (
        f"{verdict} R^2 is at most 0 (a constant)"
        if r2 is None
        else f"{verdict} private R^2 estimate is {r2:.3g} +- {se:.2g} (clipped residuals, "
        "released with a small share of the budget)"
    )
    warnings.warn(
        f"DPLinearRegression(method={method!r}): {quality} at "
        f"epsilon={estimator.epsilon:g}, delta={estimator.delta:g}, {n} rows, "
        f"{estimator.n_features_in_} features, {bounds}. What would help: more epsilon or more "
        "rows, public feature_bounds/target_bounds (privopt fit --bounds) if they are tight, "
        "or fewer features.",
        UtilityWarning,
        stacklevel=stacklevel,
    )


def check_binary_labels(y: np.ndarray, expected: tuple[float, float] = (-1.0, 1.0)) -> np.ndarray:
    """``y`` as floats after checking it holds exactly the two values ``expected``.

    Raises ``ValueError`` for one class only, for more than two values, and for the {0, 1} /
    {-1, +1} mix-up (naming the mapping to apply), so that a wrong encoding never trains a model
    that predicts a single class.
    """
    y = np.asarray(y, dtype=float)
    values = np.unique(y)
    low, high = expected
    if values.size == 2 and values[0] == low and values[1] == high:
        return y
    if set(values.tolist()) <= {low, high} and values.size == 1:
        raise ValueError(f"Only one class ({values[0]:g}) in the labels; need both {expected}.")
    if values.size == 2 and (values[0], values[1]) in ((0.0, 1.0), (-1.0, 1.0)):
        raise ValueError(
            f"Labels are {{{values[0]:g}, {values[1]:g}}} but this loss expects "
            f"{{{low:g}, {high:g}}}: map them first (e.g. y = 2 * y - 1 for {{0, 1}} -> "
            "{-1, +1}); they are not converted silently."
        )
    raise ValueError(
        f"Expected binary labels in {{{low:g}, {high:g}}}, got {values.size} distinct values "
        f"({', '.join(f'{v:g}' for v in values[:5])}{', ...' if values.size > 5 else ''})."
    )
