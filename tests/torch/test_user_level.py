"""User-level privacy in privopt.torch (issue 30 item 1): ``users=`` on make_private and
PrivateTrainer. Each user's contribution is the clipped sum (or mean) of its examples'
gradients, compared with a float64 loop over users; a user with many records moves the clipped
sum by at most one clipped contribution; batches are whole users; the report's unit is the
user; records without an id are refused by count."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import privopt.torch as pt  # noqa: E402
from privopt.torch.clipping import GradientClipper  # noqa: E402
from privopt.torch.mechanisms import build_plan  # noqa: E402
from torch import nn  # noqa: E402

G = 0.3


def _ce(out, y):
    return nn.functional.cross_entropy(out, y, reduction="none")


def per_user_loop(model, loss_fn, x, y, users, clip, reduction="sum"):
    """float64 reference: each user's gradient (sum or mean over its records) alone, clipped."""
    params = dict(model.named_parameters())
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    for u in np.unique(users):
        idx = torch.as_tensor(np.flatnonzero(users == u))
        xs = tuple(t[idx] for t in x) if isinstance(x, tuple) else x[idx]
        out = model(*xs) if isinstance(xs, tuple) else model(xs)
        grads = torch.autograd.grad(loss_fn(out, y[idx]).sum(), list(params.values()))
        if reduction == "mean":
            grads = [g / len(idx) for g in grads]
        norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
        for n, g in zip(params, grads, strict=True):
            total[n] += min(1.0, clip / norm) * g if norm > 0 else g
    return total


class Tokens(nn.Module):
    """Embedding -> Linear over T positions -> LayerNorm -> Linear: the Embedding, Linear (T > 1)
    and norm rules."""

    def __init__(self):
        super().__init__()
        self.emb, self.mid = nn.Embedding(11, 6), nn.Linear(6, 5)
        self.norm, self.head = nn.LayerNorm(5), nn.Linear(5, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.norm(self.mid(self.emb(x))))).mean(1)


class Tied(nn.Module):
    """A weight used by two layers (several hosts: per-example gradients summed) and a GRU
    (torch.func per-example path)."""

    def __init__(self):
        super().__init__()
        self.inp, self.gru = nn.Linear(4, 4), nn.GRU(4, 4, batch_first=True)
        self.out = nn.Linear(4, 4)
        self.out.weight = self.inp.weight

    def forward(self, x):
        return self.out(torch.tanh(self.gru(self.inp(x))[0][:, -1]))


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.head = nn.Conv1d(2, 3, 3), nn.Linear(3 * 6, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.conv(x)).flatten(1))


def _case(kind, gen):
    if kind == "tokens":
        return Tokens(), torch.randint(0, 11, (14, 4), generator=gen)
    if kind == "tied":
        return Tied(), torch.randn(14, 3, 4, generator=gen)
    if kind == "conv":
        return Conv(), torch.randn(14, 2, 8, generator=gen)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)), torch.randn(
        14, 5, generator=gen
    )


LAYOUTS = {  # user of each of the 14 examples (not sorted: the clipper takes any slots)
    "mixed": np.array([0, 0, 3, 1, 2, 2, 3, 3, 3, 3, 0, 4, 5, 5]),
    "singletons": np.arange(14),  # the ghost Gram branch for the Linear layers
    "one-large": np.array([0] * 12 + [1, 2]),  # the materialised branch
}


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("kind", ["mlp", "tokens", "tied", "conv"])
def test_user_clipped_sum_equals_a_float64_loop_over_users(kind, layout, reduction):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model, x = _case(kind, gen)
    model = model.double()
    x = x.double() if x.is_floating_point() else x
    y = torch.randint(0, 3, (14,), generator=gen)
    users = LAYOUTS[layout]
    clipper = GradientClipper(model)
    got, _ = clipper.clipped_sum(_ce, x, y, G, groups=users, group_reduction=reduction)
    clipper.remove()
    expected = per_user_loop(model, _ce, x, y, users, G, reduction)
    scale = max(float(v.abs().max()) for v in expected.values())
    for name, value in expected.items():
        assert float((got[name] - value).abs().max()) <= 1e-10 * scale, name
    # and it is not the record-level sum (users of several records are clipped as one)
    if layout != "singletons":
        record = pt.clipped_grad_sum(model, _ce, x, y, G)
        assert max(float((record[n] - expected[n]).abs().max()) for n in expected) > 1e-6


