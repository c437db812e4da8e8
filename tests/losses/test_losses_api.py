"""The interface of privopt.losses: registry, dataclasses, shapes and refusals with clear messages.

Bad input fails with ``ValueError`` naming what was expected (issue 6, "Bad input"): labels not
in {-1, +1}, q < 1 (non-convex), q > 2 (not Hölder), unknown or non-convex names, unknown or
missing parameters, non-positive bounds, a negative radius and mismatched shapes.
"""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from privopt.losses import (
    LOSS_ALIASES,
    LOSS_NAMES,
    AbsoluteLoss,
    HingeLoss,
    HolderConstants,
    HuberLoss,
    LinearLoss,
    LogisticLoss,
    QNormHingeLoss,
    QNormLoss,
    SquaredHingeLoss,
    SquaredLoss,
    check_labels,
    get_loss,
)

PARAMS = {"qnorm": {"q": 1.5}, "qnorm_hinge": {"q": 1.5}}
ALL = [get_loss(name, **PARAMS.get(name, {})) for name in LOSS_NAMES]
CLASSIFIERS = [loss for loss in ALL if loss.task == "classification"]


# -- registry -----------------------------------------------------------------------------------


def test_registry_names_types_and_tasks():
    expected = {
        "squared": (SquaredLoss, "regression"),
        "absolute": (AbsoluteLoss, "regression"),
        "qnorm": (QNormLoss, "regression"),
        "huber": (HuberLoss, "regression"),
        "hinge": (HingeLoss, "classification"),
        "squared_hinge": (SquaredHingeLoss, "classification"),
        "qnorm_hinge": (QNormHingeLoss, "classification"),
        "logistic": (LogisticLoss, "classification"),
    }
    assert set(LOSS_NAMES) == set(expected)
    for loss in ALL:
        cls, task = expected[loss.name]
        assert type(loss) is cls and loss.task == task and loss.convex is True
        assert isinstance(loss, LinearLoss)
    assert LOSS_ALIASES == {"least_squares": "squared"}
    assert get_loss("least_squares") == SquaredLoss() == get_loss(" Least-Squares ")
    assert get_loss("Squared-Hinge") == SquaredHingeLoss()


def test_registry_parameters():
    assert get_loss("qnorm", q=1.25) == QNormLoss(q=1.25)
    assert get_loss("qnorm_hinge", q=2) == QNormHingeLoss(q=2.0)
    assert get_loss("huber") == HuberLoss(delta=1.0)
    assert get_loss("huber", delta=2.5).delta == 2.5
    loss = LogisticLoss()
    assert get_loss(loss) is loss


