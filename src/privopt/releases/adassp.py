"""AdaSSP (Wang 2018): sufficient-statistics perturbation with an adaptive ridge, in exact GDP.

A one-shot private statistic of the transformed rows (see
:class:`~privopt.releases.preprocess.LinearBounds`): rows ``z_i`` with ``||z_i||_2 <= R``
(``row_bound``) and targets with ``|t_i| <= T`` (``target_bound``). ``R`` and ``T`` are public,
so every sensitivity below is a function of them alone, never of the data.

Privacy in one table (the ledger's neighbouring relation decides which column applies):

==========================  ===========  ====================  ============================
release                     replace-one  add-remove, zero-out  mechanism
==========================  ===========  ====================  ============================
AdaSSP lambda_min(Z^T Z)    R^2          R^2                   Gaussian, mu/sqrt(3)-GDP
AdaSSP upper(Z^T Z)         sqrt(2) R^2  R^2                   Gaussian, mu/sqrt(3)-GDP
AdaSSP Z^T t                2 R T        R T                   Gaussian, mu/sqrt(3)-GDP
==========================  ===========  ====================  ============================
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt._validate import check_design, check_positive
from privopt.accounting import GaussianEvent, Neighbouring, PrivacyLedger
from privopt.clipping import clip_factors, row_norms
from privopt.noise.rng import gaussian_noise
from privopt.training.calibrate import gaussian_release_std

__all__ = [
    "ADASSP_LOWER_BOUND_SIGMAS",
    "ADASSP_RIDGE_Z",
    "AdaSSPSensitivities",
    "adassp",
    "adassp_release",
    "adassp_sensitivities",
    "gram_matrix",
]

#: AdaSSP's private lower bound on lambda_min subtracts this many noise stds: the bound fails
#: with probability Phi(-3) ~ 1.35e-3, which can only cost accuracy (less ridge), never privacy.
ADASSP_LOWER_BOUND_SIGMAS = 3.0
#: AdaSSP's ridge target is ``ADASSP_RIDGE_Z * sqrt(d) * std`` of the Gram noise: the spectral
#: norm of a d x d symmetric Gaussian matrix with entry std s concentrates at 2 sqrt(d) s
#: (semicircle law), so this ridge keeps the noisy Gram matrix positive definite in typical runs.
ADASSP_RIDGE_Z = 2.0
_ADASSP_RELEASES = 3


def _check_private_args(rng: object, ledger: object) -> None:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"Expected rng to be a numpy Generator, got {type(rng).__name__}.")
    if not isinstance(ledger, PrivacyLedger):
        raise ValueError(f"Expected ledger to be a PrivacyLedger, got {type(ledger).__name__}.")


# -- AdaSSP ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AdaSSPSensitivities:
    """l2 sensitivities of AdaSSP's three releases under one neighbouring relation.

    Attributes:
        lambda_min: of lambda_min(Z^T Z) (a scalar).
        gram: of the upper triangle (diagonal included, off-diagonal entries once) of Z^T Z.
        moment: of Z^T t.
    """

    lambda_min: float
    gram: float
    moment: float


def adassp_sensitivities(
    row_bound: float, target_bound: float, neighbouring: Neighbouring | str = "replace-one"
) -> AdaSSPSensitivities:
    """Sensitivities of AdaSSP's releases when ``||z|| <= R = row_bound``, ``|t| <= T``.

    Proofs. Replacing a row ``(b, s)`` by ``(a, u)`` changes Z^T Z by ``D = a a^T - b b^T`` and
    Z^T t by ``u a - s b``. Adding or removing a row ``(a, u)`` changes them by ``+-a a^T`` and
    ``+-u a``; zero-out is the same as add/remove.

    * lambda_min: by Weyl's inequality lambda_min(A + D) - lambda_min(A) lies in
      ``[lambda_min(D), lambda_max(D)]``; the eigenvalues of ``a a^T - b b^T`` lie in
      ``[-||b||^2, ||a||^2]`` and those of ``+-a a^T`` in ``[-||a||^2, ||a||^2]``, so the
      sensitivity is ``R^2`` under every relation (tight: D = R^2 e1 e1^T with lambda_min along e1).
    * Gram: ``||a a^T - b b^T||_F^2 = ||a||^4 + ||b||^4 - 2 (a.b)^2 <= 2 R^4``, so the Frobenius
      sensitivity is ``sqrt(2) R^2`` (tight for a = R e1, b = R e2), and ``||a a^T||_F <= R^2``
      under add/remove. The mechanism releases only the upper triangle U(D) (symmetric noise is
      drawn there and mirrored), and ``||U(D)||^2 = (||D||_F^2 + sum_i D_ii^2) / 2 <= ||D||_F^2``,
      so the Frobenius bound is also a bound on the released vector (tight in both examples above,
      whose D is diagonal).
    * moment: ``||u a - s b|| <= |u| ||a|| + |s| ||b|| <= 2 R T`` (tight for a = -b, u = s = T) and
      ``||u a|| <= R T``.
    """
    R = check_positive("row_bound", row_bound)
    T = check_positive("target_bound", target_bound)
    if Neighbouring.parse(neighbouring) is Neighbouring.REPLACE_ONE:
        return AdaSSPSensitivities(lambda_min=R**2, gram=math.sqrt(2.0) * R**2, moment=2 * R * T)
    return AdaSSPSensitivities(lambda_min=R**2, gram=R**2, moment=R * T)


def adassp(
    Z: np.ndarray,
    t: np.ndarray,
    *,
    row_bound: float,
    target_bound: float,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: Hashable | None = "main",
    budget_split: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3),
) -> tuple[np.ndarray, dict[str, Any]]:
    """AdaSSP: sufficient-statistics perturbation with an adaptive ridge, accounted in GDP.

    Wang (2018), "Revisiting differentially private linear regression: optimal and adaptive
    prediction & estimation in unbounded domain" (UAI), Algorithm 2, with its three
    (epsilon/3, delta/3) Gaussian releases replaced by three Gaussian releases of GDP parameters
    ``mu sqrt(share_i)`` (equal thirds by default), which compose to exactly ``mu``-GDP (Dong,
    Roth & Su 2019)::

        lambda~  = lambda_min(Z^T Z) + N(0, s_1^2)               s_1 = sqrt(3) Delta_1 / mu
        lambda_- = max(0, lambda~ - 3 s_1)                        (private lower bound)
        G~       = Z^T Z + E,  E symmetric, E_ij ~ N(0, s_2^2)    s_2 = sqrt(3) Delta_2 / mu
        m~       = Z^T t + N(0, s_3^2 I)                          s_3 = sqrt(3) Delta_3 / mu
        lambda   = max(0, 2 sqrt(d) s_2 - lambda_-)               (adaptive ridge)
        w        = (G~ + lambda I)^{-1} m~

    The ridge follows Wang's rule "noise level of the Gram matrix minus the private lower bound
    on its smallest eigenvalue": Wang's ``sqrt(d log(6/delta) log(2 d^2/rho)) ||X||^2 / (eps/3)``
    bounds ||E||_op with high probability; in GDP form ``E`` has entry std ``s_2`` and
    ``||E||_op ~ 2 sqrt(d) s_2`` (:data:`ADASSP_RIDGE_Z`). The lower bound subtracts
    :data:`ADASSP_LOWER_BOUND_SIGMAS` = 3 noise stds. Both are post-processing: they change
    accuracy only.

    Privacy: ``mu``-GDP under the ledger's neighbouring relation, with the sensitivities
    Delta_1..3 of :func:`adassp_sensitivities` (replace-one: R^2, sqrt(2) R^2, 2 R T; add-remove
    and zero-out: R^2, R^2, R T). Rows and targets are clipped to the public bounds before use (a
    no-op on data from :meth:`LinearBounds.transform`), so the sensitivities hold for any input.
    Each release is recorded as a :class:`GaussianEvent` with ``partition``.

    Cost: O(n d^2 + d^3) time, O(d^2) extra memory (no n x n matrix).

    Args:
        Z: (n, d) transformed rows, ``||z_i|| <= row_bound``.
        t: (n,) transformed targets, ``|t_i| <= target_bound``.
        row_bound, target_bound: the public bounds R and T.
        mu: total GDP budget of the three releases.
        budget_split: shares of mu^2 given to (lambda_min, Z^T Z, Z^T t); normalised to sum to
            1, so the releases compose to exactly mu-GDP. Wang's split is equal thirds.
        rng: randomness for the noise.
        ledger: where the three releases are recorded.
        partition: disjoint data partition these rows form in ``ledger`` (None = all records).

    Returns:
        ``(w, info)``; ``info`` holds ``ridge_lambda``, the noise stds ``lambda_min_std``,
        ``gram_std``, ``moment_std``, the ``sensitivities``, and the private releases themselves
        (``lambda_min_release``, ``lambda_min_lower``, ``gram`` (d x d, symmetric), ``moment``),
        which can be reused at no further privacy cost.
    """
    Z, t = check_design(Z, t, "Z", "t")
    R = check_positive("row_bound", row_bound)
    T = check_positive("target_bound", target_bound)
    mu = check_positive("mu", mu)
    _check_private_args(rng, ledger)

    # Enforce the public bounds: the sensitivities must not rely on the caller's clipping
    # (rows already inside the ball are not copied).
    norms = row_norms(Z)
    if np.any(norms > R):
        Z = Z * clip_factors(norms, R)[:, None]
    t = np.clip(t, -T, T)
    return adassp_release(
        gram_matrix(Z),
        Z.T @ t,
        row_bound=R,
        target_bound=T,
        mu=mu,
        rng=rng,
        ledger=ledger,
        partition=partition,
        budget_split=budget_split,
    )


def gram_matrix(Z: np.ndarray) -> np.ndarray:
    """Z^T Z by BLAS syrk (the upper triangle, mirrored): half the work of a product and none of
    the transposed-operand copies numpy's ``Z.T @ Z`` can make (0.5 s against 37 s measured at
    N = 10^6, p = 101 on this project's machine)."""
    from scipy.linalg.blas import dsyrk

    upper = dsyrk(1.0, np.ascontiguousarray(Z, dtype=float).T, trans=0, lower=0)
    return np.triu(upper) + np.triu(upper, 1).T


