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
    "as_float_array",
    "check_count",
    "check_delta_for_rows",
    "check_design",
    "check_finite",
    "check_nonnegative",
    "check_positive",
    "check_probability",
    "check_sample_rate",
    "describe_non_numeric",
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


def _is_number(value: object) -> bool:
    """Whether ``float(value)`` works (numpy's own conversion rule for one cell)."""
    if isinstance(value, numbers.Real):
        return True
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def describe_non_numeric(data: object, name: str = "X") -> str | None:
    """Where ``data`` holds its first cell that is not a number, described by position and
    type only (never the cell's content): ``"X: column 'b' (position 1), row 7 holds a str"``.

    Rows are 0-based positions (an index label may itself be private). Returns None if every
    cell converts, or if no cell can be blamed (the caller then says so without a location).
    """
    import pandas as pd

    try:
        if isinstance(data, pd.Series):
            columns = [(repr(str(data.name)) if data.name is not None else None, data.to_numpy())]
        elif isinstance(data, pd.DataFrame):
            columns = [
                (repr(str(label)), data.iloc[:, j].to_numpy())
                for j, label in enumerate(data.columns)
            ]
        else:
            values = np.asarray(data, dtype=object)
            if values.ndim == 0:
                values = values.reshape(1)
            if values.ndim == 1:
                columns = [(None, values)]
            elif values.ndim == 2:
                columns = [(None, values[:, j]) for j in range(values.shape[1])]
            else:
                return None
    except (TypeError, ValueError):
        return None
    for j, (label, column) in enumerate(columns):
        if column.dtype.kind in "biuf":
            continue
        for i, value in enumerate(column):
            if value is None or _is_number(value):
                continue
            where = f"row {i}" if len(columns) == 1 else f"column {j}, row {i}"
            if label is not None:
                where = f"column {label} (position {j}), row {i}"
            kind = "a complex number" if isinstance(value, complex) else f"a {type(value).__name__}"
            return f"{name}: {where} holds {kind} that is not a real number"
    return None


def as_float_array(data: object, name: str = "X") -> np.ndarray:
    """``np.asarray(data, dtype=float)``, refusing a non-numeric cell by its position and type
    (numpy's own message quotes the cell, which may be private)."""
    try:
        return np.asarray(data, dtype=float)
    except (TypeError, ValueError):
        where = describe_non_numeric(data, name)
    raise ValueError(
        (where or f"{name} holds values that are not real numbers")
        + "; encode the column as numbers or leave it out (privopt never quotes data values)."
    )


def check_design(
    X: object, y: object, x_name: str = "X", y_name: str = "y"
) -> tuple[np.ndarray, np.ndarray]:
    """Return (X, y) as float64 arrays, requiring a non-empty (n, d) X, an (n,) y, all finite.

    Non-finite data would escape every clipping bound, so algorithms refuse it up front.
    """
    X = as_float_array(X, x_name)
    y = as_float_array(y, y_name)
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
