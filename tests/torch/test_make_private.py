"""make_private (issue 29 item 1): the user's own loop trains privately; the same model as
PrivateTrainer bit for bit, exact per-example gradients of the loop's loss against a float64
loop, gradient accumulation, checkpoints, and every misuse refused before anything is
released."""

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from privopt.noise import BLTMechanism  # noqa: E402
from privopt.torch import PrivateTrainer, make_private  # noqa: E402
from torch import nn  # noqa: E402

GEN = torch.Generator().manual_seed(0)
X = torch.randn(200, 4, generator=GEN)
Y = (X[:, 0] > 0).long()


def _model(seed=3, dtype=torch.float32, dropout=0.0):
    torch.manual_seed(seed)
    layers = [nn.Linear(4, 8), nn.Tanh()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    model = nn.Sequential(*layers, nn.Linear(8, 2)).to(dtype)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _run(mechanism="optimal-cc", *, seed=5, dtype=torch.float32, data=None, dropout=0.0, **kwargs):
    model, opt = _model(dtype=dtype, dropout=dropout)
    data = (X.to(dtype), Y) if data is None else data
    kwargs = {"epochs": 2, "batch_size": 25, **kwargs}
    return make_private(model, opt, data, epsilon=2.0, delta=1e-5, clip_norm=1.0,
                        mechanism=mechanism, seed=seed, **kwargs)  # fmt: skip


def _train(run, steps=None):
    """The ordinary PyTorch loop, over the planned epochs (or ``steps`` batches), its loss
    reduced as the run was told."""
    done = 0
    for _ in range(run.epochs):
        if run.done:
            break
        for x, y in run.loader:
            run.optimizer.zero_grad()
            loss = F.cross_entropy(run.model(x), y, reduction=run.loss_reduction)
            loss.backward()
            run.optimizer.step()
            done += 1
            if steps is not None and done == steps:
                return run
    return run


def _same(a, b):
    return all(
        torch.equal(u, v)
        for u, v in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


@pytest.mark.parametrize("mechanism", ["dpsgd", BLTMechanism([0.9, 0.4], [0.3, 0.2])])
def test_the_users_loop_and_the_trainer_give_the_same_model_bit_for_bit(mechanism):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accountant = "rdp" if mechanism == "dpsgd" else "auto"
        run = _train(_run(mechanism, dropout=0.2, loss_reduction="sum", accountant=accountant))
        model, opt = _model(dropout=0.2)
        trainer = PrivateTrainer(model, opt, (X, Y), epsilon=2.0, delta=1e-5, epochs=2,
                                 batch_size=25, clip_norm=1.0, mechanism=mechanism, seed=5,
                                 accountant=accountant)  # fmt: skip
        trainer.fit()
        assert run.step_count == run.steps == trainer.steps
        assert _same(run.model, trainer.model)
        assert run.report().epsilon <= 2.0 and run.report().epsilon > 1.99
        assert run.report().epsilon == trainer.report.epsilon
        assert run.epsilon_spent == run.report().epsilon
        assert run.ledger.events == (run.plan.event(),)
        assert any("sum or mean over the batch" in a for a in run.report().assumptions)


def test_a_mean_loss_is_scaled_back_per_example():
    # F.cross_entropy's mean over 25 examples: the per-example gradients are those of the sum
    mean, total = _train(_run()), _train(_run(loss_reduction="sum"))
    for a, b in zip(mean.model.parameters(), total.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _float64_reference(model, x, y, clip, reduction):
    """sum_i clip(grad_i) by a loop over examples, each gradient alone by autograd (in eval
    mode, where the run lets any forward through); the loop's per-example loss is the MSE over
    the 3 outputs, a mean with reduction="mean" and a sum with "sum"."""
    model.eval()
    total = [torch.zeros_like(p) for p in model.parameters()]
    for i in range(len(x)):
        loss = F.mse_loss(model(x[i : i + 1]), y[i : i + 1], reduction=reduction)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
        for t, g in zip(total, grads, strict=True):
            t += min(1.0, clip / norm) * g
    model.train()
    return total


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_the_clipped_sum_is_that_of_the_loops_own_loss(reduction):
    # a regression loss the run never sees: the per-example gradients come from the loop's
    # backward; compared with a float64 per-example loop to 1e-10
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    targets = torch.randn(200, 3, dtype=torch.float64, generator=GEN)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay put
    run = make_private(model, opt, (X.double(), targets), epsilon=2.0, delta=1e-5, epochs=1,
                       batch_size=25, clip_norm=0.5, mechanism="optimal-cc", seed=1,
                       loss_reduction=reduction)  # fmt: skip
    seen = []
    run._reduce = lambda sums: seen.append({k: v.clone() for k, v in sums.items()}) or sums
    for _, (x, y) in zip(range(2), run.loader, strict=False):
        run.optimizer.zero_grad()
        F.mse_loss(run.model(x), y, reduction=reduction).backward()
        want = _float64_reference(model, x, y, 0.5, reduction)
        run.optimizer.step()
        for (name, _), w in zip(model.named_parameters(), want, strict=True):
            torch.testing.assert_close(seen[-1][name], w, rtol=1e-10, atol=1e-12)


def test_gradient_accumulation_equals_the_whole_batch():
    whole = _train(_run(dtype=torch.float64))
    chunked = _run(dtype=torch.float64, max_physical_batch_size=10)
    assert len(chunked.loader) == 8  # logical steps of the first epoch
    chunks = 0
    for _ in range(2):
        for x, y in chunked.loader:
            assert len(x) <= 10
            chunked.optimizer.zero_grad()
            F.cross_entropy(chunked.model(x), y).backward()
            chunked.optimizer.step()
            chunks += 1
    assert chunks == 3 * whole.steps and chunked.step_count == whole.steps
    for a, b in zip(whole.model.parameters(), chunked.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


def test_dropout_masks_are_the_loops():
    # the per-example recomputation restores torch's RNG state, so the loop's own dropout masks
    # are used; a model drawing its randomness elsewhere is refused
    run = _train(_run(dropout=0.5), steps=3)
    assert run.step_count == 3

    class NumpyNoise(nn.Module):
        def forward(self, x):
            noise = np.random.default_rng().standard_normal(tuple(x.shape))
            return x + torch.as_tensor(noise, dtype=x.dtype)

    model = nn.Sequential(nn.Linear(4, 2), NumpyNoise())
    run = make_private(model, torch.optim.SGD(model.parameters(), lr=0.1), (X, Y), epsilon=2.0,
                       delta=1e-5, epochs=1, batch_size=25, clip_norm=1.0, seed=1,
                       mechanism="optimal-cc")  # fmt: skip
    with pytest.raises(ValueError, match="mixes the examples"):  # check_model, first batch
        _train(run, steps=1)
    run._checked = True  # past the first batch: the recomputation's comparison refuses it
    run._clear_chunk()
    run._phase = "idle"
    with pytest.raises(ValueError, match="changed between the loop's forward"):
        _train(run, steps=1)
    assert run.step_count == 0


def _one_batch(run):
    x, y = next(iter(run.loader))
    run.optimizer.zero_grad()
    return x, y


def _state(run):
    return run.step_count, run._stream.state()["step"], [p.detach().clone() for p in
                                                         run.model.parameters()]  # fmt: skip


def _unchanged(run, before):
    after = _state(run)
    return before[:2] == after[:2] and all(
        torch.equal(a, b) for a, b in zip(before[2], after[2], strict=True)
    )


def test_stepping_twice_or_without_backward_is_refused():
    run = _run()
    _train(run, steps=1)
    before = _state(run)
    with pytest.raises(RuntimeError, match="ran twice for one batch"):
        run.optimizer.step()
    x, y = _one_batch(run)
    with pytest.raises(RuntimeError, match="without a backward"):
        run.optimizer.step()
    out = run.model(x)
    with pytest.raises(RuntimeError, match=r"without loss\.backward"):
        run.optimizer.step()
    loss = F.cross_entropy(out, y)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="twice for one batch"):
        loss.backward()
    assert _unchanged(run, before)


def test_a_changed_batch_and_a_skipped_batch_are_refused():
    run = _run()
    x, _ = _one_batch(run)
    with pytest.raises(RuntimeError, match=r"batch size \[10\] where the plan's batch has 25"):
        run.model(x[:10])
    with pytest.raises(RuntimeError, match=r"not the tensors run\.loader yielded"):
        run.model(x.clone())
    with pytest.raises(RuntimeError, match=r"got no run\.optimizer\.step"):
        next(iter(run.loader))
    with torch.no_grad():  # evaluation is free
        run.model(X[:7])
    run.model.eval()
    run.model(X[:7])
    run.model.train()
    with pytest.raises(RuntimeError, match="did not yield"):
        _run().model(X[:25])
    assert run.step_count == 0


def test_a_parameter_added_after_wrapping_is_refused():
    run = _run()
    extra = nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match="cannot be added after make_private"):
        run.optimizer.add_param_group({"params": [extra]})
    run.optimizer.original_optimizer.add_param_group({"params": [extra]})
    x, y = _one_batch(run)
    F.cross_entropy(run.model(x), y).backward()
    with pytest.raises(ValueError, match="parameters changed after make_private"):
        run.optimizer.step()
    assert run.step_count == 0


def test_a_gradient_outside_the_output_is_refused():
    run = _run()
    x, y = _one_batch(run)
    penalty = sum(p.pow(2).sum() for p in run.model.parameters())
    (F.cross_entropy(run.model(x), y) + 0.1 * penalty).backward()
    with pytest.raises(ValueError, match=r"did not come from run\.model's output"):
        run.optimizer.step()
    assert run.step_count == 0


def test_a_reshuffling_sampler_and_an_iterable_dataset_are_refused():
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), shuffle=True)
    with pytest.raises(ValueError, match="min-separation"):
        _run(data=loader)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(zip(X, Y, strict=True))

    with pytest.raises(ValueError, match="IterableDataset") as info:
        _run(data=Stream())
    assert "\n" not in str(info.value)


