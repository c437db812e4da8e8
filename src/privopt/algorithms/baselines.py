"""Baselines for private linear regression: the non-private references and standard DP-SGD.

The comparison suite of docs/theory/linear-regression-adaptive-clipping.md#baselines without its
one-shot release: the non-private oracles
(OLS, logistic ERM) and multi-pass DP-SGD with Poisson sampling (Abadi et al. 2016). AdaSSP
(Wang 2018), a one-shot private statistic, lives in :mod:`privopt.releases.adassp`. DP-SGD works
on **transformed** data (see :class:`~privopt.releases.preprocess.LinearBounds`): rows ``z_i``
with ``||z_i||_2 <= R`` (``row_bound``) and targets with ``|t_i| <= T`` (``target_bound``).
``R`` and ``T`` are public, so its sensitivity is a function of them alone, never of the data.

==========================  ===========  ====================  ============================
release                     replace-one  add-remove, zero-out  mechanism
==========================  ===========  ====================  ============================
DP-SGD clipped-gradient sum (refused)    G                     Poisson-sampled Gaussian
==========================  ===========  ====================  ============================
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privopt._validate import check_design, check_positive, check_probability
from privopt.accounting import Neighbouring, PrivacyLedger
from privopt.algorithms.result import FitTrace
from privopt.training import SGD, PoissonSampling, QuantileClipping, TrainingPlan, execute

__all__ = [
    "DEFAULT_EXPECTED_BATCH",
    "dpsgd_linear",
    "logistic_erm",
    "ols",
]

#: DP-SGD's default expected batch size q n (q = min(1, 256 / n)).
DEFAULT_EXPECTED_BATCH = 256


# -- validation --------------------------------------------------------------------------------
def _check_data(Z: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return check_design(Z, t, "Z", "t")


def _check_private_args(rng: object, ledger: object) -> None:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"Expected rng to be a numpy Generator, got {type(rng).__name__}.")
    if not isinstance(ledger, PrivacyLedger):
        raise ValueError(f"Expected ledger to be a PrivacyLedger, got {type(ledger).__name__}.")


# -- OLS ---------------------------------------------------------------------------------------
def ols(Z: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Ordinary least squares ``argmin_w ||Z w - t||^2`` (minimum-norm solution via lstsq).

    **NOT private**: a non-private reference (oracle) for the private baselines; nothing is
    recorded in any ledger and the output can reveal individual records.
    """
    Z, t = _check_data(Z, t)
    return np.linalg.lstsq(Z, t, rcond=None)[0]


