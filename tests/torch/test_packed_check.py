"""Issue 27 item 5: check_model with a PackedSequence sample, and PrivateTrainer on records that
collate to packed sequences: exact (the check passes and the step runs) or a clear refusal."""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence  # noqa: E402

from privopt.torch import PrivateTrainer, check_model  # noqa: E402
from torch import nn  # noqa: E402


class PackedLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lstm = nn.LSTM(3, 4, batch_first=True, bidirectional=True)
        self.head = nn.Linear(8, 2)

    def forward(self, packed):
        out, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True)
        return self.head(out.sum(1))  # padding is zero: the sum over each sequence's own steps


class BatchMean(PackedLSTM):
    def forward(self, packed):
        h = super().forward(packed)
        return h - h.mean(0, keepdim=True)  # mixes the examples


def _loss(out, y):
    return nn.functional.cross_entropy(out, y, reduction="none")


def _sample(enforce_sorted):
    gen = torch.Generator().manual_seed(1)
    lengths = [5, 3, 3, 1] if enforce_sorted else [2, 5, 1, 4]
    seqs = [torch.randn(n, 3, generator=gen, dtype=torch.float64) for n in lengths]
    return pack_sequence(seqs, enforce_sorted=enforce_sorted), torch.tensor([0, 1, 1, 0])


@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_check_model_on_a_packed_sample(enforce_sorted):
    found = check_model(PackedLSTM().double(), _loss, _sample(enforce_sorted))
    assert found.batch == 4 and found.exact and found.independent
    assert found.largest_error < 1e-9


def test_check_model_flags_a_packed_model_that_mixes_examples():
    with pytest.raises(ValueError, match="mixes the examples"):
        check_model(BatchMean().double(), _loss, _sample(False))


class Sequences(torch.utils.data.Dataset):
    def __init__(self, n=24):
        gen = torch.Generator().manual_seed(2)
        self.items = [
            (torch.randn(int(torch.randint(1, 6, (), generator=gen)), 3, generator=gen), i % 2)
            for i in range(n)
        ]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(batch):
    seqs, labels = zip(*batch, strict=True)
    return pack_sequence(list(seqs), enforce_sorted=False), torch.tensor(labels)


@pytest.mark.slow  # about 20 s: a probe per step (packed shapes differ) and a loop per sequence
def test_trainer_on_packed_sequences():
    model = PackedLSTM()
    loader = torch.utils.data.DataLoader(Sequences(), batch_size=8, collate_fn=collate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = PrivateTrainer(
            model, torch.optim.SGD(model.parameters(), lr=0.1), loader, epsilon=4.0,
            delta=1e-5, epochs=1, batch_size=8, clip_norm=1.0, mechanism="blt", seed=0,
        )  # fmt: skip
        before = [p.detach().clone() for p in model.parameters()]
        trainer.fit()
    assert trainer.step_count == trainer.steps
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert any("check_model passed" in line for line in trainer.report.assumptions)