def test_the_loader_yields_the_planned_epochs_then_stops():
    run = _run("nu-dpftrl")
    assert len(run.loader) == 8 and run.steps == 16
    _train(run)
    assert run.done and len(run.loader) == 0
    with pytest.raises(RuntimeError, match="budget is spent"):
        iter(run.loader)


def test_save_and_load_resume_bit_for_bit(tmp_path):
    whole = _train(_run())
    first = _train(_run(), steps=5)
    first.save(tmp_path / "run.pt")
    resumed = _run(seed=None)  # other keys: the checkpoint's are used
    resumed.load(tmp_path / "run.pt")
    assert resumed.step_count == 5
    for x, y in resumed.loader:  # the rest of the second epoch... of the first: steps 5..7
        resumed.optimizer.zero_grad()
        F.cross_entropy(resumed.model(x), y).backward()
        resumed.optimizer.step()
    _train(resumed)  # ... and the last epoch
    assert resumed.done and _same(whole.model, resumed.model)
    assert resumed.report().epsilon == whole.report().epsilon
    # the trainer reads the run's checkpoints (one format)
    model, opt = _model()
    trainer = PrivateTrainer(model, opt, (X, Y), epsilon=2.0, delta=1e-5, epochs=2,
                             batch_size=25, clip_norm=1.0, mechanism="optimal-cc",
                             seed=9)  # fmt: skip
    trainer.load(tmp_path / "run.pt")
    assert trainer.step_count == 5
    x, y = _one_batch(first)
    with pytest.raises(RuntimeError, match="between steps"):
        F.cross_entropy(first.model(x), y).backward()
        first.save(tmp_path / "mid.pt")


