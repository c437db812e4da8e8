r"""``make_private``: private training in the user's own PyTorch loop.

::

    run = privopt.torch.make_private(model, optimizer, (x, y), epsilon=4.0, delta=1e-5,
                                     epochs=10, batch_size=64, clip_norm=1.0, mechanism="blt")
    for epoch in range(10):
        for x, y in run.loader:
            run.optimizer.zero_grad()
            loss = F.cross_entropy(run.model(x), y)   # a mean over the batch
            loss.backward()
            run.optimizer.step()
    run.report().epsilon                              # <= 4.0

One :class:`~privopt.training.TrainingPlan` owns the run (one calibration, rounded toward more
noise; its event recorded in the ledger before any record is read). Step t of the plan, on
its batch b_t (Poisson sampling: ``"dpsgd"``; cyclic Poisson: ``"banded"``; else fixed batches
cycled in one order every epoch; :mod:`privopt.torch.data` says why the loader is the plan's):

    p.grad = (sum_{i in b_t} clip_G(grad_i) + sigma G (B z)_t) / D,   then optimizer.step()

with grad_i the exact per-example gradient of the loop's loss (:mod:`privopt.torch._capture`:
the loop's backward gives the output gradient, ``step()`` computes the clipped sum of the
per-example surrogate losses with :class:`privopt.torch.GradientClipper`), clip_G(g) =
g min(1, G / ||g||), the noise of the mechanism's stream on the parameters' device (float32,
float64 for a float64 model, whatever autocast does), and D the plan's public divisor. The
sensitivity of the clipped sum is G (2G under replace-one), so the release is the Gaussian
mechanism of the plan's event (Denisov et al. 2022, arXiv:2202.08312, Thm. 2.1 for the
correlated streams' min-separation sensitivity; Abadi et al. 2016 and the PLD accountant for
Poisson-sampled DP-SGD).

**What the loop may do.** Each loader batch gets one forward of ``run.model`` on the tensors
as yielded (gradients enabled), one ``backward``, one ``run.optimizer.step()``; anything else
is refused with the reason, before anything is released: a second step, a step without a
backward, a forward on other inputs (a changed or sliced batch), a batch skipped, a parameter
group added, a gradient reaching a parameter outside the model's output (a weight penalty in
the loss: use the optimizer's ``weight_decay``), gradients rescaled or cleared between
``backward`` and ``step``. With ``max_physical_batch_size=m`` the loader yields each logical
batch in chunks of at most m examples and ``step()`` after a chunk that does not end the
batch only adds that chunk's clipped sum (gradient accumulation; the loss of each chunk is its
own mean with ``"mean"``). Between ``backward`` and ``step`` the parameters hold no data: all
``p.grad`` are None but one placeholder (ones), which a ``GradScaler`` unscales and checks.

**Mixed precision.** The loop's ``torch.autocast`` (bf16 or fp16) is recorded at the forward
and re-entered for the per-example computation; the per-example norms are float32 and the
noise float32. With ``grad_scaler=scaler`` the usual ``scaler.scale(loss).backward();
scaler.step(run.optimizer); scaler.update()`` works: the output gradient is divided by the
scale exactly (float32, a power of two). Overflow is per example: an example whose gradient is
not finite contributes zero, so the released sum never depends on whether another example
overflowed, and the scaler never skips a step on account of the data (its skip would otherwise
release, without noise, whether some example overflowed). A step the scaler skips (its scale
is not finite) releases nothing: no noise is drawn, no step is counted, the loader yields the
same batch again, and the next step uses the next noise of the stream.

**Users** (``users=ids``, :mod:`privopt.torch._users`): the privacy unit is the user; batches
hold all the records of the plan's users and each user's summed gradient is clipped to G.

**Several processes** (:mod:`privopt.torch.distributed`): the same ``make_private`` call in
every rank after ``torch.distributed.init_process_group`` runs one plan: each rank reads its
share of every logical batch, :meth:`PrivateRun._reduce` all-reduces the clipped sums before
any noise, and every rank adds the same noise once and takes the same step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from typing import Any

import numpy as np

import torch
from privopt._validate import check_delta_for_rows, check_positive, check_probability
from privopt.accounting import PrivacyLedger
from privopt.noise import SECRET_SEED_ASSUMPTION, independent
from privopt.noise.rng import derived_seed
from privopt.noise.torch_streams import TORCH_NOISE_ASSUMPTION, torch_noise_stream
from privopt.torch import checkpoint as ckpt
from privopt.torch._calls import is_args
from privopt.torch._capture import LoopHooks, SurrogateLoss, set_rng_state
from privopt.torch._loop import (
    PrivateLoader,
    PrivateOptimizer,
    _check_optimizer,
    _keys,
    _trainable_ids,
    _whole,
)
from privopt.torch._users import LargeUser, user_assumptions, user_index
from privopt.torch.clipping import GradientClipper, check_model
from privopt.torch.data import as_records, check_inputs, parse_autocast
from privopt.torch.distributed import data_parallel, public_fields
from privopt.torch.mechanisms import build_plan, event_after
from privopt.training import PoissonSampling, QuantileClipping, event_epsilon
from privopt.training.adaptive import AdaptiveClipController
from privopt.training.result import NonPrivateDiagnosticsWarning
from torch import nn

__all__ = ["MAX_STEPS", "PrivateRun", "make_private"]

#: the most steps a run may plan (its correlated-noise mechanism is optimised for all of them)
MAX_STEPS = 1_000_000

CLIPPING_ASSUMPTION = (
    "the model and loss treat the examples of a batch independently (per-example losses, no "
    "cross-example layers; BatchNorm is refused); an example with a non-finite loss or "
    "gradient contributes zero"
)
LOOP_ASSUMPTION = (
    "the training loop's loss is a sum or mean over the batch of per-example losses, each a "
    "function of its own example's output (make_private's per-example gradients are those of "
    "that loss)"
)


def make_private(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: Any,
    *,
    epsilon: float,
    delta: float,
    epochs: int,
    batch_size: int,
    clip_norm: float,
    mechanism: Any = "blt",
    seed: int | None = None,
    loss_reduction: str = "mean",
    max_physical_batch_size: int | None = None,
    grad_scaler: Any = None,
    users: Any = None,
    **options: Any,
) -> PrivateRun:
    """Wrap ``model``, ``optimizer`` and ``data`` for private training in the user's loop.

    Args:
        model, optimizer: the network (examples independent; BatchNorm refused) and a
            ``torch.optim`` optimizer over exactly its trainable parameters.
        data: what :class:`PrivateTrainer` accepts (a map-style Dataset, a TensorDataset,
            (inputs, targets) tensors or numpy arrays, a non-shuffling DataLoader).
        epsilon, delta: the target of the whole run (the report's epsilon is at most it).
        epochs, batch_size, clip_norm: passes, (expected) batch b, per-example l2 clip G.
        mechanism: ``"blt"`` (default), ``"dpsgd"``, ``"nu-dpftrl"``, ``"optimal-cc"``, ``"tree"``,
            ``"banded"`` (cyclic Poisson, amplified), ``"banded-fixed"``, ``"auto"`` (the least
            expected error for (N, b, E, epsilon, delta)) or a :class:`privopt.noise.Mechanism`.
        seed: secret root of the batch order and the noise (None: from the operating system).
        loss_reduction: ``"mean"`` (the loop's loss is the mean over the loader batch, as
            ``F.cross_entropy`` returns it) or ``"sum"``.
        max_physical_batch_size: split each logical batch into loader chunks of at most this
            many examples (gradient accumulation; one ``step()`` per chunk).
        grad_scaler: the ``torch.amp.GradScaler`` the loop uses (fp16), if any.
        users: one id per record: the user becomes the privacy unit (:mod:`~privopt.torch._users`:
            N users, ``batch_size`` counts users, batches hold whole users, each user's summed
            gradient clipped, or its mean: ``user_clipping="mean"``); missing ids refused.
        **options: ``user_clipping``, ``neighbouring``, ``accountant``, ``ledger``,
            ``adaptive_clipping``, ``allow_large_delta``, ``lr_scheduler`` (checkpointed),
            ``autocast`` (the loop's autocast dtype, checked up front), ``diagnostics``
            (release the exact per-step unclipped count; non-private, disclosed),
            ``distributed`` (None: data-parallel when a torch.distributed group of several
            processes is initialised; True / False: :mod:`privopt.torch.distributed`).

    Returns:
        A :class:`PrivateRun`: ``.model`` (the same module, hooked), ``.optimizer``,
        ``.loader``, ``.report()``, ``.epsilon_spent``, ``.save(path)`` / ``.load(path)``.
    """
    return PrivateRun(
        model, optimizer, data, epsilon=epsilon, delta=delta, epochs=epochs,
        batch_size=batch_size, clip_norm=clip_norm, mechanism=mechanism, seed=seed,
        loss_reduction=loss_reduction, max_physical_batch_size=max_physical_batch_size,
        grad_scaler=grad_scaler, users=users, **options,
    )  # fmt: skip


class PrivateRun(LoopHooks, ckpt.RunCheckpoints):
    """A private run in the user's loop (see the module docstring and :func:`make_private`)."""

    kind = "run"  # in messages

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        data: Any,
        *,
        epsilon: float,
        delta: float,
        epochs: int,
        batch_size: int,
        clip_norm: float,
        mechanism: Any = "blt",
        seed: int | None = None,
        loss_reduction: str = "mean",
        max_physical_batch_size: int | None = None,
        grad_scaler: Any = None,
        neighbouring: str = "zero-out",
        accountant: str = "auto",
        ledger: PrivacyLedger | None = None,
        adaptive_clipping: QuantileClipping | None = None,
        allow_large_delta: bool = False,
        lr_scheduler: Any = None,
        autocast: Any = None,
        diagnostics: bool = False,
        distributed: bool | None = None,
        users: Any = None,
        user_clipping: str = "sum",
    ) -> None:
        # every check on public values runs before anything is calibrated or recorded
        arguments = {k: v for k, v in locals().items() if k not in ("self", "model", "data")}
        self.records = as_records(data)
        self.epsilon = check_positive("epsilon", epsilon)
        self.delta = check_probability("delta", delta)
        self.users = user_index(users, len(self.records), user_clipping, adaptive_clipping)
        self.user_clipping, unit = user_clipping, "records" if users is None else "users"
        arguments["users"] = None if users is None else self.users.counts.tolist()
        n = len(self.records) if self.users is None else self.users.num_users
        check_delta_for_rows(
            self.delta, n, allow_large=allow_large_delta, flag="allow_large_delta=True"
        )
        batch_size, epochs = _whole("batch_size", batch_size), _whole("epochs", epochs)
        if batch_size > n:
            raise ValueError(
                f"Expected batch_size <= the {n} {unit}, got {batch_size}; use a smaller batch."
            )
        if epochs * max(1, n // batch_size) > MAX_STEPS:
            raise ValueError(
                f"epochs={epochs} with batch_size={batch_size} on {n} {unit} is "
                f"{epochs * (n // batch_size):,} steps, above the limit of {MAX_STEPS:,} (the "
                "noise mechanism is optimised for the whole run); use fewer epochs or larger "
                "batches."
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"Expected seed to be None or an int >= 0, got {seed!r}.")
        if loss_reduction not in ("mean", "sum"):
            raise ValueError(f"Expected loss_reduction 'mean' or 'sum', got {loss_reduction!r}.")
        if max_physical_batch_size is not None:
            max_physical_batch_size = _whole("max_physical_batch_size", max_physical_batch_size)
        if grad_scaler is not None and not isinstance(grad_scaler, torch.amp.GradScaler):
            raise ValueError(
                f"Expected grad_scaler to be a torch.amp.GradScaler, got "
                f"{type(grad_scaler).__name__}."
            )
        _check_optimizer(model, optimizer)
        self._params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("The model has no trainable parameters.")
        self.device = self._params[0][1].device
        self._dist = data_parallel(distributed, model, self.device)  # None: one process
        self.autocast = parse_autocast(autocast)
        check_inputs(model, self.records, self.device, self.autocast)
        self._clipper = GradientClipper(model)  # refuses BatchNorm and the like, by name
        self.model, self.lr_scheduler, self.accountant = model, lr_scheduler, accountant
        self.epochs, self.loss_reduction = epochs, loss_reduction
        self.max_physical_batch_size, self.grad_scaler = max_physical_batch_size, grad_scaler
        plan, self.choices = build_plan(
            mechanism, n, batch_size=batch_size, epochs=epochs, clip_norm=clip_norm,
            neighbouring=neighbouring, epsilon=self.epsilon, delta=self.delta,
        )  # fmt: skip
        if adaptive_clipping is not None:
            plan = dataclasses.replace(plan, adaptive_clipping=adaptive_clipping)
        self.plan = plan.calibrate(self.epsilon, self.delta, accountant)
        unit = "record" if self.users is None else "user"
        self.ledger = PrivacyLedger(self.plan.neighbouring, unit=unit) if ledger is None else ledger
        if self.ledger.neighbouring is not self.plan.neighbouring or self.ledger.unit != unit:
            raise ValueError(
                f"The ledger uses {self.ledger.neighbouring.value!r} neighbours of one "
                f"{self.ledger.unit.value} but the plan {self.plan.neighbouring.value!r} of one "
                f"{unit}."
            )
        if self._dist is not None:  # the same call on every rank (refused otherwise)
            self._dist.check_same(public_fields(arguments, self.plan, model, self.records))
            self._dist.broadcast_model(model)
        self.ledger.record(self.plan.event())  # before any record is read
        stated = self.plan.assumptions()
        if self.users is not None:
            stated = user_assumptions(stated, user_clipping, self.plan)
        for text in [*stated, CLIPPING_ASSUMPTION, TORCH_NOISE_ASSUMPTION]:
            self.ledger.assume(text)
        if seed is not None:
            self.ledger.assume(SECRET_SEED_ASSUMPTION)
        self.diagnostics = bool(diagnostics)
        if self.diagnostics:
            what = "examples" if self.users is None else "users"
            warnings.warn(
                f"diagnostics=True releases the per-step number of {what} left unclipped "
                "without noise; it is not covered by the privacy report's guarantee.",
                NonPrivateDiagnosticsWarning,
                stacklevel=3,
            )
            self.ledger.disclose(
                f"per-step number of {what} left unclipped in the private batch (no noise)"
            )
        self.last_unclipped: int | None = None  # with diagnostics only
        self._held = [p for group in optimizer.param_groups for p in group["params"]]
        wide = any(p.dtype == torch.float64 for _, p in self._params)
        self._noise_dtype = torch.float64 if wide else torch.float32
        self._holder = min((p for _, p in self._params), key=lambda p: p.numel())
        self._anchor = torch.zeros((), device=self.device, requires_grad=True)
        self._internal = False  # the run's own forwards pass the hooks untouched
        self._checked = False  # check_model runs on the first non-empty batch
        self._loop_assumed = False
        self._spent: dict[int, float] = {}
        self.optimizer = PrivateOptimizer(self, optimizer)
        self._registered = {  # PyTorch's registrations (their ids are global counters)
            "hooks": [
                model.register_forward_pre_hook(self._pre_forward, with_kwargs=True),
                model.register_forward_hook(self._post_forward),
            ]
        }
        self._start(*_keys(seed if self._dist is None else self._dist.root(seed)), step=0)

    @property
    def loader(self) -> PrivateLoader:
        """The plan's batches, one epoch per ``iter`` (a new view of the run each time)."""
        return PrivateLoader(self)

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

    def report(self):
        """The privacy report of the whole run (the plan's event, recorded up front)."""
        return self.ledger.report(self.delta, self.accountant)

    @property
    def epsilon_spent(self) -> float:
        """epsilon (at the run's delta) of the steps done so far."""
        return self.epsilon_after(self.step_count)

    @property
    def _clip_in_force(self) -> float:  # the plan's clip, or the adaptive bound in force
        return self.plan.clip_norm if self._adaptive is None else self._adaptive.clip

    @property
    def clip_history(self) -> tuple[np.ndarray, np.ndarray] | None:
        """With adaptive clipping: (clip in force at each step done, released noisy counts)."""
        return None if self._adaptive is None else self._adaptive.history()

    def epsilon_after(self, steps: int) -> float:
        """epsilon of the first ``steps`` steps: a post-processing of the leading steps x steps
        block of the mechanism, so it costs the epsilon of that truncated plan."""
        t = int(steps)
        if t <= 0:
            return 0.0
        if t not in self._spent:
            self._spent[t] = event_epsilon(
                event_after(self.plan, t, self.steps_per_epoch),
                self.delta,
                self.plan.neighbouring,
                self.accountant,
            )
        return self._spent[t]

    def remove(self) -> None:
        """Detach the run's hooks from the model (the run cannot train afterwards)."""
        for hook in self._registered["hooks"]:
            hook.remove()
        self._clipper.remove()

    # -- position in the plan ---------------------------------------------------------------------
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
            plan.mechanism, dim, std, key=noise_key, device=self.device,
            dtype=self._noise_dtype, steps=plan.steps,
        )  # fmt: skip
        rng = np.random.Generator(np.random.Philox(key=batch_key))
        self._schedule = plan.batches.schedule(plan.num_records, rng)
        for _ in range(step):  # the batch order is a function of the key: replay to the position
            next(self._schedule)
        self.step_count = step
        self._chunks: list[np.ndarray] = []
        self._chunk = 0
        self._sums: dict[str, torch.Tensor] | None = None
        self._unclipped = None
        self._large = LargeUser()
        self._clear_chunk()
        self._phase = "idle"

    def _epoch_end(self) -> int:
        """The step at which the epoch holding the current position ends (epoch e spans steps
        floor(T e / E) .. floor(T (e + 1) / E); T = E x batches per epoch for fixed batches)."""
        steps, epochs, s = self.steps, self.epochs, self.step_count
        e = min(epochs - 1, s * epochs // steps)
        while e < epochs - 1 and steps * (e + 1) // epochs <= s:
            e += 1
        while e > 0 and steps * e // epochs > s:
            e -= 1
        return steps * (e + 1) // epochs

    def _clear_chunk(self) -> None:
        """Forget everything data-dependent of the current chunk."""
        self._batch = self._args = self._capture = self._grads = None
        self._rng = self._autocast_state = None
        self._skip, self._scale, self._armed = False, 1.0, False
        self._holder.grad = self._holder_grad = None

    def _next_chunk(self) -> tuple[Any, Any]:
        """The loader's next item: the next chunk of the plan (or the same one again after a
        step the GradScaler skipped)."""
        phase = self._phase
        if phase == "backward" and self._skip:  # the scaler skipped: nothing was released
            self._holder.grad = None
            self._capture = self._grads = None
            self._skip, self._phase = False, "batch"
            return self._batch
        if phase != "idle":
            raise RuntimeError(
                {
                    "batch": "run.loader's previous batch got no run.optimizer.step(): the plan "
                    "expects one forward, backward and step per batch (a skipped batch would "
                    "shift every later step of the plan).",
                    "forward": "run.model ran on the previous batch but no backward() and "
                    "step() followed; one forward, backward and step per batch.",
                    "backward": "backward() ran on the previous batch but no "
                    "run.optimizer.step() followed; one step per batch (for gradient "
                    "accumulation use make_private(..., max_physical_batch_size=m)).",
                }[phase]
            )
        if self._chunk >= len(self._chunks):  # a new logical step
            if self.done:
                raise RuntimeError(f"All {self.steps} steps of the plan have run (budget spent).")
            indices = next(self._schedule)
            self._size = len(indices)  # the logical batch's; this rank reads its share
            indices = indices if self._dist is None else self._dist.share(indices)
            m = self.max_physical_batch_size
            if self.users is not None:  # the step's users' records (_users: how, and chunks)
                self._parts = self.users.chunks(indices, m)
                self._chunks = [part.records for part in self._parts]
            else:
                count = max(1, math.ceil(len(indices) / m)) if m else 1
                self._chunks = [indices] if count == 1 else np.array_split(indices, count)
            self._chunk, self._sums, self._unclipped = 0, None, None
        self._batch = self.records.batch(self._chunks[self._chunk], self.device)
        self._phase = "batch"
        return self._batch

    # -- the private step -------------------------------------------------------------------------
    def _on_step(self) -> None:
        phase = self._phase
        empty = self._batch is not None and len(self._chunks[self._chunk]) == 0
        if phase == "backward" and self._skip:
            raise RuntimeError(
                "The GradScaler's scale is not finite, so this step must be skipped: step "
                "through scaler.step(run.optimizer), which skips it."
            )
        if not (phase == "backward" or (phase in ("batch", "forward") and empty)):
            raise RuntimeError(
                {
                    "idle": "run.optimizer.step() ran twice for one batch (or before run.loader "
                    "yielded one); the plan expects one step per batch.",
                    "batch": "run.optimizer.step() ran without a backward() through run.model's "
                    "output on this batch (run the forward on the batch as yielded, with "
                    "gradients enabled).",
                    "forward": "run.optimizer.step() ran without loss.backward() on this batch.",
                }[phase]
            )
        if _trainable_ids(self.optimizer.original_optimizer) != {id(p) for p in self._held}:
            raise ValueError(
                "The optimizer's parameters changed after make_private (a parameter group "
                "added or removed); its parameters must stay the model's trainable ones."
            )
        for name, p in self._params:
            if p.grad is not None and (p is not self._holder or phase != "backward"):
                raise ValueError(
                    f"Parameter {name!r} has a gradient that did not come from run.model's "
                    "output (e.g. a weight penalty in the loss, or a forward outside "
                    "run.loader's batch); it would bypass the clipping. Use the optimizer's "
                    "weight_decay instead."
                )
        unscale = self._read_placeholder() if phase == "backward" else 1.0
        if phase == "backward" and self._grads is not None and not empty:
            self._add_chunk(unscale)
        self._clear_chunk()
        self._chunk += 1
        self._phase = "idle"
        if self._chunk >= len(self._chunks):
            self._release()

    def _add_chunk(self, unscale: float) -> None:
        """This chunk's clipped sum, added to the logical step's."""
        n = len(self._chunks[self._chunk])
        if not self._loop_assumed:
            self.ledger.assume(LOOP_ASSUMPTION)
            self._loop_assumed = True
        factor = unscale * (n if self.loss_reduction == "mean" else 1)
        grads = tuple(g.to(self._noise_dtype) * factor for g in self._grads)
        args = self._args
        if isinstance(args, dict):  # run.model(**x): the clipper calls model(**inputs)
            inputs = args
        else:
            inputs = args[0] if len(args) == 1 and not is_args(args[0]) else tuple(args)
        slots = self._capture.slots
        self._internal = True
        try:
            if not self._checked:  # before any private step; raises on a failure
                self.check(SurrogateLoss(slots), inputs, grads)
            count, clip = self._adaptive is not None or self.diagnostics, self._clip_in_force
            part = None if self.users is None else self._parts[self._chunk]
            grouped = {} if part is None else {"groups": part.slots}
            if part is not None:  # one user larger than a chunk: its sum unclipped, for now
                grouped["group_reduction"] = self.user_clipping
                clip, count = (math.inf, True) if part.part else (clip, count)
            set_rng_state(self._rng[0], self.device)  # the loop's dropout masks
            dtype = self._autocast_state
            autocast = torch.autocast(self.device.type, dtype=dtype) if dtype is not None else None
            with autocast or contextlib.nullcontext():
                sums, _, *rest = self._clipper.clipped_sum(
                    SurrogateLoss(slots, self._capture.seen), inputs, grads, clip,
                    count_unclipped=count, **grouped,
                )  # fmt: skip
        finally:
            self._internal = False
            if self._rng is not None and self._rng[1] is not None:
                set_rng_state(self._rng[1], self.device)
        if part is not None and part.part is not None:
            self._large.add(sums, rest.pop(), n, self._noise_dtype)
            if part.part == "part":
                return
            sums, unclipped = self._large.clipped(self._clip_in_force, self.user_clipping)
            rest = [unclipped.long()] if self._adaptive is not None or self.diagnostics else []
        if self._sums is None:
            self._sums = sums
        else:
            self._sums = {k: self._sums[k] + v for k, v in sums.items()}
        if rest:
            self._unclipped = rest[0] if self._unclipped is None else self._unclipped + rest[0]

    def check(self, loss_fn, inputs, targets) -> None:
        """:func:`privopt.torch.check_model` on a batch, once, before the first private step
        (torch's RNG state left as it was, the model's modes too); its pass is stated in the
        report, a failure raises before anything is released."""
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        modes = {m: m.training for m in self.model.modules()}
        internal, self._internal = self._internal, True
        try:
            with torch.random.fork_rng(devices=devices):
                found = check_model(self.model, loss_fn, (inputs, targets))
        finally:
            self._internal = internal
            for m, flag in modes.items():
                m.train(flag)
        self.ledger.assume(found.assumption)
        self._checked = True

    def _reduce(self, sums: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The clipped sum of this process's share, before any noise, summed over the ranks of
        a data-parallel run (:mod:`privopt.torch.distributed`); every rank then draws the same
        noise from the same key, adds it once and takes the same step. One process: as is."""
        return sums if self._dist is None else self._dist.all_reduce(sums, self._noise_dtype)

    def _release(self) -> None:
        """Step t of the plan: the noisy clipped sum divided by D, then the user's optimizer."""
        sums, size = self._sums, self._size
        if sums is None:  # an empty Poisson batch (or share): the step releases noise only
            sums = {n: torch.zeros_like(p) for n, p in self._params}
        sums = self._reduce(sums)
        unclipped = None if self._unclipped is None else int(self._unclipped)
        if self._dist is not None and (self._adaptive is not None or self.diagnostics):
            unclipped = self._dist.all_reduce_count(unclipped or 0)
        adaptive = self._adaptive
        clip = self._clip_in_force
        noise = self._stream.next()
        if adaptive is not None:  # unit-clip noise scaled back; then this step's noisy count
            noise = noise * clip
            adaptive.observe(self.step_count, unclipped or 0, size)
        divisor, offset = self.plan.divisor, 0
        for name, p in self._params:
            z = noise[offset : offset + p.numel()].view(p.shape)
            offset += p.numel()
            p.grad = ((sums[name].to(z.dtype) + z) / divisor).to(p.dtype)
        self.optimizer.original_optimizer.step()
        for _, p in self._params:
            p.grad = None
        self.last_unclipped = unclipped if self.diagnostics else None
        self._sums = self._unclipped = None
        self.step_count += 1
