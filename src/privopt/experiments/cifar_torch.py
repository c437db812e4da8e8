"""``privopt reproduce cifar-style --backend torch``: Choquette-Choo et al.'s (2024) CIFAR protocol
on a digits CNN.

The paper (docs/theory/correlated-noise.md) trains a CNN for 20 epochs with example-level DP and
compares DP-SGD (amplified by Poisson sampling) with correlated-noise DP-FTRL mechanisms calibrated
with the min-separation sensitivity of fixed batches cycled in the same order. This is the same
protocol on what 2 CPU cores can train in minutes, with :class:`privopt.torch.PrivateTrainer`:

* data: scikit-learn's 1797 8x8 digits (no download), the stratified 80/20 split of
  ``reproduce cifar-style`` (random_state=0); pixels / 16 (their public range), as 1x8x8 images;
* model (:func:`digits_cnn`): conv 3x3 (16) - GroupNorm - ReLU - conv 3x3 stride 2 (32) -
  GroupNorm - ReLU - linear (10); 10.0k parameters; per-example gradients by ghost norms and
  book-keeping (:mod:`privopt.torch.clipping`);
* mechanisms: ``dpsgd`` (Poisson, PLD accountant), ``blt``, ``nu-dpftrl``, ``optimal-cc``,
  ``tree``, ``banded``, each at every target epsilon, delta 1e-5,
  zero-out neighbours, clip norm 1, heavy-ball momentum (0.9, DP-SGD 0) and the paper's linear
  cool-down over the last 25% of the steps;
* learning rate: with ``select=True`` (the full run), per mechanism and epsilon the best of a
  small public grid by mean accuracy on a validation split of the training rows (20%,
  random_state=1; never the test rows), then fresh seeds on the full training rows; the selection
  is not privacy-accounted (as in the paper). ``--quick`` uses fixed rates.

The JSON's ``results`` is flat, one key per run, e.g. ``"blt@eps=4"``, each with
``test_accuracy`` (mean over seeds), ``epsilon`` (the largest reported) and ``target_epsilon``;
the non-private baseline (same model, plain SGD) is ``non_private`` outside ``results``.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privopt.experiments._common import cooldown_schedule, t_halfwidth

__all__ = ["MECHANISMS", "digits_cnn", "load_digit_images", "reproduce_cifar_torch", "train_digits"]

MECHANISMS = ("dpsgd", "blt", "nu-dpftrl", "optimal-cc", "tree", "banded")
#: fixed rates of the quick run (the full run selects from LR_GRID)
QUICK_LR = {
    "dpsgd": 2.0, "blt": 0.5, "nu-dpftrl": 0.5, "optimal-cc": 0.2, "tree": 0.1, "banded": 0.5
}  # fmt: skip
LR_GRID = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
MOMENTUM = {"dpsgd": 0.0}  # others 0.9 (the paper: DP-SGD does best without momentum)


def _torch():
    import torch

    return torch


def load_digit_images(split_seed: int = 0, test_size: float = 0.2):
    """(x_train, y_train, x_test, y_test) as float32 tensors (N, 1, 8, 8) and int64 labels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    torch = _torch()
    data = load_digits()
    x = np.clip(data.data / 16.0, 0.0, 1.0).reshape(-1, 1, 8, 8).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, data.target, test_size=test_size, random_state=split_seed, stratify=data.target
    )
    as_t = torch.from_numpy
    return as_t(x_tr), as_t(y_tr.astype(np.int64)), as_t(x_te), as_t(y_te.astype(np.int64))


def digits_cnn(seed: int = 0):
    """The GroupNorm CNN (public initialisation from ``seed``)."""
    torch = _torch()
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.GroupNorm(4, 16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.GroupNorm(4, 32),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 10),
    )


def accuracy(model, x, y) -> float:
    torch = _torch()
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def _optimizer(model, method: str, learning_rate: float, steps: int):
    torch = _torch()
    opt = torch.optim.SGD(model.parameters(), lr=learning_rate, momentum=MOMENTUM.get(method, 0.9))
    schedule = cooldown_schedule(1.0, steps)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, schedule)