def test_empty_poisson_batches_step_with_noise_only():
    # q = 1 / 200: about a third of the 200 batches are empty; the loop runs over them as
    # over any other (the forward of an empty batch, or none, then step) and each releases noise
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = _run("dpsgd", epochs=1, batch_size=1, accountant="rdp")
    sizes = []
    for x, y in run.loader:
        sizes.append(len(x))
        run.optimizer.zero_grad()
        if len(x):
            F.cross_entropy(run.model(x), y).backward()
        run.optimizer.step()
    assert run.done and sizes.count(0) > 20 and run._stream.step == run.steps


def test_a_scheduler_on_the_private_optimizer_steps_with_it(tmp_path):
    run = _run()
    sched = torch.optim.lr_scheduler.StepLR(run.optimizer, step_size=2, gamma=0.5)
    run.lr_scheduler = sched  # checkpointed with the run
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "lr_scheduler.step() before optimizer.step()"
        for x, y in run.loader:
            run.optimizer.zero_grad()
            F.cross_entropy(run.model(x), y).backward()
            run.optimizer.step()
            sched.step()
    assert run.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**4)
    run.save(tmp_path / "run.pt")
    other = _run()
    other.lr_scheduler = torch.optim.lr_scheduler.StepLR(other.optimizer, step_size=2, gamma=0.5)
    other.load(tmp_path / "run.pt")
    assert other.lr_scheduler.last_epoch == 8 and other.step_count == 8


class _Keywords(nn.Module):
    """A model called as model(**batch), as Hugging Face models are."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, features, scale):
        return self.lin(features) * scale[:, None]


def test_keyword_inputs_train_exactly():
    torch.manual_seed(2)
    model = _Keywords().double()
    scale = torch.rand(200, dtype=torch.float64, generator=GEN) + 0.5
    records = [({"features": X[i].double(), "scale": scale[i]}, Y[i]) for i in range(200)]
    run = make_private(model, torch.optim.SGD(model.parameters(), lr=0.0), records, epsilon=2.0,
                       delta=1e-5, epochs=1, batch_size=25, clip_norm=0.5,
                       mechanism="optimal-cc", seed=1, loss_reduction="sum")  # fmt: skip
    seen = []
    run._reduce = lambda sums: seen.append({k: v.clone() for k, v in sums.items()}) or sums
    x, y = next(iter(run.loader))
    assert set(x) == {"features", "scale"}
    run.optimizer.zero_grad()
    F.cross_entropy(run.model(**x), y, reduction="sum").backward()
    run.optimizer.step()
    model.eval()
    want = [torch.zeros_like(p) for p in model.parameters()]
    for i in range(len(y)):
        out = model(x["features"][i : i + 1], x["scale"][i : i + 1])
        grads = torch.autograd.grad(F.cross_entropy(out, y[i : i + 1]), list(model.parameters()))
        norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
        for t, g in zip(want, grads, strict=True):
            t += min(1.0, 0.5 / norm) * g
    for (name, _), w in zip(model.named_parameters(), want, strict=True):
        torch.testing.assert_close(seen[0][name], w, rtol=1e-10, atol=1e-12)
    model.train()
    x, y = next(iter(run.loader))
    with pytest.raises(ValueError, match="positional and keyword inputs"):
        run.model(x["features"], scale=x["scale"])
