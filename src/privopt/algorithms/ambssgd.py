"""DP-AMBSSGD (Varshney et al. 2022, Algorithm 2): adaptive-clipping mini-batch shuffled SGD.

One pass over a secret uniform permutation, in T disjoint rounds of s + b records::

    for t = 0 .. T-1:
        gamma_t = DP-STAT(|<z_j, w_t> - t_j|, j in the round's s stat records)
        zeta_t  = clip scale * gamma_t
        w_{t+1} = w_t - eta ( (1/b) sum_{i in the round's b gradient records} clip_zeta_t(r_i z_i)
                              + alpha_g (2 zeta_t / b) g_t ),   g_t ~ N(0, I)
    return the average of the last T - floor(T/2) iterates

On the training core (:func:`ambssgd_plan` -> :func:`privopt.training.execute`), line by line:
``Rounds(T, b, s)`` draws the permutation and cuts the rounds; the clip source
``DPStatThreshold(B, alpha_s, K, margin, clip_scale)`` releases gamma_t from the stat rows at w_t;
the linear model clips the gradient rows at zeta_t through :mod:`privopt.clipping`; the
independent stream (unit clip, std 2 alpha_g) scaled by zeta_t is the noise; ``SGD(eta)`` and
the ``"tail"`` average are post-processing. The plan's ``recorded_events()`` are the ledger's
entries: per round partition ("round", t), the DP-STAT event and ``GaussianEvent(2, 2 alpha_g)``.

Privacy (replace-one neighbours,
docs/theory/linear-regression-adaptive-clipping.md#ambssgd-privacy). Within a round, DP-STAT is
1/alpha_s-GDP
(K counts of sensitivity 1 and std alpha_s sqrt(K)) and the gradient step is 1/alpha_g-GDP
(sensitivity 2 eta zeta_t / b, std 2 eta zeta_t alpha_g / b) whatever zeta_t is, since zeta_t is a
function of earlier private outputs only. Every record is in exactly one round, so rounds compose
in **parallel**: the whole fit is mu-GDP with mu^2 = 1/alpha_s^2 + 1/alpha_g^2. The paper accounts
the same releases in zCDP (rho = 1/alpha^2 with alpha_s = alpha_g = alpha); privopt calibrates in
exact GDP, which needs less noise for the same (epsilon, delta).

Calibration: :func:`noise_plan` is the uncalibrated plan of one round with DP-STAT's noise tied
to the gradient's (:class:`DPStatShare`: DP-STAT's share of mu^2); ``plan.calibrate(epsilon,
delta)`` or ``plan.calibrate(mu=...)`` (the training core's one calibration,
:func:`privopt.training.calibrate_noise_multiplier`) sets both multipliers at once, verified on
the round's recorded events; :func:`practical_config` sizes the rounds from them and
:func:`ambssgd_plan` is the run's plan at those multipliers.

Practical changes, each keeping the proof intact (they only change public constants or
post-process private outputs):

* DP-STAT with the capped query count and the public margin (see :mod:`privopt.clipping.dp_stat`);
* the clip is ``zeta_t = row_bound * gamma_t`` by default: rows are clipped to ``row_bound``, so a
  per-example gradient with residual <= gamma_t has norm <= zeta_t. The paper's
  ``R_x gamma_t log^a N`` (available as ``clip_scale``) is larger by about sqrt(log N);
* ``stat_budget`` sets the share of mu^2 given to DP-STAT (the paper's split is 1/2).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from privopt._validate import (
    check_count,
    check_finite,
    check_positive,
    check_probability,
)
from privopt.accounting import PrivacyLedger, zcdp_rho
from privopt.algorithms.result import FitTrace
from privopt.clipping.dp_stat import check_margin, dp_stat_margin
from privopt.training import SGD, Rounds, TrainingPlan, execute
from privopt.training.thresholds import DPStatThreshold

__all__ = [
    "AMBSSGDConfig",
    "DPStatShare",
    "ambssgd_plan",
    "check_ledger",
    "dp_ambssgd",
    "execute_rounds",
    "moment_config",
    "noise_multipliers",
    "noise_plan",
    "practical_config",
    "theory_config",
]


@dataclass(frozen=True)
class AMBSSGDConfig:
    """Every knob of DP-AMBSSGD; all are public (data-independent or privately estimated).

    Attributes:
        steps: T, the number of rounds.
        batch_size: b, gradient records per round.
        stat_size: s, DP-STAT records per round.
        learning_rate: eta.
        stat_noise_multiplier: alpha_s (DP-STAT is 1/alpha_s-GDP).
        grad_noise_multiplier: alpha_g (each gradient step is 1/alpha_g-GDP).
        clip_scale: zeta_t = clip_scale * gamma_t.
        domain: B, the largest residual bound DP-STAT can return.
        stat_queries: K, DP-STAT's number of doublings (resolution B / 2^K).
        margin: DP-STAT's public margin ("auto" or a number).
    """

    steps: int
    batch_size: int
    stat_size: int
    learning_rate: float
    stat_noise_multiplier: float
    grad_noise_multiplier: float
    clip_scale: float
    domain: float
    stat_queries: int = 20
    margin: float | str = "auto"

    def __post_init__(self) -> None:
        check_count("steps", self.steps, minimum=2)
        check_count("batch_size", self.batch_size)
        check_count("stat_size", self.stat_size)
        check_positive("learning_rate", self.learning_rate)
        check_positive("stat_noise_multiplier", self.stat_noise_multiplier)
        check_positive("grad_noise_multiplier", self.grad_noise_multiplier)
        check_positive("clip_scale", self.clip_scale)
        check_positive("domain", self.domain)
        check_count("stat_queries", self.stat_queries)
        check_margin(self.margin)

    @property
    def records_needed(self) -> int:
        return self.steps * (self.batch_size + self.stat_size)

    @property
    def mu(self) -> float:
        """GDP parameter of the whole fit (parallel over rounds)."""
        return math.sqrt(self.stat_noise_multiplier**-2 + self.grad_noise_multiplier**-2)


@dataclass(frozen=True)
class DPStatShare:
    """DP-STAT with its noise tied to the gradient step's: a
    :class:`~privopt.training.plan.TiedThreshold` holding ``stat_budget``, DP-STAT's share of
    each round's GDP budget mu^2 (the rest goes to the gradient step).

    At the plan's noise multiplier m = 2 alpha_g (replace-one unit clip), the gradient step is
    1/alpha_g-GDP, i.e. (1 - share) mu^2 = alpha_g^-2; DP-STAT then gets share mu^2 = alpha_s^-2,
    so alpha_s = alpha_g sqrt((1 - share) / share) (:meth:`at_noise`). One calibration of the
    plan sets both.
    """

    domain: float
    stat_budget: float
    queries: int = 20
    margin: float | str = "auto"
    scale: float = 1.0
    needs_stat_rows: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_positive("domain", self.domain)
        share = check_finite("stat_budget", self.stat_budget)
        if not 0.0 < share < 1.0:
            raise ValueError(f"Expected stat_budget in (0, 1), got {share!r}.")
        check_count("queries", self.queries)
        check_margin(self.margin)
        check_positive("scale", self.scale)

    def at_noise(self, multiplier: float) -> DPStatThreshold:
        alpha_g = check_positive("multiplier", multiplier) / 2.0
        alpha_s = alpha_g * math.sqrt((1.0 - self.stat_budget) / self.stat_budget)
        return DPStatThreshold(self.domain, alpha_s, self.queries, self.margin, self.scale)

    def describe(self) -> str:
        return (
            f"DP-STAT (K = {self.queries} counts) with {self.stat_budget:g} of each round's "
            "GDP mu^2, its noise set with the gradient's by the plan's calibration"
        )


def noise_plan(stat_budget: float, queries: int = 20) -> TrainingPlan:
    """The uncalibrated plan whose one calibration sets DP-AMBSSGD's (alpha_s, alpha_g).

    One round of one DP-STAT row and one gradient row: DP-STAT tied to the gradient step
    (:class:`DPStatShare`), replace-one, unit clip. A round's releases (K counts of std
    alpha_s sqrt(K), then ``GaussianEvent(2, 2 alpha_g)``) do not depend on N, T, b, s, the
    domain or the clip scale, and rounds compose in parallel, so this round's calibration is
    the fit's: :func:`ambssgd_plan` of any layout at these multipliers records the same events
    per round (tested).
    """
    return TrainingPlan(
        2,
        Rounds(1, 1, 1),
        clip_norm=1.0,
        neighbouring="replace-one",
        label="clipped gradient step",
        private_threshold=DPStatShare(1.0, stat_budget, queries),
    )


def noise_multipliers(
    epsilon: float,
    delta: float,
    stat_budget: float = 0.5,
    calibration: str = "gdp",
    mu: float | None = None,
    queries: int = 20,
) -> tuple[float, float]:
    """(alpha_s, alpha_g) making one round, hence the fit, (epsilon, delta)-DP.

    ``calibration="gdp"`` (default): :func:`noise_plan` calibrated once to (epsilon, delta), or
    to mu-GDP with ``mu`` (the budget left when other releases share the same records), i.e.
    alpha_s^-2 + alpha_g^-2 = gdp_mu(epsilon, delta)^2 (or mu^2) exactly, rounded toward more
    noise. ``"zcdp"``: the same plan calibrated to rho-zCDP, rho = (alpha_s^-2 + alpha_g^-2) / 2
    the largest meeting the target under the tight conversion (``mu = sqrt(2 rho)``).
    ``"paper"``: Theorem 9's formula alpha = sqrt(8 log(1/delta)) / epsilon for both (valid for
    epsilon <= log(1/delta)), not a calibration. ``queries``: DP-STAT's K (its event is K counts;
    the GDP mu does not depend on K, its floating-point value may by an ulp).
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    stat_budget = check_finite("stat_budget", stat_budget)
    if not 0.0 < stat_budget < 1.0:
        raise ValueError(f"Expected stat_budget in (0, 1), got {stat_budget!r}.")
    if calibration == "paper":
        if epsilon > math.log(1.0 / delta):
            raise ValueError("The paper's alpha needs epsilon <= log(1/delta).")
        alpha = math.sqrt(8.0 * math.log(1.0 / delta)) / epsilon
        return alpha, alpha
    plan = noise_plan(stat_budget, queries)
    if calibration == "gdp":
        if mu is None:
            plan = plan.calibrate(epsilon, delta)
        else:
            plan = plan.calibrate(mu=check_positive("mu", mu))
    elif calibration == "zcdp":
        plan = plan.calibrate(mu=math.sqrt(2.0 * zcdp_rho(epsilon, delta)))
    else:
        raise ValueError(f"Expected calibration in ('gdp', 'zcdp', 'paper'), got {calibration!r}.")
    return plan.private_threshold.noise_multiplier, plan.noise_multiplier / 2.0


