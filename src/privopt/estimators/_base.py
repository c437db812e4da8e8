"""What every privopt estimator shares: the random state and the privacy report."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from privopt.accounting import PrivacyLedger, PrivacyReport
from privopt.algorithms.preprocess import LinearBounds, check_feature_bounds, public_bounds
from privopt.noise import SECRET_SEED_ASSUMPTION, SECURE_ASSUMPTION, secure_generator

__all__ = ["PrivateEstimator", "as_generator"]

#: scikit-learn constraints of the parameters every privopt estimator shares (the privacy
#: target, the public bounds, private preprocessing and the randomness).
SHARED_CONSTRAINTS: dict[str, list[Any]] = {
    "epsilon": [Interval(numbers.Real, 0, None, closed="neither")],
    "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
    "fit_intercept": ["boolean"],
    "feature_bounds": [None, "array-like"],
    "preprocess_fraction": [Interval(numbers.Real, 0, 0.5, closed="neither")],
    "random_state": [None, "random_state", np.random.Generator],
    "diagnostics": ["boolean"],
    "secure_mode": ["boolean"],
}


def public_linear_bounds(
    feature_bounds: Any,
    target_bounds: Any,
    n_features: int,
    fit_intercept: bool,
    ledger: PrivacyLedger,
) -> LinearBounds | None:
    """Bounds from the public ``feature_bounds`` and ``target_bounds`` (both or neither).

    None when neither is given (the caller estimates them privately); the assumption that the
    data are clipped to the user's public bounds is recorded in ``ledger`` otherwise.
    """
    if (feature_bounds is None) != (target_bounds is None):
        raise ValueError("Give both feature_bounds and target_bounds, or neither.")
    if feature_bounds is None:
        return None
    fb = check_feature_bounds(feature_bounds, n_features)
    tb = np.asarray(target_bounds, dtype=float).ravel()
    if tb.shape != (2,):
        raise ValueError("target_bounds must be a (low, high) pair.")
    ledger.assume("features and target clipped to the public bounds given by the user")
    return public_bounds(fb, (tb[0], tb[1]), fit_intercept)


def as_generator(random_state: Any, secure_mode: bool = False) -> np.random.Generator:
    """None, an int seed or a numpy Generator, as a Generator (clear error otherwise).

    ``secure_mode=True`` returns a ChaCha20 generator keyed from the operating system
    (:func:`privopt.noise.secure_generator`); ``random_state`` must then be None, since a seed
    would make the noise reproducible by whoever knows it.
    """
    if secure_mode:
        if random_state is not None:
            raise ValueError(
                "secure_mode=True draws the noise from the operating system's CSPRNG; "
                f"random_state must be None, got {random_state!r}."
            )
        return secure_generator()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or isinstance(random_state, numbers.Integral):
        return np.random.default_rng(random_state)
    raise ValueError(
        f"Expected random_state to be None, an int or a numpy Generator, got {random_state!r}."
    )


class PrivateEstimator(BaseEstimator):
    """A scikit-learn estimator whose fit sets ``privacy_report_`` and uses ``random_state``."""

    def _generator(self, ledger: PrivacyLedger) -> np.random.Generator:
        """The fit's randomness (``random_state`` / ``secure_mode``), stated in the report."""
        secure = getattr(self, "secure_mode", False)
        if secure not in (True, False):
            raise ValueError(f"Expected secure_mode to be True or False, got {secure!r}.")
        rng = as_generator(self.random_state, bool(secure))
        if secure:
            ledger.assume(SECURE_ASSUMPTION)
        elif self.random_state is not None:
            ledger.assume(SECRET_SEED_ASSUMPTION)
        return rng

    @property
    def report(self) -> PrivacyReport:
        """Alias of ``privacy_report_``."""
        check_is_fitted(self)
        return self.privacy_report_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None or bool(
            getattr(self, "secure_mode", False)
        )
        return tags