def test_losses_are_frozen_hashable_and_named():
    assert HingeLoss() == HingeLoss() and hash(QNormLoss(q=1.5)) == hash(QNormLoss(q=1.5))
    assert HingeLoss() != QNormHingeLoss(q=1.0)  # same maths, distinct names
    assert repr(HingeLoss()) == "HingeLoss()" and repr(QNormLoss(q=1.5)) == "QNormLoss(q=1.5)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        QNormLoss(q=1.5).q = 2.0
    with pytest.raises(TypeError):
        HingeLoss(q=2.0)  # hinge fixes q = 1
    # The named special cases are the q-norm losses at q = 1, 2 (no copied formulas).
    assert (HingeLoss().q, SquaredHingeLoss().q, AbsoluteLoss().q) == (1.0, 2.0, 1.0)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: get_loss("svm"), r"Unknown loss 'svm'. Known losses: squared, absolute"),
        (lambda: get_loss("ramp"), r"not convex"),
        (lambda: get_loss("sigmoid"), r"not convex"),
        (lambda: get_loss("qnorm", q=0.5), r"non-convex"),
        (lambda: get_loss("qnorm_hinge", q=0.99), r"non-convex"),
        (lambda: get_loss("qnorm", q=2.5), r"not alpha-Hölder continuous"),
        (lambda: get_loss("qnorm_hinge", q=3), r"q = 3.0 > 2 is refused"),
        (lambda: get_loss("qnorm"), r"needs parameter\(s\) \['q'\]"),
        (lambda: get_loss("hinge", q=2), r"'hinge' takes no parameters; got unexpected \['q'\]"),
        (lambda: get_loss("huber", q=2), r"'huber' takes delta"),
        (lambda: get_loss("huber", delta=0), r"Expected delta > 0"),
        (lambda: get_loss("qnorm", q=math.nan), r"got NaN"),
        (lambda: get_loss(3), r"Expected a loss name"),
        (lambda: get_loss(HingeLoss(), q=2), r"together with parameters"),
        (lambda: QNormLoss(q=True), r"real number"),
    ],
)
def test_registry_refusals(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@given(st.one_of(st.floats(max_value=0.999999), st.floats(min_value=2.000001)))
def test_any_q_outside_one_two_is_refused(q):
    for family in ("qnorm", "qnorm_hinge"):
        with pytest.raises(ValueError, match=r"q = |Expected q to be finite"):
            get_loss(family, q=q)


# -- labels -----------------------------------------------------------------------------------


def test_check_labels():
    out = check_labels(np.array([1, -1, 1], dtype=np.int64))
    assert out.dtype == np.float64 and out.tolist() == [1.0, -1.0, 1.0]
    with pytest.raises(ValueError, match=r"labels in \{-1, \+1\}; y contains \[0.0\].*2 \* y - 1"):
        check_labels([0, 1, 1])
    with pytest.raises(ValueError, match=r"contains \[nan\]"):
        check_labels([1.0, math.nan])
    with pytest.raises(ValueError, match=r"numeric labels"):
        check_labels(["cat", "dog"])
    with pytest.raises(ValueError, match=r"\(and more\)"):
        check_labels(np.arange(10.0))


@pytest.mark.parametrize("loss", CLASSIFIERS, ids=repr)
def test_classifiers_refuse_bad_labels_everywhere(loss):
    X, w, bad = np.ones((3, 2)), np.zeros(2), np.array([0.0, 1.0, 1.0])
    calls = [
        lambda: loss.phi(np.zeros(3), bad),
        lambda: loss.derivative(np.zeros(3), bad),
        lambda: loss.value(w, X, bad),
        lambda: loss.mean_value(w, X, bad),
        lambda: loss.gradients(w, X, bad),
        lambda: loss.gradient_norms(w, X, bad),
        lambda: loss.gradient_sum(w, X, bad),
        lambda: loss.check_data(X, bad, x_bound=2.0),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"\{-1, \+1\}"):
            call()


# -- shapes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ALL, ids=repr)
def test_mismatched_shapes_are_refused(loss):
    X, y, w = np.ones((4, 3)), np.ones(4), np.zeros(3)
    cases = [
        (lambda: loss.value(np.zeros(2), X, y), r"w of shape \(3,\) to match X of shape \(4, 3\)"),
        (lambda: loss.gradients(w, X, np.ones(5)), r"y of shape \(4,\)"),
        (lambda: loss.gradient_sum(w, np.ones(3), y), r"X of shape \(n, d\)"),
        (lambda: loss.gradient_norms(w[:, None], X, y), r"w of shape \(3,\)"),
        (lambda: loss.phi(np.zeros(3), np.ones(4)), r"same shape"),
        (lambda: loss.derivative(np.zeros((2, 2)), np.ones(4)), r"same shape"),
        (lambda: loss.mean_value(w, np.ones((0, 3)), np.ones(0)), r"at least one example"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()


@pytest.mark.parametrize("loss", ALL, ids=repr)
def test_output_shapes(loss):
    X, y, w = np.ones((4, 3)) / 2, np.ones(4), np.full(3, 0.1)
    assert loss.value(w, X, y).shape == (4,) and loss.gradients(w, X, y).shape == (4, 3)
    assert loss.gradient_norms(w, X, y).shape == (4,) and loss.gradient_sum(w, X, y).shape == (3,)
    assert isinstance(loss.mean_value(w, X, y), float)
    assert loss.phi(np.zeros((2, 2)), np.ones((2, 2))).shape == (2, 2)  # elementwise


# -- bounds -----------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ALL, ids=repr)
def test_bad_bounds_are_refused(loss):
    methods = [
        loss.holder,
        loss.lipschitz,
        loss.gradient_bound_at_zero,
        loss.value_bound_at_zero,
        loss.value_bound,
        loss.paper_gradient_bound,
        loss.constants,
    ]
    for method in methods:
        for x_bound in (0.0, -1.0, math.inf, math.nan):
            with pytest.raises(ValueError, match=r"x_bound"):
                method(x_bound)
        for y_bound in (0.0, -2.0, math.nan):
            with pytest.raises(ValueError, match=r"y_bound"):
                method(1.0, y_bound)
    for method in (loss.lipschitz, loss.value_bound, loss.paper_gradient_bound, loss.constants):
        with pytest.raises(ValueError, match=r"Expected radius >= 0"):
            method(1.0, None, -0.5)


@pytest.mark.parametrize("loss", CLASSIFIERS, ids=repr)
def test_classification_label_bound(loss):
    assert loss.lipschitz(2.0, y_bound=1.0) == loss.lipschitz(2.0, y_bound=None)
    with pytest.raises(ValueError, match=r"y_bound must be >= 1"):
        loss.lipschitz(2.0, y_bound=0.5)


def test_check_data_enforces_public_bounds():
    X = np.array([[3.0, 4.0], [0.0, 1.0]])  # row norms 5 and 1
    loss = get_loss("absolute")
    X_out, y_out = loss.check_data(X, [2.0, -1.0], x_bound=5.0, y_bound=2.0)
    assert X_out.dtype == y_out.dtype == np.float64
    with pytest.raises(ValueError, match=r"norm 5.0 > x_bound = 4.9"):
        loss.check_data(X, [0.0, 0.0], x_bound=4.9)
    with pytest.raises(ValueError, match=r"\|y\| = 2.0 > y_bound = 1.5"):
        loss.check_data(X, [2.0, 0.0], x_bound=5.0, y_bound=1.5)
    with pytest.raises(ValueError, match=r"non-finite"):
        loss.check_data([[math.inf, 0.0]], [0.0], x_bound=5.0)
    with pytest.raises(ValueError, match=r"has 2 rows but y has 1"):
        loss.check_data(X, [0.0], x_bound=5.0)
    get_loss("hinge").check_data(X, [1, -1], x_bound=5.0)  # no y_bound needed


def test_holder_constants_dataclass():
    h = HolderConstants(alpha=0.5, L=2.0)
    assert h.bound(0.25) == 1.0 and isinstance(h.bound(0.25), float)
    np.testing.assert_allclose(h.bound(np.array([0.0, 4.0])), [0.0, 4.0])
    # 0^0 = 1 (docs/theory/non-smooth-sgd.md#validation)
    assert HolderConstants(alpha=0.0, L=3.0).bound(0.0) == 3.0
    for alpha, L in ((1.5, 1.0), (-0.1, 1.0), (0.5, -1.0), (0.5, math.inf)):
        with pytest.raises(ValueError, match=r"alpha|L"):
            HolderConstants(alpha=alpha, L=L)


def test_constants_record_their_bounds():
    c = get_loss("hinge").constants(x_bound=2, y_bound=None, radius=3)
    assert (c.loss, c.x_bound, c.y_bound, c.radius) == ("hinge", 2.0, None, 3.0)
    assert dataclasses.asdict(c)["paper_gradient_bound"] == 4.0  # M + L = 2 B_x for α = 0
