"""scikit-learn estimators over privopt's algorithms."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from privopt._validate import check_delta_for_rows
from privopt.accounting import gdp_mu
from privopt.algorithms.ftrl_sigma import dp_ftrl_sigma, public_clip_constant
from privopt.algorithms.result import FitTrace
from privopt.estimators._base import SHARED_CONSTRAINTS, PrivateEstimator, weighted_rows
from privopt.estimators._bounds_ladder import (  # noqa: F401 (the plan's constants: their earlier home)
    COARSE_MAX_SHARE,
    FULL_BOUNDS_MAX_SHARE,
    MAX_PREPROCESS_SHARE,
    MIN_COARSE_RANKS,
    bounds_plan,
)
from privopt.estimators._input import validate_rows
from privopt.estimators._partial_bounds import known_plan, resolve_partial_bounds
from privopt.estimators._private_bounds import (
    PUBLIC_BOUNDS_HINT,
    PrivateBoundsMixin,
    quantile_slice_rows,  # noqa: F401 (re-exported: its earlier home)
)
from privopt.estimators._regression_methods import (
    MethodBudget,
    choose_method,
    describe,
    method_fixes,
    run_adassp,
    run_ambssgd,
    run_dpsgd,
    run_newton,
    run_newton_rows,
    run_ssgd,
)
from privopt.estimators._users import (
    USER_UNIT_ASSUMPTION,
    check_regression_users,
    user_ledger,
    user_level_rows,
)
from privopt.estimators._utility import warn_if_useless, warn_if_worse_than_mean
from privopt.noise import IdentityCovariance, LowRankPlusRidgeCovariance
from privopt.releases.coarse_bounds import coarse_quantile_bounds, intercept_only_bounds
from privopt.releases.fit_quality import QUALITY_SHARE, private_r2, quality_holdout
from privopt.releases.known_columns import (
    SCREEN_SHARE,
    UNIT_SCREEN_SHARE,
    KnownColumns,
    screen_binary_columns,
    screen_runs,
    unit_range_fallback,
    unit_screen_runs,
)
from privopt.releases.preprocess import LinearBounds
from privopt.releases.quantile_bounds import (
    QUANTILE_ROWS,
    private_quantile_bounds,
    tighten_public_bounds,
)

__all__ = ["DPLinearRegression"]

METHODS = ("auto", "newton", "adassp", "ambssgd", "ssgd", "dpsgd", "ftrl-sigma")
#: methods whose preprocessing shares the rows and the GDP budget (sequential composition)
SEQUENTIAL = ("newton", "adassp", "ambssgd")
#: methods whose public radii are tightened by private quantiles (AdaSSP keeps Wang's as given)
TIGHTENED = ("newton", "ambssgd")
#: share of mu^2 tightening public radii (2 quantiles): Newton 3x -> 1.4x OLS, N(0, I_20), |x| <= 5
TIGHTEN_SHARE = 0.05
#: fewer rows than this keep the public radii as given (a quantile of few rows is noise)
MIN_TIGHTEN_ROWS = 500
#: DP-AMBSSGD's private second moment takes this share of the method's mu^2
AMBSSGD_MOMENT_SHARE = 0.1
#: (trace, info, reasons) of the intercept-only model: no method runs
_CONSTANT = (FitTrace.empty(), {}, [])
#: uniforms drawn per call when replaying the N secret row labels of earlier versions
_UNIFORM_BLOCK = 1 << 20


class DPLinearRegression(RegressorMixin, PrivateBoundsMixin, PrivateEstimator):
    """Differentially private linear regression, (epsilon, delta)-DP end to end.

    Every release derived from the training data is recorded in a privacy ledger; the report is
    ``privacy_report_``. With only ``epsilon`` and ``delta`` given, nothing private is assumed
    known: a private count vector first finds the two-valued columns (one-hot and indicator
    features in {0, 1}; a {0, 1} or {-1, 1} target), which take that range as their box
    (:mod:`privopt.releases.known_columns`: 10% of the bounds' mu^2 taken from the method,
    skipped when too noisy; a quantile of a 0/1 column sits on an atom and fails); every
    other feature's and the target's centre and scale are private central quantiles
    chosen by the exponential mechanism over a data-independent grid, widened for heavy tails
    and atoms by private outer extents and clip counts (a feature whose box would still clip
    too many rows is dropped), and the row radius a private 97% quantile of the standardised
    row norms (:func:`~privopt.releases.quantile_bounds.private_quantile_bounds`, on a
    secret subset of at most 20,000 rows). For the Gaussian-only methods (``newton``,
    ``adassp``, ``ambssgd``) those releases share the rows and take a share of the GDP budget
    (10% to 30% of mu^2; exact GDP composition); for the methods that calibrate themselves
    (``dpsgd``, ``ssgd``, ``ftrl-sigma``) they use a disjoint secret slice at the full budget
    (parallel composition). Where the Gaussian-only methods' full bounds would need more than
    the whole budget (small N epsilon: the power-plant table at epsilon = 0.1), coarse bounds
    take their place (:mod:`privopt.releases.coarse_bounds`: a median and a spread per column,
    the row radius and one vector of clip counts, 2 d + 3 releases instead of 7 d + 6; see
    :mod:`privopt.estimators._bounds_ladder` for the analysis). Below the rows those need
    (about 520 at epsilon = 1 and d = 4) the coarse bounds take a larger share of the budget,
    then the model is the intercept only (the target's private median, spread and clipped
    mean; ``fit_info_["method"] == "intercept-only"``), each with a
    :class:`~privopt.estimators._utility.UtilityWarning`; a fit is refused, with the rows needed
    and the way out (public bounds), only where even the target's median would have fewer than
    23 ranks of resolution (158 rows at epsilon = 1) or a disjoint slice does not fit.

    Methods (``method``):

    * ``"auto"`` (default): ``"newton"`` when N mu >= 2 (d + 1)^1.5 (mu the GDP budget of
      (epsilon, delta); the Gram noise is then small against the data), ``"dpsgd"`` otherwise
      (:func:`~privopt.estimators._regression_methods.choose_method`, from the sweep in
      BENCHMARKS.md). Public quantities only.
    * ``"newton"``: noisy Newton (:mod:`privopt.releases.newton`): a private Gram matrix as
      preconditioner and three full-batch gradient steps whose residual clip follows a private
      quantile of the current residuals, so the last step's noise scales with the residuals,
      not the targets. Zero-out neighbours under ``"auto"``. Measured (only epsilon = 1,
      delta = 1e-6 given): median excess risk 1.34x OLS on x ~ N(0, I_20), N = 200,000 (12
      seeds; 1.22x before the heavy-tail preprocessing; DP-SGD 3.4x, DP-AMBSSGD 4.1x, AdaSSP
      9.7x); test R^2 0.91x to 1.0x OLS's on eight public tables of 8,760 to 45,730 rows, d
      4 to 18 (benchmarks/public_tables.py); CCPP test R^2 0.926 (OLS 0.929),
      about 0.90 on 2,000 rows; 0.9988x OLS's R^2 at epsilon = 1e4. Cost: one Gram product
      (BLAS syrk) and seven passes over the rows.
    * ``"adassp"``: AdaSSP (Wang 2018), sufficient-statistics perturbation with a private
      adaptive ridge, accounted in exact GDP, budget split :data:`ADASSP_SPLIT`. Fastest (0.3 s at
      N = 200,000) and best at small d with larger epsilon (1.2x OLS at N = 1e6, d = 10,
      epsilon = 4; 4.2x at the setting above), but its Gram-matrix noise grows with d (75x at
      N = 1e5, d = 50, epsilon = 1).
    * ``"ambssgd"``: DP-AMBSSGD (Varshney et al. 2022, Algorithm 2) with DP-STAT adaptive clipping
    and
      privopt's measured constants (:func:`privopt.algorithms.ambssgd.practical_config`); a
      private second-moment estimate (another disjoint slice) sets its step size. Close to
      the best at N = 1e6 (2.2x to 5.2x OLS for d = 10, and d = 50 at epsilon = 4), far behind at
      smaller N or larger d, where its T ln N rounds leave too few rows per round.
    * ``"ssgd"``: DP-SSGD (Varshney et al. 2022, Algorithm 1), one shuffled pass of single-example
    steps,
      accounted by amplification by shuffling; it refuses an epsilon outside the bound's
      validity region (about epsilon <= 1.09 for delta = 1e-6).
    * ``"dpsgd"``: DP-SGD with Poisson sampling (rate 256/N, 5 epochs), a fixed clip at the
      private bounds, PLD calibration (zero-out neighbours), tail averaging; the default for
      large d at small N mu, where the Gram noise of the second-moment methods dominates.

    Neighbouring relation (``neighbouring``): every relation keeps N fixed, so N is public; the
    report states the one used. ``"auto"`` (default) takes each method's own: zero-out for
    Poisson DP-SGD (its accounting is of the add/remove kind) and noisy Newton, replace-one for
    the others.
    ``"zero-out"`` accounts every method under zero-out, so methods can be compared at one
    guarantee: AdaSSP and DP-FTRL-Σ use their zero-out sensitivities (half the replace-one
    ones), DP-AMBSSGD, DP-SSGD and private preprocessing keep their replace-one analyses, which
    bound zero-out's (a null record is a valid record of the clipped domain). ``"replace-one"``
    accounts every method under replace-one except DP-SGD, which is refused.
    * ``"ftrl-sigma"``: DP-FTRL-Σ (Private Overparameterized Linear Regression, anonymous
    submission, Algorithm 1), one pass with tree-aggregated noise
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
            (n_features, 2) array, or a dict by DataFrame column name. Given for every feature
            together with ``target_bounds``, no rows are spent on private preprocessing. Partial
            bounds are accepted: None or (nan, nan) entries, or a dict naming some columns
            (e.g. the 0/1 columns of a one-hot encoding, public by construction); the other
            columns' bounds (and the target's, without ``target_bounds``) are then released
            privately, on fewer releases (:mod:`privopt.estimators._partial_bounds`), and the
            report names the public columns. Values outside are clipped.
        target_bounds: public (low, high) range of the target (may be given alone).
        preprocess_fraction: lower bound on the preprocessing's share: of mu^2 for the
            sequential methods (at most MAX_PREPROCESS_SHARE), of the rows for the others; in
            (0, 0.5).
        public_X: public unlabeled rows (``"ftrl-sigma"`` only): design Σ from them.
        random_state: None, an int seed or a numpy Generator (the permutation and all noise).
            A seed that draws noise must stay secret and serve one fit only (the report says so).
        diagnostics: also expose non-private diagnostics (clip fractions) in ``fit_trace_`` /
            ``fit_info_``; warns, and the report lists them as releases outside the guarantee.
            Default False: they are absent.
        secure_mode: draw every random number from ChaCha20 keyed by the operating system
            (:func:`privopt.noise.secure_generator`); ``random_state`` must then be None.
        neighbouring: ``"auto"``, ``"zero-out"`` or ``"replace-one"`` (see above).
        allow_large_delta: accept ``delta >= 1/N`` (refused by default: such a delta allows
            publishing a whole record).
        budget: a :class:`~privopt.PrivacyBudget` the fit draws from (checked before X is read).
        max_sample_weight: public bound on ``fit``'s ``sample_weight`` (weighted least squares;
            see :func:`privopt.estimators._base.sample_weight_factors`).

    Fitted attributes: ``coef_``, ``intercept_``, ``feature_range_`` ((d, 2): the interval each
    feature was box-clipped to in the fit, (-inf, inf) where it was not; :meth:`predict` clips
    to it, so predictions use the model on the features it was fitted on), ``private_r2_`` (for
    ``newton``, ``adassp``, ``ambssgd`` and so for ``auto``'s noisy Newton: a private estimate
    of the fit's clipped R^2 on its training rows, one Gaussian release at QUALITY_SHARE = 5% of
    mu^2 taken from the method's budget, :func:`~privopt.releases.fit_quality.private_r2`; its
    standard error is ``fit_info_["private_r2_se"]``; a
    :class:`~privopt.estimators._utility.UtilityWarning` fires when it is not two standard
    errors above 0; the self-calibrating methods release it on a held-out slice,
    :func:`~privopt.releases.fit_quality.quality_holdout`), ``privacy_report_`` (a
    :class:`~privopt.accounting.PrivacyReport`; ``epsilon``, ``delta``, ``rho`` are attributes
    and keys), ``fit_trace_`` (:class:`~privopt.algorithms.FitTrace`), ``fit_info_``
    (configuration used; ``known_ranges`` names the columns whose ranges were public or found
    binary), ``n_features_in_``.
    """

    #: noisy Newton's gradient clip is a private quantile: it scales its events' sensitivity
    #: and std (their ratio, and so the guarantee, is fixed), hence the report's event
    #: parameters and the rho / mu computed from them are released values too
    _private_outputs = (
        "coef_",
        "intercept_",
        "feature_range_",
        "fit_trace_",
        "fit_info_",
        "private_r2_",
        "privacy_report_.events",
        "privacy_report_.rho",
        "privacy_report_.mu",
    )
    _parameter_constraints: dict = {  # noqa: RUF012 (scikit-learn's declarative contract)
        **SHARED_CONSTRAINTS,
        "method": [StrOptions(set(METHODS))],
        "target_bounds": [None, "array-like"],
        "public_X": [None, "array-like"],
        "neighbouring": [StrOptions({"auto", "replace-one", "zero-out"})],
        "max_sample_weight": [Interval(numbers.Real, 0, None, closed="neither")],
        "allow_large_delta": ["boolean"],
    }

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        method: str = "auto",
        fit_intercept: bool = True,
        feature_bounds: Any = None,
        target_bounds: Any = None,
        preprocess_fraction: float = 0.1,
        public_X: Any = None,
        random_state: Any = None,
        diagnostics: bool = False,
        secure_mode: bool = False,
        neighbouring: str = "auto",
        budget: Any = None,
        max_sample_weight: float = 1.0,
        allow_large_delta: bool = False,
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
        self.budget = budget
        self.max_sample_weight = max_sample_weight
        self.allow_large_delta = allow_large_delta

    # -- fitting -------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, sample_weight: Any = None, users: Any = None):
        """Fit privately; the input arrays are never modified. ``users``: one id per record
        makes the user the privacy unit (AdaSSP with public bounds; see
        :func:`~privopt.estimators._users.check_regression_users`)."""
        self._validate_params()
        if not math.isfinite(self.epsilon):
            raise ValueError(f"Expected epsilon to be finite, got {self.epsilon!r}.")
        X, y = validate_rows(self, X, y, y_numeric=True, dtype=np.float64)
        n, d = X.shape
        groups = None if users is None else check_regression_users(self, users, n)
        if groups is None:
            check_delta_for_rows(self.delta, n, allow_large=self.allow_large_delta)
        method = self.method
        if method == "auto":  # public quantities only
            method = "adassp" if groups else choose_method(n, d, self.epsilon, self.delta,
                                                           self.fit_intercept)  # fmt: skip
        ledger, rng, mu, bounds = self._start_fit(method, d, users=groups is not None)
        bounds, mu_main, excluded = self._preprocess(
            method, n, d, bounds, mu, rng, ledger, lambda rows: (X[rows], y[rows]),
            weighted=sample_weight is not None,
        )  # fmt: skip
        if self.__dict__.pop("_intercept_only", False):  # too few rows for features' bounds
            return self._finish_fit("intercept-only", np.zeros(d + 1), *_CONSTANT, bounds, ledger)
        if groups is not None:  # all rows to AdaSSP; its quality release weighted by user
            self._quality.update(weights=groups.record_weights(), units=groups.num_users)
        keep = np.ones(n, dtype=bool)
        keep[excluded] = False
        main_rows = np.flatnonzero(keep)  # the rows the method reads (sorted)
        budget = self._method_budget(method, mu_main)
        if method == "newton" and main_rows.size == n and sample_weight is None:
            # blockwise from X: the same releases, no transformed copy of X (issue 16's speed)
            w, trace, info, reasons = run_newton_rows(
                self, X, y, bounds, budget, rng, ledger, float(n)
            )
        else:
            Z, t = bounds.transform(X, y, rows=None if main_rows.size == n else main_rows)
            Z, t = weighted_rows(Z, t, sample_weight, main_rows, self, ledger)  # no-op if None
            if groups is not None:
                Z, t = user_level_rows(groups, Z, t, ledger)
            units = main_rows.size if groups is None else groups.num_users
            w, trace, info, reasons = self._run(
                method, Z, t, bounds, budget, rng, ledger, float(units)
            )
        return self._finish_fit(method, w, trace, info, reasons, bounds, ledger)

    def _check_public(self, n_rows: int) -> None:
        if n_rows >= 1:  # no rows: validate_data names the empty input
            check_delta_for_rows(self.delta, n_rows, allow_large=self.allow_large_delta)

    def _check_users(self, users: Any, n_rows: int | None) -> None:
        check_regression_users(self, users, n_rows)

    def _start_fit(self, method: str, d: int, users: bool = False) -> tuple:
        """(ledger, rng, mu, public bounds or None): the start of every fit (in memory or on
        Dask), before any row is read."""
        # Every relation privopt uses keeps N fixed, so N is public by construction (it sets
        # step counts, sampling rates and divisors, and privopt fit writes it to model.json).
        ledger = user_ledger(self._relation(self.method if users else method), users)
        rng = self._generator(ledger)
        # a relative 1e-9 below the target, so that the exactly inverted epsilon of the
        # releases (whose mu is rebuilt from stds, a few ulps off) never prints above it
        mu = gdp_mu(self.epsilon * (1.0 - 1e-9), self.delta)
        ledger.assume(USER_UNIT_ASSUMPTION if users else "the number of records N is public")
        bounds = resolve_partial_bounds(
            self.feature_bounds, self.target_bounds, d, self.fit_intercept, ledger
        )
        if users and not isinstance(bounds, LinearBounds):
            raise ValueError("DPLinearRegression with users= needs public bounds for every column.")
        return ledger, rng, mu, bounds

    def _finish_fit(self, method, w, trace, info, reasons, bounds, ledger) -> DPLinearRegression:
        """Warn if the public checks failed and set the fitted attributes (in memory or on
        Dask); ``w`` is on the transformed scale of ``bounds``."""
        bounds = info.pop("_bounds", bounds)  # a method may rescale the intercept column
        warn_if_useless(
            f"DPLinearRegression(method={method!r})", reasons, method_fixes(method), stacklevel=4
        )
        self.coef_, self.intercept_ = bounds.to_original(w)
        self.feature_range_ = bounds.feature_range()
        quality = self.__dict__.pop("_quality", None)
        self.private_r2_, r2_se = math.nan, math.nan
        note = self.__dict__.pop("_fallback", None)  # the ladder's lower rungs: always warned
        if method == "intercept-only":  # a constant's R^2 is at most 0: a bound, not released
            self.private_r2_ = 0.0
            warn_if_worse_than_mean(self, method, None, None, quality["n"], 5, note)
        elif quality is not None:  # take, n, mu, rng[, weights, units (N users), partition]
            q, units = dict(quality), quality.get("units", quality["n"])
            args = (self.coef_, self.intercept_, bounds, q.pop("take"), q.pop("n"))
            q.pop("units", None)
            self.private_r2_, r2_se = private_r2(*args, ledger=ledger, **q)
            warn_if_worse_than_mean(self, method, self.private_r2_, r2_se, units, 5, note)
        self.privacy_report_ = ledger.report(self.delta)
        self.fit_trace_ = trace
        self.fit_info_ = {"method": method, "bounds": bounds.describe(), **describe(info)}
        known = self.__dict__.pop("_known_ranges", "none")
        if known != "none":  # which columns' ranges were public or found binary
            self.fit_info_["known_ranges"] = known
        self.fit_info_.update(private_r2=self.private_r2_, private_r2_se=r2_se)
        return self

    def _preprocess(self, method, n, d, bounds, mu, rng, ledger, take, weighted=False) -> tuple:
        """:meth:`_bounds_and_budget`, then for a self-calibrating method the held-out slice of
        its quality release (:func:`~privopt.releases.fit_quality.quality_holdout`)."""
        args = (method, n, d, bounds, mu, rng, ledger, take, weighted)
        bounds, mu_main, excluded = self._bounds_and_budget(*args)
        if method not in SEQUENTIAL:
            excluded, self._quality = quality_holdout(n, excluded, take, mu, rng)
        return bounds, mu_main, excluded

    def _bounds_and_budget(self, method, n, d, bounds, mu, rng, ledger, take, weighted) -> tuple:
        """The method's bounds and GDP budget, and the rows it must not read: (bounds, mu_main,
        excluded), the same draws from ``rng`` in the same order in memory and on Dask.

        ``take(rows)`` returns ``(X[rows], y[rows])`` for sorted row indices (arrays in memory,
        or rows gathered from a cluster). ``excluded`` holds the sorted indices of a disjoint
        preprocessing slice (empty when the preprocessing shares the rows).
        """
        none = np.empty(0, dtype=np.int64)
        self._quality, self._fallback, self._intercept_only = None, None, False
        if method in SEQUENTIAL:  # the quality release shares the rows (sequential composition)
            self._quality = {"take": take, "n": n, "mu": mu * math.sqrt(QUALITY_SHARE), "rng": rng}
            mu = mu * math.sqrt(1.0 - QUALITY_SHARE)
        public = isinstance(bounds, LinearBounds)
        if public and method in TIGHTENED and n >= MIN_TIGHTEN_ROWS:
            # loose public ranges: two private quantiles tighten the radii (a small share)
            m = min(n, QUANTILE_ROWS)
            Xs, ys = take(np.sort(rng.choice(n, m, replace=False)) if m < n else np.arange(n))
            mu_tighten = mu * math.sqrt(TIGHTEN_SHARE)
            bounds = tighten_public_bounds(
                bounds, Xs, ys, np.arange(m), mu=mu_tighten, rng=rng, ledger=ledger
            )
            return bounds, mu * math.sqrt(1.0 - TIGHTEN_SHARE), none
        if public:
            # the secret row labels of earlier versions, still drawn so that a seeded fit of
            # these methods with public bounds keeps its noise (all rows go to the fit); in
            # blocks, which draw the same stream as one rng.random(n)
            for start in range(0, n, _UNIFORM_BLOCK):
                rng.random(min(_UNIFORM_BLOCK, n - start))
            return bounds, mu, none
        known = bounds if bounds is not None else KnownColumns.none(d)
        self._known_ranges = known.describe()
        if method in SEQUENTIAL:
            # private quantiles on a secret subset, sharing the rows (and the budget, in exact
            # GDP) with the method: mu^2 = mu_pre^2 + mu_main^2
            m = min(n, QUANTILE_ROWS)  # the ladder: full, coarse, intercept-only (public)
            plan = bounds_plan(self, m, known, mu, refuse=m == n)
            if plan is None or (plan.fallback is not None and m < n):  # then every row counts
                m, plan = n, bounds_plan(self, n, known, mu)
            self._fallback = plan.fallback
            if plan.kind == "intercept-only" and weighted:  # a public decision: nothing spent
                raise ValueError(
                    f"{n} rows are too few for private feature bounds at epsilon="
                    f"{self.epsilon:g}; the intercept-only fallback takes no sample_weight. "
                    + PUBLIC_BOUNDS_HINT
                )
            Xs, ys = take(np.sort(rng.choice(n, m, replace=False)) if m < n else np.arange(n))
            if plan.kind == "intercept-only":  # no feature's bounds: the fit is these releases
                mu = math.hypot(mu, self._quality["mu"])  # (the quality's too: R^2 <= 0)
                bounds = intercept_only_bounds(
                    ys, np.arange(m), d, mu=mu, rng=rng, ledger=ledger, target=known.target
                )
                self._intercept_only = True
                return bounds, 0.0, none
            coarse, share = plan.coarse, plan.share
            known, screen = self._screen(Xs, ys, m, known, mu * math.sqrt(share), rng, ledger)
            # the screen's share comes on top of the bounds' (from the method's): with nothing
            # found the bounds keep their planned budget (at 10% less, one power-plant seed of
            # 20 at epsilon 0.3 collapsed to R^2 -0.74)
            if known.any:  # fewer releases left: the plan counted in them
                coarse, bounds_share = known_plan(self, m, known, mu, share)
            else:
                bounds_share = share
            self._known_ranges = known.describe()
            bounds = self._private_bounds(
                coarse, Xs, ys, mu * math.sqrt(bounds_share), rng, ledger, None, known
            )
            return bounds, mu * math.sqrt(1.0 - share * screen - bounds_share), none
        # methods that calibrate themselves (Poisson DP-SGD's PLD, shuffling, the tree):
        # quantiles on a disjoint secret slice at the full budget (parallel composition)
        excluded = self._quantile_slice(n, d, mu, rng)
        Xs, ys = take(excluded)
        known, screen = self._screen(Xs, ys, excluded.size, known, mu, rng, ledger, "preprocess")
        self._known_ranges = known.describe()
        bounds = self._private_bounds(
            False, Xs, ys, mu * math.sqrt(1.0 - screen), rng, ledger, "preprocess", known
        )
        return bounds, mu, excluded

    def _screen(self, Xs, ys, m, known, mu, rng, ledger, partition=None) -> tuple:
        """(known columns, the screen's share of mu^2): the binary-column screen
        (:func:`~privopt.releases.known_columns.screen_binary_columns`) at SCREEN_SHARE of the
        bounds' mu^2 when it runs, and its [0, 1] counts at UNIT_SCREEN_SHARE more when they
        run (public decisions), else nothing released and share 0."""
        mu_screen, mu_unit = mu * math.sqrt(SCREEN_SHARE), mu * math.sqrt(UNIT_SCREEN_SHARE)
        if not screen_runs(known, m, mu_screen):
            return known, 0.0
        unit = unit_screen_runs(known, m, mu_unit)
        # its noise from a child stream (numpy's SeedSequence spawning: independent of the
        # parent's, which it does not advance), so that a table with no binary column keeps
        # the bounds' draws of earlier versions (a secure generator without spawning: rng)
        try:
            child = rng.spawn(1)[0]
        except (AttributeError, TypeError, ValueError):
            child = rng
        known = screen_binary_columns(
            Xs, ys, np.arange(m), known=known, mu=mu_screen, rng=child, ledger=ledger,
            partition=partition, mu_unit=mu_unit if unit else None,
        )  # fmt: skip
        return known, SCREEN_SHARE + (UNIT_SCREEN_SHARE if unit else 0.0)

    def _private_bounds(self, coarse, Xs, ys, mu, rng, ledger, partition, known) -> LinearBounds:
        """The full or coarse private bounds on the rows (Xs, ys), the known columns kept, a
        dropped feature found inside [0, 1] boxed there (post-processing)."""
        release = coarse_quantile_bounds if coarse else private_quantile_bounds
        bounds = release(
            Xs,
            ys,
            np.arange(Xs.shape[0]),
            mu=mu,
            rng=rng,
            ledger=ledger,
            partition=partition,
            fit_intercept=self.fit_intercept,
            known=known if known.any else None,
        )  # fmt: skip  (nothing known: the unchanged releases)
        return unit_range_fallback(bounds, known, self.fit_intercept)

    def _relation(self, method: str) -> str:
        """The neighbouring relation of this fit (see the class docstring)."""
        if self.neighbouring == "auto":
            # "auto" runs newton or dpsgd (chosen from public N), both accounted under zero-out
            return "zero-out" if method in ("auto", "dpsgd", "newton") else "replace-one"
        if method == "dpsgd" and self.neighbouring == "replace-one":
            raise ValueError(
                "method='dpsgd' (Poisson sampling) is accounted under zero-out neighbours only; "
                "use neighbouring='zero-out' or 'auto', or a method analysed under replace-one "
                "(newton, adassp, ambssgd, ssgd, ftrl-sigma)."
            )
        return self.neighbouring

    def _method_budget(self, method: str, mu: float) -> MethodBudget:
        """The one budget handed to the method: the fit's target and the GDP mu left to it
        (shared with the preprocessing for the sequential methods)."""
        return MethodBudget(self.epsilon, self.delta, mu, shared=method in SEQUENTIAL)

    def _run(self, method, Z, t, bounds, budget, rng, ledger, n_public):
        if method == "newton":
            return run_newton(self, Z, t, bounds, budget, rng, ledger, n_public)
        if method == "adassp":
            return run_adassp(self, Z, t, bounds, budget, rng, ledger, n_public)
        if method == "ambssgd":
            share = AMBSSGD_MOMENT_SHARE
            return run_ambssgd(self, Z, t, bounds, budget, rng, ledger, n_public, share)
        if method == "dpsgd":
            return run_dpsgd(self, Z, t, bounds, budget, rng, ledger, n_public)
        if method == "ssgd":
            return run_ssgd(self, Z, t, bounds, budget, rng, ledger, n_public)
        w, trace, info = self._ftrl_sigma(Z, t, bounds, budget, rng, ledger)
        return w, trace, info, []

    def _ftrl_sigma(self, Z, t, bounds, budget, rng, ledger):
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
        epsilon, delta = budget.target("ftrl-sigma")
        fit = dp_ftrl_sigma(
            Z / row_bound,
            t / y_bound,
            epsilon=epsilon,
            delta=delta,
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
        """Predictions <clip(x), coef_> + intercept_, each feature clipped to its
        ``feature_range_`` (the box the fit clipped it to; infinite where it did not), so the
        model is applied to the features it was fitted on (post-processing: no privacy cost)."""
        check_is_fitted(self)
        X = validate_rows(self, X, reset=False, dtype=np.float64)
        low, high = getattr(self, "feature_range_", np.array([[-np.inf, np.inf]])).T
        return np.clip(X, low, high) @ self.coef_ + self.intercept_