def train_digits(
    method: str,
    epsilon: float,
    data,
    *,
    seed: int,
    learning_rate: float,
    epochs: int,
    batch_size: int = 64,
    delta: float = 1e-5,
    clip_norm: float = 1.0,
    accountant: str = "auto",
):
    """Train the CNN privately; returns (model, trainer). ``data`` = (x_train, y_train).

    A multi-participation sensitivity that privopt can only bound (the restarted tree) is noted
    in ``trainer.choices["sensitivity_upper_bound"]`` (valid, conservative)."""
    from privopt.noise import SensitivityUpperBoundWarning
    from privopt.torch import PrivateTrainer, build_plan

    model = digits_cnn(seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SensitivityUpperBoundWarning)
        plan, _ = build_plan(method, len(data[0]), batch_size=batch_size, epochs=epochs,
                             clip_norm=clip_norm)  # fmt: skip
        opt, sched = _optimizer(model, method, learning_rate, plan.steps)
        trainer = PrivateTrainer(
            model, opt, data, epsilon=epsilon, delta=delta, epochs=epochs, batch_size=batch_size,
            clip_norm=clip_norm, mechanism=method, lr_scheduler=sched, seed=10_000 + seed,
            accountant=accountant,
        )  # fmt: skip
    trainer.choices["sensitivity_upper_bound"] = any(
        issubclass(w.category, SensitivityUpperBoundWarning) for w in caught
    )
    trainer.fit()
    return model, trainer


