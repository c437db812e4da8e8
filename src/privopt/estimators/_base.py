"""What every privopt estimator shares: randomness, budget, leak checks, bounds and weights.

Every subclass's ``fit`` is wrapped (:meth:`PrivateEstimator.__init_subclass__`) so that, in this
order and before the data are read:

1. the parameters are validated, and the checks on public values (the parameters and the number
   of rows, e.g. delta >= 1/N) run (nothing is charged for a typo or a public refusal);
2. :func:`privopt._leak.check_for_leaks` warns when the fit is driven by a non-private pipeline
   step or a scikit-learn routine that refits it on the same rows;
3. with ``budget=`` a :class:`~privopt.accounting.PrivacyBudget`, the fit's planned charge (its
   calibration target (epsilon, delta), as the generic (epsilon, delta) mechanism) is reserved,
   or :class:`~privopt.accounting.BudgetExceededError` is raised: only the parameters are read,
   never X. After the fit the reservation is completed with the fit's ledger (the ledger handed
   to :meth:`PrivateEstimator._generator`), so the budget composes the events that ran.
   With ``users=`` (user-level privacy), :meth:`PrivateEstimator._check_users` refuses what
   has no user-level version, and ids of the wrong length or missing, before this step.
4. the fit must run under the relation planned in 3 (else it is withheld); a fit that raises
   leaves the estimator as it was before (no fitted attribute), and its reservation keeps the
   planned charge (the failure may depend on the data).
5. the report lists the estimator's ``_private_outputs`` (attributes computed from releases).

The wrapper also makes the column names of a DataFrame available to
:func:`resolve_feature_bounds` (``feature_bounds`` as a dict by column name).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import _num_samples, check_is_fitted

from privopt._leak import check_for_leaks
from privopt.accounting import PrivacyBudget, PrivacyLedger, PrivacyReport
from privopt.accounting.budget import Reservation, planned_guarantee
from privopt.accounting.events import Neighbouring
from privopt.estimators._row_source import as_row_source, fit_row_source, is_partitioned_input
from privopt.noise import SECRET_SEED_ASSUMPTION, SECURE_ASSUMPTION, secure_generator
from privopt.releases.preprocess import LinearBounds, check_feature_bounds, public_bounds

__all__ = [
    "PrivateEstimator",
    "as_generator",
    "resolve_feature_bounds",
    "sample_weight_factors",
    "weighted_rows",
]

#: scikit-learn constraints of the parameters every privopt estimator shares (the privacy
#: target, the public bounds, private preprocessing, the randomness and the budget).
SHARED_CONSTRAINTS: dict[str, list[Any]] = {
    "epsilon": [Interval(numbers.Real, 0, None, closed="neither")],
    "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
    "fit_intercept": ["boolean"],
    "feature_bounds": [None, "array-like", dict],
    "preprocess_fraction": [Interval(numbers.Real, 0, 0.5, closed="neither")],
    "random_state": [None, "random_state", np.random.Generator],
    "diagnostics": ["boolean"],
    "secure_mode": ["boolean"],
    "budget": [None, PrivacyBudget],
}


@dataclass
class _FitContext:
    """What the wrapper of one fit collects: column names in, ledgers out."""

    columns: tuple[str, ...] | None
    n_rows: int | None = None
    ledgers: list[PrivacyLedger] = field(default_factory=list)


_CONTEXT: ContextVar[_FitContext | None] = ContextVar("privopt_fit_context", default=None)


def fitted_columns() -> tuple[str, ...]:
    """The string column names of the DataFrame being fitted, for ``feature_bounds`` given as
    a dict by column name (refused for arrays)."""
    context = _CONTEXT.get()
    columns = None if context is None else context.columns
    if columns is None:
        raise ValueError(
            "feature_bounds given as a dict by column name needs X to be a DataFrame with "
            "string column names; give an (n_features, 2) array for arrays."
        )
    return columns


def resolve_feature_bounds(feature_bounds: Any, n_features: int) -> np.ndarray:
    """Public bounds as an (n_features, 2) array; a dict maps DataFrame column names to pairs.

    The dict must name every column of the DataFrame being fitted, and nothing else.
    """
    if not isinstance(feature_bounds, Mapping):
        return check_feature_bounds(feature_bounds, n_features)
    columns = fitted_columns()
    missing = [c for c in columns if c not in feature_bounds]
    extra = [k for k in feature_bounds if k not in columns]
    if missing or extra:
        raise ValueError(
            f"feature_bounds must give a (low, high) pair for every column: missing {missing}, "
            f"unknown {extra}."
        )
    return check_feature_bounds([feature_bounds[c] for c in columns], n_features)


def public_linear_bounds(
    feature_bounds: Any,
    target_bounds: Any,
    n_features: int,
    fit_intercept: bool,
    ledger: PrivacyLedger,
) -> LinearBounds | None:
    """Bounds from the public ``feature_bounds`` and ``target_bounds`` (both or neither).

    None when neither is given (the caller estimates them privately); the assumption that the
    data are clipped to the user's public bounds is recorded in ``ledger`` otherwise.
    """
    if (feature_bounds is None) != (target_bounds is None):
        raise ValueError("Give both feature_bounds and target_bounds, or neither.")
    if feature_bounds is None:
        return None
    fb = resolve_feature_bounds(feature_bounds, n_features)
    tb = np.asarray(target_bounds, dtype=float).ravel()
    if tb.shape != (2,):
        raise ValueError("target_bounds must be a (low, high) pair.")
    ledger.assume("features and target clipped to the public bounds given by the user")
    return public_bounds(fb, (tb[0], tb[1]), fit_intercept)


def sample_weight_factors(
    sample_weight: Any, n: int, max_weight: float, ledger: PrivacyLedger
) -> np.ndarray | None:
    """sqrt(w_i / w_max) for squared-loss fits, or None without weights.

    A weighted least-squares fit, min sum_i w_i (y_i - <theta, x_i>)^2, is the unweighted fit of
    the rows (sqrt(c_i) x_i, sqrt(c_i) y_i) with c_i = w_i / w_max in [0, 1] (the intercept
    column scaled alike). Scaling by sqrt(c_i) <= 1 keeps a clipped record inside the clipped
    domain, so every sensitivity of the fit holds unchanged: the weighted release's sensitivity
    is (w_max / w_max) = 1 times the unweighted one, w_max being the public bound. Weights
    must be finite and in [0, w_max] (a larger weight would raise the sensitivity silently).
    """
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, dtype=float)
    if w.ndim != 1 or w.shape[0] != n:
        raise ValueError(f"sample_weight must have shape ({n},), got {w.shape}.")
    if not np.all(np.isfinite(w)) or np.any(w < 0.0) or np.any(w > max_weight):
        raise ValueError(
            f"Expected sample_weight finite and in [0, max_sample_weight={max_weight:g}] "
            "(the public bound the sensitivity is computed for)."
        )
    if not np.any(w > 0.0):
        raise ValueError("sample_weight must not be all zero (nothing would be fitted).")
    ledger.assume(
        f"sample weights bounded by the public max_sample_weight={max_weight:g}; each record "
        "enters scaled by sqrt(w / max_sample_weight) <= 1, inside the clipped domain"
    )
    return np.sqrt(w / max_weight)


def weighted_rows(
    Z: np.ndarray,
    t: np.ndarray,
    sample_weight: Any,
    rows: np.ndarray,
    estimator: Any,
    ledger: PrivacyLedger,
) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``rows`` of a squared-loss fit, weighted by :func:`sample_weight_factors`.

    ``Z`` (with its intercept column) and ``t`` are the clipped rows of X[rows], y[rows]; None
    weights return them unchanged.
    """
    if sample_weight is None:
        return Z, t
    if getattr(estimator, "method", None) == "ambssgd":
        raise ValueError(
            "sample_weight is not supported by method='ambssgd' (its intercept column is "
            "rescaled after the rows are weighted); use another method."
        )
    sample_weight = np.asarray(sample_weight, dtype=float)
    context = _CONTEXT.get()
    n = context.n_rows if context is not None and context.n_rows is not None else None
    if n is None:
        n = sample_weight.shape[0] if sample_weight.ndim == 1 else -1
    factors = sample_weight_factors(sample_weight, n, estimator.max_sample_weight, ledger)
    assert factors is not None
    return Z * factors[rows, None], t * factors[rows]