def theory_config(
    n: int,
    *,
    epsilon: float,
    delta: float,
    row_norm_sq: float,
    h_norm: float,
    kappa: float,
    residual_scale: float,
    k2: float = 1.0,
    a: float = 0.5,
    c1: float = 1.0,
    stat_fraction: float = 1.0 / 11.0,
    stat_queries: int = 20,
    calibration: str = "paper",
) -> AMBSSGDConfig:
    """Theorem 10's parameters from public inputs
    (docs/theory/linear-regression-adaptive-clipping.md#dp-ambssgd).

    T = ceil(c1 kappa ln N) (rounded up to even), s + b = floor(N / T) with s = (b + s) / 11,
    eta = b / (R_x^2 + (b - 1) ||H||), B = K2 R_x (||w*||_H + sigma) log^{2a} N with
    ``residual_scale`` = ||w*||_H + sigma, zeta_t = R_x gamma_t log^a N, alpha from Theorem 9
    (``calibration="paper"``) or exact GDP. Natural logarithms throughout.
    """
    n = check_count("n", n, minimum=2)
    for name, value in (("row_norm_sq", row_norm_sq), ("h_norm", h_norm), ("kappa", kappa)):
        check_positive(name, value)
    check_positive("residual_scale", residual_scale)
    steps = math.ceil(c1 * kappa * math.log(n))
    steps += steps % 2
    per_round = n // steps
    stat_size = max(1, round(per_round * stat_fraction))
    batch_size = per_round - stat_size
    if batch_size < 1:
        raise ValueError(
            f"N={n} is too small for T={steps} rounds; need at least {2 * steps} rows."
        )
    r_x = math.sqrt(row_norm_sq)
    log_n = math.log(n)
    alpha_s, alpha_g = noise_multipliers(epsilon, delta, 0.5, calibration, queries=stat_queries)
    return AMBSSGDConfig(
        steps=steps,
        batch_size=batch_size,
        stat_size=stat_size,
        learning_rate=batch_size / (row_norm_sq + (batch_size - 1) * h_norm),
        stat_noise_multiplier=alpha_s,
        grad_noise_multiplier=alpha_g,
        clip_scale=r_x * log_n**a,
        domain=k2 * r_x * residual_scale * log_n ** (2 * a),
        stat_queries=stat_queries,
    )


