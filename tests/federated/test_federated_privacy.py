"""User-level accounting of federated rounds: the plan's event, the record-level epsilon of the
same plan over users, the law of the noise each round adds, and an audit with a planted bug."""

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from _fed_reference import ce, mlp, toy_data  # noqa: E402

from privopt.accounting import PrivacyLedger  # noqa: E402
from privopt.federated import UserData, federated_plan, train_federated  # noqa: E402
from privopt.torch import build_plan  # noqa: E402


@pytest.mark.filterwarnings("ignore::privopt.noise.SensitivityUpperBoundWarning")  # tree: stated
@pytest.mark.parametrize("mechanism", ["dpsgd", "nu-dpftrl", "tree", "banded"])
def test_epsilon_is_the_record_level_accounting_of_the_plan_over_users(mechanism):
    x, y, ids = toy_data()
    data = UserData.from_records(x, y, ids)
    n, eps, delta = data.num_users, 2.0, 1e-3
    acc = "rdp" if mechanism == "dpsgd" else "auto"  # RDP: the fast accountant of Poisson
    plan, _ = federated_plan(mechanism, n, cohort_size=6, epochs=3, clip_norm=0.5)
    plan = plan.calibrate(eps, delta, accountant=acc)
    result = train_federated(mlp(), ce, data, plan, delta=delta, seed=0, local_steps=2,
                             accountant=acc)  # fmt: skip
    record_plan, _ = build_plan(mechanism, n, batch_size=6, epochs=3, clip_norm=0.5)
    record_plan = record_plan.calibrate(eps, delta, accountant=acc)
    ledger = PrivacyLedger("zero-out")
    ledger.record(record_plan.event())
    assert result.epsilon <= eps
    assert result.epsilon == ledger.epsilon(delta, acc)
    assert [e.event for e in result.ledger.entries] == [plan.event()]
    event, record_event = plan.event(), record_plan.event()
    assert dataclasses.replace(event, label="") == dataclasses.replace(record_event, label="")
    report = result.report
    assert result.privacy_unit == "user" and report.neighbouring == "user-level zero-out"
    assert "all the records of one user" in report.neighbouring_description
    assert any(a.startswith("privacy unit: the user; 24 users") for a in report.assumptions)
    assert any("whatever its number of records" in a for a in report.assumptions)


def test_user_level_replace_one_doubles_the_sensitivity():
    plan, _ = federated_plan("nu-dpftrl", 24, cohort_size=6, epochs=3, clip_norm=0.5,
                             neighbouring="replace-one")  # fmt: skip
    zero, _ = federated_plan("nu-dpftrl", 24, cohort_size=6, epochs=3, clip_norm=0.5)
    assert plan.sensitivity == 2 * zero.sensitivity
    with pytest.raises(ValueError, match="zero-out"):
        federated_plan("dpsgd", 24, cohort_size=6, epochs=3, clip_norm=0.5,
                       neighbouring="replace-one")  # fmt: skip


def _increments(plan, seeds, dim_in=4):
    """Per-round server moves with every delta zero (client_lr=0, SGD without momentum, rate 1):
    exactly the noise of each round divided by the plan's divisor. Shape (seeds, T, dim)."""
    users = plan.num_records
    x = torch.zeros(users, dim_in, dtype=torch.float64)
    data = UserData.from_records(x, torch.zeros(users, dtype=torch.float64), list(range(users)))
    out = []
    for seed in seeds:
        model = torch.nn.Linear(dim_in, 1).double()
        start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        seen = []  # the model before each round, read by the server-rate schedule

        def rate(t, model=model, seen=seen):
            seen.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
            return 1.0

        train_federated(model, lambda o, t: (o[:, 0] - t) ** 2, data, plan, delta=1e-3, seed=seed,
                        client_lr=0.0, server_lr=rate, server_momentum=0.0)  # fmt: skip
        seen.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
        points = torch.stack(seen[1:])  # the model before rounds 1..T-1 and after round T-1
        moves = torch.diff(torch.cat([start[None], points]), dim=0)
        out.append(moves.numpy())
    return np.stack(out)


def _covariance_error(samples, target):
    """Relative Frobenius error of the empirical covariance over rounds (zero-mean noise)."""
    flat = samples.transpose(0, 2, 1).reshape(-1, samples.shape[1])  # (seeds x dim, T)
    empirical = flat.T @ flat / len(flat)
    return np.linalg.norm(empirical - target) / np.linalg.norm(target), len(flat)


