r"""``PrivateTrainer``: differentially private training of a PyTorch model, driven by a plan.

::

    trainer = PrivateTrainer(model, optimizer, dataset, epsilon=4.0, delta=1e-5, epochs=10,
                             batch_size=64, clip_norm=1.0, mechanism="blt")
    report = trainer.fit()          # or: while not trainer.done: trainer.step()

One object owns the whole private computation, built from one
:class:`~privopt.training.TrainingPlan` (batches, clip norm G, mechanism B, noise multiplier
sigma, neighbouring relation), so the accountant can never disagree with what ran:

* **calibration**, once, up front: ``plan.calibrate(epsilon, delta)`` (the core's; verified,
  rounded toward more noise), and the plan's event is recorded in the run's
  :class:`~privopt.accounting.PrivacyLedger` before any record is read;
* **batches**: drawn by the plan from a secret key (:mod:`privopt.torch.data` explains why a
  user loader may not reorder them): Poisson sampling for ``"dpsgd"``, fixed batches cycled in
  the same order every epoch for correlated noise;
* **step t** on batch b_t:  ``p.grad = (sum_{i in b_t} clip_G(grad_i) + sigma G (B z)_t) / D``
  with the clipped sum from :func:`privopt.torch.clipped_grad_sum`'s machinery, the noise from
  :func:`privopt.noise.torch_streams.torch_noise_stream` on the parameters' device (fp32, or fp64
  for a float64 model, also under bf16 autocast), and D the plan's public divisor (the batch size,
  or the expected batch q N for Poisson sampling); then ``optimizer.step()`` (post-processing);
* **progress**: ``callback(TrainerStep)`` after every step, ``progress=True`` prints the steps
  and the epsilon spent so far (the first t steps are a post-processing of the leading t x t
  block of the mechanism, so they cost the epsilon of that truncated plan);
* **checkpoints**: :meth:`save` / :meth:`load` hold the model, optimizer, scheduler, noise
  state, batch position, RNG state and ledger; a resumed run is bit-for-bit the uninterrupted
  one on the same device and software.

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
import copy
import dataclasses
import math
import secrets
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import torch
from privopt._validate import check_delta_for_rows, check_positive, check_probability
from privopt.accounting import GaussianEvent, PoissonSampledGaussianEvent, PrivacyLedger
from privopt.noise import SECRET_SEED_ASSUMPTION, Participation, independent
from privopt.noise.rng import derived_seed
from privopt.noise.torch_streams import TORCH_NOISE_ASSUMPTION, torch_noise_stream
from privopt.torch.checkpoint import CHECKPOINT_FIELDS, FORMAT, atomic_save, plan_signature
from privopt.torch.clipping import GradientClipper, check_model
from privopt.torch.data import as_records
from privopt.torch.mechanisms import build_plan
from privopt.training import PoissonSampling, QuantileClipping, event_epsilon
from privopt.training.adaptive import AdaptiveClipController
from privopt.training.result import NonPrivateDiagnosticsWarning
from torch import nn

__all__ = ["PrivateTrainer", "TrainerStep"]

CLIPPING_ASSUMPTION = (
    "the model and loss treat the examples of a batch independently (per-example losses, no "
    "cross-example layers; BatchNorm is refused); an example with a non-finite loss or "
    "gradient contributes zero"
)


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


#: the most steps a run may plan (its correlated-noise mechanism is optimised for all of them)
MAX_TRAINER_STEPS = 1_000_000


def _whole(name: str, value: Any) -> int:
    """A positive whole number (``batch_size=50.5`` or ``True`` are refused, not rounded)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"Expected {name} to be a whole number >= 1, got {value!r}.")
    return int(value)


