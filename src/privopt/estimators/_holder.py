"""Shared machinery of the Wang et al. (2022) estimators (DPLinearClassifier, DPSGDRegressor).

Both map the features into a public bounded domain, spend the whole (epsilon, delta) on one
private SGD fit (output or gradient perturbation, :mod:`privopt.algorithms`), and keep every
release in a replace-one ledger. Without public ``feature_bounds`` each feature's centre and
scale and the rows' radius are private quantiles on a disjoint slice of records (assigned by an
independent secret draw), which by parallel composition costs no extra budget, only rows.

``fit(X, y, users=ids)`` makes the user the privacy unit (a user-level replace-one ledger):
DP-SGD-Gradient samples one user of N per step and clips the sum (or mean) of its records'
gradients as one vector (:mod:`privopt.estimators._users`); the releases that have no user-level
version (the private bounds, the private label set, output perturbation, SRGD) are refused by
name before a budget is reserved (:meth:`HolderSGDEstimator._check_users`).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from privopt.accounting import PrivacyLedger, gdp_mu
from privopt.algorithms.gradient_perturbation import ACCOUNTING, dp_sgd_gradient
from privopt.algorithms.output_perturbation import dp_sgd_output
from privopt.algorithms.srgd import accelerated_dp_srgd
from privopt.estimators._base import SHARED_CONSTRAINTS, PrivateEstimator
from privopt.estimators._private_bounds import PUBLIC_BOUNDS_HINT, PrivateBoundsMixin
from privopt.estimators._users import (
    USER_CLIPPING,
    USER_UNIT_ASSUMPTION,
    check_user_clipping,
    user_dp_sgd_gradient,
    user_groups,
    user_ledger,
)
from privopt.estimators._utility import output_noise_reasons, warn_if_useless
from privopt.releases.preprocess import (
    LinearBounds,
    dp_stat_minimum_rows,
    preprocessing_share,
    private_bounds_by_label,
)

__all__ = ["HolderSGDEstimator"]

PERTURBATIONS = ("gradient", "output")
#: ``"sgd"``: Wang et al.'s (2022) projected SGD (output or gradient perturbation); ``"srgd"``:
#: Choquette-Choo, Ganesh & Thakurta's (2025)
#: single-epoch Accelerated-DP-SRGD (binary-tree noise, setting "interior"; smooth losses).
METHODS = ("sgd", "srgd")
#: Default number of steps per training record, and the cap on the total (the engine is a
#: sequential Python loop, ~10 us per step). Chosen on a validation split of Adult's training
#: part (never its test split): 16 steps per record reach 0.81-0.82 accuracy at epsilon = 1,
#: 64 reach 0.83 at four times the cost; the theorems' T (n for alpha >= 1/2, n^2 for the hinge
#: loss) is available from :func:`privopt.algorithms.recommended_schedule`.
STEPS_PER_RECORD = 16
#: gradient perturbation warns when the noise walk in the average exceeds this many radii
WALK_LIMIT = 3.0
#: output perturbation of a regressor warns when the noise it adds to a prediction (std up to
#: s x_bound) exceeds this many target bounds y_bound (see ``_warn_if_useless``)
OUTPUT_PREDICTION_NOISE = 1.0
MAX_DEFAULT_STEPS = 2_000_000
#: Default step size of gradient perturbation on unit-norm rows (same validation split:
#: 0.003-0.01 are within a point of each other at T = 16 n, R = 50).
GRADIENT_LEARNING_RATE = 0.005
#: Output perturbation: the stability bound grows with eta T, so the default keeps the total
#: travel eta T fixed.
OUTPUT_TRAVEL = 50.0
#: ``radius="auto"``: R = 50 for losses whose gradient norm is bounded on all of R^d (hinge,
#: logistic, absolute, Huber), so R costs no noise; R = 5 for the others (squared, squared
#: hinge, q-norm with q > 1), whose gradient bound and hence noise grow with R (measured:
#: squared hinge at R = 50 has G = 102 and accuracy 0.74 where hinge reaches 0.94).
LIPSCHITZ_RADIUS = 50.0
NON_LIPSCHITZ_RADIUS = 5.0
#: ``method="srgd"``: its clip on gradient differences (and so its noise) grows with R (Lemma
#: 11: 2 (M b + 4 M R + L)); measured on unit rows, logistic at epsilon = 1: accuracy 0.873 at
#: R = 1, 0.750 at R = 3, 0.576 at R = 10.
SRGD_RADIUS = 1.0


class HolderSGDEstimator(PrivateBoundsMixin, PrivateEstimator):
    """Base class: parameters, validation, the private fit. Subclasses map data and labels."""

    _private_outputs = ("coef_", "intercept_", "bounds_", "fit_info_")
    _parameter_constraints: dict = {  # noqa: RUF012 (scikit-learn's declarative contract)
        "loss": [str],
        "perturbation": [StrOptions(set(PERTURBATIONS))],
        "method": [StrOptions(set(METHODS))],
        **SHARED_CONSTRAINTS,
        "radius": [None, StrOptions({"auto"}), Interval(numbers.Real, 0, None, closed="neither")],
        "steps": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "learning_rate": [None, Interval(numbers.Real, 0, None, closed="neither")],
        "accounting": [StrOptions(set(ACCOUNTING))],
        "user_clipping": [StrOptions(set(USER_CLIPPING))],
    }

    # -- shared steps --------------------------------------------------------------------------
    def _start(self, users: bool = False) -> tuple[np.random.Generator, PrivacyLedger]:
        """The fit's randomness and ledger: replace-one, whose unit is the user with
        ``users`` (then N is the number of users)."""
        self._validate_params()
        if not math.isfinite(self.epsilon):
            raise ValueError(f"Expected epsilon to be finite, got {self.epsilon!r}.")
        ledger = user_ledger("replace-one", users)
        ledger.assume(USER_UNIT_ASSUMPTION if users else "the number of records N is public")
        return self._generator(ledger), ledger

    # -- user-level privacy (``fit(X, y, users=ids)``, privopt.estimators._users) ---------------
    def _check_users(self, users: Any, n_rows: int | None) -> None:
        """Refusals of ``users=`` from the parameters and the id column only, before a budget
        is reserved and before anything is released: the releases without a user-level version
        (:meth:`_check_user_releases`), then the ids (length, missing ids, >= 2 users)."""
        check_user_clipping(self.user_clipping)
        name = type(self).__name__
        if self.method != "sgd" or self.perturbation != "gradient":
            raise ValueError(
                f"{name} with users= supports method='sgd' with perturbation='gradient' only "
                "(one user sampled per step, its clipped gradient): output perturbation's "
                "stability bound (Wang et al. 2022, Thm 7) and SRGD's clipped differences are "
                "analysed for one record."
            )
        self._check_user_releases()
        if n_rows is not None:
            user_groups(users, n_rows)

    def _check_user_releases(self) -> None:
        """Subclasses refuse their private releases that have no user-level version."""

    def _user_groups(self, users: Any, n_rows: int):
        """The validated user groups of a fit with ``users=`` (None without)."""
        if users is None:
            return None
        self._check_users(users, None)
        return user_groups(users, n_rows)

    def _private_bounds(
        self,
        X: np.ndarray,
        y: np.ndarray,
        rng: np.random.Generator,
        ledger: PrivacyLedger,
        target: tuple[float, float] | None = None,
    ) -> tuple[LinearBounds, np.ndarray]:
        """Private bounds on a disjoint secret slice of the records; returns the bounds and the
        fit's rows (the others). ``target``: the (epsilon, delta) left for the slice (default
        the estimator's own; less when a release shared by every record came first).

        The slice and the fit's rows are disjoint (a secret draw independent of the data), so
        the bounds cost the full (epsilon, delta) on the slice only (parallel composition) and
        the fit keeps the whole budget on the rest. Which estimator runs depends on public N
        and mu only:

        * N at least :func:`~privopt.releases.preprocess.dp_stat_minimum_rows` (about
          17,500 at epsilon = 1, delta = 1e-6): DP-STAT's private centre and radius of
          the rows (:func:`~privopt.releases.preprocess.private_bounds_by_label`), which
          keep the rows' geometry (measured better where both run: Adult's one-hot features
          0.81 accuracy against 0.77, synthetic d = 30 R^2 0.48 against 0.37);
        * fewer rows: private quantiles, clip counts and the row radius
          (:func:`~privopt.releases.quantile_bounds.private_quantile_bounds`, as
          :class:`~privopt.estimators.DPLinearRegression`) on m rows
          (:func:`~privopt.estimators._private_bounds.quantile_slice_rows`, about
          45 sqrt(7 d + 6) / mu): CCPP's 9,568 rows fit (R^2 0.92 against OLS's 0.93), where
          DP-STAT refused. Refused, naming the public-bounds arguments, when even this slice
          would take more than half of the rows.
        """
        n, d = X.shape
        mu = self._bounds_mu(target)
        self._check_bounds_rows(n, d, target)
        if n >= dp_stat_minimum_rows(mu):
            share = preprocessing_share(n, mu, self.preprocess_fraction, PUBLIC_BOUNDS_HINT)
            label = rng.random(n)  # secret, data-independent assignment of records
            bounds = private_bounds_by_label(
                X, y, label, share, mu=mu, rng=rng, ledger=ledger, fit_intercept=self.fit_intercept
            )
            return bounds, np.flatnonzero(label >= share)
        rows = self._quantile_slice(n, d, mu, rng)
        bounds = self._quantile_bounds(X, y, rows, mu, rng, ledger, "preprocess")
        return bounds, np.setdiff1d(np.arange(n), rows, assume_unique=True)

    def _bounds_mu(self, target: tuple[float, float] | None) -> float:
        """The GDP mu of the private bounds at ``target`` (default the estimator's own)."""
        epsilon, delta = target if target is not None else (self.epsilon, self.delta)
        # a relative 1e-9 below the target, so that the exactly inverted epsilon of these
        # releases never prints above it after rounding
        return gdp_mu(epsilon * (1.0 - 1e-9), delta)

    def _check_bounds_rows(self, n: int, d: int, target: tuple[float, float] | None = None) -> None:
        """Refuse, from public N, d and mu only and before anything is released, when the
        private bounds of :meth:`_private_bounds` would need more rows than there are."""
        mu = self._bounds_mu(target)
        if n >= dp_stat_minimum_rows(mu):
            preprocessing_share(n, mu, self.preprocess_fraction, PUBLIC_BOUNDS_HINT)
        else:
            self._slice_rows(n, d, mu)

    def _schedule(self, n: int) -> tuple[int, float]:
        steps = self.steps or min(STEPS_PER_RECORD * n, MAX_DEFAULT_STEPS)
        if self.learning_rate is not None:
            return steps, float(self.learning_rate)
        if self.perturbation == "gradient":
            return steps, GRADIENT_LEARNING_RATE
        return steps, OUTPUT_TRAVEL / steps

    def _private_fit(
        self,
        Z: np.ndarray,
        t: np.ndarray,
        loss: Any,
        *,
        x_bound: float,
        y_bound: float | None,
        rng: np.random.Generator,
        ledger: PrivacyLedger,
        target: tuple[float, float] | None = None,
        groups: Any = None,
    ):
        """One private fit at ``target`` = (epsilon, delta) (default the estimator's own);
        ``groups``: the records' users (user-level DP-SGD-Gradient, N = number of users)."""
        epsilon, delta = target if target is not None else (self.epsilon, self.delta)
        steps, eta = self._schedule(Z.shape[0] if groups is None else groups.num_users)
        radius = self.radius
        if radius == "auto" and self.method == "srgd":
            radius = SRGD_RADIUS
        elif radius == "auto":
            lipschitz = math.isfinite(loss.lipschitz(x_bound, y_bound, None))
            radius = LIPSCHITZ_RADIUS if lipschitz else NON_LIPSCHITZ_RADIUS
        # the arguments every engine takes; SGD adds its schedule (eta, steps)
        common = dict(
            epsilon=epsilon,
            delta=delta,
            x_bound=x_bound,
            y_bound=y_bound,
            radius=radius,
            rng=rng,
            ledger=ledger,
            partition="fit",
            diagnostics=self.diagnostics,
        )
        if self.method == "srgd":
            if loss.phi_holder().alpha < 1.0:
                raise ValueError(
                    f"method='srgd' needs a smooth loss (alpha = 1), got {loss.name!r} with "
                    f"alpha = {loss.phi_holder().alpha:g}; use e.g. 'logistic', "
                    "'squared_hinge' or 'huber' (Choquette-Choo, Ganesh & Thakurta's (2025) "
                    "analysis clips gradient "
                    "differences, whose bound needs smoothness)."
                )
            return accelerated_dp_srgd(Z, t, loss, setting="interior", **common)
        if groups is not None:  # method "sgd", perturbation "gradient" (_check_users)
            fit = user_dp_sgd_gradient(
                Z,
                t,
                loss,
                groups,
                user_clipping=self.user_clipping,
                eta=eta,
                steps=steps,
                accounting=self.accounting,
                **common,
            )
        elif self.perturbation == "gradient":
            fit = dp_sgd_gradient(
                Z, t, loss, eta=eta, steps=steps, accounting=self.accounting, **common
            )
        else:
            fit = dp_sgd_output(Z, t, loss, eta=eta, steps=steps, **common)
        self._warn_if_useless(fit, Z.shape[1], radius, eta, steps, (x_bound, y_bound))
        return fit

    def _warn_if_useless(
        self,
        fit,
        dimension: int,
        radius,
        eta: float,
        steps: int,
        data_bounds: tuple[float, float | None],
    ) -> None:
        """Issue 16: a UtilityWarning from public quantities when the noise swamps what the
        parameter set can hold.

        * output perturbation: the output noise norm s sqrt(d) against the radius (or, on R^d,
          the farthest SGD can travel, eta T G); for regression (``data_bounds`` = (x_bound,
          y_bound): rows in the ball of radius x_bound, targets within +-y_bound) also the
          noise the output adds to each prediction, up to s x_bound on a row of the ball,
          against y_bound: above
          :data:`OUTPUT_PREDICTION_NOISE` times it, predictions are mostly noise (measured on
          CCPP at epsilon 1, public bounds: absolute loss s = 2.1, R^2 -0.76; squared s = 3.1,
          R^2 -2.4; while s = 0.26 to 0.47 gave R^2 0.75 to 0.85);
        * gradient perturbation: the noise's random walk in the averaged iterate,
          eta sigma sqrt(T d / 3), against the radius (the walk is what a flat or weakly curved
          direction keeps; the squared and q-norm hinges' large gradient bounds G on the ball
          make sigma, and this walk, far larger than the hinge's). Measured on the tests'
          two-class data at epsilon 1: hinge below 1x the radius (accuracy 0.93), q-norm hinge
          1.7x (0.85), squared hinge 5.5x (0.69; the majority class on Adult), so the warning
          fires above :data:`WALK_LIMIT` = 3.
        """
        info = fit.info
        sigma = float(info["sigma"])
        if self.perturbation == "output":
            reach = radius if radius is not None else eta * steps * float(info.get("L", 1.0))
            reasons = output_noise_reasons(sigma, dimension, reach)
            x_bound, y_bound = data_bounds
            if y_bound is not None and sigma * x_bound > OUTPUT_PREDICTION_NOISE * y_bound:
                reasons.append(
                    f"the output noise moves each prediction by a standard deviation of up to "
                    f"{sigma * x_bound:.3g}, against targets within +-{y_bound:g}"
                )
        else:
            walk = eta * sigma * math.sqrt(steps * dimension / 3.0)
            reasons = (
                [
                    f"the gradient noise's random walk in the averaged iterate (norm about "
                    f"{walk:.3g}) is {walk / radius:.3g} times the radius {radius:g}"
                ]
                if walk > WALK_LIMIT * radius
                else []
            )
        fixes = [
            "a larger epsilon",
            *(["perturbation='gradient'"] if self.perturbation == "output" else []),
            "loss='hinge' or 'logistic' (small gradient bounds on the ball)",
            "a smaller radius or learning_rate, or fewer steps (less noise accumulates)",
        ]
        warn_if_useless(type(self).__name__, reasons, fixes, stacklevel=5)

    def _store(self, fit, info: dict[str, Any], report: Any = None) -> None:
        self.privacy_report_ = fit.report if report is None else report
        self.fit_info_ = {**fit.info, "method": fit.method, **info}


def unit_rows(Z: np.ndarray) -> np.ndarray:
    """Rows scaled to l2 norm <= 1 (rows already inside the ball are unchanged)."""
    norms = np.linalg.norm(Z, axis=1, keepdims=True)
    return Z / np.maximum(1.0, norms)
