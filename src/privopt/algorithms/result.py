"""Re-export of :mod:`privopt.training.result` (the result types moved with the training core)."""

from privopt.training.result import (
    NON_PRIVATE_INFO_KEYS,
    NON_PRIVATE_TRACE_EXTRAS,
    FitResult,
    FitTrace,
    NonPrivateDiagnosticsWarning,
    release_diagnostics,
)

__all__ = [
    "NON_PRIVATE_INFO_KEYS",
    "NON_PRIVATE_TRACE_EXTRAS",
    "FitResult",
    "FitTrace",
    "NonPrivateDiagnosticsWarning",
    "release_diagnostics",
]
