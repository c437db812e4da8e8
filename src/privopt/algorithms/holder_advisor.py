"""Moved to :mod:`privopt.theory.holder_advisor` (Wang et al.'s (2022) (T, eta) advisor);
re-exported."""

from privopt.theory.holder_advisor import *  # noqa: F403
from privopt.theory.holder_advisor import __all__  # noqa: F401
