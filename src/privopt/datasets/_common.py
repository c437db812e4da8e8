"""What the synthetic regression samples share: argument checks, the oracle's basic sizes and
the freezing of their arrays (so that the oracle quantities keep describing the sample)."""

from __future__ import annotations

import numpy as np

__all__ = ["RegressionSample", "check_choice", "freeze"]


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``choices``; a ValueError naming them otherwise."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"Expected {name} to be one of {', '.join(map(repr, choices))}, got {value!r}."
        )
    return value


def freeze(*arrays: np.ndarray) -> None:
    """Make freshly drawn arrays read-only (they belong to the sample that is returned)."""
    for array in arrays:
        array.setflags(write=False)


class RegressionSample:
    r"""Mixin of the sample dataclasses: rows ``X`` (n, d) and the spectrum of
    :math:`H = \mathbb E[x x^\top]` (``eigenvalues``, shape (d,))."""

    X: np.ndarray
    eigenvalues: np.ndarray

    @property
    def n_samples(self) -> int:
        """n (N), the number of training rows."""
        return self.X.shape[0]

    @property
    def n_features(self) -> int:
        """The dimension d."""
        return self.eigenvalues.size

    @property
    def trace_H(self) -> float:
        r""":math:`\operatorname{Tr}(H) = \sum_i \lambda_i`."""
        return float(self.eigenvalues.sum())
