"""Issue 30: a one-run audit of user-level ``PrivateTrainer`` where each canary is a whole user.

The model: a filler regression head (Linear) and a table of canary rows (``nn.Embedding``). The
users:

* fillers: users of 2 regression records each;
* m canary users of R records each, each user included by a fair coin: every record of an
  included canary user j has the loss ``-K <t_j, u>`` on its own table row t_j (u a fixed unit
  vector, K >> G), so the user's summed gradient is ``-R K u`` on row j and its user-level
  clipped contribution exactly ``-G u``; an excluded canary user keeps its R records with zero
  loss (a null user): included and excluded are user-level zero-out neighbours.

One DP-SGD step over all users (sampling rate 1, the trainer's own calibration, plain SGD at
learning rate 1) releases ``r = (w_0 - w_1) D = sum_u clip(W_u) + sigma G z`` on the table;
canary j's score is ``-<r_j, u>``: N(G, (sigma G)^2) when included, N(0, (sigma G)^2) when not
(:func:`privopt.audit.audit_one_run`, the f-DP one-run bound at 95%, Steinke, Nasr & Jagielski
2023, arXiv:2305.08846). The honest bound must stay below the claim. The planted bug clips
per record instead of per user (the user-level ``groups`` dropped from the clipper's call):
an included canary user then moves its row by R G, and the audit must exceed the claim.
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from privopt.audit import audit_one_run  # noqa: E402
from privopt.torch import PrivateTrainer  # noqa: E402
from privopt.torch.clipping import GradientClipper  # noqa: E402
from torch import nn  # noqa: E402

DELTA, CLAIM, K, RECORDS, FILLERS = 1e-5, 2.0, 1e3, 10, 20
U = torch.full((4,), 0.5, dtype=torch.float64)  # unit vector


class CanaryTable(nn.Module):
    def __init__(self, canaries: int):
        super().__init__()
        torch.manual_seed(0)
        self.head = nn.Linear(5, 1)
        self.canary = nn.Embedding(canaries + 1, 4)

    def forward(self, features, ids):
        return self.head(features).squeeze(1), self.canary(ids)


def loss_fn(outputs, targets):
    pred, rows = outputs
    kind, y = targets[:, 0], targets[:, 1]
    filler = (pred - y) ** 2
    canary = -K * (rows @ U.to(rows.dtype))
    return torch.where(kind == 1, canary, torch.where(kind == 0, filler, 0.0 * filler))


def _data(m: int, rng: np.random.Generator):
    included = rng.random(m) < 0.5
    n = 2 * FILLERS + m * RECORDS
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    features = torch.randn(n, 5, generator=gen, dtype=torch.float64)
    ids = torch.zeros(n, dtype=torch.long)
    canary_of = np.repeat(np.arange(1, m + 1), RECORDS)
    ids[2 * FILLERS :] = torch.as_tensor(canary_of)
    kind = torch.zeros(n, dtype=torch.float64)
    kind[2 * FILLERS :] = torch.where(torch.as_tensor(included[canary_of - 1]), 1.0, 2.0)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    users = np.concatenate([np.repeat(np.arange(FILLERS), 2), FILLERS - 1 + canary_of])
    return (features, ids, torch.stack([kind, y], 1)), users, included


def _clip_per_record(monkeypatch):
    """The planted bug: each record clipped on its own (the user-level groups dropped)."""
    original = GradientClipper.clipped_sum

    def per_record(self, *args, groups=None, group_reduction="sum", **kwargs):
        return original(self, *args, **kwargs)

    monkeypatch.setattr(GradientClipper, "clipped_sum", per_record)


def _audit(m: int, seed: int):
    rng = np.random.default_rng(seed)
    data, users, included = _data(m, rng)
    model = CanaryTable(m).double()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = PrivateTrainer(
            model, torch.optim.SGD(model.parameters(), lr=1.0), data, epsilon=CLAIM,
            delta=DELTA, epochs=1, batch_size=FILLERS + m, clip_norm=1.0, mechanism="dpsgd",
            loss_fn=loss_fn, seed=int(rng.integers(2**62)), users=users,
        )  # fmt: skip
        assert trainer.steps == 1 and trainer.plan.num_records == FILLERS + m
        before = model.canary.weight.detach().clone()
        trainer.step()
    released = (before - model.canary.weight.detach()) * trainer.plan.divisor
    scores = -(released[1:] @ U).numpy()
    return audit_one_run(scores, included, delta=DELTA), trainer, scores, included


def _check(m: int, seed: int, monkeypatch):
    honest, trainer, scores, included = _audit(m, seed)
    print("honest", honest)
    report = trainer.report
    assert report.epsilon <= CLAIM + 1e-9 and report.neighbouring == "user-level zero-out"
    assert honest.epsilon_lower_bound < CLAIM
    with monkeypatch.context() as patch:
        _clip_per_record(patch)
        broken, _, buggy, _ = _audit(m, seed)
    print("per-record clipping", broken)
    # the same noise (same secret seed): an included canary user moves by R G instead of G
    np.testing.assert_allclose(buggy - scores, included * (RECORDS - 1.0), atol=1e-8)
    assert broken.epsilon_lower_bound > CLAIM


def test_user_level_audit_small(monkeypatch):
    """300 canary users (3,000 canary records)."""
    _check(300, seed=2, monkeypatch=monkeypatch)


@pytest.mark.slow  # about 25 s on a loaded core
def test_user_level_audit_below_claim_and_per_record_clipping_caught(monkeypatch):
    """1,000 canary users (10,000 canary records); measured: honest 0.21, planted 6.04."""
    _check(1000, seed=1, monkeypatch=monkeypatch)