def logistic_erm(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-private unconstrained empirical risk minimiser of the logistic loss (L-BFGS).

    **NOT private**: a reference (oracle) for the private methods, labels in {-1, +1}.
    """
    from scipy.optimize import minimize

    from privopt.losses import get_loss

    loss = get_loss("logistic")
    n = X.shape[0]
    result = minimize(
        lambda w: (loss.mean_value(w, X, y), loss.gradient_sum(w, X, y) / n),
        np.zeros(X.shape[1]),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 1000, "gtol": 1e-10},
    )
    return result.x


# -- DP-SGD ------------------------------------------------------------------------------------
def dpsgd_linear(
    Z: np.ndarray,
    t: np.ndarray,
    *,
    row_bound: float,
    target_bound: float,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: Hashable | None = "main",
    epochs: float = 5,
    sample_rate: float | None = None,
    clip_norm: float | None = None,
    learning_rate: float | None = None,
    accountant: str = "pld",
    public_n: float | None = None,
    diagnostics: bool = False,
    adaptive_clipping: QuantileClipping | None = None,
) -> tuple[np.ndarray, FitTrace, dict[str, Any]]:
    """Standard DP-SGD (Abadi et al. 2016) for least squares with Poisson sampling.

    For k = 1..K, with ``l_i(w) = (<z_i, w> - t_i)^2 / 2`` and per-example gradient
    ``g_i = r_i z_i`` (``r_i = <z_i, w> - t_i``, ``||g_i|| = |r_i| ||z_i||``)::

        B_k  = {i : U_i < q},  U_i ~ U(0, 1) independent          (Poisson sampling)
        w_k  = w_{k-1} - eta ( sum_{i in B_k} clip_G(g_i) + N(0, (sigma G)^2 I) ) / (q n)
        w    = average of w_k over the last K - floor(K/2) steps

    with ``clip_G(g) = g min(1, G / ||g||)``. The sum is divided by the **expected** batch size
    ``q n``, never the realised ``|B_k|``, which would leak.

    Privacy: one :class:`PoissonSampledGaussianEvent` (``noise_multiplier = sigma``,
    ``sample_rate = q``, ``count = K``) recorded with ``partition``. Under zero-out neighbours
    (a record replaced by a null record, so N stays public) the clipped sum has l2 sensitivity
    G, and sigma is the smallest noise multiplier that :func:`calibrate_dpsgd_noise` finds for
    (epsilon, delta) under ``accountant`` (PLD or RDP, via dp_accounting's add/remove analysis,
    which covers zero-out). N is used, so an add/remove ledger (where N is private) is refused,
    and so is replace-one.
    The calibration covers this release alone: the ledger composes it with anything else
    recorded. ``n`` is treated as public (it fixes q, K and the normalisation q n), as in Opacus
    and TF Privacy; this is recorded as an assumption in ``ledger``. The trace's clip fractions
    are non-private diagnostics, returned only with ``diagnostics=True``.

    Defaults (each a function of public quantities only):

    * ``sample_rate``: q = min(1, 256 / n) (expected batch :data:`DEFAULT_EXPECTED_BATCH`), and
      K = ceil(epochs / q) steps.
    * ``clip_norm``: G = R T, a bound on ``||g_i|| = |t_i| ||z_i||`` at the start w = 0, so no
      gradient is clipped at the start.
    * ``learning_rate``: eta = 1 / R^2. The update follows the averaged gradient of
      ``(1/n) sum_i l_i``, whose Hessian ``(1/n) Z^T Z`` has spectral norm at most R^2, so eta is
      the classical 1/L step for every dataset that respects the bound (conservative when the
      rows are spread over many directions, where the curvature is closer to R^2 / d).

    Args:
        public_n: public (expected) number of rows, used for q, the step count and the
            normaliser instead of the realised ``n`` (default: ``n``).
        Z: (n, d) transformed rows, ``||z_i|| <= row_bound``.
        t: (n,) transformed targets, ``|t_i| <= target_bound``.
        row_bound, target_bound: the public bounds R and T (used for the defaults only; privacy
            comes from the gradient clipping).
        epsilon, delta: the target guarantee of the DP-SGD release.
        rng: randomness for the sampling and the noise.
        ledger: a zero-out ledger.
        partition: disjoint data partition these rows form in ``ledger`` (None = all records).
        epochs: expected passes over the data (K = ceil(epochs / q)).
        sample_rate, clip_norm, learning_rate: q, G and eta (defaults above).
        accountant: "pld" or "rdp", used to calibrate sigma.
        diagnostics: also return the non-private clip fractions (warns; recorded in the report as
            a non-private release, see :func:`privopt.algorithms.result.release_diagnostics`).
        adaptive_clipping: a :class:`privopt.training.QuantileClipping`: G becomes the initial
            clip and follows a quantile of the gradient norms at the same epsilon (Andrew et
            al. 2021; :mod:`privopt.training.adaptive`).

    Returns:
        ``(w, trace, info)``: the tail average, a :class:`FitTrace` with one entry per step (clip
        threshold G, fraction of the sampled batch that was clipped, and the noise std
        sigma G / (q n) of the averaged gradient), and the configuration used.
    """
    Z, t = _check_data(Z, t)
    R = check_positive("row_bound", row_bound)
    T = check_positive("target_bound", target_bound)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    epochs = check_positive("epochs", epochs)
    _check_private_args(rng, ledger)
    if accountant not in ("pld", "rdp"):
        raise ValueError(f"Expected accountant in ('pld', 'rdp'), got {accountant!r}.")
    if ledger.neighbouring is not Neighbouring.ZERO_OUT:
        raise ValueError(
            "DP-SGD with Poisson sampling is accounted under zero-out neighbours (dp_accounting's "
            "add/remove analysis, with N public: N sets q, the step count and the divisor); "
            f"create the ledger with neighbouring 'zero-out', not {ledger.neighbouring.value!r}."
        )
    setup = dpsgd_linear_plan(
        Z.shape[0],
        public_n=public_n,
        row_bound=R,
        target_bound=T,
        epsilon=epsilon,
        delta=delta,
        epochs=epochs,
        sample_rate=sample_rate,
        clip_norm=clip_norm,
        learning_rate=learning_rate,
        accountant=accountant,
        adaptive_clipping=adaptive_clipping,
    )
    return setup.run(
        "linear", Z, t, rng=rng, ledger=ledger, partition=partition, diagnostics=diagnostics
    )


@dataclass(frozen=True)
class DPSGDSetup:
    """:func:`dpsgd_linear`'s calibrated plan, its step size and its reported configuration,
    run the same way by every backend (:meth:`run`)."""

    plan: TrainingPlan
    learning_rate: float
    info: dict[str, Any]

    def run(
        self,
        model: Any,
        X: Any,
        y: Any,
        *,
        rng: np.random.Generator,
        ledger: PrivacyLedger,
        partition: Hashable | None,
        diagnostics: bool = False,
        callback: Callable[[Any], None] | None = None,
    ) -> tuple[np.ndarray, FitTrace, dict[str, Any]]:
        """SGD at ``learning_rate`` on the plan's noisy steps, the tail average (both
        post-processing); the plan's events are recorded in ``ledger`` (:func:`execute`)."""
        return execute(
            self.plan,
            model,
            SGD(self.learning_rate),
            X,
            y,
            rng=rng,
            averaging="tail",
            ledger=ledger,
            partition=partition,
            diagnostics=diagnostics,
            callback=callback,
            info=self.info,
        )


