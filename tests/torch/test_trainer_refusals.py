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


def _refused_before_recording(message, **overrides):
    """Refused in one line, and nothing recorded in the ledger handed in."""
    from privopt.accounting import PrivacyLedger

    ledger = PrivacyLedger("zero-out")
    start = time.perf_counter()
    with pytest.raises(ValueError, match=message) as info:
        _trainer(ledger=ledger, **overrides)
    assert "\n" not in str(info.value)
    assert ledger.events == () and time.perf_counter() - start < 10
    return str(info.value)


def test_integer_inputs_to_a_float_model_are_named_with_the_fix():
    _, _, (x, y) = _setup()
    text = _refused_before_recording("model fails on inputs of dtype torch.int64", data=(
        (x * 10).long(), y))  # fmt: skip
    assert "torch.as_tensor(x, dtype=torch.float32)" in text
    embedding = nn.Sequential(nn.Embedding(10, 3), nn.Flatten(), nn.Linear(12, 2))
    trainer = _trainer(
        model=embedding,
        optimizer=torch.optim.SGD(embedding.parameters(), lr=0.1),
        data=((x.abs() * 3).long().clamp(max=9), y),
        mechanism="optimal-cc",
    )
    trainer.step()  # integer indices for an Embedding are what it takes
    assert trainer.step_count == 1


def test_a_float64_model_with_float32_data_is_named_with_the_fix():
    model = nn.Linear(4, 2).double()
    text = _refused_before_recording(
        "inputs are torch.float32 but the model's parameters are torch.float64",
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
    )
    assert "x.to(torch.float64)" in text and "model.to(torch.float32)" in text


def test_autocast_names_are_accepted_and_others_refused():
    assert _trainer(autocast="bf16", mechanism="optimal-cc").autocast == torch.bfloat16
    assert _trainer(autocast="fp16", mechanism="optimal-cc").autocast == torch.float16
    _refused_before_recording("Expected autocast to be None", autocast="int8")
    model = nn.Linear(4, 2).double()
    _, _, (x, y) = _setup()
    _refused_before_recording(
        "autocast=torch.bfloat16 with a float64 model",
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data=(x.double(), y),
        autocast=torch.bfloat16,
    )


def test_an_iterable_dataset_is_refused():
    _, _, (x, y) = _setup()

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(zip(x, y, strict=True))

    _refused_before_recording("needs len\\(data\\) and data\\[i\\]", data=Stream())
