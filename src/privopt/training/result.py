"""What every fit returns: coefficients, the privacy report, and a per-step trace."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privopt.accounting import PrivacyReport

__all__ = ["FitResult", "FitTrace"]


@dataclass(frozen=True)
class FitTrace:
    """Per-step diagnostics of an iterative private fit (all arrays have one entry per step).

    Attributes:
        clip_threshold: clipping norm used at each step (zeta_t).
        clip_fraction: fraction of the step's per-example gradients that were clipped.
        noise_std: per-coordinate standard deviation of the noise added to the update.
        extra: further named per-step series (e.g. DP-STAT's gamma_t).
    """

    clip_threshold: np.ndarray
    clip_fraction: np.ndarray
    noise_std: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> FitTrace:
        return cls(np.zeros(0), np.zeros(0), np.zeros(0))

    @property
    def steps(self) -> int:
        return int(self.clip_threshold.shape[0])

    def to_dict(self) -> dict[str, list[float]]:
        out = {
            "clip_threshold": self.clip_threshold.tolist(),
            "clip_fraction": self.clip_fraction.tolist(),
            "noise_std": self.noise_std.tolist(),
        }
        out.update({k: np.asarray(v).tolist() for k, v in self.extra.items()})
        return out


@dataclass(frozen=True)
class FitResult:
    """One private fit.

    Attributes:
        coef: fitted coefficients (in the caller's feature units).
        intercept: fitted intercept (0.0 when the model has none).
        report: the privacy report of every release the fit made.
        trace: per-step diagnostics.
        method: the algorithm's short name.
        info: configuration actually used (step size, batch sizes, unused records, ...).
    """

    coef: np.ndarray
    intercept: float
    report: PrivacyReport
    trace: FitTrace
    method: str
    info: dict[str, Any] = field(default_factory=dict)