def as_generator(random_state: Any, secure_mode: bool = False) -> np.random.Generator:
    """None, an int seed, a numpy Generator or RandomState, as a Generator (clear error otherwise).

    A ``RandomState`` is consumed the scikit-learn way: 128 bits are drawn from it to seed a
    new Generator (so reusing the same RandomState object gives different fits).
    ``secure_mode=True`` returns a ChaCha20 generator keyed from the operating system
    (:func:`privopt.noise.secure_generator`); ``random_state`` must then be None, since a seed
    would make the noise reproducible by whoever knows it.
    """
    if secure_mode:
        if random_state is not None:
            raise ValueError(
                "secure_mode=True draws the noise from the operating system's CSPRNG; "
                f"random_state must be None, got {random_state!r}."
            )
        return secure_generator()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**32, size=4, dtype=np.uint64))
    if random_state is None or isinstance(random_state, numbers.Integral):
        return np.random.default_rng(random_state)
    raise ValueError(
        "Expected random_state to be None, an int, a numpy Generator or RandomState, got "
        f"{random_state!r}."
    )


def _fit_partitioned(estimator: Any, X: Any, y: Any = None, sample_weight: Any = None) -> Any:
    """Rows held elsewhere (a :class:`~privopt.estimators._row_source.RowSource`, or Dask inputs
    through the adapter privopt.distributed registers; issue 19) are fitted through the row-source
    protocol, which DPLinearRegression supports."""
    from privopt.estimators.linear_regression import DPLinearRegression

    if not isinstance(estimator, DPLinearRegression):
        raise ValueError(
            f"{type(estimator).__name__} does not accept Dask inputs; DPLinearRegression does "
            "(methods adassp, ambssgd, dpsgd, ftrl-sigma, newton, auto). Compute the data into "
            "memory first."
        )
    if sample_weight is not None:
        raise ValueError("sample_weight is not supported with Dask inputs; fit in memory.")
    return fit_row_source(estimator, as_row_source(X, y))


