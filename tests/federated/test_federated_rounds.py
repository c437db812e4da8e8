"""The batched server loop against a plain float64 loop over users (noise off), clipping, and
the bound on one user's influence."""

import pytest

torch = pytest.importorskip("torch")
from _fed_reference import ce, mlp, reference_rounds, toy_data  # noqa: E402

from privopt.federated import (  # noqa: E402
    UserData,
    clip_user_deltas,
    federated_plan,
    train_federated,
)


def _run(
    mechanism,
    *,
    batching,
    local_steps=3,
    local_batch_size=2,
    momentum=0.9,
    seed=5,
    sampling="auto",
    clip_norm=0.05,
):
    x, y, ids = toy_data()
    data = UserData.from_records(x, y, ids)
    groups = 2 if sampling == "cyclic-poisson" else None  # parts of 12 users, q = 0.5
    plan, _ = federated_plan(mechanism, data.num_users, cohort_size=6, epochs=2,
                             clip_norm=clip_norm, sampling=sampling, groups=groups)  # fmt: skip
    model = mlp()
    start = mlp()
    kwargs = dict(
        local_steps=local_steps, local_batch_size=local_batch_size, client_lr=0.7, server_lr=0.8
    )
    result = train_federated(
        model,
        ce,
        data,
        plan,
        server_momentum=momentum,
        private=False,
        client_batching=batching,
        seed=seed,
        **kwargs,
    )
    want = reference_rounds(start, x, y, ids, plan, seed=seed, momentum=momentum, **kwargs)
    return result, want


@pytest.mark.parametrize("batching", ["vmap", "loop"])
@pytest.mark.parametrize(
    "mechanism,sampling",
    [("nu-dpftrl", "auto"), ("dpsgd", "auto"), ("dpsgd", "fixed"), ("banded", "cyclic-poisson")],
)
def test_noise_off_equals_the_plain_loop_over_users(batching, mechanism, sampling):
    result, want = _run(mechanism, batching=batching, sampling=sampling)
    got = [p.detach() for p in result.model.parameters()]
    assert result.info["client_batching"] == batching
    assert result.report is None and result.privacy_unit == "user"
    assert max(float((a - b).abs().max()) for a, b in zip(got, want, strict=True)) < 1e-9


@pytest.mark.parametrize("local_batch_size,local_steps", [(None, 1), (None, 2), (4, 3), (1, 5)])
def test_local_batches_match_the_reference_for_every_size(local_batch_size, local_steps):
    result, want = _run(
        "tree",
        batching="vmap",
        local_steps=local_steps,
        local_batch_size=local_batch_size,
        momentum=0.0,
        clip_norm=10.0,
    )
    got = [p.detach() for p in result.model.parameters()]
    assert max(float((a - b).abs().max()) for a, b in zip(got, want, strict=True)) < 1e-9


def test_the_reference_is_sensitive_to_clipping():
    # the comparison can fail: clipping at another norm moves the model
    result, _ = _run("nu-dpftrl", batching="vmap", clip_norm=0.05)
    _, want = _run("nu-dpftrl", batching="vmap", clip_norm=0.5)
    got = [p.detach() for p in result.model.parameters()]
    assert max(float((a - b).abs().max()) for a, b in zip(got, want, strict=True)) > 1e-4


def test_clipped_user_deltas_have_norm_at_most_g():
    gen = torch.Generator().manual_seed(0)
    scales = torch.logspace(-8, 8, 200, dtype=torch.float64)[:, None]
    deltas = torch.rand(200, 37, generator=gen, dtype=torch.float64) * scales
    for g in (1e-3, 0.1, 1.0, 3.7):
        clipped, zeroed = clip_user_deltas(deltas, g)
        norms = torch.linalg.vector_norm(clipped, dim=1)
        assert zeroed == 0 and bool((norms <= g).all())
        small = torch.linalg.vector_norm(deltas, dim=1) <= g
        assert torch.equal(clipped[small], deltas[small])  # below G: untouched
        assert bool(torch.isclose(norms[~small], torch.tensor(g, dtype=torch.float64)).all())


