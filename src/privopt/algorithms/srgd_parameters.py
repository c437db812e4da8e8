r"""Parameters of Accelerated-DP-SRGD (Choquette-Choo, Ganesh & Thakurta 2025) from public inputs,
and the exact noise.

:func:`srgd_parameters` validates the public inputs, takes B, T, beta and the clipping
thresholds from the caller or from the theorems' presets (:mod:`privopt.algorithms.srgd_presets`:
Theorem 14's general setting, Eq. 19's interior setting, ``clip_first = L``) and calibrates the
noise (:mod:`privopt.algorithms.srgd_privacy`).

Only utility (never privacy) depends on these choices, so out-of-theory values warn
(:class:`SRGDWarning`) instead of failing: ``beta < M`` (Theorem 3), ``beta < 2 M T`` in the
general setting (Lemma 11: the clip may bind and bias the gradients) and ``B > sqrt n`` in the
general setting (Theorem 14). When ``B T < n`` the ``n - B T`` records left over by the
permutation are **dropped** (never used); ``B T > n`` is refused.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any

from privopt._validate import check_count, check_nonnegative, check_positive, check_probability
from privopt.algorithms.srgd_presets import (
    eq19_c_dp,
    preset_beta,
    preset_clip_difference,
    preset_schedule,
)
from privopt.algorithms.srgd_privacy import NEIGHBOURING, calibrate_noise, srgd_plan

__all__ = ["SRGDParameters", "SRGDWarning", "srgd_parameters"]

SETTINGS = ("general", "interior")
VARIANTS = ("recursive", "independent")
CONSTANTS = ("practical", "paper")


class SRGDWarning(UserWarning):
    """A parameter outside a utility theorem's range (privacy is unaffected: clipping holds)."""


@dataclass(frozen=True)
class SRGDParameters:
    """Every public parameter of one Accelerated-DP-SRGD run and its noise calibration.

    Attributes:
        setting, variant, constants: see :func:`srgd_parameters`.
        n, dim: number of records and of parameters (p).
        batch_size, steps: B and T (B T <= n; the rest is dropped).
        beta: the scaling beta (inverse step size).
        clip_first: threshold of per-example first gradients (every gradient of the
            independent variant).
        clip_difference: threshold of per-example weighted differences (None: independent).
        lipschitz, smoothness: L and M used to derive the defaults (None when not given).
        levels: tree levels holding a complete node, floor(log2 T) + 1 (1 when independent).
        sensitivity: l2 sensitivity of the whole release per record under ``neighbouring``.
        sigma: std of each tree node (recursive) or of each step's gradient noise (independent),
            from the plan's one calibration (exact mu-GDP).
        mu: the fit's GDP parameter ``sensitivity / sigma`` (exact).
        epsilon, delta: the target; ``gdp_delta(mu, epsilon) <= delta``.
        classical_sigma: sigma from Lemma 8's conversion ``mu = eps / sqrt(2 ln(1.25/delta))``
            (Dwork–Roth; for comparison only, not valid for large eps).
        paper_budget_sigma: sigma from Cor. 9/13's ``mu = eps / sqrt(2 ln(2.5/delta))``.
        corollary_sigma: the printed Cor. 13 (general) / Cor. 9 (interior) node std
            ``2 sqrt 2 C sqrt(log2 T ln(2.5/delta)) / (eps B)`` / ``C sqrt(...) / (eps B)`` with C
            the largest clip (None for T = 1 or the independent variant).
        c_M: ``M R / L``; c_DP: Eq. (19)'s constant (``constants="paper"``, interior only).
        neighbouring: ``"zero-out"`` or ``"replace-one"``.
        notes: the choices made, in words.
    """

    setting: str
    variant: str
    constants: str
    n: int
    dim: int
    batch_size: int
    steps: int
    beta: float
    clip_first: float
    clip_difference: float | None
    lipschitz: float | None
    smoothness: float | None
    levels: int
    sensitivity: float
    sigma: float
    mu: float
    epsilon: float
    delta: float
    classical_sigma: float
    paper_budget_sigma: float
    corollary_sigma: float | None
    c_M: float | None
    c_DP: float | None
    neighbouring: str
    notes: tuple[str, ...]
    #: the plan's noise multiplier (:func:`~privopt.algorithms.srgd_privacy.srgd_plan`), set by
    #: its one calibration; None before it
    noise_multiplier: float | None = None

    @property
    def unused_records(self) -> int:
        return self.n - self.batch_size * self.steps

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["notes"] = list(self.notes)
        out["unused_records"] = self.unused_records
        return out


