"""Adaptive clipping of users' deltas in federated rounds (Andrew et al. 2021, the user as the
unit): the rule against a plain float64 loop over users, the accounting of a fixed clip, the law
of the noise scaled by the bound in force, the refusals, and an audit of the count release with
a planted noiseless count."""

import math

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")
from _fed_reference import ce, mlp, toy_data  # noqa: E402

from privopt.audit import audit_scores  # noqa: E402
from privopt.federated import UserData, federated_plan, train_federated  # noqa: E402
from privopt.training import QuantileClipping  # noqa: E402

RULE = QuantileClipping(target_quantile=0.5, learning_rate=0.3, count_noise_fraction=0.2)


def _reference(model, x, y, ids, plan, *, seed, client_lr, rule):
    """Non-private federated averaging (one local step on all of a user's records, FedAvg at
    rate 1) with the geometric quantile rule on exact counts, written plainly: (clips, counts)."""
    users = list(dict.fromkeys(ids))
    records = {u: [i for i, v in enumerate(ids) if v == u] for u in users}
    names = [n for n, _ in model.named_parameters()]
    w = [p.detach().clone() for p in model.parameters()]
    kappa, clips, counts = plan.clip_norm, [], []
    for cohort in plan.batches.schedule(plan.num_records, np.random.default_rng(seed)):
        total, unclipped = [torch.zeros_like(p) for p in w], 0
        for u in cohort:
            rows = records[users[int(u)]]
            local = [p.clone().requires_grad_() for p in w]
            params = dict(zip(names, local, strict=True))
            out = torch.func.functional_call(model, params, (x[rows],))
            grads = torch.autograd.grad(ce(out, y[rows]).mean(), local)
            delta = [-client_lr * g for g in grads]
            norm = math.sqrt(sum(float((d**2).sum()) for d in delta))
            unclipped += norm <= kappa
            factor = min(1.0, kappa / norm) if norm > 0 else 1.0
            total = [t + factor * d for t, d in zip(total, delta, strict=True)]
        w = [p + t / plan.divisor for p, t in zip(w, total, strict=True)]
        clips.append(kappa)
        counts.append(unclipped - 0.5 * len(cohort))
        fraction = min(1.0, max(0.0, counts[-1] / plan.divisor + 0.5))
        factor = math.exp(-rule.learning_rate * (fraction - rule.target_quantile))
        kappa = max(rule.floor * plan.clip_norm, kappa * factor)
    return w, clips, counts


@pytest.mark.parametrize("mechanism", ["dpsgd", "blt"])
def test_without_noise_the_bound_follows_the_rule_on_counts_of_users(mechanism):
    x, y, ids = toy_data(max_records=20)
    data = UserData.from_records(x, y, ids)
    plan, choices = federated_plan(mechanism, data.num_users, cohort_size=6, epochs=3,
                                   clip_norm=0.01, adaptive_clipping=RULE)  # fmt: skip
    assert "adaptive clipping" in choices["adaptive_clipping"]
    start = mlp()
    result = train_federated(mlp(), ce, data, plan, private=False, seed=3, client_lr=0.5,
                             server_lr=1.0, server_momentum=0.0)  # fmt: skip
    w, clips, counts = _reference(start, x, y, ids, plan, seed=3, client_lr=0.5, rule=RULE)
    assert result.info["clip_history"] == pytest.approx(clips, rel=1e-12)
    assert result.info["released_counts"] == pytest.approx(counts, abs=1e-12)
    got = [p.detach() for p in result.model.parameters()]
    assert max(float((a - b).abs().max()) for a, b in zip(got, w, strict=True)) < 1e-9
    # the bound moved (from 0.01, far below the deltas' median norm) and counts are users
    assert clips[-1] > 2 * clips[0]
    assert all(abs(c) <= 0.5 * 12 for c in counts)  # at most half a cohort of 12 users


@pytest.mark.parametrize("mechanism", ["dpsgd", "nu-dpftrl"])
def test_the_claim_is_the_fixed_clip_claim_with_a_larger_gradient_multiplier(mechanism):
    x, y, ids = toy_data()
    data = UserData.from_records(x, y, ids)
    eps, delta = 4.0, 1e-3
    acc = "rdp" if mechanism == "dpsgd" else "auto"
    fixed, _ = federated_plan(mechanism, data.num_users, cohort_size=6, epochs=2, clip_norm=0.5)
    fixed = fixed.calibrate(eps, delta, accountant=acc)
    plan, _ = federated_plan(mechanism, data.num_users, cohort_size=6, epochs=2, clip_norm=0.5,
                             adaptive_clipping=RULE)  # fmt: skip
    plan = plan.calibrate(eps, delta, accountant=acc)
    assert plan.noise_multiplier == fixed.noise_multiplier
    assert plan.gradient_noise_multiplier > plan.noise_multiplier
    result = train_federated(mlp(), ce, data, plan, delta=delta, seed=0, accountant=acc)
    assert result.epsilon <= eps
    assert [e.event for e in result.ledger.entries] == [plan.event()]
    assert result.report.neighbouring == "user-level zero-out"
    text = " ".join(result.report.assumptions)
    assert "users' delta norms" in text and "noisy count of the cohort's users" in text
    assert "kappa_t (adaptive, initially 0.5)" in text
    assert len(result.info["clip_history"]) == plan.steps


