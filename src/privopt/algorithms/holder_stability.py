"""Moved to :mod:`privopt.theory.holder_stability` (Wang et al.'s (2022) Theorem 7); re-exported
here."""

from privopt.theory.holder_stability import *  # noqa: F403
from privopt.theory.holder_stability import __all__  # noqa: F401
