"""A black-box audit where the canary is a whole user with many records (one round, every
user in the cohort): the lower bound stays below the claim, and a planted bug that skips the
user-level clip is caught."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privopt.audit import audit_scores  # noqa: E402
from privopt.federated import UserData, federated_plan, train_federated  # noqa: E402

EPSILON, DELTA, USERS = 1.0, 1e-3, 10


def _data(canary: bool) -> UserData:
    """USERS users of 5 null records (x = 0, y = 0: zero gradient, zero delta); the canary user
    has 40 records pushing the weight up; without it, that user's records are null too."""
    x = torch.zeros(USERS * 5 + 40, 2, dtype=torch.float64)
    y = torch.zeros(len(x), dtype=torch.float64)
    if canary:
        x[-40:, 0], y[-40:] = 3.0, 50.0
    ids = [i // 5 for i in range(USERS * 5)] + ["canary"] * 40
    return UserData.from_records(x, y, ids)


def _scores(plan, canary: bool, runs: int, offset: int) -> np.ndarray:
    data = _data(canary)
    out = []
    for seed in range(offset, offset + runs):
        model = torch.nn.Linear(2, 1, bias=False).double()
        torch.nn.init.zeros_(model.weight)
        train_federated(model, lambda o, t: (o[:, 0] - t) ** 2, data, plan, delta=DELTA,
                        seed=seed, local_steps=1, client_lr=0.1, server_momentum=0.0)  # fmt: skip
        out.append(float(model.weight.detach()[0, 0]))  # the canary's direction
    return np.array(out)


def _audit(runs: int):
    plan, _ = federated_plan("dpsgd", USERS + 1, cohort_size=USERS + 1, epochs=1, clip_norm=1.0,
                             sampling="fixed")  # fmt: skip
    plan = plan.calibrate(EPSILON, DELTA)
    return audit_scores(_scores(plan, True, runs, 0), _scores(plan, False, runs, 10**6),
                        delta=DELTA)  # fmt: skip


def _skip_clip(deltas, clip_norm, **_):
    return deltas.to(torch.float64), 0, 0


def test_a_canary_user_stays_below_the_claim_and_a_skipped_clip_is_caught(monkeypatch):
    honest = _audit(200)
    assert honest.epsilon_lower_bound < EPSILON
    monkeypatch.setattr("privopt.federated.server.clip_and_count", _skip_clip)
    planted = _audit(200)
    assert planted.epsilon_lower_bound > 3 * EPSILON  # the canary delta of 30 G, unclipped