# -- checks ---------------------------------------------------------------------------------------
def _optional(name: str, value: float | None) -> float | None:
    return None if value is None else check_nonnegative(name, value)


def _need(what: str, *values: float | None) -> None:
    if any(v is None for v in values):
        raise ValueError(
            f"The default {what} needs a finite Lipschitz bound L and the smoothness M; "
            f"pass lipschitz= and smoothness= (a regression loss needs y_bound for a finite "
            f"L), or {what}= explicitly."
        )


def _given_schedule(n: int, batch_size: int | None, steps: int | None) -> tuple[int, int] | None:
    """(B, T) from the caller's batch_size and/or steps; None when neither is given."""
    if batch_size is not None:
        batch_size = check_count("batch_size", batch_size)
        if batch_size > n:
            raise ValueError(f"batch_size={batch_size} is larger than the n={n} records.")
    if steps is not None:
        steps = check_count("steps", steps)
        if steps > n:
            raise ValueError(f"steps={steps} exceeds n={n}: a batch needs at least one record.")
    if batch_size is not None and steps is not None:
        if batch_size * steps > n:
            raise ValueError(
                f"batch_size * steps = {batch_size} * {steps} = {batch_size * steps} exceeds "
                f"n = {n}: a single epoch cannot use a record twice. Use at most "
                f"{n // batch_size} steps of {batch_size} records."
            )
        return batch_size, steps
    if batch_size is not None:
        return batch_size, n // batch_size
    if steps is not None:
        return n // steps, steps
    return None


