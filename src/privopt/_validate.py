"""Argument validation in one place, with uniform, actionable messages.

Every public function of privopt validates its scalar arguments through these helpers, so a bad
value fails early with a ``ValueError`` that names the argument and the expected range, instead
of propagating a silent NaN into a privacy claim.
"""

from __future__ import annotations

import math
import numbers

__all__ = [
    "check_count",
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
        out = int(value)
    else:
        raise ValueError(f"Expected {name} to be an integer >= {minimum}, got {value!r}.")
    if out < minimum:
        raise ValueError(f"Expected {name} to be an integer >= {minimum}, got {out!r}.")
    return out
