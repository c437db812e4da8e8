"""Checkpoints hold no trust they did not earn (issue 33, item 2): the ledger is the plan's, the
position must be within the plan, a broken or foreign file is refused in one line, and nothing
changes unless the whole load succeeds."""

import pytest

torch = pytest.importorskip("torch")
from privopt.torch import PrivateTrainer  # noqa: E402
from torch import nn  # noqa: E402


def _trainer(optimizer="sgd", seed=3):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(200, 4, generator=generator)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = (
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if optimizer == "sgd"
        else torch.optim.Adam(model.parameters(), lr=0.01)
    )
    return PrivateTrainer(
        model, opt, (x, y), epsilon=2.0, delta=1e-5, epochs=2, batch_size=25, clip_norm=1.0,
        mechanism="optimal-cc", seed=seed,
    )  # fmt: skip


def _weights(trainer):
    return [p.detach().clone() for p in trainer.model.parameters()]


def _unchanged(trainer, before):
    return all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    trainer = _trainer()
    for _ in range(5):
        trainer.step()
    path = tmp_path_factory.mktemp("ckpt") / "run.pt"
    trainer.save(path)
    return path, trainer.state_dict()


def test_an_honest_resume_reports_the_uninterrupted_epsilon(checkpoint):
    path, _ = checkpoint
    whole = _trainer()
    whole.fit()
    resumed = _trainer(seed=9)
    resumed.load(path)
    assert resumed.step_count == 5
    resumed.fit()
    assert resumed.report.epsilon == whole.report.epsilon
    assert resumed.ledger.events == whole.ledger.events


def test_a_ledger_in_the_file_is_never_read(checkpoint):
    _, state = checkpoint
    tampered = {**state, "ledger": {"neighbouring": "zero-out", "entries": [], "assumptions": []}}
    trainer = _trainer(seed=9)
    trainer.load_state_dict(tampered)
    assert trainer.report.epsilon > 1.9  # the plan's event, not the emptied ledger's 0.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"step": -1}, "not within this plan's 0..16 steps"),
        ({"step": 10**9}, "not within this plan's"),
        ({"step": 2.5}, "not within this plan's"),
        ({"format": "something else"}, r"Not a privopt\.torch checkpoint"),
        ({"noise": {"key": 1}}, "could not be restored"),
        ({"model": {"0.weight": torch.zeros(1)}}, "could not be restored"),
    ],
)
def test_tampered_checkpoints_are_refused_and_change_nothing(checkpoint, change, message):
    _, state = checkpoint
    trainer = _trainer(seed=9)
    trainer.step()
    before, step = _weights(trainer), trainer.step_count
    with pytest.raises(ValueError, match=message) as info:
        trainer.load_state_dict({**state, **change})
    assert "\n" not in str(info.value)
    assert _unchanged(trainer, before) and trainer.step_count == step
    trainer.step()  # still usable


def test_a_missing_field_is_named(checkpoint):
    _, state = checkpoint
    broken = {k: v for k, v in state.items() if k != "noise"}
    with pytest.raises(ValueError, match=r"misses \['noise'\]"):
        _trainer().load_state_dict(broken)


def test_a_file_that_is_not_a_checkpoint_is_one_line(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00\x01 not a checkpoint")
    trainer = _trainer()
    before = _weights(trainer)
    with pytest.raises(ValueError, match=r"is not a privopt\.torch checkpoint"):
        trainer.load(junk)
    torch.save({"a": 1}, tmp_path / "dict.pt")
    with pytest.raises(ValueError, match=r"Not a privopt\.torch checkpoint"):
        trainer.load(tmp_path / "dict.pt")
    with pytest.raises(ValueError, match="No checkpoint at"):
        trainer.load(tmp_path / "missing.pt")
    assert _unchanged(trainer, before)


def test_another_optimizer_is_refused_before_the_model_changes(checkpoint):
    path, _ = checkpoint
    trainer = _trainer("adam", seed=9)
    before = _weights(trainer)
    with pytest.raises(ValueError, match="SGD optimizer, this trainer has a Adam"):
        trainer.load(path)
    assert _unchanged(trainer, before)
