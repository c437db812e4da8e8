r"""User-level privacy for the scikit-learn estimators: ``fit(X, y, users=ids)``.

With ``users=`` (one id per record) the privacy unit is the user: neighbouring datasets differ in
all the records of one user (a user-level relation; the number of users N is public, the number
of records of each user is not and is never released). What each estimator needs:

* :func:`user_groups`: the ids validated and grouped (numpy only,
  :class:`privopt.training.users.UserGroups`): an id array of the wrong length, records without
  an id (None, NaN, empty string; refused by count, never quoting an id) and fewer than two users
  are refused;
* the SGD estimators (:class:`~privopt.DPLinearClassifier`, :class:`~privopt.DPSGDRegressor`):
  :func:`user_dp_sgd_gradient`, Wang et al.'s (2022) DP-SGD-Gradient over users: each step
  samples one user of N uniformly (the record-level plan over users), whose contribution is
  clip_G(sum of its records' gradients) or clip_G(their mean) (``user_clipping``), G being the
  per-record gradient bound of the loss on the ball, so replacing one user moves a step's
  gradient by at most 2G, as one record did: Theorem 11 and the RDP of the sampled Gaussian
  apply with n = N users (McMahan, Ramage, Talwar & Zhang 2018, arXiv:1710.06963, Thm 1);
* the sufficient-statistics methods of :class:`~privopt.DPLinearRegression` (AdaSSP, noisy
  Newton): :func:`record_factors`, sqrt(1 / n_u) per record. Scaling the clipped rows
  (x_i, y_i) of user u by it makes the user's Gram contribution sum_{i in u} x_i x_i^T / n_u,
  whose Frobenius norm is at most max_i ||x_i||^2 <= R^2 (the record bound), and its cross
  term sum_i x_i y_i / n_u at most R |y|_max, so every sensitivity of those releases holds for
  a whole user unchanged (the fit is then the user-weighted least squares
  min sum_u (1/n_u) sum_{i in u} (y_i - <x_i, w>)^2); :func:`record_weights` (1 / n_u) does the
  same for counts and sums of bounded values.

A private release that has no user-level version yet is refused by name before anything is
released (:func:`refuse_under_users`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from privopt._validate import check_delta_for_rows
from privopt.accounting import PrivacyLedger, PrivacyUnit
from privopt.algorithms.gradient_perturbation import noisy_sgd_plan
from privopt.algorithms.holder_problem import HolderProblem
from privopt.training import SGD, LossModel, Projected
from privopt.training import execute as execute_plan
from privopt.training.result import FitResult
from privopt.training.users import (
    USER_REDUCTIONS,
    USER_UNIT_STATEMENT,
    UserGroups,
    UserModel,
    UserRows,
    user_plan_assumptions,
)

__all__ = [
    "USER_CLIPPING",
    "USER_UNIT_ASSUMPTION",
    "check_regression_users",
    "record_factors",
    "record_weights",
    "refuse_under_users",
    "sufficient_statistics_assumption",
    "user_dp_sgd_gradient",
    "user_groups",
    "user_ledger",
    "user_level_rows",
]

#: ``user_clipping``: what is clipped, a user's sum of gradients or their mean
USER_CLIPPING = USER_REDUCTIONS
USER_UNIT_ASSUMPTION = USER_UNIT_STATEMENT


def user_groups(users: Any, num_records: int) -> UserGroups:
    """The records' users, validated (module docstring); at least two users."""
    groups = UserGroups(users, num_records)
    if groups.num_users < 2:
        raise ValueError(
            f"Expected at least 2 users (N is public under user-level neighbours); users names "
            f"{groups.num_users}."
        )
    return groups


def check_user_clipping(user_clipping: str) -> str:
    if user_clipping not in USER_CLIPPING:
        raise ValueError(f"Expected user_clipping in {USER_CLIPPING}, got {user_clipping!r}.")
    return user_clipping


def user_ledger(neighbouring: str, users: bool) -> PrivacyLedger:
    """The fit's ledger: the unit is the user when ``users`` (the relation is the estimator's)."""
    unit = PrivacyUnit.USER if users else PrivacyUnit.RECORD
    return PrivacyLedger(neighbouring, unit=unit)


