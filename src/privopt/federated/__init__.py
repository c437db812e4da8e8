"""Federated rounds with user-level differential privacy, simulated in one process.

The privacy unit is the user: a group of records named by a user id
(:class:`UserData.from_records` refuses records without one). Each round a cohort of users,
drawn by a :class:`~privopt.training.TrainingPlan` over users (:func:`federated_plan`), trains
locally from the server model; each user's model delta is clipped to G, the server adds the
plan's noise (independent, or correlated: BLT, banded, nu-DP-FTRL, optimal CC, tree with
restarts) to the sum and steps a server optimiser (:func:`train_federated`). The plan is
calibrated once by the training core; the ledger's privacy unit is the user
(``PrivacyLedger(..., unit="user")``), so the report is the accounting of the same plan over
users with the relation named ``"user-level zero-out"``.

>>> import torch
>>> from privopt.federated import UserData, federated_plan, train_federated
>>> x, y = torch.randn(60, 3, generator=torch.Generator().manual_seed(0)), torch.zeros(60)
>>> data = UserData.from_records(x, y, users=[i % 20 for i in range(60)])
>>> plan, _ = federated_plan("nu-dpftrl", data.num_users, cohort_size=5, epochs=2, clip_norm=1.0)
>>> plan = plan.calibrate(epsilon=4.0, delta=1e-3)
>>> model = torch.nn.Linear(3, 1)
>>> loss = lambda out, t: (out[:, 0] - t) ** 2
>>> result = train_federated(model, loss, data, plan, delta=1e-3, seed=0)
>>> result.privacy_unit, result.neighbouring, result.rounds, result.epsilon <= 4.0
('user', 'user-level zero-out', 8, True)
"""

from privopt.federated.clients import client_deltas, clip_user_deltas
from privopt.federated.data import UserData
from privopt.federated.plan import (
    PRIVACY_UNIT,
    federated_plan,
    user_level_assumptions,
    user_level_relation,
)
from privopt.federated.server import FederatedResult, train_federated

__all__ = [
    "PRIVACY_UNIT",
    "FederatedResult",
    "UserData",
    "client_deltas",
    "clip_user_deltas",
    "federated_plan",
    "train_federated",
    "user_level_assumptions",
    "user_level_relation",
]
