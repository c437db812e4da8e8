"""Adaptive clipping with users= in privopt.torch (Andrew et al. 2021 with the user as the
unit): one bit per user whatever its number of records, the bound in force applied to a user
split over chunks, and the claim of a fixed clip."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import privopt.torch as pt  # noqa: E402
from privopt.torch.mechanisms import build_plan  # noqa: E402
from privopt.training import QuantileClipping  # noqa: E402
from torch import nn  # noqa: E402


def _data(n_heavy=9, others=11, seed=0):
    """One user with n_heavy records, then users of 1-3 records; ids in record order."""
    gen = torch.Generator().manual_seed(seed)
    counts = [n_heavy] + [int(c) for c in torch.randint(1, 4, (others,), generator=gen)]
    users = np.repeat(np.arange(len(counts)), counts)
    x = torch.randn(len(users), 5, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (len(users),), generator=gen)
    return x, y, users


def _trainer(rule, clip, *, chunk=None, diagnostics=False, mechanism="blt", users=True):
    x, y, ids = _data()
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the non-private diagnostics notice
        return pt.PrivateTrainer(
            model, torch.optim.SGD(model.parameters(), lr=0.5), (x, y), epsilon=4.0,
            delta=1e-3, epochs=3, batch_size=6, clip_norm=clip, mechanism=mechanism, seed=2,
            users=ids if users else None, adaptive_clipping=rule,
            max_physical_batch_size=chunk, diagnostics=diagnostics,
        )  # fmt: skip


NOISELESS = QuantileClipping(target_quantile=0.5, count_noise_fraction=0.5, _count_noise=False)


@pytest.mark.parametrize("clip,unclipped", [(1e9, 6), (1e-9, 0)])
def test_the_count_is_one_bit_per_user_whatever_its_records(clip, unclipped):
    # the first batch of 6 users holds 6 + more records (the heavy user has 9): the released
    # count (noise off) is users left unclipped minus half the users, never a count of records
    trainer = _trainer(NOISELESS, clip, chunk=4, diagnostics=True)
    info = trainer.step()
    assert info.unclipped == unclipped
    _, released = trainer.clip_history
    assert released[0] == unclipped - 3.0


def test_a_user_split_over_chunks_is_clipped_at_the_bound_in_force():
    # the bound starts 1e-4 below every user's norm and grows e^(eta/2) a step (no user
    # unclipped): a user accumulated over chunks must be clipped at kappa_t, not at the plan's
    # initial clip, for the chunked run to equal the unchunked one
    runs = []
    for chunk in (None, 4):
        trainer = _trainer(NOISELESS, 1e-4, chunk=chunk)
        trainer.fit()
        runs.append(trainer)
    clips = runs[0].clip_history[0]
    assert clips[-1] > 1.5 * clips[0]
    np.testing.assert_array_equal(clips, runs[1].clip_history[0])
    for a, b in zip(runs[0].model.parameters(), runs[1].model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("mechanism", ["dpsgd", "blt"])
def test_the_claim_is_the_fixed_clip_claim_over_users(mechanism):
    rule = QuantileClipping(count_noise_fraction=0.5)
    trainer = _trainer(rule, 1.0, mechanism=mechanism)
    report = trainer.fit()
    plan, _ = build_plan(mechanism, 12, batch_size=6, epochs=3, clip_norm=1.0)
    assert trainer.plan.num_records == 12
    assert trainer.ledger.events == (plan.calibrate(4.0, 1e-3).event(),)
    assert report.epsilon <= 4.0 + 1e-12 and report.neighbouring == "user-level zero-out"
    text = " ".join(report.assumptions)
    assert "the adaptive bound kappa_t (initially 1)" in text
    assert "one bit per user" in text
    assert trainer.plan.gradient_noise_multiplier > trainer.plan.noise_multiplier
