"""Issue 27: EmbeddingBag in its 1-D input + offsets form, given as the model's input, is refused
by name with the fix (never a raw shape error); the fixes it names are exact against a loop over
the bags in the offsets form (each bag alone, offsets [0])."""

import pytest

torch = pytest.importorskip("torch")
from privopt.torch import LayoutError, check_model, clipped_grad_sum  # noqa: E402
from torch import nn  # noqa: E402

SIZES = ([2, 3, 1], [1, 1, 1], [3, 0, 1, 2], [4])


class Bags(nn.Module):
    def __init__(self, mode="sum", padding_idx=None):
        super().__init__()
        torch.manual_seed(0)
        self.bag = nn.EmbeddingBag(10, 4, mode=mode, padding_idx=padding_idx)
        self.head = nn.Linear(4, 2)

    def forward(self, ids, offsets_or_weights=None):
        if ids.dim() == 1:
            return self.head(torch.tanh(self.bag(ids, offsets_or_weights)))
        return self.head(torch.tanh(self.bag(ids, per_sample_weights=offsets_or_weights)))


def _mse(out, y):
    return ((out - y) ** 2).sum(1)


def _bags(sizes):
    gen = torch.Generator().manual_seed(len(sizes))
    ids = torch.randint(1, 10, (sum(sizes),), generator=gen)  # 0 is kept for the padding
    offsets = torch.tensor([0, *torch.tensor(sizes).cumsum(0)[:-1].tolist()])
    return ids, offsets


@pytest.mark.parametrize("sizes", SIZES, ids=str)
def test_offsets_from_the_model_input_are_refused_by_name(sizes):
    ids, offsets = _bags(sizes)
    model = Bags().double()
    y = torch.randn(len(sizes), 2, dtype=torch.float64)
    with pytest.raises(LayoutError, match=r"bag \(EmbeddingBag\).*padding_idx"):
        clipped_grad_sum(model, _mse, (ids, offsets), y, 1.0)
    with pytest.raises(ValueError, match=r"EmbeddingBag"):
        check_model(model, _mse, ((ids, offsets), y))


def _reference(model, sizes, y, clip, weights=None):
    """The offsets form, one bag at a time (each its own batch of one), clipped, summed."""
    ids, offsets = _bags(sizes)
    params = dict(model.named_parameters())
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    for i, size in enumerate(sizes):
        start = int(offsets[i])
        one = ids[start : start + size]
        if weights is None:
            out = model.head(torch.tanh(model.bag(one, torch.tensor([0]))))
        else:
            w = weights[i, :size]
            out = model.head(torch.tanh(model.bag(one, torch.tensor([0]), per_sample_weights=w)))
        grads = torch.autograd.grad(_mse(out, y[i : i + 1]).sum(), list(params.values()))
        norm = float(sum((g**2).sum() for g in grads)) ** 0.5
        for n, g in zip(params, grads, strict=True):
            total[n] += min(1.0, clip / norm) * g if norm > 0 else g
    return total


def _padded(sizes):
    ids, offsets = _bags(sizes)
    out = torch.zeros(len(sizes), max(sizes), dtype=torch.long)
    for i, size in enumerate(sizes):
        out[i, :size] = ids[int(offsets[i]) : int(offsets[i]) + size]
    return out


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("sizes", [[2, 3, 1], [3, 1, 1, 2]], ids=str)
def test_padding_idx_fix_is_exact(mode, sizes):
    model = Bags(mode, padding_idx=0).double()
    y = torch.randn(len(sizes), 2, dtype=torch.float64)
    got = clipped_grad_sum(model, _mse, _padded(sizes), y, 0.5)
    want = _reference(model, sizes, y, 0.5)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-9, atol=1e-12)


def test_per_sample_weights_fix_is_exact():
    sizes = [2, 3, 1]
    model = Bags("sum").double()
    ids = _padded(sizes)
    weights = torch.rand(len(sizes), max(sizes), dtype=torch.float64)
    weights = weights * (torch.arange(max(sizes)) < torch.tensor(sizes)[:, None])
    y = torch.randn(len(sizes), 2, dtype=torch.float64)
    got = clipped_grad_sum(model, _mse, (ids, weights), y, 0.5)
    want = _reference(model, sizes, y, 0.5, weights)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-9, atol=1e-12)
