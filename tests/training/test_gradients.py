"""The one gradient abstraction: closed forms equal a brute-force per-example computation, and
label conventions are checked once per fit (a ±1 / {0, 1} mix-up is an error)."""

import numpy as np
import pytest

from privopt.clipping import clip_rows
from privopt.losses import get_loss
from privopt.training import (
    SGD,
    FixedBatches,
    LogisticRegressionModel,
    LossModel,
    TrainingPlan,
    as_model,
    run,
)


@pytest.mark.parametrize("name", ["hinge", "logistic", "squared_hinge", "huber", "absolute"])
def test_loss_model_equals_clipped_per_example_gradients(name):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    loss = get_loss(name)
    y = np.where(rng.random(50) < 0.5, -1.0, 1.0) if loss.task == "classification" else X[:, 0]
    w = rng.normal(size=4)
    model = LossModel(name)
    if name != "logistic":  # "logistic" names the {0, 1} model of dp_ftrl
        assert isinstance(as_model(name), LossModel)
    grads = loss.derivative(X @ w, y)[:, None] * X  # per-example gradients, brute force
    for clip in (0.1, 1.0, 1e6):
        total, fraction = model.batch_gradient_sum(
            w, X, y, np.arange(50), clip, model.prepare(X, y)
        )
        np.testing.assert_allclose(total, clip_rows(grads, clip).sum(axis=0), rtol=1e-12)
        norms = np.linalg.norm(grads, axis=1)
        assert fraction == pytest.approx(np.mean(norms > clip))


def test_label_conventions_are_enforced():
    X = np.ones((4, 2))
    with pytest.raises(ValueError, match=r"\{0, 1\}.*\(y \+ 1\) / 2"):
        LogisticRegressionModel().prepare(X, np.array([-1.0, 1.0, 1.0, -1.0]))
    with pytest.raises(ValueError):
        LossModel("hinge").prepare(X, np.array([0.0, 1.0, 1.0, 0.0]))
    plan = TrainingPlan(4, FixedBatches(2), 1.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="labels"):
        run(plan, "logistic", SGD(0.1), X, np.array([-1.0, 1, 1, -1]),
            rng=np.random.default_rng(0), delta=1e-6)  # fmt: skip
    with pytest.raises(ValueError, match=r"privopt\.losses"):
        as_model("no-such-loss")
