"""``privopt reproduce federated``: the user-level comparison of Choquette-Choo et al. (2024).

Choquette-Choo, Dvijotham, Pillutla, Ganesh, Steinke and Thakurta, "Correlated Noise Provably
Beats Independent Noise for Differentially Private Learning" (ICLR 2024, arXiv:2310.06771),
Section 4 and Appendix G.2, train a next-word model on StackOverflow with user-level DP in
federated rounds: each round a cohort of users trains locally from the server model, each
user's update is clipped to l2 norm 1, the server adds independent noise (DP-FedAvg, amplified
by sampling) or correlated noise (DP-FTRL: nu-DP-FTRL, the tree, ...) and steps with server
momentum and a learning-rate cool-down over the last 25% of the rounds. They report nu-DP-FTRL
above DP-SGD from epsilon ~ 2 on (23.6% against 22.6%) and within ~1 point of the non-private
baseline at epsilon 8.

StackOverflow cannot be downloaded here, so this is the same protocol on a synthetic corpus
(:mod:`privopt.experiments.federated_data`: heterogeneous users over one bigram language,
variable numbers of examples, fresh test users), with :mod:`privopt.federated`:

* model: embeddings of the 2 previous tokens, concatenated, then a linear layer to the logits;
* users: ``dp-fedavg`` samples them by Poisson (rate b / N, PLD accountant; RDP at ``--quick``),
  the correlated mechanisms (``nu-dpftrl``, ``banded``, ``tree`` with restarts, ``blt``) cycle
  fixed cohorts of b users every pass, with the min-separation sensitivity of E participations;
* each user: one local step on all its examples (mean loss), client rate 0.5, delta clipped
  to 1; server: SGD with momentum 0.9 (the paper's StackOverflow runs use 0.95; not tuned
  here) and the cool-down to 0.05x over the last 25% of rounds; delta = 1e-5 at the user
  level (zero-out of a whole user);
* server rates: ``--quick`` uses the fixed rates of :data:`QUICK_SERVER_LR`; the full run picks,
  per method and epsilon, the best of :data:`SERVER_LR_GRID` by accuracy on separate fresh
  validation users (synthetic draws of the public generator: the choice costs no privacy of the
  training users).

The JSON's ``results`` is flat, one key per run (``"nu-dpftrl@eps=8"``), each with
``test_accuracy`` (mean over seeds), ``epsilon`` (the largest reported), ``target_epsilon``
and ``privacy_unit`` ``"user"``; ``non_private`` (federated averaging with the same cohorts and
per-user clipping, no noise, as the paper's baseline) sits outside ``results``; ``comparison``
gives, per epsilon, each correlated mechanism's gap over DP-FedAvg as the mean of per-seed
differences with a paired 95% t-interval (both runs of a seed share it).
"""

from __future__ import annotations

import functools
import json
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privopt.experiments._common import (
    check_epsilons,
    check_seeds,
    cooldown_schedule,
    reproduction_environment,
    t_halfwidth,
)
from privopt.experiments.federated_data import next_token_model, synthetic_corpus

__all__ = ["METHODS", "reproduce_federated", "train_run"]

#: method name in the results -> mechanism name of privopt.noise.registry
METHODS = {
    "dp-fedavg": "dpsgd",
    "nu-dpftrl": "nu-dpftrl",
    "banded": "banded",
    "tree": "tree",
    "blt": "blt",
}
QUICK_METHODS = ("dp-fedavg", "nu-dpftrl", "banded", "tree")  # blt's optimisation takes ~15 s
QUICK_SERVER_LR = {"dp-fedavg": 0.25, "nu-dpftrl": 0.25, "banded": 0.25, "tree": 0.25, "blt": 0.25}
SERVER_LR_GRID = (0.1, 0.25, 0.5)
#: the public sizes: users N, cohort b, passes E (rounds = E N / b), vocabulary V
QUICK_SIZE = {"users": 1000, "cohort": 50, "epochs": 5, "vocab": 32}
FULL_SIZE = {"users": 2000, "cohort": 100, "epochs": 8, "vocab": 32}
DELTA = 1e-5
CLIENT_LR = 0.5
MOMENTUM = 0.9


def _torch():
    import torch

    return torch


