"""Per-record validation utilities in [0, 1], so that a candidate's total score has sensitivity 1.

A candidate's score on the validation records is ``u = sum_i s(y_i, f(x_i))`` with each record's
utility ``s`` in [0, 1]. Replacing (or zeroing out) one validation record changes ``u`` by at most
1, for every candidate at once: the l-infinity sensitivity the exponential mechanism needs is
``Delta = 1``, whatever the models (they were trained on other records).

* classifiers: ``s = 1[f(x) = y]`` (accuracy);
* regressors: ``s = 1 - min((y - f(x))^2 / c, 1)``, with ``c`` a public bound on the squared
  error worth distinguishing (errors beyond it score 0).
"""

from __future__ import annotations

import numpy as np

__all__ = ["UTILITY_SENSITIVITY", "record_utilities"]

#: l-infinity sensitivity of the summed utilities (one record moves each by at most 1).
UTILITY_SENSITIVITY = 1.0


def record_utilities(
    y_true: np.ndarray, y_pred: np.ndarray, classifier: bool, error_bound: float | None
) -> np.ndarray:
    """Each validation record's utility in [0, 1] (see the module notes)."""
    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    if classifier:
        return (y_true == y_pred).astype(float)
    if error_bound is None or not np.isfinite(error_bound) or error_bound <= 0:
        raise ValueError(f"Expected error_bound > 0 and finite, got {error_bound!r}.")
    error = (y_true.astype(float) - y_pred.astype(float)) ** 2
    error = np.where(np.isfinite(error), error, np.inf)  # a non-finite prediction scores 0
    return 1.0 - np.minimum(error / error_bound, 1.0)
