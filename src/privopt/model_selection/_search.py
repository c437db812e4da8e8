"""PrivateGridSearchCV: private selection of the method and hyper-parameters, fully accounted.

The mechanism (every record's privacy loss bounded; nothing else is released)::

    split   each record goes to validation with probability v (a secret draw, independent of
            the data), else to training
    train   every candidate j = 1..k of the grid is fitted on the training records at
            (epsilon_c, delta_c), set by the search (the wrapped estimator's own epsilon and
            delta are ignored)
    score   u_j = sum over validation records of a utility in [0, 1] (sensitivity 1,
            :mod:`privopt.model_selection._scoring`)
    select  j* by the exponential mechanism at epsilon_s (Gumbel-max,
            :func:`privopt.noise.selection.exponential_mechanism`): P[j] ~ exp(epsilon_s u_j / 2)
    output  candidate j*'s model (or, with ``refit=True``, j*'s parameters refitted on every
            record at (epsilon_c, delta_c)); no score of any candidate is released

Accounting (each record is in one part, by the data-independent split; parallel composition):

* a training record meets the k candidate fits (and the refit): the k-fold (k + 1 with refit)
  composition of (epsilon_c, delta_c)-DP mechanisms, computed exactly for the generic such
  mechanism (Kairouz, Oh & Viswanath 2015; the privacy-loss distribution of
  :class:`~privopt.accounting.ApproxDPEvent`), since any (epsilon_c, delta_c)-DP fit is a
  post-processing of it. For a training record, the selection is post-processing of the fitted
  models (the validation records are other records).
* a validation record meets the selection: epsilon_s-DP (McSherry & Talwar 2007), the models
  being independent of it; with ``refit=True`` also the refit (basic composition).

epsilon_c is the largest value whose k-fold composition fits ``epsilon`` at ``delta`` (the
verified search on the same function the report evaluates; delta_c = delta / (2 m), m the
number of fits per training record); epsilon_s = ``epsilon`` without refit, ``epsilon`` minus
the refit's epsilon with it. The report's epsilon is the worst part's, at most ``epsilon``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from sklearn.base import MetaEstimatorMixin, clone, is_classifier
from sklearn.model_selection import ParameterGrid
from sklearn.utils import _safe_indexing
from sklearn.utils._available_if import available_if
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import _num_samples, check_is_fitted, indexable

from privopt._leak import leak_checks_suppressed
from privopt._validate import describe_non_numeric
from privopt.accounting import ApproxDPEvent, PrivacyBudget, PrivacyLedger
from privopt.accounting.events import Neighbouring
from privopt.estimators._base import PrivateEstimator
from privopt.estimators._input import NON_NUMERIC_FIX
from privopt.estimators._params import store_params
from privopt.model_selection._scoring import UTILITY_SENSITIVITY, record_utilities
from privopt.noise.selection import exponential_mechanism
from privopt.training.calibrate import split_epsilon

__all__ = ["PrivateGridSearchCV", "budget_split", "candidate_target"]

#: delta of the pure epsilon_s-DP selection written as an ApproxDPEvent (any delta > 0 holds).
PURE_DP_DELTA = 1e-300
#: Relative tolerance of a candidate's reported epsilon above its target (rounding).
TARGET_TOLERANCE = 1e-6
#: Largest total epsilon a search accepts: the composition evaluates exp(epsilon), which
#: overflows a float past ~709 (epsilon=1e6 raised OverflowError); no such epsilon protects
#: anything.
MAX_EPSILON = 700.0


def candidate_target(epsilon: float, delta: float, fits: int) -> tuple[float, float]:
    """(epsilon_c, delta_c): ``fits`` (epsilon_c, delta_c)-DP fits compose to <= ``epsilon``.

    delta_c = delta / (2 fits); epsilon_c is the largest value (the training core's one verified
    search, :func:`privopt.training.calibrate.split_epsilon`) with
    ``ApproxDPEvent(epsilon_c, delta_c, count=fits).composed_epsilon(delta) <= epsilon``, the
    same function the report evaluates.
    """
    delta_c = delta / (2.0 * fits)
    if not epsilon <= MAX_EPSILON:
        raise ValueError(
            f"Expected epsilon <= {MAX_EPSILON:g} for a private grid search, got {epsilon!r}: "
            "its accounting evaluates exp(epsilon), which overflows past ~709, and no such "
            "epsilon protects anything. Use a smaller epsilon."
        )

    return split_epsilon(epsilon, delta, fits, delta_c), delta_c


def budget_split(
    epsilon: float, delta: float, candidates: int, *, refit: bool
) -> tuple[float, float, float]:
    """(epsilon_c, delta_c, epsilon_s) of a search over ``candidates`` (module docstring):
    the per-candidate target and the selection's epsilon. Public values only."""
    fits = candidates + 1 if refit else candidates
    eps_c, delta_c = candidate_target(epsilon, delta, fits)
    eps_s = epsilon
    if refit:  # a validation record meets the selection and the refit (basic composition)
        eps_s = epsilon - ApproxDPEvent(eps_c, delta_c).composed_epsilon(delta / 2)
        eps_s *= 1.0 - 1e-6
        if not eps_s > 0:
            raise ValueError("refit=True leaves no budget for the selection.")
    return eps_c, delta_c, eps_s


