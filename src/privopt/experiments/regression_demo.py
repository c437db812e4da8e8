"""The main demo: private linear regression on the model of Varshney et al. (2022).

x ~ N(0, I_20), ||w*|| = 1, sigma = 1, N = 200,000, epsilon = 1, delta = 1e-6: fit the default
(``method="auto"``, which picks noisy Newton here), DP-AMBSSGD, DP-SGD and AdaSSP through
:class:`privopt.DPLinearRegression` (nothing but epsilon and delta
known; bounds estimated privately) and the non-private OLS reference, and compare excess risk
1/2 ||w - w*||_H^2 + b^2/2, epsilon spent and wall time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from privopt.datasets import make_linear_regression
from privopt.estimators import DPLinearRegression

__all__ = ["DemoRow", "run_regression_demo"]


@dataclass(frozen=True)
class DemoRow:
    method: str
    excess_risk: float
    ratio_to_ols: float
    epsilon: float | None
    seconds: float


def run_regression_demo(
    n_samples: int = 200_000,
    n_features: int = 20,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    seed: int = 0,
    methods: tuple[str, ...] = ("auto", "ambssgd", "dpsgd", "adassp"),
) -> list[DemoRow]:
    """Fit each method and the OLS reference on one synthetic data set; return the table rows."""
    rng = np.random.default_rng(seed)
    data = make_linear_regression(n_samples, n_features, sigma=1.0, rng=rng)
    start = time.perf_counter()
    design = np.hstack([data.X, np.ones((n_samples, 1))])
    ols = np.linalg.lstsq(design, data.y, rcond=None)[0]
    ols_seconds = time.perf_counter() - start
    ols_risk = data.excess_risk(ols[:-1], intercept=float(ols[-1]))
    rows = [DemoRow("OLS (not private)", ols_risk, 1.0, None, ols_seconds)]
    for method in methods:
        model = DPLinearRegression(epsilon=epsilon, delta=delta, method=method, random_state=seed)
        start = time.perf_counter()
        model.fit(data.X, data.y)
        seconds = time.perf_counter() - start
        risk = data.excess_risk(model.coef_, intercept=model.intercept_)
        label = f"auto (default: {model.fit_info_['method']})" if method == "auto" else method
        rows.append(DemoRow(label, risk, risk / ols_risk, model.privacy_report_.epsilon, seconds))
    return rows
