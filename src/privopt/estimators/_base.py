"""What every privopt estimator shares: the random state and the privacy report."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from privopt.accounting import PrivacyReport

__all__ = ["PrivateEstimator", "as_generator"]


def as_generator(random_state: Any) -> np.random.Generator:
    """None, an int seed or a numpy Generator, as a Generator (clear error otherwise)."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or isinstance(random_state, numbers.Integral):
        return np.random.default_rng(random_state)
    raise ValueError(
        f"Expected random_state to be None, an int or a numpy Generator, got {random_state!r}."
    )


class PrivateEstimator(BaseEstimator):
    """A scikit-learn estimator whose fit sets ``privacy_report_`` and uses ``random_state``."""

    @property
    def report(self) -> PrivacyReport:
        """Alias of ``privacy_report_``."""
        check_is_fitted(self)
        return self.privacy_report_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        return tags
