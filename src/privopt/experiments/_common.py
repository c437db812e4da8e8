"""Small pieces the reproductions share: argument checks, the run environment, the DP-SGD
baseline with Poisson sampling, the cool-down learning-rate schedule, confidence intervals, JSON
output and the plotting boilerplate."""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privopt._validate import check_count, check_positive, check_probability
from privopt.accounting import PrivacyLedger
from privopt.algorithms.ftrl import GenericModel
from privopt.training import SGD, PoissonSampling, TrainingPlan, execute

__all__ = [
    "COOLDOWN_FACTOR",
    "COOLDOWN_FRACTION",
    "check_dpsgd_accountant",
    "check_epsilons",
    "check_seeds",
    "cooldown_schedule",
    "dpsgd_plan",
    "dpsgd_poisson",
    "json_default",
    "pyplot",
    "reproduction_environment",
    "save_figure",
    "t_halfwidth",
]

#: The learning-rate schedule of Choquette-Choo et al.'s (2024) multi-epoch comparison, used by
#: the DP-SGD baselines:
#: constant, then a linear cool-down to ``COOLDOWN_FACTOR`` times the learning rate over the last
#: ``COOLDOWN_FRACTION`` of the steps (:func:`cooldown_schedule`).
COOLDOWN_FRACTION = 0.25
COOLDOWN_FACTOR = 0.05


# -- argument checks ---------------------------------------------------------------------------
def check_epsilons(epsilons: Sequence[float]) -> tuple[float, ...]:
    """A non-empty tuple of finite epsilons > 0 (booleans refused)."""
    values = tuple(epsilons)
    if not values:
        raise ValueError("Expected at least one epsilon.")
    for value in values:
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Real)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ValueError(f"Expected finite epsilons > 0, got {value!r}.")
    return tuple(float(v) for v in values)


def check_seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    """A non-empty tuple of seeds, each a count >= 0."""
    values = tuple(seeds)
    if not values:
        raise ValueError("Expected at least one seed.")
    return tuple(check_count("seed", s, minimum=0) for s in values)


def check_dpsgd_accountant(accountant: str | None, quick: bool) -> str:
    """DP-SGD's accountant: ``"pld"``, or ``"rdp"`` (the default at the quick size, faster and
    more conservative)."""
    chosen = ("rdp" if quick else "pld") if accountant is None else accountant
    if chosen not in ("pld", "rdp"):
        raise ValueError(f"Expected dpsgd_accountant in ('pld', 'rdp'), got {chosen!r}.")
    return chosen


# -- the run environment -----------------------------------------------------------------------
@contextlib.contextmanager
def reproduction_environment(
    blas_threads: int | None = 1, *, mute_accounting_notices: bool = True
) -> Iterator[None]:
    """Cap BLAS threads (threadpoolctl, a scikit-learn dependency; None leaves them) and mute
    dp_accounting's "order excluded" RDP notices for the duration of a run.

    The reproductions' matrices are small: multi-threaded BLAS only adds overhead on a busy
    2-core machine (40x slower measured), and the notices are not actionable.
    """
    from threadpoolctl import threadpool_limits

    absl = logging.getLogger("absl")
    level = absl.level
    if mute_accounting_notices:
        absl.setLevel(logging.ERROR)
    try:
        if blas_threads is None:
            yield
        else:
            limit = check_count("blas_threads", blas_threads)
            with threadpool_limits(limits=limit, user_api="blas"):
                yield
    finally:
        absl.setLevel(level)


# -- the DP-SGD baseline -----------------------------------------------------------------------
def cooldown_schedule(
    base: float,
    steps: int,
    *,
    fraction: float = COOLDOWN_FRACTION,
    factor: float = COOLDOWN_FACTOR,
    progress_first: bool = True,
) -> Callable[[int], float]:
    """Learning rate at step t (0-based): ``base``, then a linear cool-down to ``factor * base``
    over the last ``round(fraction * steps)`` steps (reached at the last step).

    In the cool-down, with k = t - start + 1 of m steps, the rate is
    ``base * (1 - (1 - factor) * (k / m))`` (``progress_first``, the multi-epoch comparison) or
    ``base * (1 - (1 - factor) * k / m)`` (the single-epoch comparison). The two differ by at most
    an ulp; each reproduction keeps its own rounding so that its numbers do not move.
    """
    start = steps - round(fraction * steps)

    def schedule(step: int) -> float:
        if step < start or steps == start:
            return base
        if progress_first:
            progress = (step - start + 1) / (steps - start)
            return base * (1.0 - (1.0 - factor) * progress)
        return base * (1.0 - (1.0 - factor) * (step - start + 1) / (steps - start))

    return schedule


