"""PrivateTrainer refuses what cannot be right, from public values, before anything is
calibrated or recorded (issue 33, item 4 and the trainer's hangs of item 5)."""

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from privopt.torch import PrivateTrainer  # noqa: E402
from torch import nn  # noqa: E402


def _setup(n=200):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=generator)
    y = (x[:, 0] > 0).long()
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), (x, y)


def _trainer(**overrides):
    model, optimizer, data = _setup()
    kwargs = dict(
        epsilon=1.0, delta=1e-5, epochs=1, batch_size=20, clip_norm=1.0, mechanism="dpsgd"
    )
    kwargs.update(overrides)
    model = kwargs.pop("model", model)
    optimizer = kwargs.pop("optimizer", optimizer)
    data = kwargs.pop("data", data)
    return PrivateTrainer(model, optimizer, data, **kwargs)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"delta": 0.5}, "allow_large_delta"),
        ({"batch_size": 50.5}, "batch_size to be a whole number"),
        ({"batch_size": 0}, "batch_size to be a whole number"),
        ({"batch_size": 1000}, "batch_size <= the 200 records"),
        ({"epochs": 2.0}, "epochs to be a whole number"),
        ({"epochs": 10**7, "mechanism": "blt"}, "above the limit of 1,000,000"),
        ({"seed": -1}, "seed to be None or an int >= 0"),
    ],
)
def test_public_refusals_are_one_clear_line_and_fast(overrides, message):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=message) as info:
        _trainer(**overrides)
    assert "\n" not in str(info.value)
    assert time.perf_counter() - start < 10


def test_an_optimizer_over_another_model_is_refused():
    other = nn.Linear(4, 2)
    with pytest.raises(ValueError, match="holds 0 of the model's 2 trainable parameters"):
        _trainer(optimizer=torch.optim.SGD(other.parameters(), lr=0.1))


def test_large_delta_runs_when_insisted_on():
    trainer = _trainer(delta=0.01, allow_large_delta=True, mechanism="optimal-cc")
    assert trainer.delta == 0.01


def test_numpy_arrays_are_accepted():
    x = np.random.default_rng(0).standard_normal((200, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    trainer = _trainer(data=(x, y), mechanism="optimal-cc")
    trainer.step()
    assert trainer.step_count == 1