def refuse_under_users(estimator: str, what: str, instead: str) -> ValueError:
    """The one-line refusal of a release that has no user-level version (raise it)."""
    return ValueError(
        f"{estimator} with users= needs {instead}: {what} is a record-level release (its "
        "sensitivity is that of one record, not of a whole user)."
    )


def record_factors(groups: UserGroups) -> np.ndarray:
    """sqrt(1 / n_u) per record (the caller's record order): the factors that make a user's
    Gram and cross-term contributions at most one record's bound (module docstring)."""
    return np.sqrt(groups.record_weights())


def record_weights(groups: UserGroups) -> np.ndarray:
    """1 / n_u per record: each user's weights sum to 1 (a count or a sum of values bounded
    by B then moves by at most B when one user's records change)."""
    return groups.record_weights()


def sufficient_statistics_assumption() -> str:
    """The ledger statement of :func:`record_factors`' weighting."""
    return (
        "each user's records enter the sufficient statistics scaled by sqrt(1 / n_u) (n_u its "
        "number of records, never released): a user's Gram and cross-term contributions are "
        "bounded by one record's bounds, so every release's record-level sensitivity holds for "
        "the whole user; the fit is the least squares of the users' average losses"
    )


#: the methods of DPLinearRegression whose every release has a user-level version
REGRESSION_USER_METHODS = ("auto", "adassp")


def _complete(bounds: Any) -> bool:
    """Whether ``bounds`` (a parameter, before the data are read) has no unknown entry (None,
    NaN); a dict naming only some columns is caught after the data's columns are known."""
    if bounds is None:
        return False
    for entry in bounds.values() if isinstance(bounds, Mapping) else [bounds]:
        if entry is None or (isinstance(entry, list | tuple) and any(v is None for v in entry)):
            return False
        try:
            if np.any(np.isnan(np.asarray(entry, dtype=float))):
                return False
        except (TypeError, ValueError):  # ragged or non-numeric: a partial or invalid bound
            return False
    return True


def check_regression_users(estimator: Any, users: Any, n_rows: int | None) -> UserGroups | None:
    """:class:`~privopt.DPLinearRegression`'s refusals of ``users=`` (parameters and ids only,
    before a budget is reserved), then the ids grouped (None when the rows are not in memory).

    User level is built for AdaSSP (``method="adassp"``, and ``"auto"``, which then runs it)
    with complete public ``feature_bounds`` and ``target_bounds``: its three Gaussian releases
    are functions of the sufficient statistics, made user-level by :func:`user_level_rows`,
    and its quality release sums the users' weighted terms. Noisy Newton's residual-clip
    quantiles, the private bounds, the public bounds' tightening quantiles and the one-pass
    methods count records, so they are refused by name; delta is checked against 1 / N users.
    """
    name = type(estimator).__name__
    if estimator.method not in REGRESSION_USER_METHODS:
        raise ValueError(
            f"{name} with users= supports method='adassp' (and 'auto', which then runs it): "
            f"method={estimator.method!r} releases record-level counts or rounds."
        )
    if not (_complete(estimator.feature_bounds) and _complete(estimator.target_bounds)):
        raise refuse_under_users(
            name, "the private estimate of the features' and target's bounds",
            "public feature_bounds and target_bounds for every column",
        )  # fmt: skip
    if n_rows is None:
        raise ValueError(f"{name} with users= needs X in memory (not a Dask collection).")
    groups = user_groups(users, n_rows)
    check_delta_for_rows(estimator.delta, groups.num_users, allow_large=estimator.allow_large_delta)
    return groups


def user_level_rows(
    groups: UserGroups, Z: np.ndarray, t: np.ndarray, ledger: PrivacyLedger
) -> tuple[np.ndarray, np.ndarray]:
    """The clipped rows scaled by :func:`record_factors` (sqrt(1 / n_u) <= 1, inside the
    clipped domain), the weighting stated in ``ledger``."""
    factors = record_factors(groups)
    ledger.assume(sufficient_statistics_assumption())
    return Z * factors[:, None], t * factors


