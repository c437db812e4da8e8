"""scikit-learn estimators over privopt's algorithms."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from privopt.accounting import PrivacyLedger, gdp_mu
from privopt.algorithms.ambssgd import dp_ambssgd, practical_config
from privopt.algorithms.baselines import adassp, dpsgd_linear
from privopt.algorithms.ftrl_sigma import dp_ftrl_sigma, public_clip_constant
from privopt.algorithms.preprocess import (
    MIN_CHUNK_ROWS,
    LinearBounds,
    preprocessing_share,
    private_bounds_by_label,
    private_second_moment,
)
from privopt.algorithms.result import FitTrace
from privopt.algorithms.ssgd import calibrate_ssgd_noise, dp_ssgd, practical_learning_rate
from privopt.estimators._base import SHARED_CONSTRAINTS, PrivateEstimator, public_linear_bounds
from privopt.noise import IdentityCovariance, LowRankPlusRidgeCovariance

__all__ = ["DPLinearRegression"]

METHODS = ("adassp", "ambssgd", "ssgd", "dpsgd", "ftrl-sigma")
#: Shares of mu^2 for AdaSSP's (lambda_min, Z^T Z, Z^T t) releases. Measured on x ~ N(0, I_20),
#: sigma = 1, N = 200,000, epsilon = 1 (8 seeds): the Gram noise dominates the error, and this
#: split lowers the median excess risk from 5.2x OLS (equal thirds, Wang 2018) to 4.2x.
ADASSP_SPLIT = (0.05, 0.6, 0.35)
PUBLIC_BOUNDS_HINT = "Give public feature_bounds and target_bounds to skip private preprocessing."


class DPLinearRegression(RegressorMixin, PrivateEstimator):
    """Differentially private linear regression, (epsilon, delta)-DP end to end.

    Every release derived from the training data is recorded in a privacy ledger; the report is
    ``privacy_report_``. With only ``epsilon`` and ``delta`` given, nothing private is assumed
    known: the centres and ranges of the data are estimated privately on a disjoint 10% slice
    of the (secretly shuffled) rows, which by parallel composition costs no extra budget.

    Methods (``method``):

    * ``"dpsgd"`` (default): DP-SGD with Poisson sampling (rate 256/N, 5 epochs), a fixed clip
      at the private bounds, PLD calibration (zero-out neighbours: N stays public, with the
      epsilon of add/remove), tail averaging. Chosen from the sweep in BENCHMARKS.md
      (x ~ N(0, I_d), sigma = 1, delta = 1e-6, median of 5 seeds, no public knowledge): it is
      the only method within about 7x of OLS in every cell with N >= 1e5 (d in {10, 50},
      epsilon in {0.5, 1, 4}); at N = 200,000, d = 20, epsilon = 1 its median is 2.5x. Its
      cost is a PLD calibration (about 4 s) plus 5 N / 256 small steps (about 12 s at
      N = 200,000).
    * ``"adassp"``: AdaSSP (Wang 2018), sufficient-statistics perturbation with a private
      adaptive ridge, accounted in exact GDP, budget split :data:`ADASSP_SPLIT`. Fastest (0.3 s at
      N = 200,000) and best at small d with larger epsilon (1.2x OLS at N = 1e6, d = 10,
      epsilon = 4; 4.2x at the setting above), but its Gram-matrix noise grows with d (75x at
      N = 1e5, d = 50, epsilon = 1).
    * ``"ambssgd"``: DP-AMBSSGD (seed 000, Algorithm 2) with DP-STAT adaptive clipping and
      privopt's measured constants (:func:`privopt.algorithms.ambssgd.practical_config`); a
      private second-moment estimate (another disjoint slice) sets its step size. Close to
      the best at N = 1e6 (2.2x to 5.2x OLS for d = 10, and d = 50 at epsilon = 4), far behind at
      smaller N or larger d, where its T ln N rounds leave too few rows per round.
    * ``"ssgd"``: DP-SSGD (seed 000, Algorithm 1), one shuffled pass of single-example steps,
      accounted by amplification by shuffling; it refuses an epsilon outside the bound's
      validity region (about epsilon <= 1.09 for delta = 1e-6).
    * ``"dpsgd"``: DP-SGD with Poisson sampling, a fixed clip and PLD accounting
      (zero-out neighbours).

    Neighbouring relation (``neighbouring``): every relation keeps N fixed, so N is public; the
    report states the one used. ``"auto"`` (default) takes each method's own: zero-out for
    Poisson DP-SGD (its accounting is of the add/remove kind), replace-one for the others.
    ``"zero-out"`` accounts every method under zero-out, so methods can be compared at one
    guarantee: AdaSSP and DP-FTRL-Σ use their zero-out sensitivities (half the replace-one
    ones), DP-AMBSSGD, DP-SSGD and private preprocessing keep their replace-one analyses, which
    bound zero-out's (a null record is a valid record of the clipped domain). ``"replace-one"``
    accounts every method under replace-one except DP-SGD, which is refused.
    * ``"ftrl-sigma"``: DP-FTRL-Σ (seed 003, Algorithm 1), one pass with tree-aggregated noise
      N(0, sigma^2 Σ) and clipping in the Σ^-1 norm, for over-parameterised problems (d > N).
      With ``public_X`` (public unlabeled rows of the same distribution) Σ is the designed
      (lambda I + X~^T X~) / M with lambda = M / (N eta), in O(d M) memory; without it Σ = I.
      The clip threshold is fixed and public: C times the target bound, with C the largest
      Σ^-1 norm of the public rows (or the row bound); the step size is 0.1 / (sqrt(N) times
      the public rows' mean squared norm) on rows scaled to norm <= 1.

    Parameters:
        epsilon: privacy loss, > 0.
        delta: in (0, 1); use less than 1/N.
        method: one of the above.
        fit_intercept: learn an intercept (as the coefficient of a constant column).
        feature_bounds: public per-feature ranges, a (low, high) pair for all features or a
            (n_features, 2) array. Given together with ``target_bounds``, no rows are spent on
            private preprocessing. Values outside are clipped.
        target_bounds: public (low, high) range of the target.
        preprocess_fraction: share of rows used for private preprocessing, in (0, 0.5).
        public_X: public unlabeled rows (``"ftrl-sigma"`` only): design Σ from them.
        random_state: None, an int seed or a numpy Generator (the permutation and all noise).
            A seed that draws noise must stay secret and serve one fit only (the report says so).
        diagnostics: also expose non-private diagnostics (clip fractions) in ``fit_trace_`` /
            ``fit_info_``; warns, and the report lists them as releases outside the guarantee.
            Default False: they are absent.
        secure_mode: draw every random number from ChaCha20 keyed by the operating system
            (:func:`privopt.noise.secure_generator`); ``random_state`` must then be None.
        neighbouring: ``"auto"``, ``"zero-out"`` or ``"replace-one"`` (see above).

    Fitted attributes: ``coef_``, ``intercept_``, ``privacy_report_`` (a
    :class:`~privopt.accounting.PrivacyReport`; ``epsilon``, ``delta``, ``rho`` are attributes and
    keys), ``fit_trace_`` (:class:`~privopt.algorithms.FitTrace`), ``fit_info_`` (configuration
    used), ``n_features_in_``.
    """

    _parameter_constraints: dict = {  # noqa: RUF012 (scikit-learn's declarative contract)
        **SHARED_CONSTRAINTS,
        "method": [StrOptions(set(METHODS))],
        "target_bounds": [None, "array-like"],
        "public_X": [None, "array-like"],
        "neighbouring": [StrOptions({"auto", "replace-one", "zero-out"})],
    }

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        method: str = "dpsgd",
        fit_intercept: bool = True,
        feature_bounds: Any = None,
        target_bounds: Any = None,
        preprocess_fraction: float = 0.1,
        public_X: Any = None,
        random_state: Any = None,
        diagnostics: bool = False,
        secure_mode: bool = False,
        neighbouring: str = "auto",
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.method = method
        self.fit_intercept = fit_intercept
        self.feature_bounds = feature_bounds
        self.target_bounds = target_bounds
        self.preprocess_fraction = preprocess_fraction
        self.public_X = public_X
        self.random_state = random_state
        self.diagnostics = diagnostics
        self.secure_mode = secure_mode
        self.neighbouring = neighbouring

    # -- fitting -------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> DPLinearRegression:
        """Fit privately; the input arrays are never modified."""
        self._validate_params()
        if not math.isfinite(self.epsilon):
            raise ValueError(f"Expected epsilon to be finite, got {self.epsilon!r}.")
        X, y = validate_data(self, X, y, y_numeric=True, dtype=np.float64)
        n = X.shape[0]
        method = self.method
        # Every relation privopt uses keeps N fixed, so N is public by construction (it sets
        # step counts, sampling rates and divisors, and privopt fit writes it to model.json).
        # Poisson-sampled DP-SGD is accounted under zero-out neighbours (a record replaced by a
        # null record; the same epsilon as add/remove); every other method under replace-one.
        ledger = PrivacyLedger(self._relation(method))
        rng = self._generator(ledger)
        # a relative 1e-9 below the target, so that the exactly inverted epsilon of the
        # preprocessing releases (whose mu is rebuilt from stds, a few ulps off) never prints
        # above it
        mu = gdp_mu(self.epsilon * (1.0 - 1e-9), self.delta)
        ledger.assume("the number of records N is public")
        # Every record is assigned to one release by an independent, data-independent draw
        # (secret): adding, removing or replacing a record changes one part only, so the parts
        # compose in parallel under every neighbouring relation. Sizes used in releases are the
        # public expected ones (N times the part's probability), never the realised counts.
        label = rng.random(n)
        public_bounds_given = self.feature_bounds is not None
        pre_share = (
            0.0
            if public_bounds_given
            else preprocessing_share(n, mu, self.preprocess_fraction, PUBLIC_BOUNDS_HINT)
        )
        moment_share = 0.0
        if method == "ambssgd":
            moment_share = max(MIN_CHUNK_ROWS / n, self.preprocess_fraction / 7)
        main_share = 1.0 - pre_share - moment_share
        self._check_rows(int(main_share * n), 1, "the fit after preprocessing")
        bounds = self._bounds(X, y, label, pre_share, mu, rng, ledger)
        second_moment_rows = np.flatnonzero(
            (label >= pre_share) & (label < pre_share + moment_share)
        )
        main_rows = np.flatnonzero(label >= pre_share + moment_share)
        Z, t = bounds.transform(X[main_rows], y[main_rows])
        sizes = {"main": main_share * n, "moment": moment_share * n}  # public expected sizes
        w, trace, info = self._run(
            method, Z, t, bounds, X, second_moment_rows, sizes, mu, rng, ledger
        )
        bounds = info.pop("_bounds", bounds)  # a method may rescale the intercept column
        self.coef_, self.intercept_ = bounds.to_original(w)
        self.privacy_report_ = ledger.report(self.delta)
        self.fit_trace_ = trace
        self.fit_info_ = {"method": method, "bounds": bounds.describe(), **info}
        return self

    def _relation(self, method: str) -> str:
        """The neighbouring relation of this fit (see the class docstring)."""
        if self.neighbouring == "auto":
            return "zero-out" if method == "dpsgd" else "replace-one"
        if method == "dpsgd" and self.neighbouring == "replace-one":
            raise ValueError(
                "method='dpsgd' (Poisson sampling) is accounted under zero-out neighbours only; "
                "use neighbouring='zero-out' or 'auto', or a method analysed under replace-one "
                "(adassp, ambssgd, ssgd, ftrl-sigma)."
            )
        return self.neighbouring

    def _check_rows(self, available: int, needed: int, what: str) -> None:
        if available < needed:
            raise ValueError(
                f"Too few rows: {what} needs at least {needed} rows, {available} are available. "
                + PUBLIC_BOUNDS_HINT
            )

    def _bounds(self, X, y, label, pre_share, mu, rng, ledger) -> LinearBounds:
        bounds = public_linear_bounds(
            self.feature_bounds, self.target_bounds, X.shape[1], self.fit_intercept, ledger
        )
        if bounds is not None:
            return bounds
        return private_bounds_by_label(
            X,
            y,
            label,
            pre_share,
            mu=mu,
            rng=rng,
            ledger=ledger,
            fit_intercept=self.fit_intercept,
        )

    def _run(self, method, Z, t, bounds, X, second_moment_rows, sizes, mu, rng, ledger):
        n = Z.shape[0]
        if method == "adassp":
            w, info = adassp(
                Z,
                t,
                row_bound=bounds.row_bound,
                target_bound=bounds.y_radius,
                mu=mu,
                rng=rng,
                ledger=ledger,
                budget_split=ADASSP_SPLIT,
            )
            return w, FitTrace.empty(), info
        if method == "dpsgd":
            return dpsgd_linear(
                Z,
                t,
                row_bound=bounds.row_bound,
                target_bound=bounds.y_radius,
                epsilon=self.epsilon,
                delta=self.delta,
                rng=rng,
                ledger=ledger,
                public_n=sizes["main"],
                diagnostics=self.diagnostics,
            )
        if method == "ftrl-sigma":
            return self._ftrl_sigma(Z, t, bounds, rng, ledger)
        if method == "ssgd":
            alpha = calibrate_ssgd_noise(self.epsilon, n, self.delta)
            return dp_ssgd(
                Z,
                t,
                noise_multiplier=alpha,
                clip=bounds.row_bound * bounds.y_radius,
                learning_rate=practical_learning_rate(bounds.row_bound, Z.shape[1], alpha),
                rng=rng,
                ledger=ledger,
                diagnostics=self.diagnostics,
            )
        # ambssgd: a private second moment of the centred, clipped features (its own disjoint
        # slice) sets the step size and the scale of the intercept column, so that the constant
        # column has the average feature's second moment and does not dominate ||H||.
        plain = dataclasses.replace(bounds, intercept_scale=0.0)
        moment = private_second_moment(
            plain.transform(X[second_moment_rows]),
            np.arange(second_moment_rows.size),
            row_bound=bounds.x_radius,
            mu=mu,
            rng=rng,
            ledger=ledger,
            expected_rows=sizes["moment"],
        )
        if self.fit_intercept:
            scale = math.sqrt(moment.trace / X.shape[1])
            bounds = dataclasses.replace(bounds, intercept_scale=scale)
            Z[:, -1] = scale
        h_norm = max(moment.h_norm, bounds.intercept_scale**2)
        config = practical_config(
            n,
            epsilon=self.epsilon,
            delta=self.delta,
            row_bound=bounds.row_bound,
            target_bound=bounds.y_radius,
            h_norm=h_norm,
            row_norm_sq=moment.row_norm_sq + bounds.intercept_scale**2,
            kappa=1.0,  # a noisy lambda_min is unreliable; T = ceil(0.5 ln N) rounds
        )
        w, trace, info = dp_ambssgd(
            Z, t, config, rng=rng, ledger=ledger, diagnostics=self.diagnostics
        )
        return w, trace, {**info, "_bounds": bounds}

    def _ftrl_sigma(self, Z, t, bounds, rng, ledger):
        """DP-FTRL-Σ on rows scaled to ||z|| <= 1 and |t| <= 1 (coefficients scaled back).

        Public choices only: with ``public_X`` the step is 0.1 / (sqrt(N) mean ||z~||^2) and
        C = max ||z~||_{Σ^-1} over the public rows; without it the worst case ||z|| = 1 is used.
        """
        n, p = Z.shape
        row_bound, y_bound = bounds.row_bound, bounds.y_radius
        covariance = IdentityCovariance(p)
        eta, clip_constant = 0.1 / math.sqrt(n), 1.0  # ||z|| <= 1
        if self.public_X is not None:
            public = np.asarray(self.public_X, dtype=float)
            if public.ndim != 2 or public.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"public_X must have {self.n_features_in_} columns like X; got shape "
                    f"{public.shape}."
                )
            public_z = bounds.transform(public) / row_bound
            eta = 0.1 / (math.sqrt(n) * max(float(np.mean(np.sum(public_z**2, axis=1))), 1e-12))
            covariance = LowRankPlusRidgeCovariance.from_public_data(
                public_z, n_samples=n, step_size=eta
            )
            clip_constant = public_clip_constant(public_z, covariance)
        fit = dp_ftrl_sigma(
            Z / row_bound,
            t / y_bound,
            epsilon=self.epsilon,
            delta=self.delta,
            learning_rate=eta,
            rng=rng,
            covariance=covariance,
            residual="fixed",
            threshold=clip_constant,  # C times the target bound |t| <= 1 (public)
            neighbouring=ledger.neighbouring.value,
            ledger=ledger,
            partition="fit",
            diagnostics=self.diagnostics,
        )
        info = {k: v for k, v in fit.info.items() if k != "last"}
        info.update(learning_rate=eta, covariance=type(covariance).__name__)
        return fit.coef * y_bound / row_bound, fit.trace, info

    # -- prediction ----------------------------------------------------------------------------
    def predict(self, X: Any) -> np.ndarray:
        """Predictions <x, coef_> + intercept_ (post-processing: no privacy cost)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return X @ self.coef_ + self.intercept_