def test_non_finite_and_guarded_deltas_contribute_zero():
    deltas = torch.tensor([[1.0, float("nan")], [200.0, 0.0], [0.3, 0.4]], dtype=torch.float64)
    clipped, zeroed = clip_user_deltas(deltas, 1.0, zero_linf_above=100.0)
    assert zeroed == 2
    assert torch.equal(clipped[:2], torch.zeros(2, 2, dtype=torch.float64))
    assert torch.equal(clipped[2], deltas[2])


def _one_round(data, clip_norm=0.5):
    plan, _ = federated_plan(
        "dpsgd",
        data.num_users,
        cohort_size=data.num_users,
        epochs=1,
        clip_norm=clip_norm,
        sampling="fixed",
    )
    model = mlp()
    train_federated(
        model,
        ce,
        data,
        plan,
        private=False,
        seed=1,
        local_steps=3,
        client_lr=5.0,
        server_lr=1.0,
        server_momentum=0.0,
    )
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), plan


def test_a_user_with_many_records_moves_a_round_by_one_clipped_contribution():
    x, y, ids = toy_data()
    base, plan = _one_round(UserData.from_records(x, y, ids))
    # user-0's records replaced by 500 records of another kind (many records, one user)
    keep = [i for i, u in enumerate(ids) if u != "user-0"]
    gen = torch.Generator().manual_seed(3)
    big_x = torch.rand(500, 4, generator=gen, dtype=torch.float64) * 40
    big_y = torch.zeros(500, dtype=torch.long)
    ids2 = ["user-0"] * 500 + [ids[i] for i in keep]
    other, _ = _one_round(
        UserData.from_records(torch.cat([big_x, x[keep]]), torch.cat([big_y, y[keep]]), ids2)
    )
    moved = float(torch.linalg.vector_norm(base - other)) * plan.divisor
    assert 0.0 < moved <= 2 * plan.clip_norm + 1e-12  # replace-one: at most 2 G per round
    # without user-level clipping (record-level would be ~500 times larger) the bound breaks
    assert moved > 0.5 * plan.clip_norm


def test_lstm_falls_back_to_the_loop_and_matches_it():
    torch.manual_seed(0)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(7, 4)
            self.lstm = torch.nn.LSTM(4, 4, batch_first=True)
            self.out = torch.nn.Linear(4, 7)

        def forward(self, tokens):
            h, _ = self.lstm(self.emb(tokens))
            return self.out(h[:, -1])

    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 7, (40, 3), generator=gen)
    y = torch.randint(0, 7, (40,), generator=gen)
    data = UserData.from_records(x, y, [i % 8 for i in range(40)])
    plan, _ = federated_plan("nu-dpftrl", 8, cohort_size=4, epochs=1, clip_norm=1.0)
    runs = {}
    for batching in ("auto", "loop"):
        torch.manual_seed(0)
        model = Tiny()
        result = train_federated(
            model, ce, data, plan, private=False, seed=0, client_batching=batching
        )
        runs[batching] = (
            torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
            result.info["client_batching"],
        )
    assert runs["auto"][1] == "loop"
    assert torch.equal(runs["auto"][0], runs["loop"][0])
    with pytest.raises(ValueError, match="client_batching='loop'"):
        torch.manual_seed(0)
        train_federated(Tiny(), ce, data, plan, private=False, seed=0, client_batching="vmap")


def test_a_torch_server_optimizer_steps_on_the_same_pseudo_gradient():
    x, y, ids = toy_data()
    data = UserData.from_records(x, y, ids)
    plan, _ = federated_plan("banded", data.num_users, cohort_size=6, epochs=1, clip_norm=0.05)
    models = [mlp(), mlp()]
    train_federated(models[0], ce, data, plan, private=False, seed=2, server_lr=0.8)
    train_federated(
        models[1],
        ce,
        data,
        plan,
        private=False,
        seed=2,
        server_optimizer=lambda p: torch.optim.SGD(p, lr=0.8, momentum=0.9),
    )
    a, b = (torch.cat([p.detach().reshape(-1) for p in m.parameters()]) for m in models)
    assert float((a - b).abs().max()) < 1e-12
    with pytest.raises(ValueError, match="own rate and momentum"):
        train_federated(
            mlp(),
            ce,
            data,
            plan,
            private=False,
            seed=2,
            server_lr=0.5,
            server_optimizer=lambda p: torch.optim.Adam(p),
        )
