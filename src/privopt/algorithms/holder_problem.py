"""The validated setting shared by Wang et al.'s (2022) algorithms: loss, public bounds, data,
budget.

Both DP-SGD-Output and DP-SGD-Gradient need the same things before they run: the loss resolved
from its name, the data checked against the public bounds (||x|| <= x_bound, |y| <= y_bound) that
the loss constants are suprema over, a valid (epsilon, delta), and a replace-one ledger stating
the assumptions. :class:`HolderProblem` does this once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privopt._validate import check_positive, check_probability
from privopt.accounting import PrivacyLedger
from privopt.losses import LinearLoss, LossConstants, get_loss

__all__ = ["HolderProblem"]


@dataclass(frozen=True)
class HolderProblem:
    """Data and constants of a private alpha-Hölder learning problem
    (docs/theory/non-smooth-sgd.md#setting, §9.1)."""

    X: np.ndarray
    y: np.ndarray
    loss: LinearLoss
    constants: LossConstants
    x_bound: float
    y_bound: float | None

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @classmethod
    def build(
        cls,
        X: np.ndarray,
        y: np.ndarray,
        loss: str | LinearLoss,
        epsilon: float,
        delta: float,
        x_bound: float,
        y_bound: float | None,
        radius: float | None,
    ) -> HolderProblem:
        """Resolve the loss, check the budget and the data against the public bounds."""
        check_positive("epsilon", epsilon)
        check_probability("delta", delta)
        loss = get_loss(loss)
        X, y = loss.check_data(X, y, x_bound, y_bound)
        if X.shape[0] < 2:
            raise ValueError(
                f"Expected at least 2 records (n is public under replace-one); got n_samples = "
                f"{X.shape[0]}."
            )
        constants = loss.constants(x_bound, y_bound, radius)
        return cls(X, y, loss, constants, float(x_bound), y_bound)

    def ledger(self, ledger: PrivacyLedger | None = None) -> PrivacyLedger:
        """The fit's replace-one ledger (``ledger`` or a new one) with this problem's assumptions.

        The sensitivities of Wang et al.'s (2022) analysis are replace-one sensitivities, so an
        external
        ledger must use that relation.
        """
        if ledger is None:
            ledger = PrivacyLedger("replace-one")
        elif ledger.neighbouring.value != "replace-one":
            raise ValueError(
                "Wang et al.'s (2022) algorithms are analysed under replace-one neighbours; got a "
                f"{ledger.neighbouring.value!r} ledger."
            )
        c = self.constants
        bounds = f"||x|| <= {self.x_bound:g}"
        if self.loss.task == "regression":
            bounds += f", |y| <= {self.y_bound:g}" if self.y_bound is not None else ""
        for text in (
            f"public data bounds {bounds}, enforced on every record",
            f"n = {self.n} is public (replace-one neighbours)",
            f"{self.loss.name} loss: convex, nonnegative, {c.alpha:g}-Hölder smooth with "
            f"L = {c.L:.6g}, M = {c.M:.6g}, M0 = {c.M0:.6g} (suprema over the data domain)",
            "step size, number of steps, domain radius chosen independently of the data",
            "indices i_1..i_T drawn uniformly with replacement, batch size 1",
        ):
            ledger.assume(text)
        return ledger
