"""Per-example gradients of a model, clipped and summed: the one gradient abstraction.

A model answers ``clipped_gradient_sum(w, X, y, clip) -> (sum_i clip_G(grad_i), fraction)`` over
a batch. Linear losses never materialise the per-example gradients: their gradient is
``r_i(w) x_i`` with norm ``|r_i| ||x_i||``, so :func:`privopt.clipping.clip_factors` works from the
residuals alone (DESIGN.md, "Linear models never materialise per-example gradients").
:class:`GenericModel` wraps any ``grad_fn(w, X, y) -> (b, p)``. All clipping goes through
:mod:`privopt.clipping`, whose clipped norms never exceed G, even in floating point.

The fraction clipped is a non-private diagnostic: the training loop returns it only with
``diagnostics=True`` (:func:`privopt.algorithms.result.release_diagnostics`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt._validate import check_nonnegative
from privopt.clipping import clip_factors, row_norms
from privopt.clipping.clip import clip_factor

__all__ = [
    "FTRLModel",
    "GenericModel",
    "GradientModel",
    "LinearRegressionModel",
    "LogisticRegressionModel",
    "LossModel",
    "SigmaNormLinearModel",
    "as_model",
    "clip_coefficients",
    "parameter_count",
]


class GradientModel:
    """Per-example gradients of a loss; subclasses give closed forms where they exist."""

    name = "model"

    def clipped_gradient_sum(
        self, w: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None
    ) -> tuple[np.ndarray, float]:
        """(sum_i clip(grad_i), fraction clipped) over the batch; ``clip=None`` disables it."""
        raise NotImplementedError

    def prepare(self, X: np.ndarray, y: np.ndarray | None = None) -> Any:
        """Per-row quantities computed once per fit (kept inside the loop, never released);
        labels are validated here."""
        return None

    def batch_gradient_sum(
        self,
        w: np.ndarray,
        X: np.ndarray,
        y: np.ndarray,
        batch: np.ndarray,
        clip: float | None,
        prepared: Any = None,
    ) -> tuple[np.ndarray, float]:
        """:meth:`clipped_gradient_sum` over the rows ``batch``, using :meth:`prepare`'s cache."""
        return self.clipped_gradient_sum(w, X[batch], y[batch], clip)