def practical_config(
    n: int,
    *,
    epsilon: float,
    delta: float,
    row_bound: float,
    target_bound: float,
    h_norm: float,
    row_norm_sq: float,
    kappa: float = 1.0,
    c1: float = 0.5,
    stat_budget: float = 0.1,
    stat_fraction: float = 1.0 / 21.0,
    stat_queries: int = 20,
    max_kappa: float = 10.0,
    mu: float | None = None,
) -> AMBSSGDConfig:
    """privopt's measured defaults for DP-AMBSSGD (same privacy proof as the paper's).

    Chosen from measurements on the paper's model (x ~ N(0, I_d), sigma = 1, medians over
    seeds; see BENCHMARKS.md): at N = 200,000, d = 20, epsilon = 1 they cut the excess risk from
    about 50x OLS (Theorem 10's constants) to about 3x.

    * T = ceil(c1 min(kappa, max_kappa) ln N), even, with c1 = 0.5 (fewer, larger batches);
    * 10% of the GDP budget mu^2 to DP-STAT, 90% to the gradient (``stat_budget``);
    * s = max(N / (T * 21), 4 Gamma): DP-STAT's margin Gamma must stay well below s or its
      count test is uninformative (docs/theory/linear-regression-adaptive-clipping.md#guarantees); b
      = N / T - s;
    * eta = b / (R_x^2 + (b - 1) ||H||) (Theorem 10), zeta_t = row_bound * gamma_t;
    * DP-STAT's search domain B = 4 * target_bound (residuals at w = 0 are bounded by
      target_bound).

    ``mu``: the GDP budget of the rounds when other releases share their records (default
    gdp_mu(epsilon, delta)).

    Raises ``ValueError`` naming the number of rows needed when N is too small.
    """
    n = check_count("n", n, minimum=2)
    for name, value in (
        ("row_bound", row_bound),
        ("target_bound", target_bound),
        ("h_norm", h_norm),
        ("row_norm_sq", row_norm_sq),
        ("kappa", kappa),
    ):
        check_positive(name, value)
    alpha_s, alpha_g = noise_multipliers(epsilon, delta, stat_budget, "gdp", mu, stat_queries)
    margin = dp_stat_margin(alpha_s, stat_queries)

    def layout(rows: int) -> tuple[int, int, int]:
        t_ = max(4, math.ceil(c1 * min(kappa, max_kappa) * math.log(rows)))
        t_ += t_ % 2
        s_ = max(math.ceil(rows * stat_fraction / t_), math.ceil(4.0 * margin))
        return t_, s_, rows // t_ - s_

    steps, stat_size, batch_size = layout(n)
    if batch_size < stat_size:
        needed = n
        while layout(needed)[2] < layout(needed)[1]:  # T grows with N: search the real minimum
            needed = max(needed + 1, int(needed * 1.05))
        raise ValueError(
            f"N={n} is too small for DP-AMBSSGD at epsilon={epsilon:g}, delta={delta:g}: each of "
            f"the {steps} rounds needs {stat_size} DP-STAT rows plus at least as many gradient "
            f"rows, i.e. at least {needed} rows."
        )
    return AMBSSGDConfig(
        steps=steps,
        batch_size=batch_size,
        stat_size=stat_size,
        learning_rate=batch_size / (row_norm_sq + (batch_size - 1) * h_norm),
        stat_noise_multiplier=alpha_s,
        grad_noise_multiplier=alpha_g,
        clip_scale=row_bound,
        domain=4.0 * target_bound,
        stat_queries=stat_queries,
    )


