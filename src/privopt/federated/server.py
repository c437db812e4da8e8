r"""The server loop of federated training with user-level privacy, simulated in one process.

Round t of a plan over N users (:func:`privopt.federated.federated_plan`):

1. the cohort U_t: the plan's t-th batch of users (``plan.batches.schedule``; Poisson over users
   for DP-FedAvg, fixed cohorts cycled in the same order for correlated noise);
2. every user u in U_t runs k local SGD steps from the server model w_t on its own records
   (:mod:`privopt.federated.clients`) and returns its delta Delta_u, clipped to l2 norm G;
3. the server privatises the sum: ``S_t = sum_u clip_G(Delta_u) + sigma G (B z)_t``, the noise
   of ``plan.mechanism`` from :func:`privopt.noise.torch_streams.torch_noise_stream` (float64),
   and divides by the plan's public divisor D (the cohort size b, or q N under Poisson);
4. a server optimiser steps with the pseudo-gradient ``g_t = -S_t / D``: by default SGD with
   heavy-ball momentum in float64, ``v <- m v + g_t; w <- w - eta_t v`` (FedAvgM; Reddi et al.
   2020, "Adaptive Federated Optimization"; eta = 1 and m = 0 is FedAvg), or any
   ``torch.optim`` optimiser given as ``server_optimizer`` (e.g. FedAdam), fed ``p.grad = g_t``.

Privacy: the releases are the noisy sums S_0..S_{T-1}; everything else is post-processing. They
are the plan's Gaussian mechanism with the user as the unit, because a user's records enter
only through its clipped delta, of norm <= G whatever its number of records. The event is the
plan's (recorded before any record is read), so epsilon is the record-level accounting of the
same plan over users; the report names the relation ``"user-level zero-out"``. Randomness: a
numpy Generator from ``seed`` draws the cohorts first, then the 128-bit key of the noise
stream (``secure=True``: ChaCha20 keyed by the OS). Non-private federated averaging with the
same cohorts and clipping is ``private=False`` (no noise, no claim).

Adaptive clipping (a plan built with ``adaptive_clipping=QuantileClipping(...)``): the bound
kappa_t of round t is computed from the counts released in rounds 0..t-1 only; the round clips
every delta to kappa_t, releases ``sum_u 1[||Delta_u|| <= kappa_t] - |U_t| / 2`` plus Gaussian
noise of std ``plan.count_noise_std`` (a second, independent stream keyed from the same secret
key), and adds ``kappa_t sigma_g (B z)_t`` with the raised multiplier sigma_g =
``plan.gradient_noise_multiplier``: the two releases together are the plan's event (Andrew et
al. 2021, "Differentially Private Learning with Adaptive Clipping", with the user as the unit;
:mod:`privopt.training.adaptive`). The bounds in force and the released counts are public and
returned in ``info``; with ``private=False`` the same rule runs on exact counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privopt._validate import check_count, check_delta_for_rows, check_nonnegative, check_positive
from privopt.accounting import PrivacyLedger, PrivacyReport
from privopt.federated.clients import CLIENT_BATCHING, client_deltas, clip_and_count
from privopt.federated.data import UserData
from privopt.federated.plan import (
    PRIVACY_UNIT,
    user_level_assumptions,
    user_level_relation,
)
from privopt.noise import independent
from privopt.noise.rng import (
    SECRET_SEED_ASSUMPTION,
    SECURE_ASSUMPTION,
    derived_seed,
    secure_generator,
)
from privopt.training import QuantileClipping, TrainingPlan
from privopt.training.adaptive import AdaptiveClipController

__all__ = ["FederatedResult", "train_federated"]


def _torch():
    import torch

    return torch


@dataclass
class FederatedResult:
    """A federated run: the trained model, the privacy claim and what was chosen publicly.

    Attributes:
        model: the server model (the module passed in, trained in place).
        report: the :class:`~privopt.accounting.PrivacyReport` with the user as the unit
            (None for ``private=False``).
        privacy_unit: ``"user"``.
        neighbouring: ``"user-level zero-out"`` or ``"user-level replace-one"``.
        plan: the (calibrated) plan over users.
        rounds: the number of rounds run.
        ledger: the ledger the report was composed from (None for ``private=False``).
        info: public choices (client batching, local steps, server optimiser settings).
    """

    model: Any
    report: PrivacyReport | None
    privacy_unit: str
    neighbouring: str
    plan: TrainingPlan
    rounds: int
    ledger: PrivacyLedger | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon(self) -> float | None:
        return None if self.report is None else self.report.epsilon


def _check_model(model) -> list:
    torch = _torch()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"Expected a torch.nn.Module, got {type(model).__name__}.")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("The model has no trainable parameters.")
    if any(True for _ in model.buffers()):
        raise ValueError(
            "The model has buffers (e.g. BatchNorm running statistics): local training would "
            "write them outside the user's clipped delta; use GroupNorm or LayerNorm."
        )
    if len({p.dtype for p in params}) != 1 or not params[0].dtype.is_floating_point:
        raise ValueError("Expected all trainable parameters in one floating-point dtype.")
    return params


def _server_lr(server_lr) -> Callable[[int], float]:
    if callable(server_lr):
        return server_lr
    value = check_positive("server_lr", server_lr)
    return lambda t: value


def _apply(params, flat, scale) -> None:
    """``p += scale * flat`` per parameter, or ``p.grad = flat`` when ``scale`` is None."""
    torch = _torch()
    start = 0
    with torch.no_grad():
        for p in params:
            part = flat[start : start + p.numel()].reshape(p.shape)
            start += p.numel()
            if scale is None:
                p.grad = part.to(p.dtype)
            else:
                p.add_((scale * part).to(p.dtype))


def _adaptive_controller(plan: TrainingPlan, key: int | None) -> AdaptiveClipController | None:
    """The bound's controller of an adaptive plan (None for a fixed clip): its count stream is
    keyed from the run's secret noise key; without privacy (``key`` None) the counts are exact
    (the non-private baseline follows the same rule on the true quantile)."""
    rule = plan.adaptive_clipping
    if rule is None:
        return None
    if key is None:
        rule = QuantileClipping(rule.target_quantile, rule.learning_rate,
                                rule.count_noise_fraction, rule.adopt_every, rule.floor,
                                _count_noise=False)  # fmt: skip
        counts = independent().noise_stream(1, 1.0, seed=0)
    else:
        counts = independent().noise_stream(
            1, plan.count_noise_std, seed=derived_seed(key, "counts")
        )
    return AdaptiveClipController(rule, plan.clip_norm, plan.divisor, counts)


def train_federated(
    model,
    loss_fn: Callable[[Any, Any], Any],
    data: UserData,
    plan: TrainingPlan,
    *,
    delta: float | None = None,
    local_steps: int = 1,
    local_batch_size: int | None = None,
    client_lr: float = 0.1,
    server_lr: float | Callable[[int], float] = 1.0,
    server_momentum: float = 0.9,
    server_optimizer: Callable[[list], Any] | None = None,
    zero_linf_above: float | None = None,
    client_batching: str = "auto",
    private: bool = True,
    accountant: str = "auto",
    seed: int | None = None,
    secure: bool = False,
    allow_large_delta: bool = False,
) -> FederatedResult:
    """Train ``model`` for ``plan.steps`` federated rounds (module docstring).

    Args:
        loss_fn: ``loss_fn(outputs, targets)`` -> one loss per example (``reduction="none"``).
        data: the records grouped by user (:meth:`UserData.from_records`); its number of
            users must be the plan's N.
        plan: from :func:`~privopt.federated.federated_plan`, calibrated with
            ``plan.calibrate(epsilon, delta)`` (or uncalibrated with ``private=False``).
        delta: the delta of the report (< 1 / N users unless ``allow_large_delta``).
        local_steps, local_batch_size, client_lr: each user's k local SGD steps on batches of
            ``local_batch_size`` of its records (None: all of them) at rate ``client_lr``
            (0 makes every delta zero: the rounds then release pure noise).
        server_lr: the server rate, or a function of the round (e.g. a cool-down).
        server_momentum: heavy-ball momentum of the server's SGD, in [0, 1).
        server_optimizer: instead of the server's SGD, ``server_optimizer(params)`` -> a
            ``torch.optim`` optimiser with its own rate and momentum (then leave ``server_lr``
            and ``server_momentum`` at their defaults).
        zero_linf_above: replace a user's delta whose l-infinity norm exceeds this by zero
            (the guard of the paper's StackOverflow runs; None: off).
        client_batching: ``"auto"``, ``"vmap"`` or ``"loop"`` (:mod:`.clients`).
        private: False trains the non-private baseline (same cohorts, clipping, no noise).
        accountant: the accountant of the report (``"auto"``: exact GDP for fixed cohorts,
            PLD for Poisson).
        seed, secure: exactly one: a secret integer seed, or ``secure=True``.
    """
    torch = _torch()
    params = _check_model(model)
    if not isinstance(data, UserData):
        raise ValueError(f"Expected a UserData (UserData.from_records), got {type(data).__name__}.")
    if not isinstance(plan, TrainingPlan):
        raise ValueError(f"Expected a TrainingPlan (federated_plan), got {type(plan).__name__}.")
    if plan.num_records != data.num_users:
        raise ValueError(
            f"The plan is over {plan.num_records} users but the data have {data.num_users}."
        )
    if not callable(loss_fn):
        raise ValueError("Expected loss_fn to be callable: loss_fn(outputs, targets).")
    local_steps = check_count("local_steps", local_steps)
    if local_batch_size is not None:
        local_batch_size = check_count("local_batch_size", local_batch_size)
    client_lr = check_nonnegative("client_lr", client_lr)
    lr_at = _server_lr(server_lr)
    momentum = check_nonnegative("server_momentum", server_momentum)
    if momentum >= 1.0:
        raise ValueError(f"Expected server_momentum in [0, 1), got {server_momentum!r}.")
    if server_optimizer is not None and (
        not callable(server_optimizer) or server_lr != 1.0 or momentum != 0.9
    ):
        raise ValueError(
            "server_optimizer(params) carries its own rate and momentum: leave server_lr and "
            "server_momentum at their defaults."
        )
    if zero_linf_above is not None:
        zero_linf_above = check_positive("zero_linf_above", zero_linf_above)
    if client_batching not in CLIENT_BATCHING:
        raise ValueError(f"Expected client_batching in {CLIENT_BATCHING}, got {client_batching!r}.")
    if (seed is None) == (not secure):
        raise ValueError("Give exactly one of seed (a secret integer) or secure=True.")
    if seed is not None:
        seed = check_count("seed", seed, minimum=0)
    if private:
        if delta is None:
            raise ValueError("Expected delta for a private run (the delta of the report).")
        delta = check_delta_for_rows(delta, data.num_users, allow_large=allow_large_delta,
                                     flag="allow_large_delta=True")  # fmt: skip
        plan.event()  # refuses an uncalibrated plan before anything runs

    ledger = None
    if private:  # recorded before any record is read
        ledger = PrivacyLedger(plan.neighbouring, unit=PRIVACY_UNIT)
        ledger.record(plan.event())
        ledger.resolve_accountant(accountant)  # an unknown or unfit accountant, refused now
        for text in user_level_assumptions(plan, local_steps):
            ledger.assume(text)
        ledger.assume(SECURE_ASSUMPTION if secure else SECRET_SEED_ASSUMPTION)
    rng = secure_generator() if secure else np.random.default_rng(seed)
    schedule = plan.batches.schedule(plan.num_records, rng)  # cohorts first, then the key
    dim = sum(p.numel() for p in params)
    stream = None
    key = None
    if private:
        from privopt.noise.torch_streams import TORCH_NOISE_ASSUMPTION, torch_noise_stream

        high, low = (int(x) for x in rng.integers(0, 2**64, size=2, dtype=np.uint64))
        key = (high << 64) | low
        # adaptive clipping: the unit-clip stream, scaled by the bound in force each round
        std = plan.noise_std if plan.adaptive_clipping is None else plan.gradient_noise_multiplier
        stream = torch_noise_stream(plan.mechanism, dim, std, key=key, device=params[0].device,
                                    dtype=torch.float64, steps=plan.steps)  # fmt: skip
        ledger.assume(TORCH_NOISE_ASSUMPTION)
    adaptive = _adaptive_controller(plan, key)
    optimizer = None if server_optimizer is None else server_optimizer(params)
    velocity = torch.zeros(dim, dtype=torch.float64, device=params[0].device)
    batching = client_batching
    for t, cohort in enumerate(schedule):
        deltas, batching = client_deltas(model, data, np.asarray(cohort), loss_fn=loss_fn,
                                         client_lr=client_lr, local_steps=local_steps,
                                         local_batch_size=local_batch_size,
                                         batching=batching)  # fmt: skip
        bound = plan.clip_norm if adaptive is None else adaptive.clip  # public: earlier rounds
        clipped, _, unclipped = clip_and_count(deltas, bound, zero_linf_above=zero_linf_above)
        total = clipped.sum(dim=0)
        del deltas, clipped  # nothing un-noised outlives the round
        if stream is not None:
            noise = stream.next()
            total = total + (noise if adaptive is None else noise * bound)
        if adaptive is not None:  # this round's noisy count of unclipped users, then kappa
            adaptive.observe(t, unclipped, len(cohort))
        del unclipped
        pseudo_gradient = -(total / plan.divisor)
        if optimizer is None:
            velocity = momentum * velocity + pseudo_gradient
            _apply(params, velocity, -check_positive("server_lr(t)", lr_at(t)))
        else:
            _apply(params, pseudo_gradient, None)
            optimizer.step()
    for p in params:
        p.grad = None
    report = None
    if ledger is not None:
        report = ledger.report(delta, accountant)
    info = {
        "client_batching": batching,
        "local_steps": local_steps,
        "local_batch_size": local_batch_size,
        "client_lr": client_lr,
        "server_momentum": momentum if server_optimizer is None else None,
        "server_optimizer": "sgd (heavy ball, float64)"
        if optimizer is None
        else type(optimizer).__name__,
        "zero_linf_above": zero_linf_above,
        "divisor": plan.divisor,
        "noise_std": plan.noise_std if private else 0.0,
    }
    if adaptive is not None:  # public: functions of the released counts
        clips, released = adaptive.history()
        info["clip_history"], info["released_counts"] = clips.tolist(), released.tolist()
    return FederatedResult(
        model=model,
        report=report,
        privacy_unit=PRIVACY_UNIT,
        neighbouring=user_level_relation(plan.neighbouring)[0],
        plan=plan,
        rounds=plan.steps,
        ledger=ledger,
        info=info,
    )
