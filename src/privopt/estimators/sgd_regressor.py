"""DPSGDRegressor: private linear regression with robust or non-smooth losses (Wang et al. 2022)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_is_fitted

from privopt.estimators._base import public_linear_bounds
from privopt.estimators._holder import HolderSGDEstimator
from privopt.estimators._input import validate_rows
from privopt.estimators._params import store_params
from privopt.estimators._users import refuse_under_users
from privopt.losses import get_loss

__all__ = ["DPSGDRegressor"]

REGRESSION_LOSSES = ("squared", "absolute", "huber", "qnorm")


class DPSGDRegressor(RegressorMixin, HolderSGDEstimator):
    """Differentially private linear regression by private SGD with an alpha-Hölder loss.

    Losses: ``"squared"`` (least squares, alpha = 1), ``"absolute"`` (robust, alpha = 0),
    ``"huber"`` (with ``huber_delta``; the default), ``"qnorm"`` (|y - <w, x>|^q, q in [1, 2]).
    Measured on x ~ N(0, I_5), sigma = 1, N = 20,000, epsilon = 1 (no public bounds): excess
    risk 8e-4 (absolute), 1.8e-3 (Huber), 0.14 to 0.2 (squared: its gradient bound grows with
    the radius, so its noise does; use :class:`DPLinearRegression` for least squares). Rows and
    targets are centred and clipped to public bounds (``feature_bounds`` and ``target_bounds``)
    or to privately estimated ones (a disjoint slice of records, no extra budget), then scaled
    so that ||x|| <= 1 and |y| <= 1; the fitted coefficients are mapped back to the caller's
    units, so the model is linear in the original features. The private fit is Wang et al.'s (2022)
    DP-SGD-Gradient (default) or DP-SGD-Output; see :class:`DPLinearClassifier` for the
    parameters they share (``budget``: a :class:`~privopt.PrivacyBudget` the fit draws from,
    checked before X is read). Privacy: (epsilon, delta)-DP under replace-one neighbours, stated in
    ``privacy_report_``. ``fit(X, y, users=ids)`` makes the user the privacy unit (user-level
    replace-one; ``user_clipping``: ``"sum"`` or ``"mean"`` of a user's gradients is clipped;
    see :meth:`fit`).

    Fitted attributes: ``coef_``, ``intercept_``, ``privacy_report_``, ``fit_info_``,
    ``n_features_in_``.
    """

    _parameter_constraints: dict = {  # noqa: RUF012
        **HolderSGDEstimator._parameter_constraints,
        "target_bounds": [None, "array-like"],
        "q": [float, int],
        "huber_delta": [float, int],
    }

    def __init__(
        self,
        loss: str = "huber",
        perturbation: str = "gradient",
        method: str = "sgd",
        epsilon: float = 1.0,
        delta: float = 1e-6,
        fit_intercept: bool = True,
        feature_bounds: Any = None,
        target_bounds: Any = None,
        radius: float | str | None = "auto",
        steps: int | None = None,
        learning_rate: float | None = None,
        accounting: str = "auto",
        preprocess_fraction: float = 0.1,
        q: float = 1.5,
        huber_delta: float = 0.5,
        random_state: Any = None,
        diagnostics: bool = False,
        secure_mode: bool = False,
        budget: Any = None,
        user_clipping: str = "sum",
    ) -> None:
        store_params(self, locals())

    def _loss(self):
        if self.loss not in REGRESSION_LOSSES:
            raise ValueError(
                f"Expected a regression loss in {REGRESSION_LOSSES}, got {self.loss!r}."
            )
        if self.loss == "qnorm":
            return get_loss("qnorm", q=self.q)
        if self.loss == "huber":
            return get_loss("huber", delta=self.huber_delta)
        return get_loss(self.loss)

    def fit(self, X: Any, y: Any, users: Any = None) -> DPSGDRegressor:
        """Fit privately; the input arrays are never modified.

        ``users`` (one id per record; None, NaN or empty ids refused): the privacy unit
        becomes the user (user-level replace-one, N = the number of users, public): each step
        samples one user, whose contribution is its records' gradients summed (or averaged,
        ``user_clipping="mean"``) and clipped to the per-record bound G as one vector
        (:mod:`privopt.estimators._users`); ``steps`` defaults to 16 per user. It needs the
        public ``feature_bounds`` and ``target_bounds`` (the private bounds are a record-level
        release) and ``perturbation="gradient"``, ``method="sgd"``.
        """
        rng, ledger = self._start(users is not None)
        loss = self._loss()
        X, y = validate_rows(self, X, y, y_numeric=True, dtype=np.float64)
        groups = self._user_groups(users, X.shape[0])
        bounds = public_linear_bounds(
            self.feature_bounds, self.target_bounds, X.shape[1], self.fit_intercept, ledger
        )
        if bounds is not None:
            rows = np.arange(X.shape[0])
        else:
            bounds, rows = self._private_bounds(X, y, rng, ledger)
        Z, t = bounds.transform(X[rows], y[rows])
        row_bound, y_bound = bounds.row_bound, bounds.y_radius
        fit = self._private_fit(
            Z / row_bound,
            t / y_bound,
            loss,
            x_bound=1.0,
            y_bound=1.0,
            rng=rng,
            ledger=ledger,
            groups=groups,
        )
        # t / y_bound ~ <Z / row_bound, w>  =>  t ~ <Z, w y_bound / row_bound>
        self.coef_, self.intercept_ = bounds.to_original(fit.coef * y_bound / row_bound)
        self.bounds_ = dataclasses.replace(bounds)
        # under users= the number of records is not public: only N users is reported
        fitted = (
            {"rows_fitted": int(rows.size)}
            if groups is None
            else {"users_fitted": groups.num_users}
        )
        self._store(fit, {"bounds": bounds.describe(), **fitted})
        return self

    def _check_user_releases(self) -> None:
        if self.feature_bounds is None or self.target_bounds is None:
            raise refuse_under_users(
                "DPSGDRegressor",
                "the private estimate of the features' and target's bounds",
                "public feature_bounds and target_bounds",
            )

    def predict(self, X: Any) -> np.ndarray:
        """<x, coef_> + intercept_ (post-processing: no privacy cost)."""
        check_is_fitted(self)
        X = validate_rows(self, X, reset=False, dtype=np.float64)
        return X @ self.coef_ + self.intercept_