def dpsgd_linear_plan(
    n: int,
    *,
    public_n: float | None,
    row_bound: float,
    target_bound: float,
    epsilon: float,
    delta: float,
    epochs: float = 5,
    sample_rate: float | None = None,
    clip_norm: float | None = None,
    learning_rate: float | None = None,
    accountant: str = "pld",
    adaptive_clipping: QuantileClipping | None = None,
) -> DPSGDSetup:
    """:func:`dpsgd_linear`'s paper config -> calibrated plan, with eta and the info.

    Public quantities only (n, the public size, the bounds, the target, the knobs), so the
    in-memory fit and the Dask backend (:func:`privopt.distributed.methods.dpsgd_dask`) build
    the same plan; each then runs it with :meth:`DPSGDSetup.run` on its own rows.
    """
    # q, the number of steps and the normaliser q n are computed from a public size: the
    # caller's ``public_n`` when the rows were assigned to this fit by independent draws, else n.
    n_public = n if public_n is None else check_positive("public_n", public_n)
    batches = PoissonSampling.from_epochs(
        n_public, epochs=epochs, expected_batch=DEFAULT_EXPECTED_BATCH, sample_rate=sample_rate
    )
    G = row_bound * target_bound if clip_norm is None else check_positive("clip_norm", clip_norm)
    eta = (
        1.0 / row_bound**2
        if learning_rate is None
        else check_positive("learning_rate", learning_rate)
    )
    # paper config -> plan -> calibrate (the training core)
    plan = TrainingPlan(
        n,
        batches,
        G,
        neighbouring="zero-out",
        public_records=n_public,
        label="dp-sgd steps",
        adaptive_clipping=adaptive_clipping,
    ).calibrate(epsilon, delta, accountant)
    info = {
        "sample_rate": batches.sample_rate,
        "epochs": epochs,
        "expected_batch_size": plan.divisor,
        "clip_norm": G,
        "learning_rate": eta,
        "accountant": accountant,
        "epsilon": epsilon,
        "delta": delta,
    }
    return DPSGDSetup(plan, eta, info)