def _heavy_user_data(n_heavy=40, others=10, seed=0):
    """A user with n_heavy records whose gradients all point the same way (norm >> G each),
    and `others` users of 1-3 records."""
    gen = torch.Generator().manual_seed(seed)
    counts = [n_heavy] + [int(c) for c in torch.randint(1, 4, (others,), generator=gen)]
    users = np.repeat(np.arange(len(counts)), counts)
    x = torch.randn(len(users), 5, generator=gen, dtype=torch.float64)
    x[:n_heavy] = 10.0 * torch.ones(5, dtype=torch.float64)
    y = torch.randint(0, 3, (len(users),), generator=gen)
    return x, y, users


def test_a_user_with_many_records_moves_the_clipped_sum_by_at_most_one_contribution():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    x, y, users = _heavy_user_data()
    clipper = GradientClipper(model)
    full, _ = clipper.clipped_sum(_ce, x, y, G, groups=users)
    rest = users != 0  # the neighbour: the heavy user zeroed out (its records removed)
    without, _ = clipper.clipped_sum(_ce, x[rest], y[rest], G, groups=users[rest] - 1)
    alone, _ = clipper.clipped_sum(_ce, x[~rest], y[~rest], G, groups=users[~rest])
    diff = {n: full[n] - without[n] for n in full}
    # exactly the heavy user's one clipped contribution, of norm <= G
    for n in full:
        torch.testing.assert_close(diff[n], alone[n], rtol=0, atol=1e-12)
    norm = math.sqrt(sum(float((v**2).sum()) for v in diff.values()))
    assert norm <= G * (1 + 1e-9)
    # record-level clipping (the bug user-level clipping prevents) moves it by ~40 G
    record = pt.clipped_grad_sum(model, _ce, x, y, G)
    record_rest = pt.clipped_grad_sum(model, _ce, x[rest], y[rest], G)
    moved = math.sqrt(sum(float(((record[n] - record_rest[n]) ** 2).sum()) for n in record))
    assert moved > 10 * G


def _mlp():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _loop(run, reduction="sum"):
    seen = []
    while not run.done:
        for xb, yb in run.loader:
            run.optimizer.zero_grad()
            seen.append(xb[:, 0].clone())
            loss = nn.functional.cross_entropy(run.model(xb), yb, reduction=reduction)
            loss.backward()
            run.optimizer.step()
    return seen


def _records(n_users=30, seed=0):
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 9, size=n_users)
    users = np.repeat(np.arange(n_users), counts)
    perm = rng.permutation(len(users))  # records of a user scattered through the data
    users = users[perm]
    x = torch.randn(len(users), 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x[:, 0] = torch.arange(len(users), dtype=torch.float64)  # feature 0 = the record's index
    y = torch.randint(0, 3, (len(users),), generator=torch.Generator().manual_seed(2))
    return x, y, users


@pytest.mark.parametrize("mechanism", ["dpsgd", "blt"])
def test_make_private_and_trainer_give_the_same_model_and_a_user_level_report(mechanism):
    x, y, users = _records()
    kw = dict(epsilon=4.0, delta=1e-3, epochs=2, batch_size=6, clip_norm=1.0,
              mechanism=mechanism, seed=3, users=users)  # fmt: skip
    model, opt = _mlp()
    run = pt.make_private(model, opt, (x, y), loss_reduction="sum", **kw)
    _loop(run)
    model2, opt2 = _mlp()
    trainer = pt.PrivateTrainer(model2, opt2, (x, y), **kw)
    report = trainer.fit()
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)
    assert report.neighbouring == "user-level zero-out" and report.privacy_unit == "user"
    assert "all the records of one user" in report.neighbouring_description
    assert report.epsilon <= 4.0 + 1e-12 and run.report().epsilon == report.epsilon
    assert any("privacy unit: the user" in a for a in report.assumptions)
    # N is the number of users: the event is the record-level plan's over 30 users
    plan, _ = build_plan(mechanism, 30, batch_size=6, epochs=2, clip_norm=1.0)
    assert trainer.plan.num_records == 30
    assert trainer.plan.event() == plan.calibrate(4.0, 1e-3).event()


