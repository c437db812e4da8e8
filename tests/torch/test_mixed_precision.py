"""Mixed precision in make_private and PrivateTrainer (issue 29 item 4): bf16 and fp16 autocast
with float32 per-example norms and noise; fp16 with torch.amp.GradScaler, whose skipped step
releases nothing and leaves the noise stream where it was."""

import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from privopt.torch import PrivateTrainer, make_private  # noqa: E402
from torch import nn  # noqa: E402

GEN = torch.Generator().manual_seed(0)
X = torch.randn(200, 4, generator=GEN)
Y = (X[:, 0] > 0).long()


def _run(scaler=None, reduction="mean", **kwargs):
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return make_private(model, opt, (X, Y), epsilon=2.0, delta=1e-5, epochs=1, batch_size=25,
                        clip_norm=1.0, mechanism="optimal-cc", seed=4, grad_scaler=scaler,
                        loss_reduction=reduction, **kwargs)  # fmt: skip


def _loop(run, dtype, scaler=None, skip_at=None, reduction="mean"):
    """The usual autocast loop (with a scaler: scale, step through it, update). At iteration
    ``skip_at`` the scale is set to infinity (the scaler must skip that step), then back."""
    seen = []
    for it, (x, y) in enumerate(run.loader):
        run.optimizer.zero_grad()
        if it == skip_at:
            scaler.update(new_scale=math.inf)
        with torch.autocast("cpu", dtype=dtype):
            out = run.model(x)
            loss = F.cross_entropy(out, y, reduction=reduction)
        assert out.dtype == torch.float32  # 16-bit outputs come back widened
        if scaler is None:
            loss.backward()
            run.optimizer.step()
            continue
        before = (run.step_count, run._stream.step, run.epsilon_spent)
        weights = [p.detach().clone() for p in run.model.parameters()]
        scaler.scale(loss).backward()
        scaler.step(run.optimizer)
        scaler.update()
        if it == skip_at:
            state = (run.step_count, run._stream.step, run.epsilon_spent)
            moved = any(
                not torch.equal(w, p) for w, p in zip(weights, run.model.parameters(), strict=True)
            )
            seen.append((before, state, moved))
            scaler.update(new_scale=2.0**8)
    return seen


def _same(a, b):
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_in_the_loop_equals_the_trainers(dtype):
    run = _run(reduction="sum")
    _loop(run, dtype, reduction="sum")
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    trainer = PrivateTrainer(model, torch.optim.SGD(model.parameters(), lr=0.1), (X, Y),
                             epsilon=2.0, delta=1e-5, epochs=1, batch_size=25, clip_norm=1.0,
                             mechanism="optimal-cc", seed=4, autocast=dtype)  # fmt: skip
    trainer.fit()
    assert _same(run.model, trainer.model)
    assert run._noise_dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_clipped_sums_against_a_float64_loop(dtype):
    run = _run()
    seen = []
    run._reduce = lambda sums: seen.append({k: v.clone() for k, v in sums.items()}) or sums
    x, y = next(iter(run.loader))
    model64 = [p.detach().double() for p in run.model.parameters()]
    run.optimizer.zero_grad()
    with torch.autocast("cpu", dtype=dtype):
        F.cross_entropy(run.model(x), y).backward()
    run.optimizer.step()
    total = [torch.zeros_like(w) for w in model64]
    for i in range(len(x)):
        w = [t.clone().requires_grad_() for t in model64]
        h = torch.tanh(x[i : i + 1].double() @ w[0].T + w[1])
        loss = F.cross_entropy(h @ w[2].T + w[3], y[i : i + 1])
        grads = torch.autograd.grad(loss, w)
        norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
        for t, g in zip(total, grads, strict=True):
            t += min(1.0, 1.0 / norm) * g
    # the clipper's guard for 16-bit layers clips at G / (1 + 2^-7) (0.8%), plus the rounding
    tol = 3e-2 if dtype == torch.bfloat16 else 1.2e-2
    for got, want in zip(seen[0].values(), total, strict=True):
        assert float((got.double() - want).abs().max()) <= tol * float(want.abs().max())


def test_grad_scaler_is_exact_and_a_skipped_step_releases_nothing():
    plain = _run()
    _loop(plain, torch.float16)
    scaled = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=1000)
    run = _run(scaled)
    _loop(run, torch.float16, scaled)
    assert _same(plain.model, run.model)  # a power-of-two scale divides out exactly
    skipper = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=1000)
    skipped = _run(skipper)
    seen = _loop(skipped, torch.float16, skipper, skip_at=3)
    (before, after, moved), = seen  # fmt: skip
    assert before == after and not moved  # no step counted, no noise drawn, nothing changed
    # the loader gave the same batch again and the next step used the next noise: the run is
    # the one without the skip
    assert skipped.done and _same(plain.model, skipped.model)


def test_a_scaler_the_run_does_not_know_or_a_step_around_it_is_refused():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    run = _run()
    x, y = next(iter(run.loader))
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(run.model(x), y)
    scaler.scale(loss).backward()
    with pytest.raises(RuntimeError, match="pass grad_scaler=scaler"):
        scaler.step(run.optimizer)
    assert run.step_count == 0
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    run = _run(scaler)
    x, y = next(iter(run.loader))
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(run.model(x), y)
    scaler.scale(loss).backward()
    with pytest.raises(RuntimeError, match=r"step through scaler\.step"):
        run.optimizer.step()
    assert run.step_count == 0


def test_a_float64_model_under_autocast_is_refused():
    model = nn.Linear(4, 2).double()
    run = make_private(model, torch.optim.SGD(model.parameters(), lr=0.1), (X.double(), Y),
                       epsilon=2.0, delta=1e-5, epochs=1, batch_size=25, clip_norm=1.0,
                       mechanism="optimal-cc", seed=1)  # fmt: skip
    x, _ = next(iter(run.loader))
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(ValueError, match="float64"):
        run.model(x)
    with pytest.raises(ValueError, match="would do nothing") as info:
        make_private(model, torch.optim.SGD(model.parameters(), lr=0.1), (X.double(), Y),
                     epsilon=2.0, delta=1e-5, epochs=1, batch_size=25, clip_norm=1.0,
                     mechanism="optimal-cc", autocast="bf16")  # fmt: skip
    assert "\n" not in str(info.value)
