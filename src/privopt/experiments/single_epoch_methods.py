"""The method runners of Choquette-Choo, Ganesh & Thakurta's (2025) single-epoch comparison (issue
8; docs/theory/single-epoch-srgd.md): one
fit of Accelerated-DP-SRGD (validated or preset), single-pass DP-SGD or multi-epoch Poisson DP-SGD
at a target (epsilon, delta), with T = ``steps`` batches of B = n // T records. The experiment is
described in :mod:`privopt.experiments.single_epoch`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt._validate import check_count
from privopt.algorithms.ftrl import dp_ftrl
from privopt.algorithms.result import NonPrivateDiagnosticsWarning
from privopt.algorithms.srgd import SRGDWarning, accelerated_dp_srgd
from privopt.experiments._common import cooldown_schedule, dpsgd_plan, dpsgd_poisson
from privopt.experiments.single_epoch_config import METHODS, MULTI_EPOCHS, PRESETS, STEP_EXPONENTS
from privopt.losses import get_loss
from privopt.noise import independent

__all__ = ["ProblemConstants", "fit_method", "steps_grid"]


def steps_grid(n: int, exponents: Sequence[float] = STEP_EXPONENTS) -> list[int]:
    """T = round(n^e) for each exponent (e = 1/2 gives Theorem 14's n // floor(sqrt n))."""
    n = check_count("n", n, minimum=4)
    out = []
    for e in exponents:
        T = n // math.isqrt(n) if e == 0.5 else round(n**e)
        out.append(max(2, min(T, n)))
    return out


@dataclass(frozen=True)
class ProblemConstants:
    """Public constants of a problem: the data bound, the ball and the loss's L and M."""

    x_bound: float
    radius: float

    @property
    def lipschitz(self) -> float:
        return get_loss("logistic").lipschitz(self.x_bound, None, self.radius)

    @property
    def smoothness(self) -> float:
        return get_loss("logistic").holder(self.x_bound).L


def fit_method(
    method: str,
    X: np.ndarray,
    y: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    steps: int | None,
    config: dict[str, float] | None,
    x_bound: float,
    radius: float,
    rng: np.random.Generator,
    accountant: str = "pld",
    cache: dict | None = None,
    calibration_rtol: float = 1e-3,
) -> dict[str, Any]:
    """Fit one method at (epsilon, delta) with T = ``steps`` batches of B = n // T records
    (``steps`` is ignored by the presets, which derive their own schedule).

    ``config`` is in the units of :data:`HYPERPARAMETER_GRID` (None for the presets). ``y`` in
    {-1, +1}. ``cache`` memoises multi-epoch DP-SGD's noise calibration and privacy report (they
    depend only on epsilon, delta, q, steps and the accountant); ``calibration_rtol`` is that
    calibration's relative tolerance (the result is verified feasible, so a looser tolerance only
    adds noise).

    Returns a dict with ``coef``, ``reported_epsilon``, ``sequential_steps``, ``batch_size``,
    ``gradient_evaluations``, ``noise`` (std / multiplier), ``clip_fraction`` and ``seconds``
    (the fit; multi-epoch DP-SGD's calibration and report, shared by every fit with the same
    epsilon, q and steps, are in ``accounting_seconds`` instead, 0 when cached).
    """
    problem = ProblemConstants(x_bound, radius)
    L, M = problem.lipschitz, problem.smoothness
    n = X.shape[0]
    cache = {} if cache is None else cache
    start = time.perf_counter()
    if method not in PRESETS:
        T = check_count("steps", steps)
        B = n // T
    if method in ("srgd", "srgd-independent", *PRESETS):
        kwargs: dict[str, Any] = {}
        if method in PRESETS:
            kwargs["setting"] = "interior" if method == "srgd-interior-preset" else "general"
        else:
            assert config is not None
            clip = config["clip"] * L
            kwargs.update(
                setting="interior",
                batch_size=B,
                steps=T,
                beta=config["beta"] * M,
                clip_first=clip,
                variant="recursive" if method == "srgd" else "independent",
            )
            if method == "srgd":
                kwargs["clip_difference"] = clip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SRGDWarning)  # beta < M etc.: utility only
            # the clip fraction is reported as a research diagnostic (stated in the report)
            warnings.simplefilter("ignore", NonPrivateDiagnosticsWarning)
            fit = accelerated_dp_srgd(
                X,
                y,
                "logistic",
                epsilon=epsilon,
                delta=delta,
                radius=radius,
                x_bound=x_bound,
                rng=rng,
                diagnostics=True,
                **kwargs,
            )
        info = fit.info
        return {
            "coef": fit.coef,
            "reported_epsilon": float(fit.report.epsilon),
            "sequential_steps": int(info["steps"]),
            "batch_size": int(info["batch_size"]),
            "gradient_evaluations": int(info["gradient_evaluations"]),
            "noise": {
                "sigma": info["sigma"],
                "mu": info["mu"],
                "beta": info["beta"],
                "clip_first": info["clip_first"],
                "clip_difference": info["clip_difference"],
            },
            "clip_fraction": float(np.mean(fit.trace.clip_fraction)),
            "seconds": time.perf_counter() - start,
        }
    assert config is not None
    clip = config["clip"] * L
    if method == "dp-sgd-single-pass":
        lr = config["lr"] / (M * T)
        used = B * T  # the first B T rows (data-independent); dp_ftrl makes n // B batches
        with warnings.catch_warnings():
            # the clip fraction is reported as a research diagnostic (stated in the report)
            warnings.simplefilter("ignore", NonPrivateDiagnosticsWarning)
            fit = dp_ftrl(
                X[:used],
                (y[:used] + 1.0) / 2.0,
                mechanism=independent(),
                # dp_ftrl calibrates sigma at unit clip but records the event (G s, G sigma); for
                # some G the report's epsilon rounds a few 1e-13 above the target (e.g. G =
                # sigmoid(4), epsilon 4: 4.0000000000027). Aiming 1e-9 lower keeps report <= target.
                epsilon=epsilon * (1.0 - 1e-9),
                delta=delta,
                clip_norm=clip,
                learning_rate=cooldown_schedule(lr, T, progress_first=False),
                rng=rng,
                model="logistic",
                batch_size=B,
                epochs=1,
                diagnostics=True,
            )
        assert fit.info["steps"] == T
        return {
            "coef": fit.coef,
            "reported_epsilon": float(fit.report.epsilon),
            "sequential_steps": T,
            "batch_size": B,
            "gradient_evaluations": used,
            "noise": {
                "noise_multiplier": fit.info["noise_multiplier"],
                "clip": clip,
                "learning_rate": lr,
            },
            "clip_fraction": float(np.mean(fit.trace.clip_fraction)),
            "seconds": time.perf_counter() - start,
        }
    if method == "dp-sgd-multi-epoch":
        total = MULTI_EPOCHS * T
        q = B / n
        lr = config["lr"] / (M * total)
        key = (float(epsilon), float(delta), q, total, accountant)
        calibration_start = time.perf_counter()
        if key not in cache:  # the fit's plan, calibrated once (its multiplier: not n or G)
            plan = dpsgd_plan(n, q, total, clip).calibrate(
                epsilon, delta, accountant, rtol=calibration_rtol
            )
            cache[key] = {"sigma": plan.noise_multiplier}
        sigma = cache[key]["sigma"]
        accounting = time.perf_counter() - calibration_start  # once per (epsilon, q, steps)
        loss = get_loss("logistic")
        w, info = dpsgd_poisson(
            X,
            y,
            grad_fn=loss.gradients,
            w0=np.zeros(X.shape[1]),
            epsilon=epsilon,
            delta=delta,
            sample_rate=q,
            steps=total,
            clip_norm=clip,
            learning_rate=cooldown_schedule(lr, total, progress_first=False),
            rng=rng,
            noise_multiplier=sigma,
            accountant=accountant,
        )
        if "epsilon" not in cache[key]:
            report_start = time.perf_counter()
            cache[key]["epsilon"] = float(info["ledger"].report(delta, accountant).epsilon)
            accounting += time.perf_counter() - report_start
        return {
            "coef": w,
            "reported_epsilon": cache[key]["epsilon"],
            "sequential_steps": total,
            "batch_size": B,
            "gradient_evaluations": round(q * n * total),  # expected
            "noise": {
                "noise_multiplier": sigma,
                "clip": clip,
                "learning_rate": lr,
                "sample_rate": q,
                "accountant": accountant,
            },
            "clip_fraction": None,
            "seconds": time.perf_counter() - start - accounting,
            "accounting_seconds": accounting,
        }
    raise ValueError(f"Unknown method {method!r}; expected one of {METHODS + PRESETS}.")
