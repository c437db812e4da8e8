"""DPLinearClassifier: private linear classification with non-smooth losses (Wang et al. 2022)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from privopt.accounting import PrivacyLedger
from privopt.estimators._base import resolve_feature_bounds
from privopt.estimators._holder import HolderSGDEstimator, unit_rows
from privopt.estimators._input import validate_rows
from privopt.estimators._params import store_params
from privopt.estimators._users import refuse_under_users
from privopt.losses import get_loss
from privopt.releases.label_set import (
    check_public_labels,
    label_slice_rows,
    observed_labels,
    release_label_set,
)
from privopt.releases.preprocess import LinearBounds

__all__ = ["DPLinearClassifier"]

CLASSIFICATION_LOSSES = ("hinge", "squared_hinge", "qnorm_hinge", "logistic")


@dataclass(frozen=True)
class FeatureMap:
    """The public (or privately estimated) map of raw features to rows of norm <= 1.

    Public bounds: each feature is clipped to [low, high] and divided by max(|low|, |high|)
    (sparsity is kept: 0 stays 0). Private ``bounds`` (DP-STAT's centre and radius, or private
    quantiles at small N, which also standardise and box each feature): rows are transformed
    and clipped to the private radius (:meth:`LinearBounds.transform_block`), then divided by
    it. Then a constant 1 is appended for the intercept and every row is scaled to norm <= 1.
    Scaling a row by a positive factor does not change the sign of <w, x>, so predictions are
    those of a linear classifier in the mapped space.
    """

    center: np.ndarray
    low: np.ndarray | None
    high: np.ndarray | None
    scale: np.ndarray | float
    fit_intercept: bool
    source: str
    bounds: LinearBounds | None = None

    def __post_init__(self) -> None:
        if (self.low is None) == (self.bounds is None):
            raise ValueError("A feature map needs public [low, high] ranges or private bounds.")

    def transform(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        if self.bounds is None:
            Z = np.clip(X, self.low, self.high) / self.scale
        else:
            Z = np.empty_like(X)
            self.bounds.transform_block(X, Z, track_changes=False)
            Z /= self.bounds.x_radius
        if self.fit_intercept:
            Z = np.hstack([Z, np.ones((Z.shape[0], 1))])
        return unit_rows(Z)


#: fit_info_["label_set"]: how the label set was obtained (a list of classes: "public")
_LABEL_SOURCE = {"None": "private", "observed": "observed (not private)"}


class DPLinearClassifier(ClassifierMixin, HolderSGDEstimator):
    """Differentially private linear classifier trained by private SGD (Wang et al. 2022).

    The loss may be non-smooth (alpha-Hölder smooth): ``"hinge"`` (SVM), ``"squared_hinge"``,
    ``"qnorm_hinge"`` (with ``q``), ``"logistic"``. The model is fitted on features mapped into
    the unit ball (:class:`FeatureMap`), by

    * ``perturbation="gradient"`` (default): DP-SGD-Gradient, Gaussian noise on each of T
      single-record gradient steps on the ball of radius ``radius``; sigma from Theorem 11 or
      from dp_accounting's RDP of the sampled Gaussian, whichever is smaller and valid
      (``accounting``);
    * ``perturbation="output"``: DP-SGD-Output, one Gaussian release of the SGD average scaled
      to Theorem 7's stability bound (``radius=None`` for an unbounded domain).

    Privacy: (epsilon, delta)-DP under replace-one neighbours (N public), stated with every
    assumption in ``privacy_report_``. With only ``epsilon`` and ``delta`` given, the centre and
    radius of the rows are estimated privately on a disjoint slice of the records (parallel
    composition: no extra budget). Give public ``feature_bounds`` (for instance ``(0, 1)``
    after a preprocessing that maps every column into [0, 1] with public knowledge, see
    :mod:`privopt.datasets.adult`) to use all records for the fit.

    Parameters:
        loss, q: the loss (``q`` in [1, 2] for ``"qnorm_hinge"``).
        perturbation: ``"gradient"`` or ``"output"``.
        method: ``"sgd"`` (Wang et al.'s (2022) projected SGD) or ``"srgd"`` (Choquette-Choo, Ganesh
        & Thakurta's (2025) single-epoch
            Accelerated-DP-SRGD with binary-tree noise, setting "interior", radius 1 by
            default; smooth losses only; ``perturbation``, ``steps`` and ``learning_rate`` do
            not apply).
        epsilon, delta: the privacy target (delta in (0, 1), well below 1/N).
        fit_intercept: append a constant feature.
        feature_bounds: public (low, high) of every feature, or an (n_features, 2) array.
        radius: R of the domain ball (None: unbounded, output perturbation only); ``"auto"``:
            50 for losses with bounded gradients (hinge, logistic), 5 otherwise (their noise
            grows with R).
        steps: T (default 16 per record, at most 2,000,000).
        learning_rate: constant eta (default 0.005 for gradient perturbation; 50 / T for output
            perturbation, which keeps Theorem 7's bound fixed).
        accounting: ``"auto"``, ``"paper"`` or ``"rdp"`` (gradient perturbation).
        preprocess_fraction: share of records for private preprocessing (no public bounds).
        random_state: None, an int or a numpy Generator. A seed that draws noise must stay
            secret and serve one fit only (the report says so).
        diagnostics: also expose non-private diagnostics (clip fractions, visit counts) in
            ``fit_info_`` / ``fit_trace_``; warns, and the report lists them as releases outside
            the guarantee. Default False: they are absent.
        secure_mode: draw every random number from ChaCha20 keyed by the operating system
            (:func:`privopt.noise.secure_generator`); ``random_state`` must then be None.
        budget: a :class:`~privopt.PrivacyBudget` the fit draws from (checked before X is read).
        classes: the public label set (a list of two or more labels), known before the data are
            read; a record whose label is outside it is refused. None (default): the label set
            is released privately by a thresholded Gaussian histogram of the labels of a
            disjoint secret slice of 10% of the records (at most 20,000), which the fit then
            does not use; a label with fewer records in the slice than the threshold in the
            report (about 33 at epsilon = 1) is not released, and its records count as
            negatives of every class. ``"observed"``: ``np.unique(y)``, NOT private (whether a
            record holds a label no other record holds is released); warns
            (:class:`~privopt.PrivacyLeakWarning`) and the report lists it under the releases
            without privacy. For tools that need it (scikit-learn's estimator checks on a few
            dozen rows); never for private labels. The report says which way was used.
        user_clipping: with ``fit(X, y, users=ids)`` (user-level privacy), what is clipped to
            the per-record gradient bound G: ``"sum"`` (default) of a user's gradients, or
            their ``"mean"`` (never clipped, since each gradient has norm <= G: the gradient of
            the user's average loss). Unused without ``users``.

    Multiclass targets are fitted one-vs-rest (see :meth:`fit`).

    Fitted attributes: ``classes_``, ``coef_`` (1 or K, n_features) and ``intercept_`` (1 or K,)
    in the mapped space, ``feature_map_``, ``privacy_report_``, ``fit_info_``, ``n_features_in_``.
    """

    _private_outputs = ("coef_", "intercept_", "classes_", "feature_map_", "fit_info_")
    _parameter_constraints: dict = {  # noqa: RUF012
        **HolderSGDEstimator._parameter_constraints,
        "q": [float, int],
        "classes": [None, "array-like", StrOptions({"observed"})],
    }

    def __init__(
        self,
        loss: str = "logistic",
        perturbation: str = "gradient",
        method: str = "sgd",
        epsilon: float = 1.0,
        delta: float = 1e-6,
        fit_intercept: bool = True,
        feature_bounds: Any = None,
        radius: float | str | None = "auto",
        steps: int | None = None,
        learning_rate: float | None = None,
        accounting: str = "auto",
        preprocess_fraction: float = 0.1,
        q: float = 1.5,
        random_state: Any = None,
        diagnostics: bool = False,
        secure_mode: bool = False,
        budget: Any = None,
        classes: Any = None,
        user_clipping: str = "sum",
    ) -> None:
        store_params(self, locals())

    def _loss(self):
        if self.loss not in CLASSIFICATION_LOSSES:
            raise ValueError(
                f"Expected a classification loss in {CLASSIFICATION_LOSSES}, got {self.loss!r}."
            )
        return get_loss(self.loss, q=self.q) if self.loss == "qnorm_hinge" else get_loss(self.loss)

    def fit(self, X: Any, y: Any, users: Any = None) -> DPLinearClassifier:
        """Fit privately: two classes (the larger label is positive), or one-vs-rest for more.

        ``users`` (one id per record; None, NaN or empty ids refused): the privacy unit
        becomes the user (user-level replace-one, N = the number of users, public): each step
        samples one user, whose contribution is its records' gradients summed (or averaged,
        ``user_clipping="mean"``) and clipped to the per-record bound G as one vector
        (:mod:`privopt.estimators._users`); ``steps`` defaults to 16 per user. It needs public
        ``feature_bounds`` and ``classes`` (a list, or ``"observed"``: not private): the
        private bounds and the private label set are record-level releases.

        The label set is never ``np.unique(y)`` (that would release whether some record holds
        a label no other record holds). With ``classes=`` it is the public set given (a label
        outside it is refused before anything is released); without it, it is released by a
        thresholded Gaussian histogram of the labels of a disjoint secret slice of 10% of the
        records (:mod:`privopt.releases.label_set`) at the full (epsilon, delta), and the fit
        runs on the other records (parallel composition: the label set costs rows, not budget).

        With K > 2 classes, K binary fits (class k against the rest) run on the same rows, each
        at (epsilon' / K, delta' / K) of what the label set left: their releases compose
        sequentially in the fit's ledger, so the whole fit is (epsilon, delta)-DP by basic
        composition at worst (the report composes the recorded events, usually tighter). The
        preprocessing, if any, is shared.
        """
        rng, ledger = self._start(users is not None)
        loss = self._loss()
        X, y = validate_rows(self, X, y, dtype=np.float64, y_numeric=False)
        y = self._check_label_column(y)
        n, d = X.shape
        groups = self._user_groups(users, n)
        if isinstance(self.classes, str) and self.classes == "observed":
            classes, rows = observed_labels(y, ledger, type(self).__name__), np.arange(n)
        elif self.classes is not None:
            classes, rows = check_public_labels(self.classes, y), np.arange(n)
            ledger.assume(
                "the label set is public (classes= given by the user, fixed before the data "
                "were read)"
            )
        else:
            m = label_slice_rows(n)
            if self.feature_bounds is None:
                self._check_bounds_rows(n - m, d)  # public refusals before any release
            classes, rows = self._private_label_set(y, m, rng, ledger)
        self.classes_ = classes
        signs = np.where(y == classes[-1], 1.0, -1.0)
        if self.feature_bounds is not None:
            fb = resolve_feature_bounds(self.feature_bounds, d)
            scale = np.maximum(np.abs(fb[:, 0]), np.abs(fb[:, 1]))
            fmap = FeatureMap(np.zeros(d), fb[:, 0], fb[:, 1], scale, self.fit_intercept, "public")
            ledger.assume("features clipped to the public feature_bounds given by the user")
        else:
            bounds, kept = self._private_bounds(X[rows], signs[rows], rng, ledger)
            rows = rows[kept]
            fmap = FeatureMap(
                bounds.x_center, None, None, bounds.x_radius, self.fit_intercept, "private", bounds
            )
        ledger.assume("rows mapped to the unit ball (a public, per-record transformation)")
        Z = fmap.transform(X[rows])
        # binary: one fit of classes_[1] against classes_[0]; else one per class (vs the rest)
        positives = classes[1:] if classes.size == 2 else classes
        k = len(positives)
        each = (self.epsilon / k, self.delta / k)
        if k > 1:
            ledger.assume(
                f"one-vs-rest: {k} binary fits on the same rows, each at (epsilon / {k}, "
                f"delta / {k}), composed sequentially"
            )
        weights = []
        for positive in positives:
            t = np.where(y[rows] == positive, 1.0, -1.0)
            # one ledger per class fit, merged after
            own = ledger if k == 1 else PrivacyLedger(ledger.neighbouring, unit=ledger.unit)
            fit = self._private_fit(
                Z,
                t,
                loss,
                x_bound=1.0,
                y_bound=None,
                rng=rng,
                ledger=own,
                target=each,
                groups=groups,
            )
            if own is not ledger:
                ledger.extend(own)
            weights.append(fit.coef)
        W = np.array(weights)
        self.feature_map_ = fmap
        self.coef_ = (W[:, :-1] if self.fit_intercept else W).copy()
        self.intercept_ = W[:, -1].copy() if self.fit_intercept else np.zeros(k)
        info = {
            "feature_map": fmap.source,
            # under users= the number of records is not public: only N users is reported
            **(
                {"rows_fitted": int(rows.size)}
                if groups is None
                else {"users_fitted": groups.num_users}
            ),
            "label_set": _LABEL_SOURCE.get(str(self.classes), "public"),
        }
        self._store(fit, info, ledger.report(self.delta))
        return self

    def _check_user_releases(self) -> None:
        if self.feature_bounds is None:
            raise refuse_under_users(
                "DPLinearClassifier",
                "the private estimate of the features' centre and radius",
                "public feature_bounds",
            )
        if self.classes is None:
            raise refuse_under_users(
                "DPLinearClassifier", "the private label set", "the public label set classes="
            )

    def _check_label_column(self, y: np.ndarray) -> np.ndarray:
        """One column of labels; float labels must be whole numbers or given in ``classes``."""
        y = np.asarray(y)
        public = self.classes is not None and not isinstance(self.classes, str)
        if y.dtype.kind in "fc" and not public:
            finite = np.all(np.isfinite(y)) if y.dtype.kind == "f" else False
            if not finite or not np.all(np.equal(np.mod(y, 1), 0)):
                raise ValueError(
                    "DPLinearClassifier needs class labels; y holds non-integer or non-finite "
                    "numbers (continuous targets?). Give the public label set with classes=, "
                    "or use DPSGDRegressor for a continuous target."
                )
        if y.dtype.kind == "O":
            y = y.astype(str)
        return y

    def _private_label_set(
        self, y: np.ndarray, m: int, rng: np.random.Generator, ledger: PrivacyLedger
    ) -> tuple[np.ndarray, np.ndarray]:
        """The label set released from a disjoint secret slice of m records at the full
        (epsilon, delta) (parallel composition, :mod:`privopt.releases.label_set`), and the
        sorted indices of the other records (the fit's)."""
        slice_rows = np.zeros(y.shape[0], dtype=bool)
        slice_rows[rng.permutation(y.shape[0])[:m]] = True  # secret, data-independent
        classes = release_label_set(
            y[slice_rows], epsilon=self.epsilon, delta=self.delta, rng=rng, ledger=ledger
        )
        if classes.size < 2:
            raise ValueError(
                f"The privately released label set holds {classes.size} class"
                f"{'es' if classes.size != 1 else ''} (a label needs more records than the "
                "release's threshold, printed in the report, in a slice of 10% of the records). "
                "Give the public label set with classes=, or use a larger epsilon or more data."
            )
        return classes, np.flatnonzero(~slice_rows)

    def decision_function(self, X: Any) -> np.ndarray:
        """<w_k, map(X)> (post-processing, no privacy cost).

        Two classes: shape (n,), positive for ``classes_[1]``; more: shape (n, K), one column
        per class of ``classes_``.
        """
        check_is_fitted(self)
        X = validate_rows(self, X, reset=False, dtype=np.float64)
        Z = self.feature_map_.transform(X)
        W = np.hstack([self.coef_, self.intercept_[:, None]]) if self.fit_intercept else self.coef_
        scores = Z @ W.T
        return scores[:, 0] if len(self.classes_) == 2 else scores

    def predict(self, X: Any) -> np.ndarray:
        """The class of the sign of :meth:`decision_function` (two classes) or of its argmax."""
        check_is_fitted(self)
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]

    @property
    def predict_proba(self):
        """Class probabilities (logistic loss only: the model's own probabilistic reading).

        More than two classes: the one-vs-rest probabilities expit(<w_k, x>), normalised. For
        other losses the attribute does not exist (``hasattr`` is False, as scikit-learn
        expects of a method that does not apply).
        """
        if self.loss != "logistic":
            raise AttributeError("predict_proba is available for the logistic loss only.")
        return self._predict_proba

    def _predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        p = expit(self.decision_function(X))
        if p.ndim == 1:
            return np.column_stack([1.0 - p, p])
        return p / p.sum(axis=1, keepdims=True)