def _delegate_has(method: str):
    """available_if check: the selected model (or, before fitting, the template) has it."""

    def check(self) -> bool:
        return hasattr(getattr(self, "best_estimator_", self.estimator), method)

    return check


class PrivateGridSearchCV(MetaEstimatorMixin, PrivateEstimator):
    """Private search over ``param_grid`` for a privopt estimator, (epsilon, delta)-DP in total.

    See the module notes for the mechanism and its accounting.

    Parameters:
        estimator: a privopt estimator (its ``epsilon``, ``delta`` and ``budget`` are set by the
            search for every candidate).
        param_grid: a dict or list of dicts, as for scikit-learn's ``GridSearchCV``; it may
            vary the method (e.g. ``{"method": ["adassp", "dpsgd"]}``).
        epsilon, delta: the total privacy target of the search (training, selection, refit).
        validation_fraction: probability of a record going to validation, in (0, 1).
        error_bound: regressors: public bound c on the squared error (utility
            ``1 - min(err^2 / c, 1)``); default ``((high - low) / 4)^2`` for the widest
            ``target_bounds`` of the candidates (errors beyond a quarter of the range score 0).
        refit: refit the selected parameters on every record (costs budget: the candidates
            and the selection get less); default False: the selected candidate's model,
            trained on the training records, is the output.
        random_state, secure_mode: the split, the candidates' and the selection's randomness.
        budget: a :class:`~privopt.PrivacyBudget` the whole search draws from.

    Fitted attributes: ``best_estimator_``, ``best_params_``, ``best_index_``, ``cv_results_``
    (the candidates' parameters only: their scores are not released), ``candidate_epsilon_``,
    ``candidate_delta_``, ``selection_epsilon_``, ``privacy_report_``, ``n_features_in_``.
    """

    _private_outputs = ("best_estimator_", "best_params_", "best_index_", "cv_results_", "classes_")
    _parameter_constraints: dict = {  # noqa: RUF012 (scikit-learn's declarative contract)
        "estimator": [PrivateEstimator],
        "param_grid": [dict, list],
        "epsilon": [Interval(numbers.Real, 0, None, closed="neither")],
        "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "error_bound": [None, Interval(numbers.Real, 0, None, closed="neither")],
        "refit": ["boolean"],
        "random_state": [None, "random_state", np.random.Generator],
        "secure_mode": ["boolean"],
        "budget": [None, PrivacyBudget],
    }

    def __init__(
        self,
        estimator: Any,
        param_grid: Any,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        *,
        validation_fraction: float = 0.2,
        error_bound: float | None = None,
        refit: bool = False,
        random_state: Any = None,
        secure_mode: bool = False,
        budget: Any = None,
    ) -> None:
        store_params(self, locals())

    # -- planning (parameters only) ------------------------------------------------------------
    def _candidates(self) -> list[dict[str, Any]]:
        candidates = list(ParameterGrid(self.param_grid))
        if not candidates:
            raise ValueError(
                f"param_grid={self.param_grid!r} holds no candidate; give a dict (or a list of "
                "dicts) of parameter lists, e.g. {'method': ['adassp', 'newton']} ({} searches "
                "the estimator as given)."
            )
        for params in candidates:
            bad = {"epsilon", "delta", "budget"} & set(params)
            if bad:
                raise ValueError(f"param_grid may not set {sorted(bad)}: the search sets them.")
        return candidates

    def _planned_relation(self) -> str:
        """zero-out if a candidate is accounted under it (replace-one implies zero-out)."""
        relations = {
            clone(self.estimator).set_params(**p)._planned_relation() for p in self._candidates()
        }
        return "zero-out" if "zero-out" in relations else "replace-one"

    def _error_bound(self) -> float | None:
        if is_classifier(self.estimator):
            return None
        if self.error_bound is not None:
            return float(self.error_bound)
        ranges = []
        for params in self._candidates():
            bounds = clone(self.estimator).set_params(**params).get_params().get("target_bounds")
            if bounds is None:
                raise ValueError(
                    "A regressor's validation utility needs a public error_bound (squared "
                    "error beyond which a prediction scores 0), or target_bounds on every "
                    "candidate."
                )
            low, high = np.asarray(bounds, dtype=float).ravel()
            ranges.append(high - low)
        return float((max(ranges) / 4.0) ** 2)

    # -- fitting -------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> PrivateGridSearchCV:
        """Run the private search (module notes); nothing but the selected model is released."""
        candidates = self._candidates()
        error_bound = self._error_bound()
        relation = self._planned_relation()
        k = len(candidates)
        eps_c, delta_c, eps_s = budget_split(self.epsilon, self.delta, k, refit=self.refit)
        ledger = PrivacyLedger(relation)
        rng = self._generator(ledger)
        X, y = indexable(X, y)
        if not is_classifier(self):
            # every target is checked before the secret split: a non-number that only the
            # validation rows hold would otherwise reach the scoring's float conversion, whose
            # message quotes the cell
            where = describe_non_numeric(y, "y")
            if where is not None:
                raise ValueError(where + NON_NUMERIC_FIX)
        n = _num_samples(X)
        validation = rng.random(n) < self.validation_fraction  # secret, data-independent
        train, val = np.flatnonzero(~validation), np.flatnonzero(validation)
        if train.size == 0 or val.size == 0:
            raise ValueError(
                f"Too few rows (n_samples = {n}) to split into training and validation."
            )
        self._check_candidates(candidates, eps_c, delta_c, train.size, k)
        X_train, y_train = _take(X, train), _take(y, train)
        X_val, y_val = _take(X, val), _take(y, val)
        models, assumptions = [], {}
        with leak_checks_suppressed():
            for params in candidates:
                model = self._fit_candidate(params, eps_c, delta_c, X_train, y_train, rng, relation)
                models.append(model)
                assumptions.update(dict.fromkeys(model.privacy_report_.assumptions))
        utilities = np.array(
            [
                record_utilities(y_val, m.predict(X_val), is_classifier(self), error_bound).sum()
                for m in models
            ]
        )
        best = exponential_mechanism(rng, utilities, eps_s, UTILITY_SENSITIVITY)
        del utilities  # never released
        if self.refit:
            with leak_checks_suppressed():
                models[best] = self._fit_candidate(
                    candidates[best], eps_c, delta_c, X, y, rng, relation
                )
        self._record(ledger, k, eps_c, delta_c, eps_s, error_bound, assumptions)
        self.best_index_ = best
        self.best_params_ = candidates[best]
        self.best_estimator_ = models[best]
        self.cv_results_ = _results(candidates, best)
        self.candidate_epsilon_, self.candidate_delta_ = eps_c, delta_c
        self.selection_epsilon_ = eps_s
        self.privacy_report_ = ledger.report(self.delta)
        if hasattr(self.best_estimator_, "n_features_in_"):
            self.n_features_in_ = self.best_estimator_.n_features_in_
        if hasattr(self.best_estimator_, "classes_"):
            self.classes_ = self.best_estimator_.classes_
        return self

    def _check_candidates(self, candidates, eps_c, delta_c, n_train, k) -> None:
        """Every candidate's refusals on public values (its parameters at (eps_c, delta_c) and
        the number of training rows, which the data-independent split fixed) before any
        candidate is fitted, naming the candidate and the fix."""
        for params in candidates:
            model = clone(self.estimator).set_params(**params, epsilon=eps_c, delta=delta_c)
            try:
                model._validate_params()
                model._check_public(n_train)
            except ValueError as error:
                raise ValueError(
                    f"Candidate {params} is refused at the per-candidate target "
                    f"(epsilon_c, delta_c) = ({eps_c:.3g}, {delta_c:.3g}) that {k} candidates "
                    f"leave of epsilon={self.epsilon:g} on {n_train} training rows: {error} Use "
                    "a larger epsilon or fewer candidates; nothing was fitted."
                ) from None

    def _fit_candidate(self, params, eps_c, delta_c, X, y, rng, relation) -> Any:
        model = clone(self.estimator).set_params(**params, epsilon=eps_c, delta=delta_c)
        planned = Neighbouring.parse(model._planned_relation())
        if not _implies(planned, Neighbouring.parse(relation)):
            raise ValueError(
                f"Candidate {params} is accounted under {planned.value!r} neighbours, which do "
                f"not imply the search's {relation!r} guarantee; nothing was fitted."
            )
        if "budget" in model.get_params():
            model.set_params(budget=None)
        secure = bool(self.secure_mode)
        if "secure_mode" in model.get_params():
            model.set_params(secure_mode=secure)
        model.set_params(
            random_state=None if secure else np.random.default_rng(rng.integers(2**63))
        )
        try:
            model.fit(X, y)
        except ValueError as error:
            raise ValueError(
                f"Candidate {params} was refused at the per-candidate target (epsilon_c, "
                f"delta_c) = ({eps_c:.3g}, {delta_c:.3g}): {error} Use a larger epsilon or "
                "fewer candidates; nothing is released."
            ) from None
        report = model.privacy_report_
        if not (
            report.epsilon <= eps_c * (1.0 + TARGET_TOLERANCE)
            and math.isclose(report.delta, delta_c)
            and _implies(Neighbouring.parse(report.neighbouring), Neighbouring.parse(relation))
        ):
            raise RuntimeError(
                f"Candidate {params} reports ({report.epsilon:g}, {report.delta:g})-DP under "
                f"{report.neighbouring!r} neighbours, not its target ({eps_c:g}, {delta_c:g}) "
                f"under {relation!r}; nothing is released."
            )
        return model

    def _record(self, ledger, k, eps_c, delta_c, eps_s, error_bound, assumptions) -> None:
        fits = k + 1 if self.refit else k
        label = f"{k} candidate fits" + (" and the refit" if self.refit else "")
        ledger.record(
            ApproxDPEvent(eps_c, delta_c, count=fits, label=label + " (training records)"),
            partition="training",
        )
        ledger.record(
            ApproxDPEvent(eps_s, PURE_DP_DELTA, label="exponential-mechanism selection (pure DP)"),
            partition="validation",
        )
        if self.refit:
            ledger.record(
                ApproxDPEvent(eps_c, delta_c, label="refit (validation records)"),
                partition="validation",
            )
        name = type(self.estimator).__name__
        ledger.assume(
            f"the wrapped {name}'s own epsilon={self.estimator.epsilon!r} and "
            f"delta={self.estimator.delta!r} are ignored: every candidate is fitted at "
            f"(epsilon_c, delta_c) = ({eps_c:.6g}, {delta_c:.3g}) set by the search"
        )
        ledger.assume(
            "records are assigned to training or validation by a secret draw independent of "
            f"the data (validation probability {self.validation_fraction:g})"
        )
        utility = (
            "accuracy (1 if correct)"
            if error_bound is None
            else f"1 - min(squared error / {error_bound:g}, 1), {error_bound:g} being public"
        )
        ledger.assume(
            f"each validation record's utility is {utility}, in [0, 1], so every candidate's "
            "summed score has sensitivity 1; no score is released"
        )
        for text in assumptions:
            ledger.assume(f"candidates: {text}")

    def plot_tradeoff(self, path, *, confidence: float = 0.95):
        """Draw the trade-off this search's budget was split along, against the number of
        candidates k (the fitted k marked): each candidate's epsilon_c, and the selection's
        shortfall, the number of validation records' utility by which the exponential
        mechanism's choice can fall short of the best candidate with probability
        ``confidence``: 2 ln(k / (1 - confidence)) / epsilon_s (McSherry & Talwar 2007,
        Theorem 6; utilities of sensitivity 1). Public values only: no score is read.

        Returns the written file (PNG, or SVG/PDF by suffix).
        """
        check_is_fitted(self, "best_index_")
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"Expected confidence in (0, 1), got {confidence!r}.")
        from privopt.plots import plot_search_tradeoff

        k = len(self.cv_results_["params"])
        counts = np.unique(np.geomspace(1, max(2 * k, 8), 8).round().astype(int))
        counts = np.union1d(counts, [k])
        splits = [budget_split(self.epsilon, self.delta, int(c), refit=self.refit) for c in counts]
        eps_c = np.array([s[0] for s in splits])
        shortfall = np.array(
            [
                2.0 * math.log(c / (1.0 - confidence)) / s[2]
                for c, s in zip(counts, splits, strict=True)
            ]
        )
        return plot_search_tradeoff(
            counts, eps_c, shortfall, k, path,
            title=f"Private grid search: epsilon = {self.epsilon:g}, delta = {self.delta:g}",
            confidence=confidence,
        )  # fmt: skip

    # -- delegation ----------------------------------------------------------------------------
    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.best_estimator_.predict(X)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """The selected model's score on (X, y) (a release if (X, y) is private)."""
        check_is_fitted(self)
        return self.best_estimator_.score(X, y, sample_weight=sample_weight)

    @available_if(_delegate_has("decision_function"))
    def decision_function(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.best_estimator_.decision_function(X)

    @available_if(_delegate_has("predict_proba"))
    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.best_estimator_.predict_proba(X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        inner = self.estimator.__sklearn_tags__()
        tags.estimator_type = inner.estimator_type
        tags.classifier_tags = inner.classifier_tags
        tags.regressor_tags = inner.regressor_tags
        tags.input_tags = inner.input_tags
        return tags


def _implies(candidate: Neighbouring, search: Neighbouring) -> bool:
    """A candidate's guarantee holds under the search's relation: the same relation, or a
    replace-one candidate in a zero-out search (a null record is a record of the domain)."""
    return candidate is search or (
        candidate is Neighbouring.REPLACE_ONE and search is Neighbouring.ZERO_OUT
    )


def _take(data: Any, rows: np.ndarray) -> Any:
    return _safe_indexing(data, rows)  # arrays, sparse matrices, DataFrames


def _results(candidates: list[dict[str, Any]], best: int) -> dict[str, Any]:
    """scikit-learn's cv_results_ keys that carry no private information."""
    names = sorted({name for params in candidates for name in params})
    out: dict[str, Any] = {"params": candidates}
    for name in names:
        values = np.ma.masked_all(len(candidates), dtype=object)
        for i, params in enumerate(candidates):
            if name in params:
                values[i] = params[name]
        out[f"param_{name}"] = values
    out["selected"] = np.arange(len(candidates)) == best
    return out