def _tensors(contexts, targets):
    torch = _torch()
    return torch.from_numpy(contexts), torch.from_numpy(targets)


def _accuracy(model, contexts, targets) -> float:
    torch = _torch()
    with torch.no_grad():
        return float((model(contexts).argmax(1) == targets).float().mean())


def _loss(outputs, targets):
    return _torch().nn.functional.cross_entropy(outputs, targets, reduction="none")


def train_run(
    method: str,
    epsilon: float | None,
    data,
    *,
    size: dict[str, int],
    server_lr: float,
    seed: int,
    dpsgd_accountant: str = "pld",
):
    """One federated run; returns (model, FederatedResult). ``epsilon=None``: non-private
    federated averaging (same cohorts as the correlated mechanisms, clipping, no noise)."""
    from privopt.federated import train_federated

    mechanism = METHODS["nu-dpftrl" if epsilon is None else method]
    accountant = dpsgd_accountant if mechanism == "dpsgd" else "auto"
    plan, choices = _plan(mechanism, data.num_users, size["cohort"], size["epochs"], epsilon,
                          accountant)  # fmt: skip
    model = next_token_model(size["vocab"], seed=seed)
    result = train_federated(
        model, _loss, data, plan, delta=DELTA, private=epsilon is not None, seed=10_000 + seed,
        local_steps=1, client_lr=CLIENT_LR, server_lr=cooldown_schedule(server_lr, plan.steps),
        server_momentum=MOMENTUM, accountant=accountant,
    )  # fmt: skip
    result.info["choices"] = choices
    return model, result


@functools.lru_cache(maxsize=64)
def _plan(mechanism: str, users: int, cohort: int, epochs: int, epsilon, accountant: str):
    """The run's plan, calibrated once per (method, size, epsilon) (DP-FedAvg's PLD search
    takes seconds), and its public choices, with whether a sensitivity is an upper bound
    (the restarted tree's, stated)."""
    from privopt.federated import federated_plan
    from privopt.noise import SensitivityUpperBoundWarning

    tuned, choices = _tuned(mechanism, users, cohort, epochs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SensitivityUpperBoundWarning)
        plan, _ = federated_plan(tuned or mechanism, users, cohort_size=cohort, epochs=epochs,
                                 clip_norm=1.0)  # fmt: skip
        if epsilon is not None:
            plan = plan.calibrate(epsilon, DELTA, accountant=accountant)
            plan.event()  # the sensitivity, computed (and cached on the plan) here
    bound = any(issubclass(w.category, SensitivityUpperBoundWarning) for w in caught)
    sampling = "poisson" if tuned is None else "fixed"
    return plan, {**choices, "sampling": sampling, "sensitivity_upper_bound": bound}


@functools.lru_cache(maxsize=16)
def _tuned(mechanism: str, users: int, cohort: int, epochs: int):
    """The registry's mechanism for fixed cohorts (tuned once per size: BLT's optimisation
    takes seconds) and its public choices; (None, {...}) for DP-FedAvg's Poisson sampling."""
    from privopt.noise.registry import tuned_mechanism
    from privopt.training import FixedBatches

    if mechanism == "dpsgd":
        return None, {"mechanism": "dpsgd"}
    batches = FixedBatches(cohort, epochs)
    mech, choices = tuned_mechanism(mechanism, batches.steps(users), batches.participation(users))
    choices.pop("restart_objective", None)
    return mech, {"mechanism": mechanism, **choices}


def _select(method, epsilon, data, validation, *, size, accountant) -> tuple[float, dict]:
    scores = {}
    for lr in SERVER_LR_GRID:
        model, _ = train_run(method, epsilon, data, size=size, server_lr=lr, seed=100,
                             dpsgd_accountant=accountant)  # fmt: skip
        scores[f"{lr:g}"] = _accuracy(model, *validation)
    best = max(SERVER_LR_GRID, key=lambda lr: scores[f"{lr:g}"])
    return best, scores