def _check_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """The optimizer must hold exactly the model's trainable parameters: one over another
    model's would spend the budget and train nothing; one missing some would leave them
    unprivatised-but-unchanged while the report covers them."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"Expected a torch.optim.Optimizer, got {type(optimizer).__name__}.")
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    if held != trainable:
        raise ValueError(
            f"The optimizer holds {len(held & trainable)} of the model's {len(trainable)} "
            f"trainable parameters and {len(held - trainable)} others; build it from this "
            "model's parameters, e.g. torch.optim.SGD(model.parameters(), lr=...)."
        )


def _keys(seed: int | None) -> tuple[int, int]:
    """(batch key, noise key), 128 bits each, derived from one secret root."""
    root = secrets.randbits(128) if seed is None else int(seed)
    words = [s.generate_state(4, np.uint32) for s in np.random.SeedSequence(root).spawn(2)]
    return tuple(sum(int(w) << (32 * i) for i, w in enumerate(ws)) for ws in words)  # type: ignore[return-value]


class PrivateTrainer:
    """Private training of ``model`` on ``dataset`` (see the module docstring).

    Args:
        model: the network (examples must be independent: BatchNorm is refused).
        optimizer: a ``torch.optim`` optimizer over the model's parameters.
        dataset: map-style dataset of (input, target), a TensorDataset, (inputs, targets)
            tensors, or a non-shuffling DataLoader (:func:`privopt.torch.data.as_records`).
        epsilon, delta: the target of the whole run.
        epochs, batch_size: passes and (expected) batch size b.
        clip_norm: G, the per-example l2 clip.
        mechanism: ``"blt"``, ``"nu-dpftrl"``, ``"optimal-cc"``, ``"tree"``, ``"banded"``,
            ``"dpsgd"`` or a :class:`privopt.noise.Mechanism` (:mod:`privopt.torch.mechanisms`).
        loss_fn: ``loss_fn(outputs, targets)`` -> per-example losses (default cross-entropy).
        lr_scheduler: stepped after every optimizer step (and checkpointed).
        neighbouring: ``"zero-out"`` (default) or ``"replace-one"`` (not with ``"dpsgd"``).
        accountant: for calibration and the report (``"auto"``: exact GDP for fixed batches,
            PLD for Poisson sampling).
        seed: secret root of the batch order and noise keys (reproducible; must stay secret);
            None draws it from the operating system.
        autocast: e.g. ``torch.bfloat16``: the forward and the per-example computations run
            under ``torch.autocast``; the noise is still added in fp32.
        progress: print steps and epsilon spent every ``log_every`` steps (default each epoch).
        callback: called with a :class:`TrainerStep` after every step.
        ledger: record into this ledger (its relation must match); default a new one.
        diagnostics: also release the per-step private-batch loss (non-private; warns).
        allow_large_delta: accept delta >= 1/N (refused by default, as in the estimators: such
            a delta allows publishing a record outright).
        adaptive_clipping: a :class:`privopt.training.QuantileClipping`: the clip follows a
            quantile of the per-example norms, learnt from a noisy count released each step,
            at the same epsilon (``clip_norm`` is the initial clip;
            :mod:`privopt.training.adaptive` has the argument).
    """

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
        autocast: torch.dtype | None = None,
        progress: bool = False,
        log_every: int | None = None,
        callback: Callable[[TrainerStep], None] | None = None,
        ledger: PrivacyLedger | None = None,
        diagnostics: bool = False,
        adaptive_clipping: QuantileClipping | None = None,
        allow_large_delta: bool = False,
    ) -> None:
        self.model, self.optimizer, self.lr_scheduler = model, optimizer, lr_scheduler
        self.records = as_records(dataset)
        self.epsilon = check_positive("epsilon", epsilon)
        self.delta = check_probability("delta", delta)
        # checks on public values, before anything is calibrated or recorded (issue 33)
        n = len(self.records)
        check_delta_for_rows(
            self.delta, n, allow_large=allow_large_delta, flag="allow_large_delta=True"
        )
        batch_size, epochs = _whole("batch_size", batch_size), _whole("epochs", epochs)
        if batch_size > n:
            raise ValueError(
                f"Expected batch_size <= the {n} records, got {batch_size}; use a smaller batch."
            )
        if epochs * max(1, n // batch_size) > MAX_TRAINER_STEPS:
            raise ValueError(
                f"epochs={epochs} with batch_size={batch_size} on {n} records is "
                f"{epochs * (n // batch_size):,} steps, above the limit of "
                f"{MAX_TRAINER_STEPS:,} (the noise mechanism is optimised for the whole run); "
                "use fewer epochs or larger batches."
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"Expected seed to be None or an int >= 0, got {seed!r}.")
        _check_optimizer(model, optimizer)
        self.accountant = accountant
        self.loss_fn = loss_fn or (
            lambda out, y: nn.functional.cross_entropy(out, y, reduction="none")
        )
        plan, self.choices = build_plan(
            mechanism,
            len(self.records),
            batch_size=batch_size,
            epochs=epochs,
            clip_norm=clip_norm,
            neighbouring=neighbouring,
        )
        if adaptive_clipping is not None:
            plan = dataclasses.replace(plan, adaptive_clipping=adaptive_clipping)
        self.plan = plan.calibrate(self.epsilon, self.delta, accountant)
        self.ledger = PrivacyLedger(self.plan.neighbouring) if ledger is None else ledger
        if self.ledger.neighbouring is not self.plan.neighbouring:
            raise ValueError(
                f"The ledger uses {self.ledger.neighbouring.value!r} neighbours but the plan "
                f"{self.plan.neighbouring.value!r}."
            )
        self.ledger.record(self.plan.event())  # before any record is read
        for text in [*self.plan.assumptions(), CLIPPING_ASSUMPTION, TORCH_NOISE_ASSUMPTION]:
            self.ledger.assume(text)
        if seed is not None:
            self.ledger.assume(SECRET_SEED_ASSUMPTION)
        self.diagnostics = bool(diagnostics)
        if self.diagnostics:
            warnings.warn(
                "diagnostics=True releases the per-step loss and unclipped count of the private "
                "batch without noise; they are not covered by the privacy report's guarantee.",
                NonPrivateDiagnosticsWarning,
                stacklevel=2,
            )
            self.ledger.disclose("per-step mean loss of the private batch (no noise)")
            self.ledger.disclose(
                "per-step number of examples left unclipped in the private batch (no noise)"
            )
        self._params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("The model has no trainable parameters.")
        self.device = self._params[0][1].device
        wide = any(p.dtype == torch.float64 for _, p in self._params)
        self._noise_dtype = torch.float64 if wide else torch.float32
        self._clipper = GradientClipper(model)
        self._checked = False  # check_model runs on the first non-empty batch
        self.autocast = autocast
        self.progress, self.callback = bool(progress), callback
        self.log_every = log_every or self.steps_per_epoch
        self._spent: dict[int, float] = {}
        self._start(*_keys(seed), step=0)

    # -- public quantities ------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return self.plan.steps

    @property
    def steps_per_epoch(self) -> int:
        if isinstance(self.plan.batches, PoissonSampling):
            return max(1, round(1.0 / self.plan.batches.sample_rate))
        return self.plan.batches.per_epoch(self.plan.num_records)

    @property
    def done(self) -> bool:
        return self.step_count >= self.steps

    @property
    def report(self):
        """The privacy report of the run (the plan's event; every release it makes)."""
        return self.ledger.report(self.delta, self.accountant)

    @property
    def clip_history(self) -> tuple[np.ndarray, np.ndarray] | None:
        """With adaptive clipping: (clip in force at each step done, released noisy counts),
        both public; None otherwise."""
        return None if self._adaptive is None else self._adaptive.history()

    def epsilon_spent(self, steps: int | None = None) -> float:
        """epsilon (at the run's delta) of the first ``steps`` steps (default: those done)."""
        t = self.step_count if steps is None else int(steps)
        if t <= 0:
            return 0.0
        if t not in self._spent:
            self._spent[t] = event_epsilon(
                self._event_after(t), self.delta, self.plan.neighbouring, self.accountant
            )
        return self._spent[t]

    def _event_after(self, t: int):
        plan = self.plan
        if t >= plan.steps:
            return plan.event()
        if isinstance(plan.batches, PoissonSampling):
            return PoissonSampledGaussianEvent(
                plan.noise_multiplier, plan.batches.sample_rate, count=t, label=plan.label
            )
        per_epoch = self.steps_per_epoch
        pattern = (
            Participation.single()
            if t <= per_epoch
            else Participation.multiple(per_epoch, math.ceil(t / per_epoch))
        )
        unit = plan.mechanism.sensitivity(t, pattern)
        return GaussianEvent(plan.relation_factor * plan.clip_norm * unit, plan.noise_std)

    # -- the step ---------------------------------------------------------------------------------
    def _start(self, batch_key: int, noise_key: int, step: int) -> None:
        self._batch_key, self._noise_key = batch_key, noise_key
        dim = sum(p.numel() for _, p in self._params)
        plan, self._adaptive = self.plan, None
        std = plan.noise_std
        if plan.adaptive_clipping is not None:  # unit-clip gradient noise; the counts' stream
            std = plan.gradient_noise_multiplier
            counts = independent().noise_stream(
                1, plan.count_noise_std, seed=derived_seed(noise_key, "counts")
            )
            self._adaptive = AdaptiveClipController(
                plan.adaptive_clipping, plan.clip_norm, plan.divisor, counts
            )
        self._stream = torch_noise_stream(
            self.plan.mechanism,
            dim,
            std,
            key=noise_key,
            device=self.device,
            dtype=self._noise_dtype,
            steps=self.plan.steps,
        )
        rng = np.random.Generator(np.random.Philox(key=batch_key))
        self._schedule = self.plan.batches.schedule(self.plan.num_records, rng)
        for _ in range(step):  # the batch order is a function of the key: replay to the position
            next(self._schedule)
        self.step_count = step

    def _autocast(self):
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast)

    def step(self) -> TrainerStep:
        """Run one private step of the plan; returns what the step may release."""
        if self.done:
            raise RuntimeError(f"All {self.steps} steps of the plan have run (budget spent).")
        indices = next(self._schedule)
        self.model.train()
        losses = None
        adaptive = self._adaptive
        clip = self.plan.clip_norm if adaptive is None else adaptive.clip  # kappa_t: public
        unclipped = None
        if len(indices):
            inputs, targets = self.records.batch(indices, self.device)
            if not self._checked:  # before any private step; raises on a failure
                found = check_model(self.model, self.loss_fn, (inputs, targets))
                self.ledger.assume(found.assumption)
                self._checked = True
                self.model.train()
            count = adaptive is not None or self.diagnostics
            with self._autocast():
                sums, losses, *rest = self._clipper.clipped_sum(
                    self.loss_fn, inputs, targets, clip, count_unclipped=count
                )
            if count:
                unclipped = int(rest[0])
        else:  # an empty Poisson batch: the step releases noise only
            sums = {n: torch.zeros_like(p) for n, p in self._params}
        noise = self._stream.next()
        if adaptive is not None:  # unit-clip noise scaled back; then this step's noisy count
            noise = noise * clip
            adaptive.observe(self.step_count, unclipped or 0, len(indices))
        divisor, offset = self.plan.divisor, 0
        for name, p in self._params:
            z = noise[offset : offset + p.numel()].view(p.shape)
            offset += p.numel()
            p.grad = ((sums[name].to(z.dtype) + z) / divisor).to(p.dtype)
        self.optimizer.step()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        for _, p in self._params:
            p.grad = None
        self.step_count += 1
        return self._report_step(losses, unclipped if self.diagnostics else None)

    def _report_step(self, losses, unclipped=None) -> TrainerStep:
        t = self.step_count
        at_point = t % self.log_every == 0 or t == self.steps
        loss = None
        if self.diagnostics and losses is not None:
            loss = float(losses.float().mean())
        info = TrainerStep(
            t,
            self.steps,
            t / self.steps_per_epoch,
            self.epsilon_spent() if (at_point and self.progress) else None,
            loss,
            unclipped,
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

    # -- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs (holds the secret keys: keep it secret). The ledger is
        not part of it: a resume rebuilds it from the plan (see :meth:`load_state_dict`)."""
        return {
            "format": FORMAT,
            "plan": plan_signature(self.plan),
            "step": self.step_count,
            "batch_key": self._batch_key,
            "noise": self._stream.state(),
            "adaptive": None if self._adaptive is None else self._adaptive.state(),
            "model": self.model.state_dict(),
            "optimizer_type": type(self.optimizer).__name__,
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": None if self.lr_scheduler is None else self.lr_scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the same plan (checked field by field), the same
        optimizer type and parameter groups, a step within the plan.

        Nothing the file says about privacy is trusted: the ledger stays the one this trainer
        recorded from its plan before reading any record (the whole run's event), so a
        tampered or emptied ledger cannot lower the report; the position only says where the
        batch order and the noise stream continue. Either everything loads or nothing changes:
        on any failure the model, optimizer, scheduler and trainer are as before, and the error
        is one line (:class:`ValueError`).
        """
        self._check_checkpoint(state)
        saved = (
            copy.deepcopy(self.model.state_dict()),
            copy.deepcopy(self.optimizer.state_dict()),
            None if self.lr_scheduler is None else copy.deepcopy(self.lr_scheduler.state_dict()),
            dict(self.__dict__),
            torch.get_rng_state(),
        )
        try:
            self._restore(state)
        except Exception as error:
            self.model.load_state_dict(saved[0])
            self.optimizer.load_state_dict(saved[1])
            if self.lr_scheduler is not None:
                self.lr_scheduler.load_state_dict(saved[2])
            self.__dict__.clear()
            self.__dict__.update(saved[3])
            torch.set_rng_state(saved[4])
            detail = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ValueError(
                f"The checkpoint could not be restored ({detail}); nothing was changed."
            ) from None

    def _check_checkpoint(self, state: Any) -> None:
        """Refuse, before anything changes, what is not a checkpoint of this run."""
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"Not a privopt.torch checkpoint (expected {FORMAT!r}).")
        missing = [k for k in CHECKPOINT_FIELDS if k not in state]
        if missing:
            raise ValueError(f"The checkpoint misses {missing}; it is truncated or not ours.")
        mine = plan_signature(self.plan)
        if state["plan"] != mine:
            theirs = state["plan"] if isinstance(state["plan"], dict) else {}
            diff = sorted(k for k in mine if theirs.get(k) != mine[k])
            raise ValueError(f"The checkpoint was written under another plan (differs in {diff}).")
        step = state["step"]
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= self.steps:
            raise ValueError(
                f"The checkpoint's step {step!r} is not within this plan's 0..{self.steps} steps."
            )
        if state["optimizer_type"] != type(self.optimizer).__name__:
            raise ValueError(
                f"The checkpoint was written with a {state['optimizer_type']} optimizer, this "
                f"trainer has a {type(self.optimizer).__name__}; build the same optimizer."
            )
        groups = (
            state["optimizer"].get("param_groups") if isinstance(state["optimizer"], dict) else None
        )
        mine_groups = self.optimizer.state_dict()["param_groups"]
        if (
            not isinstance(groups, list)
            or [len(g.get("params", ())) for g in groups] != [len(g["params"]) for g in mine_groups]
            or [sorted(g) for g in groups] != [sorted(g) for g in mine_groups]
        ):
            raise ValueError(
                "The checkpoint's optimizer has other parameter groups or settings than this "
                "trainer's; build the optimizer as in the run that wrote it."
            )

    def _restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lr_scheduler is not None and state["lr_scheduler"] is not None:
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        step = int(state["step"])
        self._start(int(state["batch_key"]), int(state["noise"]["key"]), step)
        self._stream.restore(state["noise"])
        if self._adaptive is not None:
            self._adaptive.restore(state["adaptive"])
        torch.set_rng_state(state["torch_rng"].cpu())
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
        self._checked = False  # the model is checked again before the next private step

    def save(self, path) -> None:
        """Write :meth:`state_dict` atomically to ``path``."""
        atomic_save(self.state_dict(), path)

    def load(self, path) -> None:
        """Resume from a file written by :meth:`save` (``torch.load(weights_only=True)``); a
        file that is not one is refused in one line, with nothing changed."""
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
        except FileNotFoundError:
            raise ValueError(f"No checkpoint at {str(path)!r}.") from None
        except Exception as error:  # unpickling errors of any kind: not a checkpoint
            raise ValueError(
                f"{str(path)!r} is not a privopt.torch checkpoint ({type(error).__name__})."
            ) from None
        self.load_state_dict(state)