@pytest.mark.parametrize("mechanism", ["dpsgd", "blt"])
def test_batches_hold_whole_users(mechanism):
    x, y, users = _records()
    model, opt = _mlp()
    run = pt.make_private(model, opt, (x, y), epsilon=4.0, delta=1e-3, epochs=2, batch_size=6,
                          clip_norm=1.0, mechanism=mechanism, seed=5, users=users)  # fmt: skip
    batches = [users[b.long().numpy()] for b in _loop(run, "mean")]
    for batch in batches:
        ids = np.unique(batch)
        assert sorted(batch.tolist()) == sorted(users[np.isin(users, ids)].tolist())
        for u in ids:  # a user's records come together, user after user
            where = np.flatnonzero(batch == u)
            assert where[-1] - where[0] == len(where) - 1
    if mechanism == "blt":  # fixed batches of 6 users cycled: each epoch sees every user once
        per_epoch = run.steps // 2
        for e in range(2):
            seen = np.concatenate(
                [np.unique(b) for b in batches[e * per_epoch : (e + 1) * per_epoch]]
            )
            assert sorted(seen.tolist()) == list(range(30))
        assert [set(b) for b in batches[:per_epoch]] == [set(b) for b in batches[per_epoch:]]
        assert all(len(np.unique(b)) == 6 for b in batches)