def _guarded(fit):
    """Wrap a subclass's ``fit`` with validation, leak checks and the budget (module notes)."""

    @functools.wraps(fit)
    def guarded_fit(self, X, *args, **kwargs):
        self._validate_params()
        check_for_leaks(self, stacklevel=3)
        dask_input = is_partitioned_input(X)  # issue 19: len() of a Dask frame reads it all
        sized = hasattr(X, "__len__") and not dask_input
        n_rows = _num_samples(X) if sized else None
        if kwargs.get("users") is not None:  # user-level privacy: refusals before reserving
            self._check_users(kwargs["users"], n_rows)  # (the number of records is private)
        elif n_rows is not None:
            self._check_public(n_rows)  # refusals on public values: nothing reserved yet
        reservation = self._reserve_budget()
        columns = getattr(X, "columns", None)
        names = None
        if columns is not None and all(isinstance(c, str) for c in columns):
            names = tuple(columns)
        context = _FitContext(names, n_rows)
        token = _CONTEXT.set(context)
        state = dict(self.__dict__)  # restored if the fit fails: no fitted attribute is left
        try:
            if dask_input:
                out = _fit_partitioned(self, X, *args, **kwargs)
            else:
                out = fit(self, X, *args, **kwargs)
            self._check_ran_as_planned(context.ledgers)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(state)
            raise  # a reservation is kept at its planned charge (module notes)
        finally:
            _CONTEXT.reset(token)
        self._declare_outputs()
        if reservation is not None:
            reservation.complete(context.ledgers)
        return out

    guarded_fit.__privopt_guarded__ = True  # type: ignore[attr-defined]
    return guarded_fit