def ambssgd_plan(n: int, config: AMBSSGDConfig, shuffle: str = "rows") -> TrainingPlan:
    """Algorithm 2 as a plan of the training core, built from the configuration only.

    Rounds of s stat + b gradient rows; the threshold zeta_t = clip_scale * DP-STAT (its event:
    K counts of std alpha_s sqrt(K)); the gradient stream at the unit clip with noise
    multiplier 2 alpha_g (replace-one: two unit-clipped contributions differ by at most 2), so
    each round's gradient step is ``GaussianEvent(2, 2 alpha_g)``, mu = 1/alpha_g; the noise
    on w is eta zeta_t 2 alpha_g / b (post-processing by the public eta zeta_t / b).
    """
    return TrainingPlan(
        n,
        Rounds(config.steps, config.batch_size, config.stat_size, shuffle),
        clip_norm=1.0,
        noise_multiplier=2.0 * config.grad_noise_multiplier,
        neighbouring="replace-one",
        label="clipped gradient step",
        private_threshold=DPStatThreshold(
            config.domain,
            config.stat_noise_multiplier,
            config.stat_queries,
            config.margin,
            config.clip_scale,
        ),
    )


def dp_ambssgd(
    Z: np.ndarray,
    t: np.ndarray,
    config: AMBSSGDConfig,
    *,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    shuffle: str = "rows",
    diagnostics: bool = False,
) -> tuple[np.ndarray, FitTrace, dict]:
    """Run DP-AMBSSGD on bounded data and record every release in ``ledger``.

    Args:
        Z: (N, p) rows (already clipped to a public bound by the caller).
        t: (N,) targets.
        config: the public configuration (see :func:`theory_config`).
        rng: randomness for the secret permutation and all noise.
        ledger: a replace-one ledger; round t's releases are recorded with partition
            ``("round", t)``.
        shuffle: ``"rows"`` (default) draws the secret uniform permutation of Algorithm 2;
            ``"none"`` uses contiguous rounds of the rows as given, for callers whose row order is
            already random and independent of the data (e.g. data shuffled when written). Privacy
            is the same either way (it rests on parallel composition over a data-independent
            partition); utility needs exchangeable rounds. ``"none"`` avoids gathering each
            round's rows, about 3x faster at N = 10^6, d = 100.
        diagnostics: also return the non-private clip fractions (warns; recorded in the report as
            a non-private release, see :func:`privopt.algorithms.result.release_diagnostics`).

    Returns:
        (w_bar, trace, info): the tail-averaged iterate, per-round diagnostics (clip threshold,
        clip fraction, noise std on w, gamma), and the configuration with the number of unused
        rows and the plan (``info["plan"]``).
    """
    check_ledger(ledger)
    Z = np.asarray(Z, dtype=float)
    t = np.asarray(t, dtype=float)
    n = Z.shape[0]
    if config.records_needed > n:
        raise ValueError(
            f"DP-AMBSSGD with T={config.steps}, b={config.batch_size}, s={config.stat_size} needs "
            f"{config.records_needed} rows, got {n}."
        )
    if shuffle not in ("rows", "none"):
        raise ValueError(f"Expected shuffle in ('rows', 'none'), got {shuffle!r}.")
    plan = ambssgd_plan(n, config, shuffle)
    return execute_rounds(
        plan, config, "linear", Z, t, rng=rng, ledger=ledger, diagnostics=diagnostics
    )