def test_a_large_user_in_chunks_equals_the_unchunked_run():
    x, y, users = _heavy_user_data(n_heavy=23, others=12)
    x[:23] += torch.randn(23, 5, dtype=torch.float64)
    models = []
    for m in (None, 4):
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double()
        trainer = pt.PrivateTrainer(model, torch.optim.SGD(model.parameters(), lr=0.5),
                                    (x, y), epsilon=4.0, delta=1e-3, epochs=2, batch_size=4,
                                    clip_norm=G, mechanism="blt", seed=7, users=users,
                                    max_physical_batch_size=m)  # fmt: skip
        if m is not None:  # the heavy user is split over chunks of its own
            chunks = trainer.users.chunks(np.array([0, 1, 2]), m)
            assert [c.part for c in chunks][:6] == ["part"] * 5 + ["last"]
            assert all(len(c.records) <= m for c in chunks)
        trainer.fit()
        models.append(model)
    for a, b in zip(*(m.parameters() for m in models), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_user_mean_clipping_in_the_trainer_matches_the_loop_reference():
    x, y, users = _records(n_users=12)
    model, opt = _mlp()
    trainer = pt.PrivateTrainer(model, opt, (x, y), epsilon=1e6, delta=1e-2, epochs=2,
                                batch_size=12, clip_norm=G, mechanism="blt", seed=0,
                                users=users, user_clipping="mean",
                                allow_large_delta=True)  # fmt: skip
    reference, _ = _mlp()
    expected = per_user_loop(reference, _ce, x, y, users, G, "mean")
    before = [p.detach().clone() for p in model.parameters()]
    trainer.step()  # one batch of all 12 users; epsilon 1e6: noise ~ 1e-6 relative
    for (name, p), b in zip(model.named_parameters(), before, strict=True):
        released = (b - p.detach()) / 0.1 * trainer.plan.divisor
        torch.testing.assert_close(released, expected[name], rtol=0, atol=1e-3)


def test_a_user_with_a_non_finite_gradient_contributes_zero():
    model, _ = _mlp()
    x, y, users = _records(n_users=6)
    x[np.flatnonzero(users == 2)[0], 1] = float("inf")
    clipper = GradientClipper(model)
    got, _ = clipper.clipped_sum(_ce, x, y, G, groups=users)
    keep = users != 2
    expected = per_user_loop(model, _ce, x[keep], y[keep], users[keep], G)
    for n in got:
        torch.testing.assert_close(got[n], expected[n], rtol=0, atol=1e-12)


def test_records_without_a_user_id_and_bad_arguments_are_refused():
    x, y, users = _records(n_users=8)
    ids = np.array([f"SECRET-ID-{u}" for u in users], dtype=object)
    ids[[1, 4, 6]] = [None, float("nan"), " "]
    model, opt = _mlp()
    kw = dict(epsilon=4.0, delta=1e-3, epochs=1, batch_size=2, clip_norm=1.0, seed=0)
    with pytest.raises(ValueError, match=r"^3 of \d+ records have no user id") as info:
        pt.make_private(model, opt, (x, y), users=ids, **kw)
    assert "SECRET" not in str(info.value)
    with pytest.raises(ValueError, match="one user id per record"):
        pt.PrivateTrainer(model, opt, (x, y), users=users[:-1], **kw)
    with pytest.raises(ValueError, match="user_clipping"):
        pt.make_private(model, opt, (x, y), users=users, user_clipping="max", **kw)
    with pytest.raises(ValueError, match="batch_size <= the 8 users"):
        pt.make_private(model, opt, (x, y), users=users, **{**kw, "batch_size": 9})
    from privopt.accounting import PrivacyLedger

    with pytest.raises(ValueError, match="of one record but the plan 'zero-out' of one user"):
        pt.make_private(model, opt, (x, y), users=users, ledger=PrivacyLedger("zero-out"), **kw)
    # tensors and string ids work; users are numbered by first appearance
    run = pt.make_private(model, opt, (x, y), users=torch.as_tensor(users), **kw)
    assert run.users.num_users == 8 and run.plan.num_records == 8


def test_a_user_level_run_resumes_from_a_checkpoint_bit_for_bit(tmp_path):
    x, y, users = _records()
    kw = dict(epsilon=4.0, delta=1e-3, epochs=2, batch_size=6, clip_norm=1.0, mechanism="blt",
              seed=3, users=users, max_physical_batch_size=5)  # fmt: skip
    model, opt = _mlp()
    whole = pt.PrivateTrainer(model, opt, (x, y), **kw)
    whole.fit()
    model2, opt2 = _mlp()
    first = pt.PrivateTrainer(model2, opt2, (x, y), **kw)
    for _ in range(3):
        first.step()
    first.save(tmp_path / "run.pt")
    model3, opt3 = _mlp()
    resumed = pt.PrivateTrainer(model3, opt3, (x, y), **kw)
    resumed.load(tmp_path / "run.pt")
    resumed.fit()
    for a, b in zip(model.parameters(), model3.parameters(), strict=True):
        assert torch.equal(a, b)
    assert resumed.report.neighbouring == "user-level zero-out"


def test_diagnostics_count_users_left_unclipped():
    x, y, users = _heavy_user_data(n_heavy=9, others=5)
    model, opt = _mlp()
    with pytest.warns(Warning, match="number of users left unclipped"):
        trainer = pt.PrivateTrainer(model, opt, (x, y), epsilon=4.0, delta=1e-3, epochs=2,
                                    batch_size=6, clip_norm=1e6, mechanism="blt", seed=1,
                                    users=users, diagnostics=True,
                                    max_physical_batch_size=4)  # fmt: skip
    info = trainer.step()  # all 6 users in the batch; none clipped at G = 1e6
    assert info.unclipped == 6
    assert any("users left unclipped" in d for d in trainer.report.non_private_releases)


@pytest.mark.slow  # two calibrations of amplified banded: ~40 s on a loaded core
def test_amplified_banded_samples_users_by_cyclic_poisson():
    x = torch.randn(300, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (300,))
    users = np.arange(300) // 3  # 100 users of 3 records
    model, opt = _mlp()
    trainer = pt.PrivateTrainer(model, opt, (x, y), epsilon=2.0, delta=1e-4, epochs=2,
                                batch_size=10, clip_norm=1.0, mechanism="banded", seed=0,
                                users=users)  # fmt: skip
    plan, choices = build_plan("banded", 100, batch_size=10, epochs=2, clip_norm=1.0,
                               epsilon=2.0, delta=1e-4)  # fmt: skip
    assert trainer.choices.get("sampling") == choices.get("sampling") == "cyclic-poisson"
    assert trainer.plan.event() == plan.calibrate(2.0, 1e-4).event()
    report = trainer.fit()
    assert report.neighbouring == "user-level zero-out" and report.epsilon <= 2.0 + 1e-12