def test_the_noise_is_the_unit_clip_noise_times_the_bound_in_force():
    # every delta zero (client_lr 0): each round's move is kappa_t sigma_g z_t / D, z_t ~ N(0, I)
    users = 40
    x = torch.zeros(users, 3, dtype=torch.float64)
    data = UserData.from_records(x, torch.zeros(users, dtype=torch.float64), list(range(users)))
    plan, _ = federated_plan("dpsgd", users, cohort_size=10, epochs=3, clip_norm=10.0,
                             sampling="fixed", adaptive_clipping=RULE)  # fmt: skip
    plan = plan.calibrate(2.0, 1e-3)
    normalised = []
    for seed in range(12):
        model = torch.nn.Linear(3, 4, bias=False).double()
        torch.nn.init.zeros_(model.weight)

        def loss(out, target):
            return (out.sum(dim=1) - target) ** 2

        result = train_federated(model, loss, data, plan, delta=1e-3, seed=seed, client_lr=0.0,
                                 server_lr=1.0, server_momentum=0.0)  # fmt: skip
        moves = model.weight.detach().reshape(-1)  # from 0: the sum of the rounds' moves
        clips = np.array(result.info["clip_history"])
        # all users unclipped (norm 0): the bound shrinks by exp(-eta (1 - gamma)) per round
        # up to the count noise, and the sum of moves has std sigma_g sqrt(sum kappa_t^2) / D
        scale = plan.gradient_noise_multiplier * math.sqrt(float((clips**2).sum())) / plan.divisor
        normalised.append(moves.numpy() / scale)
        assert clips[-1] < clips[0]
    sample = np.concatenate(normalised)
    assert stats.kstest(sample, "norm").pvalue > 1e-3
    assert 0.85 < sample.std() < 1.15  # unscaled noise (the bound left out) gives about 0.2


def test_adaptive_clipping_refusals():
    with pytest.raises(ValueError, match="QuantileClipping"):
        federated_plan("dpsgd", 24, cohort_size=6, epochs=2, clip_norm=1.0, adaptive_clipping=0.5)
    with pytest.raises(ValueError, match="cyclic-poisson"):
        federated_plan("banded", 24, cohort_size=6, epochs=2, clip_norm=1.0,
                       sampling="cyclic-poisson", groups=2, adaptive_clipping=RULE)  # fmt: skip


# -- audit of the count release: user-level replace-one (a canary user against a null user) ----

EPS, DELTA, USERS = 1.0, 1e-3, 10
AUDIT_RULE = QuantileClipping(count_noise_fraction=0.5)


def _count_scores(plan, canary: bool, runs: int, offset: int) -> np.ndarray:
    """Round 0's released count: the canary user (40 records, delta far above the bound,
    centred bit -1/2) against a user of null records (zero delta, bit +1/2)."""
    x = torch.zeros(USERS * 5 + 40, 2, dtype=torch.float64)
    y = torch.zeros(len(x), dtype=torch.float64)
    if canary:
        x[-40:, 0], y[-40:] = 3.0, 50.0
    ids = [i // 5 for i in range(USERS * 5)] + ["canary"] * 40
    data = UserData.from_records(x, y, ids)
    out = []
    for seed in range(offset, offset + runs):
        model = torch.nn.Linear(2, 1, bias=False).double()
        torch.nn.init.zeros_(model.weight)
        result = train_federated(model, lambda o, t: (o[:, 0] - t) ** 2, data, plan, delta=DELTA,
                                 seed=seed, client_lr=0.1, server_momentum=0.0)  # fmt: skip
        out.append(result.info["released_counts"][0])
    return np.array(out)


def _count_audit(runs: int):
    plan, _ = federated_plan("dpsgd", USERS + 1, cohort_size=USERS + 1, epochs=1, clip_norm=1.0,
                             sampling="fixed", neighbouring="replace-one",
                             adaptive_clipping=AUDIT_RULE)  # fmt: skip
    plan = plan.calibrate(EPS, DELTA)
    return audit_scores(_count_scores(plan, True, runs, 0),
                        _count_scores(plan, False, runs, 10**6), delta=DELTA)  # fmt: skip


def test_the_count_release_audits_below_the_claim_and_a_noiseless_count_is_caught(monkeypatch):
    honest = _count_audit(150)
    assert honest.epsilon_lower_bound < EPS
    from privopt.federated import server

    original = server._adaptive_controller

    def noiseless(plan, key):  # the planted bug: the count released without its noise
        controller = original(plan, key)
        controller.rule = QuantileClipping(count_noise_fraction=0.5, _count_noise=False)
        return controller

    monkeypatch.setattr(server, "_adaptive_controller", noiseless)
    planted = _count_audit(150)
    assert planted.epsilon_lower_bound > 2 * EPS
