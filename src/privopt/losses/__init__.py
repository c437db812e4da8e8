r"""Convex losses of linear models with the constants Wang et al.'s (2022) theorems need.

A loss is ``ℓ(w; x, y) = φ(<w, x>, y)``. Every :class:`LinearLoss` gives values, per-example
(sub)gradients, their norms (no (n, d) matrix) and their sum, and, under public bounds
``||x|| <= x_bound``, ``|y| <= y_bound`` and a domain ``||w|| <= radius`` (None: R^d), the
constants of docs/theory/non-smooth-sgd.md and §5: the Hölder pair (α, L) with
``||∇ℓ(w) - ∇ℓ(w')|| <= L ||w - w'||^α``, M, M_0, the gradient bound G and a value bound.

=================  ==========================  =====  =========  ============
name               φ(z, y)                     α      L_φ        G on R^d
=================  ==========================  =====  =========  ============
``squared``        (z - y)^2 / 2               1      1          inf
``absolute``       |z - y|                     0      2          B_x
``qnorm``          |z - y|^q, q in [1, 2]      q - 1  q 2^(2-q)  inf if q > 1
``huber``          Huber with threshold δ      1      1          δ B_x
``hinge``          max(0, 1 - y z)             0      1          B_x
``squared_hinge``  max(0, 1 - y z)^2           1      2          inf
``qnorm_hinge``    max(0, 1 - y z)^q           q - 1  q          inf if q > 1
``logistic``       log(1 + exp(-y z))          1      1/4        B_x
=================  ==========================  =====  =========  ============

``L = L_φ x_bound^(1+α)`` (B_x = x_bound); docs/theory/non-smooth-sgd.md derives every entry.
Classification losses take labels in {-1, +1} only.

>>> from privopt.losses import get_loss
>>> hinge = get_loss("hinge")
>>> hinge.holder(x_bound=2.0)
HolderConstants(alpha=0.0, L=2.0)
>>> hinge.lipschitz(x_bound=2.0), get_loss("squared").lipschitz(x_bound=2.0, y_bound=1.0)
(2.0, inf)
"""

from privopt.losses._checks import check_labels
from privopt.losses.base import HolderConstants, LinearLoss, LossConstants
from privopt.losses.classification import (
    HingeLoss,
    LogisticLoss,
    MarginLoss,
    QNormHingeLoss,
    SquaredHingeLoss,
)
from privopt.losses.registry import LOSS_ALIASES, LOSS_NAMES, get_loss
from privopt.losses.regression import (
    AbsoluteLoss,
    HuberLoss,
    QNormLoss,
    ResidualLoss,
    SquaredLoss,
)

__all__ = [
    "LOSS_ALIASES",
    "LOSS_NAMES",
    "AbsoluteLoss",
    "HingeLoss",
    "HolderConstants",
    "HuberLoss",
    "LinearLoss",
    "LogisticLoss",
    "LossConstants",
    "MarginLoss",
    "QNormHingeLoss",
    "QNormLoss",
    "ResidualLoss",
    "SquaredHingeLoss",
    "SquaredLoss",
    "check_labels",
    "get_loss",
]
