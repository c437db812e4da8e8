"""Records grouped by user: refusals, grouping, local batch positions; argument checks."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from _fed_reference import ce, mlp, toy_data  # noqa: E402

from privopt.federated import UserData, federated_plan, train_federated  # noqa: E402


@pytest.mark.parametrize("missing", [None, float("nan"), "", "  "])
def test_records_without_a_user_id_are_refused_by_count(missing):
    ids = ["a", "b", missing, "a"]
    with pytest.raises(ValueError, match=r"^1 of 4 records have no user id"):
        UserData.from_records(torch.zeros(4, 2), torch.zeros(4), ids)


def test_one_id_per_record_and_tensors_are_required():
    with pytest.raises(ValueError, match="one user id per record"):
        UserData.from_records(torch.zeros(4, 2), torch.zeros(4), ["a", "b"])
    with pytest.raises(ValueError, match="one user id per record"):
        UserData.from_records(torch.zeros(4, 2), torch.zeros(4), None)
    with pytest.raises(ValueError, match="torch tensors"):
        UserData.from_records(np.zeros((4, 2)), torch.zeros(4), list("abcd"))
    with pytest.raises(ValueError, match="one target per record"):
        UserData.from_records(torch.zeros(4, 2), torch.zeros(3), list("abcd"))
    with pytest.raises(ValueError, match="hashable"):
        UserData.from_records(torch.zeros(2, 2), torch.zeros(2), [{1}, {2}])


def test_records_are_grouped_by_first_appearance_keeping_their_order():
    x = torch.arange(6.0)[:, None]
    data = UserData.from_records(x, torch.arange(6), ["b", "a", "b", 7, "a", "b"])
    assert data.num_users == 3 and data.num_records == 6
    assert data.counts.tolist() == [3, 2, 1] and data.offsets.tolist() == [0, 3, 5]
    assert data.targets.tolist() == [0, 2, 5, 1, 4, 3]


def test_local_batches_cycle_each_users_records():
    data = UserData.from_records(torch.zeros(8, 1), torch.zeros(8), [0] * 5 + [1] * 2 + [2])
    rows, weights = data.local_batches(np.array([0, 1, 2]), local_steps=3, local_batch_size=2)
    assert rows[0].tolist() == [[0, 1], [2, 3], [4, 0]]  # positions (2j + i) mod 5
    assert rows[1].tolist() == [[5, 6], [5, 6], [5, 6]]
    assert rows[2, :, 0].tolist() == [7, 7, 7]
    assert weights[2, :, 1].tolist() == [0, 0, 0] and weights[2, :, 0].tolist() == [1, 1, 1]
    assert np.allclose(weights[:2], 0.5)
    full, w = data.local_batches(np.array([0, 2]), local_steps=1, local_batch_size=None)
    assert full[0, 0].tolist() == [0, 1, 2, 3, 4] and math.isclose(w[0, 0, 0], 0.2)
    assert w[1, 0].tolist() == [1, 0, 0, 0, 0]


def _setup():
    x, y, ids = toy_data()
    data = UserData.from_records(x, y, ids)
    plan, _ = federated_plan("dpsgd", data.num_users, cohort_size=6, epochs=1, clip_norm=1.0)
    return data, plan


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"local_steps": 0}, "local_steps"),
        ({"local_batch_size": 0}, "local_batch_size"),
        ({"client_lr": -1.0}, "client_lr"),
        ({"server_lr": 0.0}, "server_lr"),
        ({"server_momentum": 1.0}, "server_momentum"),
        ({"zero_linf_above": 0.0}, "zero_linf_above"),
        ({"client_batching": "threads"}, "client_batching"),
        ({"seed": -1}, "seed"),
        ({"seed": None}, "exactly one of seed"),
        ({"secure": True}, "exactly one of seed"),
        ({"delta": None, "private": True}, "Expected delta"),
        ({"delta": 0.5, "private": True}, "delta < 1/N"),
        ({"loss_fn": 3}, "loss_fn"),
    ],
)
def test_every_argument_is_checked_with_one_line(kwargs, message):
    data, plan = _setup()
    args = {"private": False, "seed": 0, "loss_fn": ce, **kwargs}
    loss_fn = args.pop("loss_fn")
    with pytest.raises(ValueError, match=message) as info:
        train_federated(mlp(), loss_fn, data, plan, **args)
    assert "\n" not in str(info.value)


def test_an_unknown_accountant_is_refused_before_training():
    x, y, ids = toy_data()
    data = UserData.from_records(x, y, ids)
    plan, _ = federated_plan("nu-dpftrl", data.num_users, cohort_size=6, epochs=1, clip_norm=1)
    plan = plan.calibrate(2.0, 1e-3)
    with pytest.raises(ValueError, match="Expected accountant in"):
        train_federated(mlp(), ce, data, plan, delta=1e-3, seed=0, accountant="bogus")


def test_the_plan_must_be_over_the_datas_users_and_calibrated():
    data, plan = _setup()
    other, _ = federated_plan("dpsgd", data.num_users + 1, cohort_size=6, epochs=1, clip_norm=1)
    with pytest.raises(ValueError, match="over 25 users but the data have 24"):
        train_federated(mlp(), ce, data, other, private=False, seed=0)
    with pytest.raises(ValueError, match="calibrate"):
        train_federated(mlp(), ce, data, plan, delta=1e-3, seed=0)


def test_models_with_buffers_and_per_batch_losses_are_refused():
    data, plan = _setup()
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).double()
    with pytest.raises(ValueError, match="buffers"):
        train_federated(model, ce, data, plan, private=False, seed=0)
    mean_loss = lambda out, y: torch.nn.functional.cross_entropy(out, y)  # noqa: E731
    with pytest.raises(ValueError, match="one loss per example"):
        train_federated(mlp(), mean_loss, data, plan, private=False, seed=0)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"mechanism": "fancy"}, "Expected mechanism"),
        ({"cohort_size": 0}, "cohort_size"),
        ({"cohort_size": 100}, "larger than the 24 users"),
        ({"epochs": 1.5}, "epochs"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"neighbouring": "add-remove"}, "number of users private"),
        ({"sampling": "cyclic"}, "sampling"),
        ({"sampling": "poisson", "mechanism": "blt"}, "dpsgd"),
    ],
)
def test_plan_arguments_are_checked(kwargs, message):
    args = {"mechanism": "dpsgd", "cohort_size": 6, "epochs": 1, "clip_norm": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        federated_plan(args.pop("mechanism"), 24, **args)