def train_non_private(data, *, seed: int, epochs: int, batch_size: int = 64, lr: float = 0.5):
    """The same model and schedule without privacy (shuffled mini-batches, mean loss)."""
    torch = _torch()
    x, y = data
    model = digits_cnn(seed)
    steps = epochs * (len(x) // batch_size)
    opt, sched = _optimizer(model, "non-private", lr, steps)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=gen)
        for k in range(len(x) // batch_size):
            idx = order[k * batch_size : (k + 1) * batch_size]
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return model


def _select_lr(
    method, epsilon, train, *, epochs, seeds, accountant
) -> tuple[float, dict[str, float]]:
    """Best rate of LR_GRID by mean validation accuracy (a split of the training rows);
    ``method="non-private"`` selects the baseline's rate the same way."""
    from sklearn.model_selection import train_test_split

    x, y = train
    idx_fit, idx_val = train_test_split(
        np.arange(len(y)), test_size=0.2, random_state=1, stratify=y.numpy()
    )
    fit = (x[idx_fit], y[idx_fit])

    def model_for(lr, s):
        if method == "non-private":
            return train_non_private(fit, seed=s, epochs=epochs, lr=lr)
        return train_digits(method, epsilon, fit, seed=s, learning_rate=lr, epochs=epochs,
                            accountant=accountant)[0]  # fmt: skip

    scores = {}
    for lr in LR_GRID:
        accs = [accuracy(model_for(lr, s), x[idx_val], y[idx_val]) for s in seeds]
        scores[f"{lr:g}"] = float(np.mean(accs))
    best = max(LR_GRID, key=lambda lr: scores[f"{lr:g}"])
    return best, scores


def reproduce_cifar_torch(
    out: Path,
    *,
    quick: bool = False,
    epsilons: Sequence[float] | None = None,
    seeds: Sequence[int] | None = None,
    epochs: int | None = None,
    methods: Sequence[str] | None = None,
    select: bool | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Write ``cifar_torch.json`` (and ``cifar_torch.png``) into ``out``; return the payload.

    Args:
        quick: 2 epsilons (2, 8), 1 seed, 5 epochs, fixed learning rates (under 3 minutes on 2
            cores); else epsilons (1, 2, 4, 8), 5 seeds, 15 epochs, rates selected per method and
            epsilon (``select``) on a validation split with 2 other seeds.
        methods: default every mechanism of :data:`MECHANISMS`.
        threads: torch CPU threads (default 1: the model is small).
    """
    torch = _torch()
    start = time.perf_counter()
    epsilons = (
        tuple((2.0, 8.0) if quick else (1.0, 2.0, 4.0, 8.0)) if epsilons is None else epsilons
    )
    seeds = tuple(range(1) if quick else range(5)) if seeds is None else tuple(seeds)
    epochs = (5 if quick else 15) if epochs is None else int(epochs)
    select = (not quick) if select is None else bool(select)
    # DP-SGD: RDP at the quick size (faster, more conservative), else the PLD of "auto"
    dpsgd_accountant = "rdp" if quick else "auto"
    if methods is None:
        methods = MECHANISMS
    previous = torch.get_num_threads()
    torch.set_num_threads(threads or 1)
    try:
        x_tr, y_tr, x_te, y_te = load_digit_images()
        results: dict[str, dict[str, Any]] = {}
        for method in methods:
            for eps in epsilons:
                accountant = dpsgd_accountant if method == "dpsgd" else "auto"
                lr, scores = QUICK_LR.get(method, 0.5), None
                if select:
                    lr, scores = _select_lr(method, eps, (x_tr, y_tr), epochs=epochs,
                                            seeds=(100, 101), accountant=accountant)  # fmt: skip
                accs, reported = [], []
                for seed in seeds:
                    model, trainer = train_digits(
                        method,
                        eps,
                        (x_tr, y_tr),
                        seed=seed,
                        learning_rate=lr,
                        epochs=epochs,
                        accountant=accountant,
                    )
                    accs.append(accuracy(model, x_te, y_te))
                    reported.append(trainer.report.epsilon)
                results[f"{method}@eps={eps:g}"] = {
                    "mechanism": method,
                    "test_accuracy": float(np.mean(accs)),
                    "test_accuracies": accs,
                    "ci95_halfwidth": t_halfwidth(accs),
                    "epsilon": float(max(reported)),
                    "target_epsilon": float(eps),
                    "delta": trainer.delta,
                    "noise_multiplier": trainer.plan.noise_multiplier,
                    "steps": trainer.steps,
                    "learning_rate": lr,
                    "validation_accuracy_by_lr": scores,
                    "choices": trainer.choices,
                    "accountant": trainer.report.accountant,
                }
        base_lr, base_scores = 0.5, None
        if select:
            base_lr, base_scores = _select_lr("non-private", None, (x_tr, y_tr), epochs=epochs,
                                              seeds=(100, 101), accountant=None)  # fmt: skip
        baseline = [
            accuracy(train_non_private((x_tr, y_tr), seed=s, epochs=epochs, lr=base_lr), x_te, y_te)
            for s in seeds
        ]
    finally:
        torch.set_num_threads(previous)
    payload: dict[str, Any] = {
        "figure": "cifar_torch",
        "backend": "torch",
        "quick": quick,
        "dataset": "scikit-learn digits as 1x8x8 images / 16, stratified 80/20 (random_state=0)",
        "n_train": len(y_tr),
        "n_test": len(y_te),
        "model": "conv16-GN-ReLU-conv32(s2)-GN-ReLU-linear10, 10.0k parameters",
        "epochs": epochs,
        "batch_size": 64,
        "clip_norm": 1.0,
        "neighbouring": "zero-out",
        "learning_rate_selection": (
            f"best of {LR_GRID} by validation accuracy (20% of the training rows, seeds 100-101)"
            if select
            else "fixed in advance (quick)"
        ),
        "non_private": {
            "test_accuracy": float(np.mean(baseline)),
            "test_accuracies": baseline,
            "learning_rate": base_lr,
            "validation_accuracy_by_lr": base_scores,
        },
        "results": results,
        "wall_time_s": time.perf_counter() - start,
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _plot(out / "cifar_torch.png", payload)
    payload["png"] = str(out / "cifar_torch.png")
    (out / "cifar_torch.json").write_text(json.dumps(payload, indent=2) + "\n")
    return payload


def _plot(path: Path, payload: dict) -> None:
    from privopt.experiments._common import pyplot, save_figure

    fig, ax = pyplot().subplots(figsize=(6.5, 4))
    by_method: dict[str, list] = {}
    for entry in payload["results"].values():
        by_method.setdefault(entry["mechanism"], []).append(entry)
    for method, entries in by_method.items():
        entries.sort(key=lambda e: e["target_epsilon"])
        ax.plot([e["target_epsilon"] for e in entries], [e["test_accuracy"] for e in entries],
                marker="o", label=method)  # fmt: skip
    ax.axhline(payload["non_private"]["test_accuracy"], color="k", ls="--", label="non-private")
    ax.set(xscale="log", xlabel="epsilon", ylabel="test accuracy", title="digits CNN (torch)")
    ax.legend(fontsize=8)
    save_figure(fig, path)