@pytest.mark.parametrize("mechanism", ["nu-dpftrl", "dpsgd"])
def test_the_noise_of_each_round_has_the_mechanisms_law(mechanism):
    plan, _ = federated_plan(mechanism, 12, cohort_size=4, epochs=2, clip_norm=0.5,
                             sampling="fixed")  # fmt: skip
    plan = plan.calibrate(3.0, 1e-3)
    samples = _increments(plan, range(120))
    b = plan.mechanism.decoder_matrix(plan.steps)
    scale = (plan.noise_std / plan.divisor) ** 2
    error, count = _covariance_error(samples, scale * b @ b.T)
    assert error < 4.0 / np.sqrt(count)
    # the test can fail: half the std, or independent noise for a correlated mechanism
    assert _covariance_error(samples, scale / 4 * b @ b.T)[0] > 0.5
    if mechanism != "dpsgd":
        assert _covariance_error(samples, scale * np.eye(plan.steps))[0] > 4.0 / np.sqrt(count)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::privopt.noise.SensitivityUpperBoundWarning")  # tree: stated
@pytest.mark.parametrize("mechanism", ["blt", "tree", "banded"])
def test_the_noise_of_every_correlated_mechanism_has_its_law(mechanism):
    plan, _ = federated_plan(mechanism, 12, cohort_size=3, epochs=3, clip_norm=0.5)
    plan = plan.calibrate(3.0, 1e-3)
    samples = _increments(plan, range(300))
    b = plan.mechanism.decoder_matrix(plan.steps)
    error, count = _covariance_error(samples, (plan.noise_std / plan.divisor) ** 2 * b @ b.T)
    assert error < 4.0 / np.sqrt(count)


def test_the_report_states_where_the_randomness_came_from():
    from privopt.noise import SECRET_SEED_ASSUMPTION, SECURE_ASSUMPTION

    x, y, ids = toy_data()
    data = UserData.from_records(x, y, ids)
    plan, _ = federated_plan("nu-dpftrl", data.num_users, cohort_size=6, epochs=1, clip_norm=1)
    plan = plan.calibrate(4.0, 1e-3)
    secure = train_federated(mlp(), ce, data, plan, delta=1e-3, secure=True).report
    seeded = train_federated(mlp(), ce, data, plan, delta=1e-3, seed=3).report
    assert SECURE_ASSUMPTION in secure.assumptions
    assert SECRET_SEED_ASSUMPTION not in secure.assumptions
    assert SECRET_SEED_ASSUMPTION in seeded.assumptions


def test_cyclic_poisson_over_users_is_accounted_by_the_amplified_banded_event():
    from privopt.noise import cyclic_poisson_event

    x, y, ids = toy_data(num_users=60)
    data = UserData.from_records(x, y, ids)
    plan, choices = federated_plan("banded", 60, cohort_size=6, epochs=3, clip_norm=1.0,
                                   sampling="cyclic-poisson", groups=5)  # fmt: skip
    assert choices["rate"] == 0.5 and choices["bands"] <= 5 and plan.steps == 30
    plan = plan.calibrate(4.0, 1e-3, accountant="rdp")
    want = cyclic_poisson_event(plan.mechanism, 30, groups=5, sample_rate=0.5,
                                noise_multiplier=plan.noise_multiplier)  # fmt: skip
    assert dataclasses.replace(plan.event(), label="") == dataclasses.replace(want, label="")
    assert plan.noise_std == plan.noise_multiplier * plan.mechanism.sensitivity(30)
    result = train_federated(mlp(), ce, data, plan, delta=1e-3, seed=0, accountant="rdp")
    assert result.epsilon <= 4.0 and result.report.neighbouring == "user-level zero-out"
    assert any("amplified by cyclic Poisson" in a for a in result.report.assumptions)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({}, "needs groups"),
        ({"groups": 11}, "groups <= N // cohort_size = 10"),
        ({"groups": 5, "mechanism": "blt"}, "banded mechanisms"),
        ({"groups": 5, "sampling": "fixed"}, "groups applies to"),
    ],
)
def test_cyclic_poisson_arguments_are_checked(kwargs, message):
    args = {"mechanism": "banded", "sampling": "cyclic-poisson", **kwargs}
    with pytest.raises(ValueError, match=message):
        federated_plan(args.pop("mechanism"), 60, cohort_size=6, epochs=3, clip_norm=1.0, **args)
