"""The two objects of the user's loop that :func:`privopt.torch.make_private` hands back.

* :class:`PrivateLoader`: ``for x, y in run.loader`` yields the plan's batches (drawn from the
  run's secret key, in the plan's order; a batch split into chunks of at most
  ``max_physical_batch_size`` examples), one epoch per iteration, on the model's device;
* :class:`PrivateOptimizer`: a ``torch.optim.Optimizer`` in front of the user's, whose
  :meth:`~PrivateOptimizer.step` is the private step (:meth:`PrivateRun._on_step`). Its
  ``param_groups`` and ``state`` are the user's optimizer's, so learning-rate schedulers,
  ``state_dict`` and ``torch.amp.GradScaler`` work on it unchanged.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

import torch
from torch import nn

__all__ = ["PrivateLoader", "PrivateOptimizer"]


def _whole(name: str, value: Any) -> int:
    """A positive whole number (``batch_size=50.5`` or ``True`` are refused, not rounded)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"Expected {name} to be a whole number >= 1, got {value!r}.")
    return int(value)


def _trainable_ids(optimizer: torch.optim.Optimizer) -> set[int]:
    return {id(p) for group in optimizer.param_groups for p in group["params"]}


def _check_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """The optimizer must hold exactly the model's trainable parameters: one over another
    model's would spend the budget and train nothing; one missing some would leave them
    unprivatised-but-unchanged while the report covers them."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"Expected a torch.optim.Optimizer, got {type(optimizer).__name__}.")
    held = _trainable_ids(optimizer)
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


class PrivateLoader:
    """The plan's batches, one epoch per ``iter`` (see :class:`PrivateRun`)."""

    def __init__(self, run) -> None:
        self._run = run

    def __iter__(self):
        run = self._run
        if run.done:
            raise RuntimeError(
                f"All {run.steps} steps of the plan have run (the budget is spent); the loader "
                f"yields {run.epochs} epoch(s), as planned."
            )
        end = run._epoch_end()

        def epoch():
            while run.step_count < end:
                yield run._next_chunk()

        return epoch()

    def __len__(self) -> int:
        """Logical steps in the epoch the next ``iter`` runs (0 once the plan is done)."""
        run = self._run
        return 0 if run.done else run._epoch_end() - run.step_count

    def __repr__(self) -> str:
        return f"PrivateLoader(steps={self._run.steps}, epochs={self._run.epochs})"


class PrivateOptimizer(torch.optim.Optimizer):
    """The user's optimizer behind the private step (see :class:`PrivateRun`).

    ``step()`` after each loader batch: clips per example, and at the end of a logical batch
    adds the mechanism's noise and steps the user's optimizer. ``zero_grad`` is the user's
    optimizer's. ``add_param_group`` is refused: a parameter added after ``make_private`` is
    outside the plan's clipping and noise.
    """

    def __init__(self, run, optimizer: torch.optim.Optimizer) -> None:  # no super().__init__:
        self._run = run  # the groups, state and defaults are the user's optimizer's
        self.original_optimizer = optimizer

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.original_optimizer.param_groups

    @property
    def state(self):
        return self.original_optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:
        return self.original_optimizer.defaults

    def step(self, closure=None):
        if closure is not None:
            raise ValueError(
                "run.optimizer.step(closure) is not supported: a closure re-evaluates the loss "
                "outside the recorded batch; call step() after loss.backward()."
            )
        self._run._on_step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.original_optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        raise ValueError(
            "A parameter group cannot be added after make_private: its parameters would be "
            "outside the plan's clipping and noise; build the optimizer with every parameter "
            "first."
        )

    def state_dict(self) -> dict[str, Any]:
        return self.original_optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.original_optimizer.load_state_dict(state_dict)

    def __getstate__(self):
        raise TypeError("run.optimizer is not picklable; use run.save(path).")

    def __repr__(self) -> str:
        return f"PrivateOptimizer({self.original_optimizer!r})"