def check_ledger(ledger: PrivacyLedger) -> None:
    """DP-AMBSSGD's sensitivities are replace-one's; a zero-out ledger is stated, others refused."""
    if ledger.neighbouring.value not in ("replace-one", "zero-out"):
        raise ValueError(
            "DP-AMBSSGD's sensitivities are computed under replace-one neighbours (valid under "
            f"zero-out too); got a {ledger.neighbouring.value!r} ledger."
        )
    if ledger.neighbouring.value == "zero-out":
        # a null record is a valid record of the clipped domain, so replacing a record by it is
        # a replacement: the replace-one sensitivities bound the zero-out ones
        ledger.assume("DP-AMBSSGD uses its replace-one sensitivities, which bound zero-out's")


def execute_rounds(
    plan: TrainingPlan,
    config: AMBSSGDConfig,
    model: Any,
    Z: Any,
    t: Any,
    *,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    diagnostics: bool = False,
) -> tuple[np.ndarray, FitTrace, dict]:
    """Run ``plan`` (from :func:`ambssgd_plan`) with SGD(eta) and the tail average, on in-memory
    rows (model ``"linear"``) or a backend's row handle (the Dask rounds); the trace's noise std
    is the noise added to w."""
    n = plan.num_records
    info = {**asdict(config), "unused_rows": n - config.records_needed, "mu": config.mu}
    w, trace, info = execute(
        plan,
        model,
        SGD(config.learning_rate),
        Z,
        t,
        rng=rng,
        averaging="tail",
        ledger=ledger,
        diagnostics=diagnostics,
        info=info,
    )
    # the noise added to w: eta times the direction's zeta_t 2 alpha_g / b
    trace = dataclasses.replace(trace, noise_std=config.learning_rate * trace.noise_std)
    return w, trace, info


