"""Checks shared by the finite-horizon mechanisms and by the streams that checkpoint arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from privopt._validate import check_count

__all__ = ["check_coefficient_vector", "check_within_horizon", "restored_array"]


def check_within_horizon(steps: int, horizon: int, matrix: str) -> int:
    """``steps`` (a count) if a mechanism materialised for ``horizon`` steps can serve it."""
    steps = check_count("steps", steps)
    if steps > horizon:
        raise ValueError(f"This {matrix} has horizon {horizon}; got steps={steps}.")
    return steps


def check_coefficient_vector(values: Any, name: str, first: str, matrix: str) -> np.ndarray:
    """A non-empty, finite 1-D vector of Toeplitz coefficients whose first entry is non-zero.

    The lower-triangular Toeplitz ``matrix`` they define is then invertible. ``name`` names the
    coefficients and ``first`` their first entry in the error messages.
    """
    c = np.asarray(values, dtype=float)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"Expected a non-empty 1-D vector of {name}.")
    if not np.all(np.isfinite(c)):
        raise ValueError(f"Expected finite {name}.")
    if c[0] == 0.0:
        raise ValueError(f"{first} must be non-zero ({matrix} must be invertible).")
    return c


def restored_array(state: dict[str, Any], key: str, current: np.ndarray) -> np.ndarray:
    """A float copy of the checkpoint's ``state[key]``, which must have ``current``'s shape."""
    value = np.asarray(state[key], dtype=float)
    if value.shape != current.shape:
        raise ValueError(f"Checkpoint {key!r} has shape {value.shape}, expected {current.shape}.")
    return value.copy()