class _ResidualModel(GradientModel):
    """Losses whose per-example gradient is r_i(w) x_i: norm |r_i| ||x_i||, no gradient matrix."""

    def residuals(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def clipped_gradient_sum(self, w, X, y, clip):
        return self._sum(w, X, y, clip, None)

    def prepare(self, X: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        return row_norms(X)  # ||x_i|| once per fit, not once per step

    def batch_gradient_sum(self, w, X, y, batch, clip, prepared=None):
        norms = None if prepared is None else prepared[batch]
        return self._sum(w, X[batch], y[batch], clip, norms)

    def _sum(self, w, X, y, clip, norms):
        r = self.residuals(w, X, y)
        if clip is None:
            return X.T @ r, 0.0
        norms = row_norms(X) if norms is None else norms
        factors = clip_factors(np.abs(r) * norms, clip)
        clipped = np.count_nonzero(factors < 1.0) / r.size if r.size else 0.0
        return X.T @ (r * factors), clipped


class LinearRegressionModel(_ResidualModel):
    """Squared loss 1/2 (<x, w> - y)^2: gradient (<x, w> - y) x."""

    name = "linear"

    def residuals(self, w, X, y):
        return X @ w - y

    def scalar_residual(self, z: float, y: float) -> float:
        return z - y


class SigmaNormLinearModel(LinearRegressionModel):
    """Squared loss clipped in the Σ^-1 norm (Private Overparameterized Linear Regression, anonymous
    submission): ||r x||_{Σ^-1} = |r| ||x||_{Σ^-1}.

    The per-row norms ||x_i||_{Σ^-1} come from the public covariance operator once per fit (no
    d x d matrix); the factors from :func:`privopt.clipping.clip_factors` on |r_i| ||x_i||_{Σ^-1},
    and the coefficient c_i = r_i f_i is stepped toward 0 where the product |c_i| ||x_i||_{Σ^-1}
    (the clipped norm as computed) would round above the threshold.
    """

    name = "linear (sigma^-1 norm)"

    def __init__(self, covariance: Any) -> None:
        self.covariance = covariance

    def prepare(self, X: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        return self.inv_norms(X)

    def inv_norms(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.covariance.inv_norm(X), dtype=float).reshape(-1)

    def _sum(self, w, X, y, clip, norms):
        r = self.residuals(w, X, y)
        if clip is None:
            return X.T @ r, 0.0
        coefficients, clipped = clip_coefficients(
            r, self.inv_norms(X) if norms is None else norms, clip
        )
        return X.T @ coefficients, np.count_nonzero(clipped) / r.size if r.size else 0.0


def clip_coefficients(
    residuals: np.ndarray, norms: np.ndarray, clip: float
) -> tuple[np.ndarray, np.ndarray]:
    """(c, clipped): c_i x_i = clip(r_i x_i) with |c_i| norms_i <= clip in floating point.

    The factor is :func:`privopt.clipping.clip_factors`'s on the scalar norms |r_i| norms_i; the
    product r_i f_i may round one ulp above, so it is stepped toward 0 until |c_i| norms_i <=
    clip. Norms at or below the threshold pass unchanged (c_i = r_i).
    """
    residuals = np.asarray(residuals, dtype=float)
    if residuals.size == 1 and np.size(norms) == 1:  # one row per step (DP-FTRL-Σ): on floats
        return _clip_coefficient(float(residuals.flat[0]), float(np.ravel(norms)[0]), clip)
    factors = clip_factors(np.abs(residuals) * norms, clip)
    clipped = factors < 1.0
    coefficients = residuals * factors
    over = np.abs(coefficients) * norms > clip
    while np.any(over):
        coefficients[over] = np.nextafter(coefficients[over], 0.0)
        over = np.abs(coefficients) * norms > clip
    return coefficients, clipped


def _clip_coefficient(r: float, norm: float, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`clip_coefficients` for one row, on Python floats (the same values and checks:
    :func:`privopt.clipping.clip_factor` is :func:`~privopt.clipping.clip_factors` on floats)."""
    clip = check_nonnegative("threshold", clip)
    factor = clip_factor(abs(r) * norm, clip)
    c = r * factor
    while abs(c) * norm > clip:
        c = math.nextafter(c, 0.0)
    return np.array([c]), np.array([factor < 1.0])


class LogisticRegressionModel(_ResidualModel):
    """Logistic loss with labels in {0, 1}: gradient (sigmoid(<x, w>) - y) x.

    Labels are checked once per fit: ±1 labels (privopt.losses' convention) would give a
    silently wrong model here, so they are refused with the conversion to use, or use
    ``LossModel("logistic")``, which takes ±1 labels.
    """

    name = "logistic"

    def prepare(self, X: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        if y is not None:
            _check_binary_labels(y, (0.0, 1.0), "model='logistic' (labels in {0, 1})")
        return super().prepare(X)

    def residuals(self, w, X, y):
        z = X @ w
        return np.exp(-np.logaddexp(0.0, -z)) - y  # sigmoid without overflow

    def scalar_residual(self, z: float, y: float) -> float:
        return float(np.exp(-np.logaddexp(0.0, -z))) - y


@dataclass(frozen=True)
class LossModel(_ResidualModel):
    """Any :class:`privopt.losses.LinearLoss` of a linear model: gradient phi'(<x, w>, y) x.

    The loss validates its labels (±1 for classification) once per fit, so the core has one
    gradient abstraction for every linear loss of the five papers (closed-form norms
    |phi'| ||x||, no per-example gradient matrix).
    """

    loss: Any = None
    name: str = "loss"

    def __post_init__(self) -> None:
        from privopt.losses import LinearLoss, get_loss

        loss = get_loss(self.loss) if isinstance(self.loss, str) else self.loss
        if not isinstance(loss, LinearLoss):
            raise TypeError(f"Expected a privopt.losses.LinearLoss or its name, got {loss!r}.")
        object.__setattr__(self, "loss", loss)
        object.__setattr__(self, "name", f"loss:{loss.name}")

    def prepare(self, X: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        if y is not None:
            self.loss.derivative(np.zeros(np.shape(y)), y)  # validates every label once
        return super().prepare(X)

    def residuals(self, w, X, y):
        return self.loss._derivative(X @ w, y)  # labels validated in prepare

    def scalar_residual(self, z: float, y: float) -> float:
        return self.loss._derivative(z, y)


def _check_binary_labels(y: np.ndarray, allowed: tuple[float, float], what: str) -> None:
    values = np.unique(np.asarray(y, dtype=float))
    if not np.all(np.isin(values, allowed)):
        hint = " (labels look like ±1: pass (y + 1) / 2)" if -1.0 in values else ""
        raise ValueError(f"{what} got labels {values[:5].tolist()}{hint}.")


@dataclass(frozen=True)
class GenericModel(GradientModel):
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


#: The name the DP-FTRL module has always used for the gradient abstraction.
FTRLModel = GradientModel

_MODELS: dict[str, type[GradientModel]] = {
    "linear": LinearRegressionModel,
    "logistic": LogisticRegressionModel,
}


def as_model(model: str | GradientModel) -> GradientModel:
    """A model from its name (``"linear"``, ``"logistic"`` with {0, 1} labels, or any
    :mod:`privopt.losses` name such as ``"hinge"``, ±1 labels) or a :class:`GradientModel`."""
    if isinstance(model, str):
        if model in _MODELS:
            return _MODELS[model]()
        from privopt.losses.registry import LOSS_NAMES

        if model in LOSS_NAMES:
            return LossModel(model)
        raise ValueError(
            f"Expected model in {tuple(_MODELS)}, a privopt.losses name or a GradientModel, "
            f"got {model!r}."
        )
    if not isinstance(model, GradientModel):
        raise TypeError(f"Expected a GradientModel, got {type(model).__name__}.")
    return model


def parameter_count(model: GradientModel, X: np.ndarray, w0: np.ndarray | None) -> int:
    """p: the features' count for the linear models; w0's length for a generic model."""
    if isinstance(model, GenericModel) and w0 is not None:
        return int(np.asarray(w0).size)
    return X.shape[1]
