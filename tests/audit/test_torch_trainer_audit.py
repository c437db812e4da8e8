"""Issue 27: a one-run audit of ``PrivateTrainer`` on a small model with an LSTM and attention.

The model: token embedding -> ``nn.LSTM`` -> self-attention (``nn.MultiheadAttention``) -> mean
-> Linear, plus a table of canary rows registered **twice** (on its ``nn.Embedding`` and on the
parent, as DP re-implementations of RNN layers register their cells' weights): the aliased
parameter whose gradient the clipper must count once. The records:

* fillers: token sequences with a regression target (they train the LSTM and the attention);
* m canary slots, each included by a fair coin: an included canary's loss is ``-K <t_j, u>`` on
  its own table row t_j (u a fixed unit vector, K >> G), so its clipped gradient is exactly
  ``-G u`` on row j and zero elsewhere; an excluded slot is a null record (zero loss, zero
  gradient): included and excluded are zero-out neighbours.

One DP-SGD step over the whole dataset (sampling rate 1, the trainer's own calibration, plain SGD
with learning rate 1) releases ``r = (w_0 - w_1) D = sum_i clip(grad_i) + sigma G z`` on the
table; canary j's score is ``-<r_j, u>``: N(G, (sigma G)^2) when included, N(0, (sigma G)^2)
when not: the most powerful test of the claim (:func:`privopt.audit.audit_one_run`, f-DP one-run
bound at 95%).

At a claimed epsilon of 5 (delta 1e-5, m = 4000) the bound must stay below the claim (measured:
3.07); with the aliasing double count planted (the aliased table's clipped sum added twice, its
norm counted once, so the sensitivity on the table is 2G) the trainer's first-batch
``check_model`` refuses the run, and with that check switched off the audit must exceed the
claim. Simulated on Gaussian
scores over 8 seeds: honest 2.1 to 3.1, doubled 5.2 to 6.6.
"""

import types
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from privopt.audit import audit_one_run  # noqa: E402
from privopt.torch import PrivateTrainer  # noqa: E402
from privopt.torch import private_run as private_run_module  # noqa: E402
from privopt.torch.clipping import GradientClipper  # noqa: E402
from torch import nn  # noqa: E402

DELTA, CLAIM, K, TOKENS = 1e-5, 5.0, 1e3, 3


class LstmAttention(nn.Module):
    def __init__(self, canaries: int):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(8, 4)
        self.lstm = nn.LSTM(4, 4, batch_first=True)
        self.attn = nn.MultiheadAttention(4, 1, batch_first=True)
        self.head = nn.Linear(4, 1)
        self.canary = nn.Embedding(canaries + 1, 4)
        self.canary_table = self.canary.weight  # the same Parameter registered twice

    def forward(self, tokens, ids):
        h = self.lstm(self.emb(tokens))[0]
        h = self.attn(h, h, h, need_weights=False)[0]
        return self.head(torch.tanh(h).mean(1)).squeeze(1), self.canary(ids)


U = torch.full((4,), 0.5, dtype=torch.float64)  # unit vector


def loss_fn(outputs, targets):
    pred, rows = outputs
    kind, y = targets[:, 0], targets[:, 1]
    filler = (pred - y) ** 2
    canary = -K * (rows @ U.to(rows.dtype))
    return torch.where(kind == 1, canary, torch.where(kind == 0, filler, 0.0 * filler))


def _data(m: int, fillers: int, rng: np.random.Generator):
    included = rng.random(m) < 0.5
    n = fillers + m
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    tokens = torch.randint(0, 8, (n, TOKENS), generator=gen)
    ids = torch.zeros(n, dtype=torch.long)
    ids[fillers:] = torch.arange(1, m + 1)
    kind = torch.zeros(n, dtype=torch.float64)
    kind[fillers:] = torch.where(torch.as_tensor(included), 1.0, 2.0)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    return (tokens, ids, torch.stack([kind, y], 1)), included


def _double_count_aliased(monkeypatch, model):
    """The planted bug: the aliased table's clipped sum added once per registration (twice)
    while its norm counts it once, as a clipper that walks registrations instead of identities
    would: the table's sensitivity becomes 2G while the report still says G."""
    name = next(n for n, p in model.named_parameters() if p is model.canary.weight)
    original = GradientClipper.clipped_sum

    def doubled(self, *args, **kwargs):
        sums, *rest = original(self, *args, **kwargs)
        sums = dict(sums)
        sums[name] = 2 * sums[name]
        return (sums, *rest)

    monkeypatch.setattr(GradientClipper, "clipped_sum", doubled)


def _audit(m: int, fillers: int, seed: int, monkeypatch=None):
    rng = np.random.default_rng(seed)
    data, included = _data(m, fillers, rng)
    model = LstmAttention(m).double()
    if monkeypatch is not None:
        _double_count_aliased(monkeypatch, model)
    n = m + fillers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = PrivateTrainer(
            model, torch.optim.SGD(model.parameters(), lr=1.0), data, epsilon=CLAIM,
            delta=DELTA, epochs=1, batch_size=n, clip_norm=1.0, mechanism="dpsgd",
            loss_fn=loss_fn, seed=int(rng.integers(2**62)),
        )  # fmt: skip
        assert trainer.steps == 1
        before = model.canary.weight.detach().clone()
        trainer.step()
    released = (before - model.canary.weight.detach()) * trainer.plan.divisor
    scores = -(released[1:] @ U).numpy()
    return audit_one_run(scores, included, delta=DELTA), trainer, scores, included


@pytest.mark.slow
def test_trainer_audit_below_claim_and_planted_double_count_caught(monkeypatch):
    honest, trainer, _, _ = _audit(4000, 64, seed=1)
    print("honest", honest)
    assert trainer.report.epsilon <= CLAIM + 1e-9
    assert honest.epsilon_lower_bound < CLAIM
    with monkeypatch.context() as patch:
        # first line of defence: the trainer's check_model compares the clipped sum with a
        # per-example loop on the first batch and refuses before any private step
        with pytest.raises(ValueError, match="check_model: the clipped sum"):
            _audit(4000, 64, seed=1, monkeypatch=patch)
        # with the check switched off the run releases, and the audit must catch it
        skipped = types.SimpleNamespace(assumption="check_model skipped (audit control)")
        patch.setattr(private_run_module, "check_model", lambda *args, **kwargs: skipped)
        broken, *_ = _audit(4000, 64, seed=1)  # the double count is still planted
    print("double count", broken)
    assert broken.epsilon_lower_bound > CLAIM


@pytest.mark.slow  # about 30 s on one core (two trainer runs with calibration): over budget
def test_trainer_audit_small():
    """The fast sibling (m = 200: too few canaries to catch a factor of 2 at this claim): the
    honest bound stays below the claim, and the planted bug doubles the canaries' release."""
    honest, _, scores, included = _audit(200, 8, seed=2)
    assert honest.epsilon_lower_bound < CLAIM
    with pytest.MonkeyPatch.context() as patch:
        _, _, doubled, _ = _audit(200, 8, seed=2, monkeypatch=patch)
    # the same noise (same secret seed): each included canary's score grows by exactly G
    np.testing.assert_allclose(doubled - scores, included * 1.0, atol=1e-9)
