"""What every privopt estimator shares: the random state and the privacy report."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from privopt.accounting import PrivacyLedger, PrivacyReport
from privopt.noise import SECRET_SEED_ASSUMPTION, SECURE_ASSUMPTION, secure_generator

__all__ = ["PrivateEstimator", "as_generator"]


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
