"""Black-box input canaries for the estimators: many fits with and without one canary record.

Neighbours (zero-out, so valid under every relation the estimators report):

* D: ``n - 1`` base rows, plus the
  canary ``(x_c, y_c) = ((1, ..., 1), 1)``: a corner of the public box, so its transformed row
  has the largest norm the bounds allow and its target the largest value;
* D': the same base rows plus, for a fit reported under zero-out neighbours, the null record
  ``(0, 0)``, which the estimators' public-bounds transform maps to z = 0, t = 0 (bounds
  symmetric about 0, no intercept), whose gradient and sufficient-statistic contributions are
  zero; under replace-one, the opposite record ``(x_c, -1)`` (the largest change of the target).

The base rows are null records by default (``base="null"``: the worst case of Nasr et al.
2021, where nothing but the noise hides the canary; a DP claim covers every dataset), or
``base="random"``: ``x ~ U[-1, 1]^d``, ``y = clip(<x, w*> + U(-0.2, 0.2), -1, 1)``, where the
order of one-pass methods also hides it. Each fit uses fresh randomness; the score is the
fitted model's prediction at ``x_c`` (black box: only the released coefficients are used).
:func:`privopt.audit.audit_scores` chooses the threshold on half of the runs and gives a
Clopper-Pearson bound on the other half. The base rows are the same in every run (a DP claim
holds for every fixed pair of neighbours).

Planted bug for controls: ``planted_noise_factor = f`` fits at the epsilon whose Gaussian
noise is f times the claimed one's (``mu -> mu / f`` in GDP terms) while the claim stays;
DP-SSGD, whose shuffling bound certifies no large epsilon, has its calibrated noise
multiplier scaled instead. A single input canary sees only part of a fit's budget (a share of
AdaSSP's split, one step of a one-pass method, one leaf of a tree), so black-box controls need
larger factors than white-box ones: each method's ``control_factor`` is the measured one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np

from privopt._validate import check_count, check_positive, check_probability
from privopt.audit.blackbox import AuditResult, audit_scores

__all__ = [
    "ESTIMATOR_AUDITS",
    "EstimatorAudit",
    "audit_estimator",
    "input_canary_data",
    "planted_epsilon",
]


@dataclass(frozen=True)
class EstimatorAudit:
    """How to audit one estimator method: a factory ``(epsilon, delta, seed) -> estimator``,
    the rows and features of the audit data, and the default claimed epsilon."""

    make: Callable[[float, float, int], Any]
    n_records: int = 400
    n_features: int = 2
    epsilon: float = 1.0
    note: str = ""
    #: base rows: "null" (worst case) or "random" (for methods that refuse degenerate data)
    base: str = "null"
    #: the noise factor of this method's planted-bug control (measured power: TRUST.md)
    control_factor: float = 0.1
    #: how the control plants its bug: "epsilon" (fit at the epsilon of the scaled noise) or
    #: "ssgd-noise" (scale DP-SSGD's calibrated noise multiplier, whose shuffling bound cannot
    #: certify a larger epsilon)
    plant: str = "epsilon"


def _regression(method: str, **extra: Any) -> Callable[[float, float, int], Any]:
    def make(epsilon: float, delta: float, seed: int) -> Any:
        from privopt.estimators import DPLinearRegression

        return DPLinearRegression(
            epsilon=epsilon,
            delta=delta,
            method=method,
            fit_intercept=False,
            feature_bounds=(-1.0, 1.0),
            target_bounds=(-1.0, 1.0),
            random_state=seed,
            **extra,
        )

    return make


#: Every DPLinearRegression method, by CLI name.
ESTIMATOR_AUDITS: dict[str, EstimatorAudit] = {
    "regression-adassp": EstimatorAudit(_regression("adassp")),
    "regression-ambssgd": EstimatorAudit(_regression("ambssgd"), n_records=14000, base="random"),
    "regression-dpsgd": EstimatorAudit(_regression("dpsgd")),
    "regression-ftrl-sigma": EstimatorAudit(_regression("ftrl-sigma"), control_factor=0.01),
    "regression-ssgd": EstimatorAudit(
        _regression("ssgd"),
        n_records=4000,
        epsilon=1.0,
        note="DP-SSGD's shuffling bound is valid only for small epsilon (about 1 at N = 4000)",
        control_factor=0.01,
        plant="ssgd-noise",
    ),
}


def input_canary_data(
    n_records: int,
    n_features: int,
    seed: int = 0,
    relation: str = "zero-out",
    base: str = "null",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_with, y_with, X_without, y_without): the neighbours of the module docstring
    (``relation="replace-one"``: the canary against its opposite ``(x_c, -1)``)."""
    n = check_count("n_records", n_records, minimum=2)
    d = check_count("n_features", n_features)
    rng = np.random.default_rng(seed)
    if base == "null":
        X, y = np.zeros((n, d)), np.zeros(n)
    else:
        X = rng.uniform(-1.0, 1.0, size=(n, d))
        w_star = np.linspace(0.5, -0.5, d) if d > 1 else np.array([0.5])
        y = np.clip(X @ w_star + rng.uniform(-0.2, 0.2, size=n), -1.0, 1.0)
    X_with, y_with = X.copy(), y.copy()
    X_with[-1], y_with[-1] = 1.0, 1.0
    X_without, y_without = X.copy(), y.copy()
    if relation == "replace-one":
        X_without[-1], y_without[-1] = 1.0, -1.0
    else:
        X_without[-1], y_without[-1] = 0.0, 0.0
    return X_with, y_with, X_without, y_without