def dpsgd_plan(
    n: int,
    sample_rate: float,
    steps: int,
    clip_norm: float,
    noise_multiplier: float | None = None,
) -> TrainingPlan:
    """DP-SGD's plan (Abadi et al. 2016): Poisson sampling at rate q for T steps, clip G,
    independent noise, zero-out neighbours; uncalibrated unless ``noise_multiplier`` is given.
    The reproductions calibrate it once per (epsilon, delta, q, T, accountant) with
    ``dpsgd_plan(...).calibrate(epsilon, delta, accountant, rtol=...)`` (the multiplier does
    not depend on n or G) and reuse the multiplier across seeds."""
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"Expected sample_rate in (0, 1], got {sample_rate!r}.")
    return TrainingPlan(
        n,
        PoissonSampling(sample_rate, check_count("steps", steps)),
        check_positive("clip_norm", clip_norm),
        noise_multiplier=noise_multiplier,
        neighbouring="zero-out",
        label="dp-sgd steps",
    )


def dpsgd_poisson(
    X: np.ndarray,
    y: np.ndarray,
    *,
    grad_fn: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    w0: np.ndarray,
    epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    clip_norm: float,
    learning_rate: float | Callable[[int], float],
    rng: np.random.Generator,
    momentum: float = 0.0,
    noise_multiplier: float | None = None,
    accountant: str = "pld",
) -> tuple[np.ndarray, dict[str, Any]]:
    """DP-SGD (Abadi et al. 2016) with Poisson sampling for any per-example gradient function.

    Each step samples every record independently with probability q, sums the per-example
    gradients clipped to ``clip_norm`` (through :class:`GenericModel`), adds
    N(0, (sigma G)^2 I), divides by the **expected** batch size q n (never the realised one) and
    takes a heavy-ball step (post-processing). sigma is the calibration of the fit's
    :func:`dpsgd_plan` (``plan.calibrate``, the training core's one calibration); pass
    ``noise_multiplier`` to reuse a calibration made for the same (epsilon, delta, q, steps,
    accountant). Returns the last iterate and ``info`` with the
    noise multiplier and the fit's zero-out :class:`PrivacyLedger` holding one
    :class:`PoissonSampledGaussianEvent` (``ledger.report(delta, accountant)`` is its privacy
    report; the ``dp_accounting`` analysis is add/remove-one, which covers zero-out).
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    steps = check_count("steps", steps)
    clip_norm = check_positive("clip_norm", clip_norm)
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"Expected momentum in [0, 1), got {momentum!r}.")
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"Expected sample_rate in (0, 1], got {sample_rate!r}.")
    plan = dpsgd_plan(X.shape[0], sample_rate, steps, clip_norm, noise_multiplier)
    if noise_multiplier is None:
        plan = plan.calibrate(epsilon, delta, accountant)
    sigma = plan.noise_multiplier
    ledger = PrivacyLedger("zero-out")
    w, _, _ = execute(
        plan,
        GenericModel(grad_fn),
        SGD(learning_rate, momentum),
        X,
        y,
        rng=rng,
        ledger=ledger,
        w0=np.asarray(w0, dtype=float),
    )
    expected = plan.divisor
    info = {
        "noise_multiplier": sigma,
        "sample_rate": sample_rate,
        "steps": steps,
        "expected_batch_size": expected,
        "ledger": ledger,
    }
    return w, info


# -- summaries and output ----------------------------------------------------------------------
def t_halfwidth(values: Sequence[float]) -> float | None:
    """95% t-interval half-width of the mean (None with fewer than two values)."""
    from scipy.stats import t as student_t

    if len(values) < 2:
        return None
    spread = float(np.std(values, ddof=1))
    return float(student_t.ppf(0.975, len(values) - 1) * spread / math.sqrt(len(values)))


def json_default(value: object) -> object:
    """``json.dumps`` default for NumPy arrays and scalars (anything else is refused)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer | np.floating):
        return value.item()
    raise TypeError(f"Not JSON serialisable: {type(value).__name__}")


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (imported on first use, so only
    a run that plots pays for matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, *, rect: tuple[float, ...] | None = None) -> None:
    """Tight layout (inside ``rect`` when given), write ``path`` at 100 dpi, close the figure."""
    if rect is None:
        fig.tight_layout()
    else:
        fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=100)
    pyplot().close(fig)