def user_dp_sgd_gradient(
    X: np.ndarray,
    y: np.ndarray,
    loss: Any,
    groups: UserGroups,
    *,
    user_clipping: str,
    epsilon: float,
    delta: float,
    x_bound: float,
    y_bound: float | None,
    radius: float,
    eta: float,
    steps: int,
    rng: np.random.Generator,
    accounting: str,
    ledger: PrivacyLedger,
    partition: Hashable | None = None,
    diagnostics: bool = False,
) -> FitResult:
    """DP-SGD-Gradient (Wang et al. 2022, Alg. 2) with the user as the unit (module docstring).

    One user of N sampled uniformly per step (secret), its contribution the ``user_clipping``
    of its records' gradients clipped to G (the loss's tight gradient bound on the ball of
    ``radius``, :func:`privopt.algorithms.dp_sgd_gradient`'s per-record bound), Gaussian noise
    of std sigma, projected step, mean of the iterates. ``accounting`` as there: Theorem 11 or
    the RDP of the sampled Gaussian (the smaller valid sigma with ``"auto"``), with n = N users.
    ``ledger`` must be a replace-one ledger whose unit is the user.
    """
    check_user_clipping(user_clipping)
    if ledger.unit is not PrivacyUnit.USER or ledger.neighbouring.value != "replace-one":
        raise ValueError("The user-level fit records into a user-level replace-one ledger.")
    problem = HolderProblem.build(X, y, loss, epsilon, delta, x_bound, y_bound, radius)
    bound = problem.constants.lipschitz
    if not math.isfinite(bound):
        raise ValueError(f"The {problem.loss.name} loss has no finite gradient bound on the ball.")
    n = groups.num_users
    plan, paper, rdp_sigma, use_paper = noisy_sgd_plan(
        n, steps, bound, epsilon, delta, accounting, unit="user"
    )
    sigma = paper.sigma if use_paper else rdp_sigma
    rows = UserRows.build(problem.X, problem.y, groups)
    scratch = PrivacyLedger("replace-one", unit=PrivacyUnit.USER)  # events; statements below
    coef, trace, info = execute_plan(
        plan,
        UserModel(LossModel(problem.loss), user_clipping),
        Projected(SGD(eta), radius),
        rows,
        rows,
        rng=rng,
        averaging="inputs",
        ledger=scratch,
        partition=partition,
        diagnostics=diagnostics,
    )
    for entry in scratch.entries:
        ledger.record(entry.event, partition=entry.partition)
    for text in scratch.disclosures:
        ledger.disclose(text)
    c = problem.constants
    bounds = f"||x|| <= {x_bound:g}" + (
        f", |y| <= {y_bound:g}" if problem.loss.task == "regression" and y_bound else ""
    )
    for text in (
        f"public data bounds {bounds}, enforced on every record",
        f"N = {n} users is public (user-level replace-one neighbours)",
        f"{problem.loss.name} loss: convex, nonnegative, {c.alpha:g}-Hölder smooth with "
        f"L = {c.L:.6g}, M = {c.M:.6g}, M0 = {c.M0:.6g} (suprema over the data domain)",
        "step size, number of steps, domain radius chosen independently of the data",
        *user_plan_assumptions(plan.assumptions(), user_clipping, bound),
        f"G = {bound:.6g} is one record's gradient bound on the ball of radius {radius:g}; a "
        f"user's clipped {user_clipping} has norm <= G, so replacing a user moves a step by "
        "at most 2G",
        "accounting used: "
        + ("Theorem 11 (paper)" if use_paper else "dp_accounting RDP of the sampled Gaussian")
        + f" with n = N = {n} users",
    ):
        ledger.assume(text)
    info.update(
        {
            "sigma": sigma,
            "accounting": "paper" if use_paper else "rdp",
            "paper_sigma": None if paper is None else paper.sigma,
            "rdp_sigma": rdp_sigma,
            "gradient_bound": bound,
            "eta": eta,
            "steps": steps,
            "radius": radius,
            "loss": problem.loss.name,
            "users": n,
            "user_clipping": user_clipping,
        }
    )
    return FitResult(
        coef=coef,
        intercept=0.0,
        report=ledger.report(delta),
        trace=trace,
        method="dp-sgd-gradient (user-level)",
        info=info,
    )
