"""What every fit returns: coefficients, the privacy report, and a per-step trace.

Privacy of diagnostics. A trace holds public or privatised per-step values (clip thresholds that
are public or privately estimated, noise stds). Quantities computed from the private data without
noise (the fraction of a batch that was clipped, the largest per-example norm, how often the
secret index sequence visited a record) are releases too: for a one-example-per-step algorithm,
``clip_fraction[t]`` says whether record t was clipped. They are therefore dropped by
:func:`release_diagnostics` unless the caller asks for them with ``diagnostics=True``, which warns
(:class:`NonPrivateDiagnosticsWarning`) and records them in the ledger as non-private releases, so
the privacy report states that they are not covered by its guarantee.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from privopt.accounting import PrivacyReport

if TYPE_CHECKING:  # pragma: no cover
    from privopt.accounting import PrivacyLedger

__all__ = ["FitResult", "FitTrace", "NonPrivateDiagnosticsWarning", "release_diagnostics"]

#: Trace series computed from the private data without noise (kept only with diagnostics=True).
NON_PRIVATE_TRACE_EXTRAS = frozenset({"max_norm", "noise_norm"})
#: Info keys computed from the private data, or from secret sampling, without noise.
NON_PRIVATE_INFO_KEYS = frozenset({"clipped_fraction", "max_visits"})


class NonPrivateDiagnosticsWarning(UserWarning):
    """Diagnostics computed from the private data without noise were released on request."""


@dataclass(frozen=True)
class FitTrace:
    """Per-step diagnostics of an iterative private fit (all arrays have one entry per step).

    Attributes:
        clip_threshold: clipping norm used at each step (zeta_t).
        clip_fraction: fraction of the step's per-example gradients that were clipped; a
            non-private diagnostic, ``None`` unless the fit ran with ``diagnostics=True``.
        noise_std: per-coordinate standard deviation of the noise added to the update.
        extra: further named per-step series (e.g. DP-STAT's gamma_t).
    """

    clip_threshold: np.ndarray
    clip_fraction: np.ndarray | None
    noise_std: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> FitTrace:
        return cls(np.zeros(0), None, np.zeros(0))

    @property
    def steps(self) -> int:
        return int(self.clip_threshold.shape[0])

    def to_dict(self) -> dict[str, list[float]]:
        out = {
            "clip_threshold": self.clip_threshold.tolist(),
            "noise_std": self.noise_std.tolist(),
        }
        if self.clip_fraction is not None:
            out["clip_fraction"] = self.clip_fraction.tolist()
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


def release_diagnostics(
    trace: FitTrace,
    info: dict[str, Any],
    *,
    diagnostics: bool,
    ledger: PrivacyLedger | None,
    extra_info_keys: Iterable[str] = (),
) -> tuple[FitTrace, dict[str, Any]]:
    """The trace and info a fit may return: non-private diagnostics only on request.

    With ``diagnostics=False`` (every algorithm's default) the trace's ``clip_fraction`` becomes
    None and the non-private extras and info keys (:data:`NON_PRIVATE_TRACE_EXTRAS`,
    :data:`NON_PRIVATE_INFO_KEYS`, ``extra_info_keys``) are removed. With ``diagnostics=True``
    they are kept, a :class:`NonPrivateDiagnosticsWarning` is issued, and each is recorded in
    ``ledger`` as a non-private release (the report says it is outside the guarantee; ``ledger``
    is None only for a fit that is not private at all).
    """
    if not isinstance(diagnostics, bool | np.bool_):
        raise ValueError(f"Expected diagnostics to be True or False, got {diagnostics!r}.")
    info_keys = NON_PRIVATE_INFO_KEYS | frozenset(extra_info_keys)
    released = [k for k in info if k in info_keys]
    released += [k for k in trace.extra if k in NON_PRIVATE_TRACE_EXTRAS]
    if trace.clip_fraction is not None:
        released.insert(0, "clip_fraction")
    if diagnostics:
        if released:
            names = ", ".join(released)
            warnings.warn(
                f"diagnostics=True releases {names} computed from the private data without "
                "noise; they are not covered by the privacy report's guarantee.",
                NonPrivateDiagnosticsWarning,
                stacklevel=3,
            )
            for name in released if ledger is not None else ():
                ledger.disclose(f"{name} (diagnostic computed from the private data, no noise)")
        return trace, info
    trace = dataclasses.replace(
        trace,
        clip_fraction=None,
        extra={k: v for k, v in trace.extra.items() if k not in NON_PRIVATE_TRACE_EXTRAS},
    )
    return trace, {k: v for k, v in info.items() if k not in info_keys}
