"""check_model's probe (issue 27 item 3) and what PrivateTrainer keeps after a step (issue 26
item 3): the check runs before any private step and is stated in the report; nothing exact
and data-dependent stays on the trainer or its clipper unless diagnostics are on."""

import warnings

import pytest

torch = pytest.importorskip("torch")
from privopt.experiments.cifar_torch import digits_cnn, load_digit_images  # noqa: E402
from privopt.noise import nu_dpftrl  # noqa: E402
from privopt.torch import ModelCheck, PrivateTrainer, check_model  # noqa: E402
from privopt.training.result import NonPrivateDiagnosticsWarning  # noqa: E402
from torch import nn  # noqa: E402

DIGITS = load_digit_images()


def _xent(out, y):
    return nn.functional.cross_entropy(out, y, reduction="none")


class BatchCentre(nn.Module):
    """Subtracts the batch mean: no type list knows it mixes the examples."""

    def forward(self, x):
        return x - x.mean(0, keepdim=True)


def _sample(n=8):
    return torch.as_tensor(DIGITS[0][:n]), torch.as_tensor(DIGITS[1][:n])


def test_check_flags_a_module_that_mixes_examples():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), BatchCentre(), nn.Linear(16, 10))
    with pytest.raises(ValueError, match="moved another example's loss"):
        check_model(model, _xent, _sample())
    assert check_model(model) is None  # the one-argument form: type checks only


@pytest.mark.parametrize(
    "model",
    [
        lambda: digits_cnn(0),
        lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Dropout(0.5), nn.Linear(16, 10)),
    ],
)
def test_check_passes_supported_models_and_says_what_it_found(model):
    found = check_model(model(), _xent, _sample())
    assert isinstance(found, ModelCheck) and found.independent and found.exact
    assert found.examples == 4 and found.batch == 8
    assert found.largest_error < 1e-4 and "check_model passed" in found.assumption


def _trainer(**kwargs):
    model = digits_cnn(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    data = (torch.as_tensor(DIGITS[0][:96]).clone(), torch.as_tensor(DIGITS[1][:96]).clone())
    return PrivateTrainer(
        model, opt, data, epsilon=4.0, delta=1e-5, epochs=1, batch_size=32, clip_norm=1.0,
        mechanism=nu_dpftrl(0.2), seed=5, **kwargs,
    )  # fmt: skip


def test_trainer_checks_the_model_first_and_states_it():
    trainer = _trainer()
    assert not any("check_model" in a for a in trainer.report.assumptions)
    trainer.step()
    assert any("check_model passed" in a for a in trainer.report.assumptions)

    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), BatchCentre(), nn.Linear(16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    bad = PrivateTrainer(
        model, opt, (DIGITS[0][:96], DIGITS[1][:96]), epsilon=4.0, delta=1e-5, epochs=1,
        batch_size=32, clip_norm=1.0, mechanism=nu_dpftrl(0.2), seed=5,
    )  # fmt: skip
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="mixes the examples"):
        bad.step()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))


def _state(trainer):
    """Everything on the trainer's clipper, and the trainer's own non-model attributes."""
    clipper = trainer._clipper
    return {
        "clipper": sorted(k for k in vars(clipper)),
        "recorder": (clipper._recorder.calls, clipper._recorder.uses, clipper._recorder.stack),
        "layouts": clipper._layouts.entries,
        "methods": clipper.methods,
    }


def test_no_exact_unclipped_count_stays_after_a_step():
    # two neighbouring datasets (the first record changed), one step each with the same seed:
    # what the clipper keeps is the same, and no exact count is kept at all
    runs = []
    for scale in (1.0, 50.0):
        trainer = _trainer()
        trainer.records.tensors[0][0] *= scale
        info = trainer.step()
        assert info.unclipped is None and info.loss is None
        assert not hasattr(trainer._clipper, "last_unclipped")
        runs.append(_state(trainer))
    assert runs[0]["recorder"] == ([], {}, [])
    assert runs[0] == runs[1]


def test_diagnostics_release_the_unclipped_count_and_disclose_it():
    with pytest.warns(NonPrivateDiagnosticsWarning):
        trainer = _trainer(diagnostics=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = trainer.step()
    assert 0 <= info.unclipped <= 32
    assert any("unclipped" in text for text in trainer.report.non_private_releases)
