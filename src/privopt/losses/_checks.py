"""Input checks shared by the losses: labels, array shapes, data bounds and the exponent q.

Every check raises ``ValueError`` with a message that names the argument and says what was
expected, so a wrong call fails before it can turn into a wrong privacy constant.
"""

from __future__ import annotations

import math

import numpy as np

from privopt._validate import check_finite, check_nonnegative, check_positive

__all__ = [
    "check_bound",
    "check_exponent",
    "check_labels",
    "check_linear_inputs",
    "check_pointwise_inputs",
    "check_radius",
    "check_y_bound",
]


def check_labels(y: object, name: str = "y") -> np.ndarray:
    r"""Return classification labels as a float array, requiring every entry in {-1, +1}.

    Margin losses are written φ(z, y) = ψ(y z); their constants (docs/theory/non-smooth-sgd.md)
    assume ``|y| = 1``. Labels 0/1 map to -1/+1 with ``2 * y - 1``.

    >>> check_labels([1, -1, 1])
    array([ 1., -1.,  1.])
    """
    try:
        labels = np.asarray(y, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(
            f"Classification losses need numeric labels in {{-1, +1}}; could not read {name} "
            "as numbers. Encode the two classes as -1 and +1 first."
        ) from None
    bad = ~(np.abs(labels) == 1.0)  # also catches NaN
    if np.any(bad):
        shown = np.unique(labels[bad])[:5].tolist()
        raise ValueError(
            f"Classification losses need labels in {{-1, +1}}; {name} contains {shown}"
            f"{' (and more)' if np.unique(labels[bad]).size > 5 else ''}. Map the two classes to "
            "-1 and +1 first (0/1 labels: 2 * y - 1)."
        )
    return labels


def check_pointwise_inputs(z: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    """Return (z, y) as float arrays of one and the same shape (margins and labels/targets)."""
    z = np.asarray(z, dtype=float)
    y = np.asarray(y, dtype=float)
    if z.shape != y.shape:
        raise ValueError(
            f"Expected z and y of the same shape, got z of shape {z.shape} and y of shape "
            f"{y.shape}."
        )
    return z, y


def check_linear_inputs(w: object, X: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    """Return (w, X) as float arrays, requiring X of shape (n, d), w of shape (d,), y of (n,).

    Finiteness is not checked here (it would double the cost of a gradient); algorithms check
    the data once, e.g. with :meth:`privopt.losses.LinearLoss.check_data`.
    """
    X = np.asarray(X, dtype=float)
    w = np.asarray(w, dtype=float)
    y_shape = np.shape(y)
    if X.ndim != 2:
        raise ValueError(f"Expected X of shape (n, d), got shape {X.shape}.")
    if w.shape != (X.shape[1],):
        raise ValueError(
            f"Expected w of shape ({X.shape[1]},) to match X of shape {X.shape}, got shape "
            f"{w.shape}."
        )
    if y_shape != (X.shape[0],):
        raise ValueError(
            f"Expected y of shape ({X.shape[0]},) to match X of shape {X.shape}, got shape "
            f"{y_shape}."
        )
    return w, X


def check_bound(name: str, value: object) -> float:
    """Return a data bound (x_bound or y_bound) as a float, requiring ``0 < value < inf``."""
    return check_positive(name, value)


def check_y_bound(y_bound: object) -> float:
    """Return the bound on |y| as a float, requiring ``y_bound > 0``; None means no bound (inf)."""
    if y_bound is None:
        return math.inf
    return check_positive("y_bound", y_bound, allow_inf=True)


def check_radius(radius: object) -> float:
    """Return the domain radius R as a float; ``None`` (or inf) means the unbounded domain R^d."""
    if radius is None:
        return math.inf
    return check_nonnegative("radius", radius, allow_inf=True)


def check_exponent(q: object, family: str) -> float:
    r"""Return the exponent q of a q-norm loss as a float, requiring 1 <= q <= 2.

    * q < 1: t ↦ t^q is concave on t >= 0, so the loss is not convex; every result of Wang et
      al. (2022) (stability, privacy, utility) assumes a convex loss
      (docs/theory/non-smooth-sgd.md).
    * q > 2: the derivative grows like |t|^(q-1) with q - 1 > 1, so for a fixed gap |t - t'| the
      difference of derivatives grows without bound as |t| grows: it is not α-Hölder for any
      α in [0, 1] on R (and hence not on R^d), so no constant L exists
      (docs/theory/non-smooth-sgd.md covers exactly 1 <= q <= 2, where the loss is (q - 1)-Hölder
      smooth).
    """
    q = check_finite("q", q)
    if q < 1.0:
        raise ValueError(
            f"q = {q!r} < 1 makes the {family} loss non-convex (t -> t^q is concave on t >= 0); "
            "the privacy and stability analysis of docs/theory/non-smooth-sgd.md needs a convex "
            "loss. Use 1 <= q <= 2."
        )
    if q > 2.0:
        raise ValueError(
            f"q = {q!r} > 2 is refused: the derivative of the {family} loss grows like "
            f"|t|^{q - 1:g} with exponent > 1, so it is not alpha-Hölder continuous for any "
            "alpha in [0, 1] on an unbounded set of margins and no Hölder constant L exists "
            "(docs/theory/non-smooth-sgd.md: q-norm losses are (q - 1)-Hölder only for "
            "1 <= q <= 2). Use 1 <= q <= 2."
        )
    return q
