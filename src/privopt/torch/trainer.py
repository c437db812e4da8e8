r"""``PrivateTrainer``: differentially private training of a PyTorch model, driven by a plan.

::

    trainer = PrivateTrainer(model, optimizer, dataset, epsilon=4.0, delta=1e-5, epochs=10,
                             batch_size=64, clip_norm=1.0, mechanism="blt")
    report = trainer.fit()          # or: while not trainer.done: trainer.step()

The trainer is a :class:`privopt.torch.PrivateRun` (what :func:`privopt.torch.make_private`
returns) with its own loop: one implementation, and the same seed gives the same model bit for
bit as the user's loop with ``loss_reduction="sum"``. Per step it takes the run's next batch,
runs ``loss_fn(model(x), y).sum()`` and its backward (under ``autocast``) and calls
``optimizer.step()``. One object owns the whole private computation, built from one
:class:`~privopt.training.TrainingPlan` (batches, clip norm G, mechanism B, noise multiplier
sigma, neighbouring relation), so the accountant can never disagree with what ran:

* **calibration**, once, up front: ``plan.calibrate(epsilon, delta)`` (the core's; verified,
  rounded toward more noise), and the plan's event is recorded in the run's
  :class:`~privopt.accounting.PrivacyLedger` before any record is read;
* **batches**: drawn by the plan from a secret key (:mod:`privopt.torch.data` explains why a
  user loader may not reorder them): Poisson sampling for ``"dpsgd"``, cyclic Poisson
  sampling for ``"banded"`` (amplified), fixed batches cycled in the same order every epoch for
  the other correlated mechanisms and ``"banded-fixed"``;
* **step t** on batch b_t:  ``p.grad = (sum_{i in b_t} clip_G(grad_i) + sigma G (B z)_t) / D``
  with the clipped sum from :func:`privopt.torch.clipped_grad_sum`'s machinery, the noise from
  :func:`privopt.noise.torch_streams.torch_noise_stream` on the parameters' device (fp32, or fp64
  for a float64 model, also under bf16 autocast), and D the plan's public divisor (the batch size,
  or the expected batch q N for Poisson sampling); then ``optimizer.step()`` (post-processing);
* **progress**: ``callback(TrainerStep)`` after every step, ``progress=True`` prints the steps
  and the epsilon spent so far (the first t steps are a post-processing of the leading t x t
  block of the mechanism, so they cost the epsilon of that truncated plan);
* **checkpoints**: :meth:`save` / :meth:`load` hold the model, optimizer, scheduler, noise
  state, batch position and RNG state, never the ledger (a resume keeps the one recorded from
  the plan; :func:`privopt.torch.checkpoint.load_run`); a resumed run is bit-for-bit the
  uninterrupted one on the same device and software.

**Before the first private step** the trainer runs :func:`privopt.torch.check_model` on the
first non-empty batch (independence of the examples' losses, and the clipped sum against a
per-example loop on a few examples); a failure raises a ``ValueError`` before anything is
released, a pass is stated in the report (as an assumption: its outcome is computed from private
data without noise, and a model that treats examples independently passes on every batch).

The per-step training loss and the number of examples left unclipped are computed from the
private batch without noise: they are released (``TrainerStep.loss`` / ``.unclipped``) only
with ``diagnostics=True``, which warns and is recorded as a non-private release. Otherwise
nothing data-dependent and un-noised stays on the trainer or its clipper after a step (with
adaptive clipping the exact count is used only to draw the noisy count, then dropped).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from privopt.accounting import PrivacyLedger
from privopt.torch._calls import call_model
from privopt.torch.private_run import MAX_STEPS, PrivateRun
from privopt.training import QuantileClipping
from torch import nn

__all__ = ["PrivateTrainer", "TrainerStep"]

#: the most steps a run may plan (its correlated-noise mechanism is optimised for all of them)
MAX_TRAINER_STEPS = MAX_STEPS


@dataclass(frozen=True)
class TrainerStep:
    """What a callback sees after each step.

    Attributes:
        step: steps done so far (1-based); steps: T of the plan; epoch: step / steps per epoch.
        epsilon_spent: epsilon of the steps so far (at progress points; else None).
        loss: mean loss of the step's private batch, only with ``diagnostics=True`` (else None).
        unclipped: examples of the step's batch left unclipped, only with ``diagnostics=True``
            (exact, un-noised; else None).
    """

    step: int
    steps: int
    epoch: float
    epsilon_spent: float | None = None
    loss: float | None = None
    unclipped: int | None = None


class PrivateTrainer(PrivateRun):
    """Private training of ``model`` on ``dataset`` (see the module docstring): a
    :class:`~privopt.torch.PrivateRun` with ``loss_reduction="sum"`` and its own loop.

    Args:
        model: the network (examples must be independent: BatchNorm is refused).
        optimizer: a ``torch.optim`` optimizer over the model's parameters
            (``trainer.optimizer`` is the run's private optimizer in front of it).
        dataset: map-style dataset of (input, target), a TensorDataset, (inputs, targets)
            tensors or numpy arrays, or a non-shuffling DataLoader
            (:func:`privopt.torch.data.as_records`; an IterableDataset is refused).
        epsilon, delta: the target of the whole run.
        epochs, batch_size: passes and (expected) batch size b.
        clip_norm: G, the per-example l2 clip.
        mechanism: ``"blt"`` (default), ``"dpsgd"``, ``"nu-dpftrl"``, ``"optimal-cc"``,
            ``"tree"``, ``"banded"`` (cyclic Poisson sampling, amplified), ``"banded-fixed"``,
            ``"auto"`` (the least expected error for the run's public N, batch, epochs, epsilon
            and delta; :mod:`privopt.torch.amplified`) or a :class:`privopt.noise.Mechanism`
            (:mod:`privopt.torch.mechanisms`).
        loss_fn: ``loss_fn(outputs, targets)`` -> per-example losses (default cross-entropy).
        lr_scheduler: stepped after every optimizer step (and checkpointed).
        neighbouring: ``"zero-out"`` (default) or ``"replace-one"`` (not with ``"dpsgd"``).
        accountant: for calibration and the report (``"auto"``: exact GDP for fixed batches,
            PLD for Poisson sampling).
        seed: secret root of the batch order and noise keys (reproducible; must stay secret);
            None draws it from the operating system.
        autocast: ``torch.bfloat16`` or ``torch.float16`` (or "bf16" / "fp16"): the forward and
            the per-example computations run under ``torch.autocast``; the per-example norms
            and the noise are float32.
        progress: print steps and epsilon spent every ``log_every`` steps (default each epoch).
        callback: called with a :class:`TrainerStep` after every step.
        ledger: record into this ledger (its relation must match); default a new one.
        diagnostics: also release the per-step private-batch loss and unclipped count
            (non-private; warns).
        allow_large_delta: accept delta >= 1/N (refused by default, as in the estimators: such
            a delta allows publishing a record outright).
        adaptive_clipping: a :class:`privopt.training.QuantileClipping`: the clip follows a
            quantile of the per-example norms, learnt from a noisy count released each step,
            at the same epsilon (``clip_norm`` is the initial clip;
            :mod:`privopt.training.adaptive` has the argument).
        max_physical_batch_size: run each batch in chunks of at most this many examples.
        users: one user id per record: user-level privacy (``batch_size`` counts users, each
            user's summed gradient clipped to ``clip_norm``; :mod:`privopt.torch._users`).
        user_clipping: ``"sum"`` (default) or ``"mean"``: what of a user's examples'
            gradients is clipped.
    """

    kind = "trainer"  # in messages

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        dataset: Any,
        *,
        epsilon: float,
        delta: float,
        epochs: int,
        batch_size: int,
        clip_norm: float,
        mechanism: Any = "blt",
        loss_fn: Callable[..., torch.Tensor] | None = None,
        lr_scheduler: Any = None,
        neighbouring: str = "zero-out",
        accountant: str = "auto",
        seed: int | None = None,
        autocast: Any = None,
        progress: bool = False,
        log_every: int | None = None,
        callback: Callable[[TrainerStep], None] | None = None,
        ledger: PrivacyLedger | None = None,
        diagnostics: bool = False,
        adaptive_clipping: QuantileClipping | None = None,
        allow_large_delta: bool = False,
        max_physical_batch_size: int | None = None,
        users: Any = None,
        user_clipping: str = "sum",
    ) -> None:
        super().__init__(
            model, optimizer, dataset, epsilon=epsilon, delta=delta, epochs=epochs,
            batch_size=batch_size, clip_norm=clip_norm, mechanism=mechanism, seed=seed,
            loss_reduction="sum", max_physical_batch_size=max_physical_batch_size,
            neighbouring=neighbouring, accountant=accountant, ledger=ledger,
            adaptive_clipping=adaptive_clipping, allow_large_delta=allow_large_delta,
            lr_scheduler=lr_scheduler, autocast=autocast, diagnostics=diagnostics,
            users=users, user_clipping=user_clipping,
        )  # fmt: skip
        self.loss_fn = loss_fn or (
            lambda out, y: nn.functional.cross_entropy(out, y, reduction="none")
        )
        if self.diagnostics:
            self.ledger.disclose("per-step mean loss of the private batch (no noise)")
        self.progress, self.callback = bool(progress), callback
        self.log_every = log_every or self.steps_per_epoch

    @property
    def report(self):  # type: ignore[override]
        """The privacy report of the run (the plan's event; every release it makes)."""
        return PrivateRun.report(self)

    def epsilon_spent(self, steps: int | None = None) -> float:  # type: ignore[override]
        """epsilon (at the run's delta) of the first ``steps`` steps (default: those done)."""
        return self.epsilon_after(self.step_count if steps is None else steps)

    # -- the step ---------------------------------------------------------------------------------
    def _autocast(self):
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast)

    def step(self) -> TrainerStep:
        """Run one private step of the plan; returns what the step may release."""
        if self.done:
            raise RuntimeError(f"All {self.steps} steps of the plan have run (budget spent).")
        target = self.step_count + 1
        self.model.train()
        losses = []
        while self.step_count < target:  # the chunks of one logical batch
            inputs, targets = self._next_chunk()
            self.optimizer.zero_grad()
            if len(self._chunks[self._chunk]):
                if not self._checked:  # before any private step, with the real loss
                    self.check(self.loss_fn, inputs, targets)
                with self._autocast():
                    out = call_model(self.model, inputs)
                    loss = self.loss_fn(out, targets)
                loss.sum().backward()
                losses.append(loss.detach())
            self.optimizer.step()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        return self._report_step(losses, self.last_unclipped)

    def _report_step(self, losses, unclipped=None) -> TrainerStep:
        t = self.step_count
        at_point = t % self.log_every == 0 or t == self.steps
        loss = None
        if self.diagnostics:  # the mean over the whole logical batch (all ranks' shares)
            flat = torch.cat([v.double().reshape(-1).cpu() for v in losses] or [torch.zeros(0)])
            total = {"sum": flat.sum().reshape(1), "count": torch.tensor([float(len(flat))])}
            total = self._reduce({k: v.to(self.device) for k, v in total.items()})
            count = float(total["count"].item())
            loss = float(total["sum"].item()) / count if count else None
        info = TrainerStep(
            t,
            self.steps,
            t / self.steps_per_epoch,
            self.epsilon_spent() if (at_point and self.progress) else None,
            loss,
            unclipped if self.diagnostics else None,
        )
        if self.progress and at_point:
            text = (
                f"step {t}/{self.steps}  epoch {info.epoch:.2f}  epsilon spent "
                f"{info.epsilon_spent:.4g} of {self.epsilon:g} (delta {self.delta:g})"
            )
            print(
                text + (f"  loss {loss:.4f} (non-private)" if loss is not None else ""), flush=True
            )
        if self.callback is not None:
            self.callback(info)
        return info

    def fit(self):
        """Run the remaining steps; returns the privacy report."""
        while not self.done:
            self.step()
        return self.report