def reproduce_federated(
    out: Path,
    *,
    quick: bool = False,
    epsilons: Sequence[float] | None = None,
    seeds: Sequence[int] | None = None,
    methods: Sequence[str] | None = None,
    select: bool | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Write ``federated.json`` and ``federated.png`` into ``out``; return the payload.

    Args:
        quick: 1,000 users, cohorts of 50, 5 passes (100 rounds), epsilons (2, 8), one seed,
            :data:`QUICK_METHODS` at fixed server rates (under a minute on one core); else
            2,000 users, cohorts of 100, 8 passes (160 rounds), epsilons (2, 4, 8, 16), 3
            seeds, every method, server rates selected on validation users.
        methods: a subset of :data:`METHODS`.
        threads: torch CPU threads (default 1).
    """
    torch = _torch()
    from privopt.federated import UserData

    start = time.perf_counter()
    size = QUICK_SIZE if quick else FULL_SIZE
    epsilons = check_epsilons((2.0, 8.0) if quick else (2.0, 4.0, 8.0, 16.0)) if epsilons is None \
        else check_epsilons(epsilons)  # fmt: skip
    seeds = check_seeds((0,) if quick else (0, 1, 2)) if seeds is None else check_seeds(seeds)
    methods = tuple(QUICK_METHODS if quick else METHODS) if methods is None else tuple(methods)
    for method in methods:
        if method not in METHODS:
            raise ValueError(f"Expected methods in {tuple(METHODS)}, got {method!r}.")
    select = (not quick) if select is None else bool(select)
    accountant = "rdp" if quick else "pld"
    corpus = synthetic_corpus(size["users"], vocab=size["vocab"], seed=0)
    data = UserData.from_records(*_tensors(corpus.contexts, corpus.targets), corpus.users)
    test = _tensors(corpus.test_contexts, corpus.test_targets)
    validation = None
    if select:  # fresh users of the same public generator, not the test users
        held = synthetic_corpus(1, vocab=size["vocab"], seed=0, user_seed=1, test_users=400)
        validation = _tensors(held.test_contexts, held.test_targets)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads or 1)
    try:
        with reproduction_environment():
            results = _runs(methods, epsilons, seeds, data, test, validation, size, accountant)
            base_lr, base_scores = QUICK_SERVER_LR["nu-dpftrl"], None
            if validation is not None:
                base_lr, base_scores = _select(None, None, data, validation, size=size,
                                               accountant=accountant)  # fmt: skip
            baseline = [
                _accuracy(
                    train_run(None, None, data, size=size, server_lr=base_lr, seed=s)[0], *test
                )
                for s in seeds
            ]
    finally:
        torch.set_num_threads(previous)
    payload: dict[str, Any] = {
        "figure": "federated",
        "quick": quick,
        "paper": "Choquette-Choo et al. 2024 (arXiv:2310.06771), Section 4, user-level DP",
        "dataset": (
            "synthetic next-token corpus (privopt.experiments.federated_data): "
            f"{size['users']} users over a {size['vocab']}-token bigram language with 8 topics, "
            "heterogeneity 0.6, 4 + Geometric(mean 16) examples per user (at most 128); "
            "fresh test users"
        ),
        "n_users": data.num_users,
        "n_train_examples": data.num_records,
        "n_test_examples": len(test[1]),
        "model": "embedding(32 x 16) of 2 context tokens, concatenated, linear to 32 logits",
        "cohort_size": size["cohort"],
        "epochs": size["epochs"],
        "clip_norm": 1.0,
        "client": {
            "local_steps": 1,
            "local_batch": "all the user's examples",
            "client_lr": CLIENT_LR,
        },
        "server": {"momentum": MOMENTUM, "cooldown": "linear to 0.05x over the last 25%"},
        "delta": DELTA,
        "privacy_unit": "user",
        "neighbouring": "user-level zero-out",
        "server_lr_selection": (
            f"best of {SERVER_LR_GRID} by accuracy on fresh validation users (seed 100)"
            if select
            else "fixed in advance (quick)"
        ),
        "non_private": {
            "test_accuracy": float(np.mean(baseline)),
            "test_accuracies": baseline,
            "server_lr": base_lr,
            "validation_accuracy_by_lr": base_scores,
        },
        "results": results,
        "comparison": _comparison(results, epsilons),
        "wall_time_s": time.perf_counter() - start,
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _plot(out / "federated.png", payload)
    payload["png"] = str(out / "federated.png")
    (out / "federated.json").write_text(json.dumps(payload, indent=2) + "\n")
    return payload


def _runs(methods, epsilons, seeds, data, test, validation, size, accountant) -> dict:
    results: dict[str, dict[str, Any]] = {}
    for method in methods:
        for eps in epsilons:
            lr, scores = QUICK_SERVER_LR[method], None
            if validation is not None:
                lr, scores = _select(method, eps, data, validation, size=size,
                                     accountant=accountant)  # fmt: skip
            accs, reported = [], []
            for seed in seeds:
                model, run = train_run(method, eps, data, size=size, server_lr=lr, seed=seed,
                                       dpsgd_accountant=accountant)  # fmt: skip
                accs.append(_accuracy(model, *test))
                reported.append(run.epsilon)
            results[f"{method}@eps={eps:g}"] = {
                "method": method,
                "test_accuracy": float(np.mean(accs)),
                "test_accuracies": accs,
                "ci95_halfwidth": t_halfwidth(accs),
                "epsilon": float(max(reported)),
                "target_epsilon": eps,
                "delta": DELTA,
                "privacy_unit": run.privacy_unit,
                "neighbouring": run.neighbouring,
                "noise_multiplier": run.plan.noise_multiplier,
                "rounds": run.rounds,
                "server_lr": lr,
                "validation_accuracy_by_lr": scores,
                "choices": run.info["choices"],
                "client_batching": run.info["client_batching"],
                "accountant": run.report.accountant,
            }
    return results


def _comparison(results: dict, epsilons) -> dict[str, Any]:
    """Per epsilon: every correlated mechanism's gap over DP-FedAvg, the mean over seeds of the
    per-seed differences with its 95% t-interval (paired: both runs of a seed share the seed),
    and the best mechanism by mean. ``significant`` is the best gap's interval above 0; it is
    not corrected for picking the best of several mechanisms."""
    out = {}
    for eps in epsilons:
        runs = {r["method"]: r for r in results.values() if r["target_epsilon"] == eps}
        if "dp-fedavg" not in runs or len(runs) < 2:
            continue
        base = np.asarray(runs["dp-fedavg"]["test_accuracies"])
        gaps = {}
        for method in (m for m in runs if m != "dp-fedavg"):
            diff = np.asarray(runs[method]["test_accuracies"]) - base
            gaps[method] = {"mean": float(diff.mean()), "ci95_halfwidth": t_halfwidth(diff)}
        best = max(gaps, key=lambda m: runs[m]["test_accuracy"])
        half = gaps[best]["ci95_halfwidth"]
        out[f"eps={eps:g}"] = {
            "best_correlated": best,
            "gap_over_dp_fedavg": gaps[best]["mean"],
            "gap_ci95_halfwidth": half,
            "significant": half is not None and gaps[best]["mean"] - half > 0,
            "winner": best if gaps[best]["mean"] > 0 else "dp-fedavg",
            "gaps": gaps,
        }
    return out


def _plot(path: Path, payload: dict) -> None:
    from privopt.experiments._common import pyplot, save_figure

    fig, ax = pyplot().subplots(figsize=(6.5, 4))
    by_method: dict[str, list] = {}
    for entry in payload["results"].values():
        by_method.setdefault(entry["method"], []).append(entry)
    for method, entries in by_method.items():
        entries.sort(key=lambda e: e["target_epsilon"])
        ax.errorbar([e["target_epsilon"] for e in entries],
                    [e["test_accuracy"] for e in entries],
                    yerr=[e["ci95_halfwidth"] or 0.0 for e in entries],
                    marker="o", capsize=3, label=method)  # fmt: skip
    ax.axhline(payload["non_private"]["test_accuracy"], color="k", ls="--",
               label="non-private (per-user clip)")  # fmt: skip
    ax.set(xscale="log", xlabel="epsilon (user-level, delta 1e-5)",
           ylabel="next-token accuracy (test users)",
           title="federated, user-level DP (synthetic corpus)")  # fmt: skip
    epsilons = sorted({e["target_epsilon"] for e in payload["results"].values()})
    ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    ax.minorticks_off()
    ax.legend(fontsize=8)
    save_figure(fig, path)