def planted_epsilon(epsilon: float, delta: float, noise_factor: float) -> float:
    """The epsilon whose calibrated Gaussian noise is ``noise_factor`` times that of
    ``epsilon`` (GDP: mu / noise_factor); the planted bug fits at it and claims ``epsilon``."""
    from privopt.accounting import gdp_epsilon, gdp_mu

    factor = check_positive("noise_factor", noise_factor)
    return float(gdp_epsilon(gdp_mu(epsilon, delta) / factor, delta))


def audit_estimator(
    audit: EstimatorAudit,
    *,
    epsilon: float | None = None,
    delta: float = 1e-5,
    runs: int = 200,
    confidence: float = 0.95,
    planted_noise_factor: float = 1.0,
    seed: int = 0,
) -> tuple[float, AuditResult]:
    """(claimed epsilon, black-box audit) of an estimator method with an input canary.

    ``runs`` fits on each neighbour (seeds ``seed``, ``seed + 1``, ...; fresh noise each). The
    claimed epsilon is the largest that any fit's report states.
    """
    epsilon = check_positive("epsilon", audit.epsilon if epsilon is None else epsilon)
    delta = check_probability("delta", delta)
    runs = check_count("runs", runs, minimum=8)
    fit_epsilon = epsilon
    planted: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if planted_noise_factor != 1.0 and audit.plant == "ssgd-noise":
        planted = _scaled_ssgd_noise(planted_noise_factor)
    elif planted_noise_factor != 1.0:
        fit_epsilon = planted_epsilon(epsilon, delta, planted_noise_factor)
    with planted:
        claimed, scores = _fits(audit, fit_epsilon, delta, runs, seed)
    if planted_noise_factor != 1.0:
        claimed = epsilon  # the bug: the report would say epsilon
    result = audit_scores(
        np.asarray(scores[0]), np.asarray(scores[1]), delta=delta, confidence=confidence
    )
    return claimed, result


@contextlib.contextmanager
def _scaled_ssgd_noise(factor: float) -> Iterator[None]:
    """The planted bug of the DP-SSGD control: its calibrated noise multiplier times ``factor``
    (every plan with the shuffling analysis, as it leaves ``TrainingPlan.calibrate``)."""
    import dataclasses

    from privopt.algorithms.ssgd import ShuffleAnalysis
    from privopt.training.plan import TrainingPlan

    original = TrainingPlan.calibrate

    def scaled(self: Any, epsilon: float, delta: float, *args: Any, **kwargs: Any) -> Any:
        plan = original(self, epsilon, delta, *args, **kwargs)
        if isinstance(plan.analysis, ShuffleAnalysis):
            plan = dataclasses.replace(plan, noise_multiplier=plan.noise_multiplier * factor)
        return plan

    with mock.patch.object(TrainingPlan, "calibrate", scaled):
        yield


def _fits(
    audit: EstimatorAudit, fit_epsilon: float, delta: float, runs: int, seed: int
) -> tuple[float, list[list[float]]]:
    X1, y1, _, _ = input_canary_data(audit.n_records, audit.n_features, seed, base=audit.base)
    point = np.ones((1, audit.n_features))
    scores: list[list[float]] = [[], []]
    claimed = 0.0
    relation = "zero-out"
    for side in (0, 1):
        for k in range(runs):
            if side == 0:
                X, y = X1, y1
            elif k == 0:  # the neighbour under the relation the fits report
                _, _, X, y = input_canary_data(
                    audit.n_records, audit.n_features, seed, relation, audit.base
                )
            model = audit.make(fit_epsilon, delta, seed + 2 * k + side).fit(X, y)
            report = model.privacy_report_
            relation = report.neighbouring
            scores[side].append(float(model.predict(point)[0]))
            claimed = max(claimed, float(report.epsilon))
    return claimed, scores