def adassp_release(
    gram: np.ndarray,
    moment: np.ndarray,
    *,
    row_bound: float,
    target_bound: float,
    mu: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: Hashable | None,
    budget_split: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3),
) -> tuple[np.ndarray, dict[str, Any]]:
    """AdaSSP's three Gaussian releases and solve, from the exact statistics of clipped rows.

    ``gram`` = Z^T Z and ``moment`` = Z^T t of rows clipped to ``row_bound`` and targets to
    ``target_bound`` (computed in memory by :func:`adassp`, or reduced across partitions by
    :mod:`privopt.distributed`): the one place where AdaSSP's noise is drawn and recorded (see
    :func:`adassp` for the mechanism and its mu-GDP guarantee).
    """
    sens = adassp_sensitivities(row_bound, target_bound, ledger.neighbouring)
    gram = np.asarray(gram, dtype=float)
    gram = (gram + gram.T) / 2.0  # exactly symmetric
    moment = np.asarray(moment, dtype=float)
    d = gram.shape[0]
    shares = np.asarray(budget_split, dtype=float)
    if (
        shares.shape != (_ADASSP_RELEASES,)
        or np.any(shares <= 0)
        or not np.all(np.isfinite(shares))
    ):
        raise ValueError(f"Expected budget_split of three positive shares, got {budget_split!r}.")
    shares = shares / shares.sum()  # shares of mu^2: the three releases compose to mu exactly
    mu_lam, mu_gram, mu_moment = (mu * math.sqrt(share) for share in shares)
    std_lam = gaussian_release_std(sens.lambda_min, mu_lam)
    std_gram = gaussian_release_std(sens.gram, mu_gram)
    std_moment = gaussian_release_std(sens.moment, mu_moment)

    # (a) private lower bound on lambda_min(Z^T Z)
    lam_release = float(np.linalg.eigvalsh(gram)[0]) + gaussian_noise(rng, std_lam)
    ledger.record(
        GaussianEvent(sens.lambda_min, std_lam, label="adassp lambda_min(Z^T Z)"),
        partition=partition,
    )
    lam_lower = max(0.0, lam_release - ADASSP_LOWER_BOUND_SIGMAS * std_lam)

    # (b) Z^T Z + E: noise on the upper triangle (diagonal included), mirrored below
    rows, cols = np.triu_indices(d)
    noise = np.zeros((d, d))
    noise[rows, cols] = gaussian_noise(rng, std_gram, rows.size)
    noise = noise + np.triu(noise, 1).T
    gram_release = gram + noise
    ledger.record(
        GaussianEvent(sens.gram, std_gram, label="adassp upper triangle of Z^T Z"),
        partition=partition,
    )

    # (c) Z^T t + e
    moment_release = moment + gaussian_noise(rng, std_moment, d)
    ledger.record(GaussianEvent(sens.moment, std_moment, label="adassp Z^T t"), partition=partition)

    # post-processing: adaptive ridge and the solve
    ridge = max(0.0, ADASSP_RIDGE_Z * math.sqrt(d) * std_gram - lam_lower)
    system = gram_release + ridge * np.eye(d)
    try:
        w = np.linalg.solve(system, moment_release)
    except np.linalg.LinAlgError:
        w = np.linalg.lstsq(system, moment_release, rcond=None)[0]
    info: dict[str, Any] = {
        "ridge_lambda": ridge,
        "lambda_min_std": std_lam,
        "gram_std": std_gram,
        "moment_std": std_moment,
        "sensitivities": sens,
        "lambda_min_release": lam_release,
        "lambda_min_lower": lam_lower,
        "gram": gram_release,
        "moment": moment_release,
        "mu": mu,
    }
    return w, info