# -- the public derivation ------------------------------------------------------------------------
def srgd_parameters(
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    radius: float,
    lipschitz: float | None = None,
    smoothness: float | None = None,
    setting: str = "general",
    *,
    variant: str = "recursive",
    batch_size: int | None = None,
    steps: int | None = None,
    beta: float | None = None,
    clip_first: float | None = None,
    clip_difference: float | None = None,
    constants: str = "practical",
    neighbouring: str = "zero-out",
) -> SRGDParameters:
    r"""Every parameter of Accelerated-DP-SRGD from public inputs, and the exact noise.

    Args:
        n: number of records; d: number of parameters (p in the paper).
        epsilon, delta: the target, ``epsilon > 0``, ``delta`` in (0, 1).
        radius: R, the ball ``C = B(0, R)``.
        lipschitz: L, a bound on every per-example gradient norm on the ball.
        smoothness: M, the per-example smoothness (None: unknown; then ``beta`` and
            ``clip_difference`` must be given and the theorem checks are skipped).
        setting: ``"general"`` (Theorem 14) or ``"interior"`` (Eq. 19).
        variant: ``"recursive"`` (the SRG of Algorithm 1) or ``"independent"`` (Theorem 15).
        batch_size, steps, beta, clip_first, clip_difference: overrides (the defaults are
            in :mod:`privopt.algorithms.srgd_presets`). With only one of B and T the other is
            ``floor(n / given)``; ``B T < n`` drops the rest, ``B T > n`` is refused.
        constants: ``"practical"`` (default) or ``"paper"`` (the printed constants; Eq. (19)
            then refuses every n it cannot serve).
        neighbouring: ``"zero-out"`` (the paper's) or ``"replace-one"`` (sensitivity x 2).

    Raises:
        ValueError: invalid inputs, or a default that needs an unknown constant.

    Warns:
        SRGDWarning: ``beta < M``, ``beta < 2 M T`` (general, recursive) or ``B > sqrt n``
            (general): the utility theorems do not apply; privacy is unaffected.
    """
    n = check_count("n", n)
    d = check_count("d", d)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    radius = check_positive("radius", radius)
    L = _optional("lipschitz", lipschitz)
    M = _optional("smoothness", smoothness)
    for name, value, options in (
        ("setting", setting, SETTINGS),
        ("variant", variant, VARIANTS),
        ("constants", constants, CONSTANTS),
        ("neighbouring", neighbouring, tuple(NEIGHBOURING)),
    ):
        if value not in options:
            raise ValueError(f"Expected {name} in {options}, got {value!r}.")
    notes: list[str] = []
    c_M = None if (L is None or M is None or L == 0.0) else M * radius / L
    c_DP = eq19_c_dp(n, delta) if setting == "interior" and constants == "paper" else None

    # -- schedule (B, T) ----------------------------------------------------------------------
    schedule = _given_schedule(n, batch_size, steps)
    B, T = schedule if schedule is not None else preset_schedule(setting, n, c_DP, notes)
    if setting == "general" and B * B > n:
        warnings.warn(
            f"batch_size={B} exceeds sqrt(n)={math.sqrt(n):.4g}: Theorem 14's utility bound "
            "needs B <= sqrt(n) (privacy is unaffected).",
            SRGDWarning,
            stacklevel=2,
        )
    if B * T < n:
        notes.append(f"{n - B * T} records left over by the permutation are dropped (unused)")

    # -- beta ---------------------------------------------------------------------------------
    if beta is None:
        _need("beta", L, M)
        assert L is not None and M is not None
        beta = preset_beta(setting, n, d, epsilon, radius, B, L, M, c_DP, notes)
        if not beta > 0:
            raise ValueError("The derived beta is 0 (L = M = 0); give beta explicitly.")
    beta = check_positive("beta", beta)
    if M is not None and beta < M:
        warnings.warn(
            f"beta={beta:.6g} < M={M:.6g}: Theorem 3's convergence guarantee needs beta >= M "
            "(privacy is unaffected).",
            SRGDWarning,
            stacklevel=2,
        )
    elif M is not None and setting == "general" and variant == "recursive" and beta < 2 * M * T:
        warnings.warn(
            f"beta={beta:.6g} < 2 M T = {2 * M * T:.6g}: Lemma 11's sensitivity bound does not "
            "apply, so clip_difference may bind and bias the gradients (privacy is unaffected).",
            SRGDWarning,
            stacklevel=2,
        )

    # -- clipping thresholds ------------------------------------------------------------------
    if clip_first is None:
        if L is None or not math.isfinite(L) or L == 0.0:
            raise ValueError(
                "The default clip_first is the Lipschitz bound L, which is unknown, infinite or 0; "
                "pass a finite lipschitz= (e.g. y_bound for a regression loss) or clip_first=."
            )
        clip_first = L
        notes.append("clip_first = L (inactive: every gradient on the ball has norm <= L)")
    clip_first = check_positive("clip_first", clip_first)
    if variant == "independent":
        clip_difference = None
        notes.append("independent variant: one clipped gradient per record, clip_difference unused")
    else:
        if clip_difference is None:
            _need("clip_difference", L, M)
            assert L is not None and M is not None
            clip_difference = preset_clip_difference(constants, radius, L, M, c_DP, notes)
        clip_difference = check_positive("clip_difference", clip_difference)

    # -- noise calibration (exact mu-GDP) -----------------------------------------------------
    noise = calibrate_noise(
        variant=variant,
        setting=setting,
        neighbouring=neighbouring,
        epsilon=epsilon,
        delta=delta,
        batch_size=B,
        steps=T,
        clip_first=clip_first,
        clip_difference=clip_difference,
    )
    notes.append(
        "noise calibrated by exact mu-GDP (sigma = s / gdp_mu(eps, delta)), not the classical "
        "sqrt(2 ln(1.25/delta)) conversion"
    )
    params = SRGDParameters(
        setting=setting,
        variant=variant,
        constants=constants,
        n=n,
        dim=d,
        batch_size=B,
        steps=T,
        beta=float(beta),
        clip_first=float(clip_first),
        clip_difference=None if clip_difference is None else float(clip_difference),
        lipschitz=L,
        smoothness=M,
        levels=noise.levels,
        sensitivity=float(noise.sensitivity),
        sigma=math.nan,
        mu=math.nan,
        epsilon=epsilon,
        delta=delta,
        classical_sigma=float(noise.classical_sigma),
        paper_budget_sigma=float(noise.paper_budget_sigma),
        corollary_sigma=noise.corollary_sigma,
        c_M=c_M,
        c_DP=c_DP,
        neighbouring=neighbouring,
        notes=tuple(notes),
    )
    # paper config -> uncalibrated plan with SRGD's analysis -> the one calibration
    plan = srgd_plan(params).calibrate(epsilon, delta)
    event = plan.event()
    return dataclasses.replace(
        params,
        sensitivity=float(event.sensitivity),
        sigma=float(event.std),
        mu=float(event.mu),
        noise_multiplier=plan.noise_multiplier,
    )
