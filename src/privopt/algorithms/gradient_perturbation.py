"""DP-SGD-Gradient (Wang et al. 2022, Algorithm 2): noisy projected SGD on a ball, averaged iterate.

    G = sup ||grad l(w; z)|| over ||w|| <= R and the data domain (per-step sensitivity 2G)
    w_{t+1} = Proj_{B(0,R)}(w_t - eta (grad l(w_t; z_{i_t}) + b_t)),  b_t ~ N(0, sigma^2 I_d)
    output  (1/T) sum_{t=1}^T w_t

Two analyses of the same mechanism (T steps of a uniformly sampled Gaussian, one record of n per
step, replace-one neighbours) are offered:

* ``"paper"``, Theorem 11: Liang et al.'s subsampled-Gaussian RDP bound (Lemma 3), composed
  over T steps and converted with Mironov's bound. For beta in (0, 1),
  lambda = log(1/delta) / ((1 - beta) epsilon) + 1 and
  sigma^2 = 14 G^2 T lambda / (beta n^2 epsilon), valid only where conditions (32)
  sigma^2 / (4 G^2) >= 0.67 and (33)
  lambda - 1 <= sigma^2 / (6 G^2) log(n / (lambda (1 + sigma^2 / (4 G^2)))) hold. The
  admissible beta are found on a grid (they are often tiny, ~1e-4,
  docs/theory/non-smooth-sgd.md#beta-in-practice) and the one
  closest to 1/2 is used (Remark 4). Lemma 13's sufficient condition is not relied on: it is false
  for 18 <= n <= 43 (docs/theory/non-smooth-sgd.md#beta-in-practice).
* ``"rdp"``: dp_accounting's RDP of the sampled-without-replacement Gaussian (one record of n),
  composed over T steps: the fit's uncalibrated plan calibrated once to the target
  (``plan.calibrate``, the training core's one calibration, verified).

``"auto"`` (the default) uses the valid analysis with the smaller sigma, and says which in the
report. The domain must be bounded: on R^d the per-step sensitivity 2 (M + L ||w_t||^alpha) is
unbounded because the noise makes ||w_t|| random (Wang et al. (2022) Remark 5,
docs/theory/non-smooth-sgd.md#unbounded-domains).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt._validate import check_count, check_positive
from privopt.accounting import (
    DpAccountingAccountant,
    PrivacyEvent,
    PrivacyLedger,
    RenyiGuaranteeEvent,
    SampledGaussianEvent,
)
from privopt.algorithms.holder_problem import HolderProblem
from privopt.algorithms.result import FitResult
from privopt.losses import LinearLoss
from privopt.training import (
    SGD,
    LossModel,
    Projected,
    SampledWithoutReplacement,
    TrainingPlan,
    execute,
)

__all__ = [
    "Theorem11Analysis",
    "Theorem11Noise",
    "dp_sgd_gradient",
    "rdp_gradient_noise",
    "theorem11_conditions",
    "theorem11_noise",
    "theorem11_sigma",
]

ACCOUNTING = ("auto", "paper", "rdp")
GRADIENT_BOUNDS = ("tight", "paper")

# beta grid: log-spaced down to 1e-12 (the admissible set is often near 0) plus a linear grid.
_BETA_GRID = np.unique(
    np.concatenate([np.logspace(-12, 0, 4001)[:-1], np.linspace(1e-4, 1.0, 10001)[:-1]])
)


@dataclass(frozen=True)
class Theorem11Noise:
    """An admissible beta of Theorem 11 and what it implies
    (docs/theory/non-smooth-sgd.md#gradient-privacy, §9.1 item 9)."""

    beta: float
    order: float  # lambda
    sigma: float
    per_step_rdp: float  # beta epsilon / T
    slack_32: float
    slack_33: float
    admissible_range: tuple[float, float]


def _order(beta, epsilon, delta):
    # lambda, rounded up by a relative 1e-12 so that the Mironov conversion of the composed RDP
    # lands at or below the target epsilon in floating point (sigma is computed from it).
    return np.log(1.0 / delta) / ((1.0 - beta) * epsilon) * (1.0 + 1e-12) + 1.0


def theorem11_sigma(beta, epsilon, delta, n, steps, gradient_bound):
    """sigma of Algorithm 2 line 3: sqrt(14 G^2 T lambda / (beta n^2 epsilon)) (vectorised)."""
    lam = _order(beta, epsilon, delta)
    return np.sqrt(14.0 * gradient_bound**2 * steps * lam / (beta * n**2 * epsilon))


def theorem11_conditions(beta, epsilon, delta, n, steps, gradient_bound):
    """Slacks of conditions (32) and (33) at beta (both >= 0 means admissible; vectorised).

    (32): sigma^2 / (4 G^2) - 0.67.  (33): sigma^2 / (6 G^2) log(n / (lambda (1 + sigma^2 /
    (4 G^2)))) - (lambda - 1), which is -inf where the logarithm's argument is <= 1.
    """
    beta = np.asarray(beta, dtype=float)
    lam = _order(beta, epsilon, delta)
    ratio = theorem11_sigma(beta, epsilon, delta, n, steps, gradient_bound) ** 2 / (
        4.0 * gradient_bound**2
    )
    argument = n / (lam * (1.0 + ratio))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_term = np.where(argument > 1.0, np.log(np.maximum(argument, 1e-300)), -np.inf)
    slack_33 = np.where(argument > 1.0, (2.0 / 3.0) * ratio * log_term - (lam - 1.0), -np.inf)
    return ratio - 0.67, slack_33


def theorem11_noise(
    epsilon: float, delta: float, n: int, steps: int, gradient_bound: float
) -> Theorem11Noise | None:
    """The admissible beta closest to 1/2 (Remark 4), or None when no beta satisfies (32)-(33)."""
    slack_32, slack_33 = theorem11_conditions(_BETA_GRID, epsilon, delta, n, steps, gradient_bound)
    ok = (slack_32 >= 0) & (slack_33 >= 0)
    if not np.any(ok):
        return None
    admissible = _BETA_GRID[ok]
    beta = float(admissible[np.argmin(np.abs(admissible - 0.5))])
    sigma = float(theorem11_sigma(beta, epsilon, delta, n, steps, gradient_bound))
    s32, s33 = theorem11_conditions(beta, epsilon, delta, n, steps, gradient_bound)
    return Theorem11Noise(
        beta=beta,
        order=float(_order(beta, epsilon, delta)),
        sigma=sigma,
        per_step_rdp=beta * epsilon / steps,
        slack_32=float(s32),
        slack_33=float(s33),
        admissible_range=(float(admissible.min()), float(admissible.max())),
    )


@dataclass(frozen=True)
class Theorem11Analysis:
    """Theorem 11 as a plan analysis: the RDP at order lambda of the plan's T sampled steps.

    From Algorithm 2 line 3 solved for the guarantee: T steps with noise std sigma = s G on a
    gradient of norm <= G (one record of n per step, replace-one) are
    (lambda, 14 T lambda / (s^2 n^2))-RDP, provided conditions (32) s^2 / 4 >= 0.67 and (33)
    lambda - 1 <= s^2 / 6 log(n / (lambda (1 + s^2 / 4))) hold (checked here, on the plan's
    own fields, whenever the event is built).
    """

    order: float

    def event(self, plan: TrainingPlan, multiplier: float) -> PrivacyEvent:
        batches = plan.batches
        if not isinstance(batches, SampledWithoutReplacement) or batches.sample_size != 1:
            raise ValueError("Theorem 11 analyses one uniformly sampled record per step.")
        n, steps, lam = plan.num_records, plan.steps, self.order
        ratio = multiplier**2 / 4.0
        argument = n / (lam * (1.0 + ratio))
        if ratio < 0.67 or argument <= 1.0 or lam - 1.0 > (2.0 / 3.0) * ratio * math.log(argument):
            raise ValueError(
                f"Theorem 11's conditions (32)-(33) fail at noise multiplier {multiplier:.6g}, "
                f"lambda = {lam:.6g}, n = {n}, T = {steps}."
            )
        return RenyiGuaranteeEvent(
            order=lam,
            value=14.0 * steps * lam / (multiplier**2 * n**2),
            label="noisy SGD steps, Theorem 11 (Liang et al. subsampled-Gaussian RDP)",
        )


@functools.lru_cache(maxsize=256)
def _rdp_epsilon(noise_multiplier: float, n: int, steps: int, delta: float) -> float:
    event = SampledGaussianEvent(noise_multiplier, population=n, count=steps)
    return DpAccountingAccountant("rdp").epsilon([event], delta)


def rdp_gradient_noise(
    epsilon: float, delta: float, n: int, steps: int, gradient_bound: float
) -> float:
    """Smallest sigma (verified) with dp_accounting RDP epsilon <= target for T sampled steps.

    The noise multiplier is sigma / G of the plan (one record of n per step, replace-one
    sensitivity 2G), found by the training core's one calibration
    (:meth:`privopt.training.TrainingPlan.calibrate`) on the event the fit records.
    """
    plan = TrainingPlan(
        n, SampledWithoutReplacement(1, steps), clip_norm=gradient_bound, neighbouring="replace-one"
    )
    return plan.calibrate(epsilon, delta).noise_std


def noisy_sgd_plan(
    n: int,
    steps: int,
    bound: float,
    epsilon: float,
    delta: float,
    accounting: str,
    unit: str = "record",
) -> tuple[TrainingPlan, Any, float | None, bool]:
    """Algorithm 2's calibrated plan: (plan, Theorem 11's solution or None, the RDP sigma or
    None, whether Theorem 11's sigma runs).

    Algorithm 2 on the training core: one uniformly sampled ``unit`` (a record, or a user: n is
    then the number of users) per step, its gradient clipped at G = ``bound`` (a no-op within
    the bound; it makes the sensitivity hold by construction), noise std sigma = (sigma / G) G,
    w <- Proj_R(w - eta (g + b)), mean of w_1 .. w_T. One uncalibrated plan; the RDP analysis
    calibrates it once, and Theorem 11 (a formula over a grid of beta, not a calibration) gives
    the same plan at the paper's sigma with its own analysis; the smaller valid noise runs
    (``accounting="auto"``).
    """
    plan = TrainingPlan(
        n,
        SampledWithoutReplacement(1, steps),
        clip_norm=bound,
        neighbouring="replace-one",
        label=f"noisy SGD steps (one {unit} of {'n' if unit == 'record' else 'N'} per step)",
    )
    paper = theorem11_noise(epsilon, delta, n, steps, bound)
    rdp_plan = plan.calibrate(epsilon, delta) if accounting != "paper" else None
    rdp_sigma = None if rdp_plan is None else rdp_plan.noise_std
    if accounting == "paper" and paper is None:
        population = f"n={n}" if unit == "record" else f"N={n} users"
        raise ValueError(
            f"No beta in (0, 1) satisfies Theorem 11's conditions (32)-(33) at {population}, "
            f"T={steps}, epsilon={epsilon:g}, delta={delta:g}; the paper's analysis certifies "
            "nothing here (Lemma 13 is false for 18 <= n <= 43, "
            "docs/theory/non-smooth-sgd.md#beta-in-practice). Use accounting='rdp' or "
            "'auto', a larger epsilon, or fewer steps."
        )
    use_paper = accounting == "paper" or (
        accounting == "auto" and paper is not None and paper.sigma <= rdp_sigma
    )
    if use_paper:
        plan = dataclasses.replace(
            plan, noise_multiplier=paper.sigma / bound, analysis=Theorem11Analysis(paper.order)
        )
    else:
        plan = rdp_plan
    return plan, paper, rdp_sigma, use_paper


def dp_sgd_gradient(
    X: np.ndarray,
    y: np.ndarray,
    loss: str | LinearLoss,
    *,
    epsilon: float,
    delta: float,
    x_bound: float,
    radius: float | None,
    eta: float,
    steps: int,
    rng: np.random.Generator,
    y_bound: float | None = None,
    accounting: str = "auto",
    gradient_bound: str = "tight",
    ledger: PrivacyLedger | None = None,
    partition: Hashable | None = None,
    diagnostics: bool = False,
) -> FitResult:
    """Private linear model by noisy projected SGD (Wang et al. 2022, Algorithm 2).

    Args:
        X, y, loss, x_bound, y_bound: as in :func:`privopt.algorithms.dp_sgd_output`.
        epsilon, delta: the target.
        radius: R of the domain ball (required: see the module docstring).
        eta: constant step (privacy does not depend on it; Theorem 12 uses
            eta < min{1, 1/L}).
        steps: T.
        rng: randomness of the index sequence and the gradient noise.
        accounting: ``"auto"`` (smaller valid sigma), ``"paper"`` (Theorem 11) or ``"rdp"``.
        gradient_bound: ``"tight"`` (sup of the gradient norm over the ball,
        docs/theory/non-smooth-sgd.md#losses) or
            ``"paper"`` (M + L R^alpha); both are valid, the tight one is never larger.
        ledger, partition: record into this replace-one ledger under this partition label.
        diagnostics: also return the non-private per-step clip flags (warns; recorded in the
            report as a non-private release).
    """
    if radius is None:
        raise ValueError(
            "Gradient perturbation needs a bounded domain (radius R): on R^d the per-step "
            "sensitivity 2 (M + L ||w_t||^alpha) cannot be bounded because the noise makes "
            "||w_t|| random (Wang et al. (2022) Remark 5, an open problem; "
            "docs/theory/non-smooth-sgd.md#unbounded-domains). Use "
            "output perturbation for an unbounded domain."
        )
    if accounting not in ACCOUNTING:
        raise ValueError(f"Expected accounting in {ACCOUNTING}, got {accounting!r}.")
    if gradient_bound not in GRADIENT_BOUNDS:
        raise ValueError(f"Expected gradient_bound in {GRADIENT_BOUNDS}, got {gradient_bound!r}.")
    problem = HolderProblem.build(X, y, loss, epsilon, delta, x_bound, y_bound, radius)
    check_positive("eta", eta)
    steps = check_count("steps", steps)
    c = problem.constants
    bound = c.lipschitz if gradient_bound == "tight" else c.paper_gradient_bound
    if not math.isfinite(bound):
        raise ValueError(f"The {problem.loss.name} loss has no finite gradient bound on the ball.")
    n = problem.n

    plan, paper, rdp_sigma, use_paper = noisy_sgd_plan(n, steps, bound, epsilon, delta, accounting)
    sigma = paper.sigma if use_paper else rdp_sigma
    ledger = problem.ledger(ledger)
    coef, trace, info = execute(
        plan,
        LossModel(problem.loss),
        Projected(SGD(eta), radius),
        problem.X,
        problem.y,
        rng=rng,
        averaging="inputs",
        ledger=ledger,
        partition=partition,
        diagnostics=diagnostics,
    )
    ledger.assume(
        f"per-step gradient norm <= G = {bound:.6g} ({gradient_bound} bound) on the ball of "
        f"radius {radius:g}; replace-one sensitivity 2G"
    )
    used = "Theorem 11 (paper)" if use_paper else "dp_accounting RDP of the sampled Gaussian"
    paper_note = (
        f"Theorem 11 sigma = {paper.sigma:.6g} (beta = {paper.beta:.3g}, lambda = "
        f"{paper.order:.4g})"
        if paper
        else "Theorem 11 has no admissible beta"
    )
    rdp_note = "" if rdp_sigma is None else f"; RDP sigma = {rdp_sigma:.6g}"
    ledger.assume(f"accounting used: {used}; {paper_note}{rdp_note}")
    info.update(
        {
            "sigma": sigma,
            "accounting": "paper" if use_paper else "rdp",
            "paper_sigma": None if paper is None else paper.sigma,
            "paper_beta": None if paper is None else paper.beta,
            "paper_order": None if paper is None else paper.order,
            "paper_admissible_beta": None if paper is None else paper.admissible_range,
            "rdp_sigma": rdp_sigma,
            "rdp_epsilon_at_sigma": _rdp_epsilon(sigma / (2.0 * bound), n, steps, delta),
            "gradient_bound": bound,
            "eta": eta,
            "steps": steps,
            "radius": radius,
            "loss": problem.loss.name,
        }
    )
    return FitResult(
        coef=coef,
        intercept=0.0,
        report=ledger.report(delta),  # the whole ledger's claim (it may hold other partitions)
        trace=trace,
        method="dp-sgd-gradient",
        info=info,
    )
