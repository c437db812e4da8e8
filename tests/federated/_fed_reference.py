"""A plain float64 federated server loop (a loop over users, no batching), and test data."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def toy_data(num_users=24, dim=4, classes=3, seed=0, max_records=9):
    """Records of users with 1..max_records records each, ids as shuffled strings."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, max_records + 1, size=num_users)
    ids = np.repeat([f"user-{u}" for u in range(num_users)], counts)
    order = rng.permutation(len(ids))
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(len(ids), dim, generator=gen, dtype=torch.float64) * 4 - 2
    y = torch.randint(0, classes, (len(ids),), generator=gen)
    return x[order], y[order], ids[order].tolist()


def mlp(seed=0, dim=4, classes=3, dtype=torch.float64):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(dim, 5), torch.nn.Tanh(), torch.nn.Linear(5, classes)
    ).to(dtype)


def ce(outputs, targets):
    return torch.nn.functional.cross_entropy(outputs, targets, reduction="none")


def reference_rounds(
    model, x, y, ids, plan, *, seed, local_steps, local_batch_size, client_lr, server_lr, momentum
):
    """Non-private federated averaging written plainly: every user one after another, float64.

    Users are numbered by first appearance of their id; the cohorts are the plan's schedule
    drawn first from default_rng(seed); local step j of a user with n records reads positions
    (j b + i) mod n, i < min(b, n), of its records in their original order."""
    users = list(dict.fromkeys(ids))
    records = {u: [i for i, v in enumerate(ids) if v == u] for u in users}
    w = [p.detach().clone().to(torch.float64) for p in model.parameters()]
    velocity = [torch.zeros_like(p) for p in w]
    rng = np.random.default_rng(seed)
    for cohort in plan.batches.schedule(plan.num_records, rng):
        total = [torch.zeros_like(p) for p in w]
        for u in cohort:
            rows = records[users[int(u)]]
            n = len(rows)
            b = n if local_batch_size is None else local_batch_size
            local = [p.clone() for p in w]
            for j in range(local_steps):
                batch = [rows[(j * b + i) % n] for i in range(min(b, n))]
                local = [p.requires_grad_() for p in local]
                out = torch.func.functional_call(
                    model,
                    dict(zip([n_ for n_, _ in model.named_parameters()], local, strict=True)),
                    (x[batch],),
                )
                loss = ce(out, y[batch]).mean()
                grads = torch.autograd.grad(loss, local)
                local = [(p - client_lr * g).detach() for p, g in zip(local, grads, strict=True)]
            delta = [a - b_ for a, b_ in zip(local, w, strict=True)]
            norm = float(torch.sqrt(sum((d**2).sum() for d in delta)))
            factor = min(1.0, plan.clip_norm / norm) if norm > 0 else 1.0
            total = [t + factor * d for t, d in zip(total, delta, strict=True)]
        for k in range(len(w)):
            g = -total[k] / plan.divisor
            velocity[k] = momentum * velocity[k] + g
            w[k] = w[k] - server_lr * velocity[k]
    return w
