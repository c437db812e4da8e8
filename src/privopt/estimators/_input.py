"""scikit-learn's input validation without private values in its messages.

``validate_data`` (numpy underneath) quotes the offending cell (``could not convert string to
float: '4111...'``) or prints the whole array (a 1-D X, complex data). Error messages end up in
logs, tickets and chat, so every estimator validates through :func:`validate_rows`: the same
checks and results, and a refusal names the argument, the column, the row position and the
type, never a value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.validation import validate_data

from privopt._validate import describe_non_numeric

__all__ = ["NON_NUMERIC_FIX", "safe_message", "validate_rows"]

#: the fix every refusal of a non-numeric cell ends with
NON_NUMERIC_FIX = (
    "; encode the column as numbers or leave it out (privopt never quotes data values)."
)


def safe_message(message: str) -> str:
    """scikit-learn's message without the array dumps some of them append."""
    first, _, _ = message.partition("\n")
    if "1D array instead" in first:
        return (
            "Expected a 2-D X, got a 1-D array. Reshape your data: X.reshape(-1, 1) for one "
            "feature, X.reshape(1, -1) for one sample."
        )
    if "scalar array instead" in first:
        return "Expected a 2-D X, got a scalar. Reshape your data to (n_samples, n_features)."
    if first.startswith("Complex data not supported"):
        return "Complex data not supported; pass real numbers (e.g. the real part, X.real)."
    if "array=" in first:
        first = first.partition("array=")[0].rstrip(" :")
    if "feature names" in first:  # the lines after name columns (the schema, not values)
        return message
    return first


def validate_rows(estimator: Any, X: Any, y: Any = "no_validation", **kwargs: Any) -> Any:
    """``validate_data(estimator, X, y, **kwargs)`` whose refusals quote no data value.

    scikit-learn's finiteness check sums the array first; on rows holding both +inf and -inf
    that sum warns "invalid value encountered" before the refusal it leads to, so numpy's
    floating-point warnings are silenced here (the refusal itself is unchanged).
    """
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            return validate_data(estimator, X, y, **kwargs)
    except (ValueError, TypeError) as error:
        text, kind = str(error), type(error)
    if "could not convert" in text or "must be a string or a" in text:
        where = None
        for data, name in ((X, "X"), (y, "y")):
            skip = isinstance(data, str) and data == "no_validation"
            if name == "y" and (skip or data is None or not kwargs.get("y_numeric", False)):
                continue
            where = describe_non_numeric(data, name)
            if where is not None:
                break
        where = where or "The data hold values that are not real numbers"
        if kind is TypeError:  # float() refused the cell's type (no value in Python's text)
            raise TypeError(
                f"{where} (float() argument must be a string or a real number)" + NON_NUMERIC_FIX
            )
        raise ValueError(where + NON_NUMERIC_FIX) from None
    raise kind(safe_message(text)) from None
