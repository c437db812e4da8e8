"""PrivateTrainer: the plan's event, epsilon <= target, batch order, exact resume, progress."""

import dataclasses
import itertools
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from privopt.algorithms.ftrl import dp_ftrl  # noqa: E402
from privopt.experiments._common import dpsgd_poisson  # noqa: E402
from privopt.experiments.cifar_torch import digits_cnn, load_digit_images  # noqa: E402
from privopt.noise import BLTMechanism, nu_dpftrl  # noqa: E402
from privopt.torch import PrivateTrainer  # noqa: E402
from privopt.training.result import NonPrivateDiagnosticsWarning  # noqa: E402
from torch import nn  # noqa: E402

DIGITS = load_digit_images()
SMALL = (DIGITS[0][:200], DIGITS[1][:200])  # 200 records: 6 batches of 32 per epoch


def _trainer(mechanism, *, epochs=2, seed=7, model=None, data=SMALL, **kwargs):
    model = digits_cnn(0) if model is None else model
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0 / (1 + 0.1 * t))
    return PrivateTrainer(
        model, opt, data, epsilon=4.0, delta=1e-5, epochs=epochs, batch_size=32, clip_norm=1.0,
        mechanism=mechanism, lr_scheduler=sched, seed=seed, **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize(
    "mechanism",
    ["dpsgd", "nu-dpftrl", "optimal-cc", "tree", "banded", BLTMechanism([0.9, 0.4], [0.3, 0.2])],
)
def test_digits_cnn_reports_epsilon_at_most_the_target(mechanism):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the restarted tree's sensitivity is a flagged bound
        trainer = _trainer(mechanism, accountant="rdp" if mechanism == "dpsgd" else "auto")
        before = [p.detach().clone() for p in trainer.model.parameters()]
        report = trainer.fit()
    assert trainer.step_count == trainer.steps
    assert report.epsilon <= 4.0 and report.epsilon > 3.9  # calibrated, not over-noised
    assert trainer.ledger.events == (trainer.plan.event(),)
    assert any("zero out" in a or "independently" in a for a in report.assumptions)
    assert all(
        not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(), strict=True)
    )
    with pytest.raises(RuntimeError, match="budget spent"):
        trainer.step()


def test_recorded_event_equals_the_numpy_paths():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = _trainer(nu_dpftrl(0.2))
        x = SMALL[0].reshape(200, -1).double().numpy()
        fit = dp_ftrl(x, SMALL[1].numpy() % 2, mechanism=nu_dpftrl(0.2), epsilon=4.0, delta=1e-5,
                      clip_norm=1.0, learning_rate=0.1, rng=np.random.default_rng(0),
                      batch_size=32, epochs=2, model="logistic")  # fmt: skip
    # the same Gaussian mechanism (sensitivity, std, count); only the descriptive label differs
    numpy_event = dataclasses.replace(fit.info["plan"].event(), label="")
    assert numpy_event == dataclasses.replace(trainer.ledger.events[0], label="")
    poisson = _trainer("dpsgd", accountant="rdp")
    _, info = dpsgd_poisson(
        x, SMALL[1].numpy().astype(float), grad_fn=lambda w, X, y: X * (X @ w - y)[:, None],
        w0=np.zeros(64), epsilon=4.0, delta=1e-5, sample_rate=32 / 200,
        steps=poisson.steps, clip_norm=1.0, learning_rate=0.1, rng=np.random.default_rng(0),
        accountant="rdp",
    )  # fmt: skip
    assert info["ledger"].events[0].noise_multiplier == pytest.approx(
        poisson.plan.noise_multiplier, rel=1e-3
    )
    assert info["ledger"].events[0].sample_rate == poisson.ledger.events[0].sample_rate
    assert info["ledger"].events[0].count == poisson.ledger.events[0].count


def test_fixed_batches_cycle_in_the_same_order_every_epoch():
    trainer = _trainer(nu_dpftrl(0.2), epochs=3)
    order = [next(trainer._schedule) for _ in range(trainer.steps)]
    per_epoch = trainer.steps_per_epoch
    assert per_epoch == 6 and trainer.steps == 18
    for t in range(per_epoch, trainer.steps):
        np.testing.assert_array_equal(order[t], order[t - per_epoch])
    seen = np.concatenate(order[:per_epoch])
    assert len(np.unique(seen)) == len(seen) == 6 * 32


def test_resume_from_a_checkpoint_is_bit_for_bit(tmp_path):
    mech = BLTMechanism([0.9, 0.4], [0.3, 0.2])
    whole = _trainer(mech)
    whole.fit()
    first = _trainer(mech)
    for _ in range(5):
        first.step()
    first.save(tmp_path / "ckpt.pt")
    for _ in range(3):  # steps after the checkpoint are discarded by the resume
        first.step()
    resumed = _trainer(mech, model=digits_cnn(123), seed=None)  # other init, other keys
    resumed.load(tmp_path / "ckpt.pt")
    assert resumed.step_count == 5
    resumed.fit()
    for a, b in zip(whole.model.state_dict().values(), resumed.model.state_dict().values(),
                    strict=True):  # fmt: skip
        assert torch.equal(a, b)
    assert resumed.report.epsilon == whole.report.epsilon
    assert resumed.ledger.events == whole.ledger.events
    other = _trainer(nu_dpftrl(0.2))
    with pytest.raises(ValueError, match="another plan"):
        other.load(tmp_path / "ckpt.pt")


def test_refuses_a_shuffling_loader_and_batchnorm():
    dataset = torch.utils.data.TensorDataset(*SMALL)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True)
    with pytest.raises(ValueError, match="min-separation"):
        _trainer("nu-dpftrl", data=loader)
    sequential = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=False)
    assert _trainer(nu_dpftrl(0.2), data=sequential).records.size == 200
    bn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(144, 10))
    with pytest.raises(ValueError, match="GroupNorm"):
        _trainer(nu_dpftrl(0.2), model=bn)


def test_progress_and_epsilon_spent(capsys):
    seen = []
    trainer = _trainer(nu_dpftrl(0.2), progress=True, callback=seen.append)
    trainer.fit()
    out = capsys.readouterr().out
    assert "step 6/12" in out and "epsilon spent" in out and "loss" not in out
    assert [s.step for s in seen] == list(range(1, 13)) and seen[0].loss is None
    spent = [trainer.epsilon_spent(t) for t in (0, 3, 6, 7, 12)]
    assert spent[0] == 0.0 and all(a < b for a, b in itertools.pairwise(spent))
    assert spent[-1] == trainer.report.epsilon


def test_diagnostics_release_the_loss_and_say_so():
    with pytest.warns(NonPrivateDiagnosticsWarning):
        trainer = _trainer(nu_dpftrl(0.2), diagnostics=True)
    info = trainer.step()
    assert info.loss is not None and info.loss > 0
    assert trainer.report.non_private_releases