class PrivateEstimator(BaseEstimator):
    """A scikit-learn estimator whose fit sets ``privacy_report_`` and uses ``random_state``.

    Subclasses get the guarded ``fit`` of the module notes automatically.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fit = cls.__dict__.get("fit")
        if fit is not None and not getattr(fit, "__privopt_guarded__", False):
            cls.fit = _guarded(fit)

    #: fitted attributes computed from the recorded releases (post-processing, covered by the
    #: guarantee); the report lists them, and every other attribute must be the same on
    #: neighbouring data sets under one seed (tests/estimators/test_neighbouring_fits.py)
    _private_outputs: tuple[str, ...] = ("coef_", "intercept_")

    def _declare_outputs(self) -> None:
        report = getattr(self, "privacy_report_", None)
        if isinstance(report, PrivacyReport):
            present = tuple(a for a in self._private_outputs if hasattr(self, a.split(".")[0]))
            self.privacy_report_ = dataclasses.replace(report, private_outputs=present)

    def _check_public(self, n_rows: int) -> None:
        """Refusals that depend on the parameters and the public number of rows only; run
        before a budget is reserved, so a refused fit costs nothing (subclasses extend)."""

    def _check_users(self, users: Any, n_rows: int | None) -> None:
        """Refusals of ``fit(X, y, users=ids)`` (user-level privacy) from the parameters and
        the ids only, run before a budget is reserved; estimators that support it override
        this (:mod:`privopt.estimators._users`)."""
        raise ValueError(
            f"{type(self).__name__} does not support users= (user-level privacy) yet; "
            "DPLinearClassifier and DPSGDRegressor do."
        )

    def _check_ran_as_planned(self, ledgers: list[PrivacyLedger]) -> None:
        """The relation the fit was accounted under is the one planned before the data were
        read (and charged to a budget); a mismatch is a defect and voids the fit."""
        planned = Neighbouring.parse(self._planned_relation())
        for ledger in ledgers:
            if ledger.neighbouring is not planned:
                raise RuntimeError(
                    f"{type(self).__name__} was planned under {planned.value!r} neighbours but "
                    f"ran under {ledger.neighbouring.value!r}; the fit is withheld."
                )

    def _planned_relation(self) -> str:
        """The neighbouring relation the fit will be accounted under (parameters only)."""
        relation = getattr(self, "_relation", None)
        if callable(relation):
            return relation(self.method)
        return "replace-one"

    def _planned_guarantee(self) -> tuple[float, float]:
        """(epsilon, delta) the fit is calibrated to, hence satisfies (parameters only)."""
        if not math.isfinite(self.epsilon):
            raise ValueError(f"Expected epsilon to be finite, got {self.epsilon!r}.")
        return float(self.epsilon), float(self.delta)

    def _reserve_budget(self) -> Reservation | None:
        budget = getattr(self, "budget", None)
        if budget is None:
            return None
        epsilon, delta = self._planned_guarantee()
        label = f"{type(self).__name__}(epsilon={epsilon:g}, delta={delta:g}).fit"
        return budget.reserve(
            planned_guarantee(epsilon, delta, label),
            neighbouring=self._planned_relation(),
            label=label,
            guarantee=(epsilon, delta),
        )

    def _generator(self, ledger: PrivacyLedger) -> np.random.Generator:
        """The fit's randomness (``random_state`` / ``secure_mode``), stated in the report.

        ``ledger`` is the fit's ledger: it is also what a ``budget`` is charged with.
        """
        context = _CONTEXT.get()
        if context is not None and all(ledger is not other for other in context.ledgers):
            context.ledgers.append(ledger)
        secure = getattr(self, "secure_mode", False)
        if secure not in (True, False):
            raise ValueError(f"Expected secure_mode to be True or False, got {secure!r}.")
        rng = as_generator(self.random_state, bool(secure))
        if secure:
            ledger.assume(SECURE_ASSUMPTION)
        elif self.random_state is not None:
            ledger.assume(SECRET_SEED_ASSUMPTION)
        return rng

    @property
    def report(self) -> PrivacyReport:
        """Alias of ``privacy_report_``."""
        check_is_fitted(self)
        return self.privacy_report_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None or bool(
            getattr(self, "secure_mode", False)
        )
        return tags