def moment_config(
    n: int,
    moment: Any,
    moment_rows: int,
    *,
    moment_mu: float,
    mu: float,
    epsilon: float,
    delta: float,
    bounds: Any,
    x_dim: int,
) -> tuple[AMBSSGDConfig, float, float]:
    """``practical_config`` from a private second moment of the rows: (config, ||H||, scale).

    ||H|| is bias-corrected for the moment's noise (:meth:`SecondMoment.h_norm` is the top
    eigenvalue of H + E; the spike of a symmetric Gaussian perturbation with entry std s sits at
    lambda + s^2 p / lambda, inverted here when it exceeds the noise edge 2 s sqrt(p)). With an
    intercept column (``bounds.intercept_scale > 0``) its public scale becomes sqrt(tr H / d),
    returned as ``scale`` (else the bounds' own). The rounds get ``mu^2 - moment_mu^2``
    (the moment shares their rows). Post-processing of the moment only.
    """
    entry_std = math.sqrt(2.0) * bounds.x_radius**2 / moment_rows / moment_mu
    edge = 2.0 * entry_std * math.sqrt(x_dim)
    top = moment.h_norm
    h_norm = (top + math.sqrt(top**2 - edge**2)) / 2.0 if top > edge else max(edge / 2, 1e-12)
    trace_h = max(float(np.sum(moment.eigenvalues)), h_norm)
    scale = math.sqrt(trace_h / x_dim) if bounds.intercept_scale > 0 else bounds.intercept_scale
    h_norm = max(h_norm, scale**2)
    config = practical_config(
        n,
        epsilon=epsilon,
        delta=delta,
        mu=math.sqrt(max(mu**2 - moment_mu**2, 1e-300)),
        row_bound=math.hypot(bounds.x_radius, scale),  # the row bound with the new column
        target_bound=bounds.y_radius,
        h_norm=h_norm,
        row_norm_sq=trace_h + 2 * h_norm + scale**2,
        kappa=max(1.0, h_norm / (trace_h / x_dim)),
    )
    return config, h_norm, scale
