"""Argument validation in one place, with uniform, actionable messages.

Every public function of privopt validates its scalar arguments through these helpers, so a bad
value fails early with a ``ValueError`` that names the argument and the expected range, instead
of propagating a silent NaN into a privacy claim.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = [
    "check_count",
    "check_delta_for_rows",
    "check_design",
    "check_finite",
    "check_nonnegative",
    "check_positive",
    "check_probability",
    "check_sample_rate",
]


def _as_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"Expected {name} to be a real number, got {value!r}.")
    out = float(value)
    if math.isnan(out):
        raise ValueError(f"Expected {name} to be a number, got NaN.")
    return out


def check_finite(name: str, value: object) -> float:
    """Return ``value`` as a float, raising ``ValueError`` if it is NaN or infinite."""
    out = _as_real(name, value)
    if math.isinf(out):
        raise ValueError(f"Expected {name} to be finite, got {out!r}.")
    return out


def check_positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float, requiring ``value > 0`` (and finite unless ``allow_inf``)."""
    out = _as_real(name, value) if allow_inf else check_finite(name, value)
    if not out > 0:
        raise ValueError(f"Expected {name} > 0, got {out!r}.")
    return out


def check_nonnegative(name: str, value: object, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float, requiring ``value >= 0`` (and finite unless ``allow_inf``)."""
    out = _as_real(name, value) if allow_inf else check_finite(name, value)
    if not out >= 0:
        raise ValueError(f"Expected {name} >= 0, got {out!r}.")
    return out


def check_probability(name: str, value: object) -> float:
    """Return ``value`` as a float in the open interval (0, 1); used for delta."""
    out = check_finite(name, value)
    if not 0.0 < out < 1.0:
        raise ValueError(f"Expected {name} in the open interval (0, 1), got {out!r}.")
    return out


def check_sample_rate(name: str, value: object) -> float:
    """Return ``value`` as a float in the half-open interval (0, 1]."""
    out = check_finite(name, value)
    if not 0.0 < out <= 1.0:
        raise ValueError(f"Expected {name} in the interval (0, 1], got {out!r}.")
    return out


def check_count(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` as an int, requiring an integral value ``>= minimum``."""
    if isinstance(value, bool):
        raise ValueError(f"Expected {name} to be an integer >= {minimum}, got {value!r}.")
    if isinstance(value, numbers.Integral):
        out = int(value)
    elif (
        isinstance(value, numbers.Real)
        and math.isfinite(float(value))
        and float(value).is_integer()
    ):
        out = int(float(value))
    else:
        raise ValueError(f"Expected {name} to be an integer >= {minimum}, got {value!r}.")
    if out < minimum:
        raise ValueError(f"Expected {name} to be an integer >= {minimum}, got {out!r}.")
    return out


def check_design(
    X: object, y: object, x_name: str = "X", y_name: str = "y"
) -> tuple[np.ndarray, np.ndarray]:
    """Return (X, y) as float64 arrays, requiring a non-empty (n, d) X, an (n,) y, all finite.

    Non-finite data would escape every clipping bound, so algorithms refuse it up front.
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"Expected {x_name} of shape (n, d), got shape {X.shape}.")
    if y.ndim != 1:
        raise ValueError(f"Expected {y_name} of shape (n,), got shape {y.shape}.")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(
            f"Expected non-empty data with n >= 1 rows and d >= 1 columns, got {X.shape}."
        )
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"{x_name} has {X.shape[0]} rows but {y_name} has {y.shape[0]} entries.")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{x_name} contains non-finite values (NaN or inf).")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{y_name} contains non-finite values (NaN or inf).")
    return X, y


def check_delta_for_rows(
    delta: object,
    n_rows: int,
    *,
    allow_large: bool = False,
    flag: str = "allow_large_delta=True (privopt fit: --allow-large-delta)",
) -> float:
    """Return delta, refusing ``delta >= 1 / n_rows`` unless ``allow_large``.

    A mechanism may be (epsilon, delta)-DP and still publish each record with probability
    delta ("name and shame"): with delta >= 1/N that is one record in expectation, which no
    one should accept by accident (Dwork & Roth 2014, §2.3). ``flag`` names how to insist.

    >>> check_delta_for_rows(1e-6, 1000)
    1e-06
    >>> check_delta_for_rows(0.01, 1000, allow_large=True)
    0.01
    """
    out = check_probability("delta", delta)
    n = check_count("n_rows", n_rows)
    if out >= 1.0 / n and not allow_large:
        raise ValueError(
            f"Expected delta < 1/N = {1.0 / n:.3g} for N = {n} rows, got delta = {out!r}: a "
            "mechanism with delta >= 1/N may publish a whole record; use a smaller delta, or "
            f"{flag} to accept it."
        )
    return out
