"""Losses by name: ``get_loss("hinge")``, ``get_loss("qnorm", q=1.5)``, ``get_loss("huber")``.

Names are case-insensitive and ``-`` may stand for ``_``. Unknown names, unknown or missing
parameters and non-convex requests raise ``ValueError`` saying what is accepted.
"""

from __future__ import annotations

import dataclasses

from privopt.losses.base import LinearLoss
from privopt.losses.classification import (
    HingeLoss,
    LogisticLoss,
    QNormHingeLoss,
    SquaredHingeLoss,
)
from privopt.losses.regression import AbsoluteLoss, HuberLoss, QNormLoss, SquaredLoss

__all__ = ["LOSS_ALIASES", "LOSS_NAMES", "get_loss"]

_LOSSES: dict[str, type[LinearLoss]] = {
    "squared": SquaredLoss,
    "absolute": AbsoluteLoss,
    "qnorm": QNormLoss,
    "huber": HuberLoss,
    "hinge": HingeLoss,
    "squared_hinge": SquaredHingeLoss,
    "qnorm_hinge": QNormHingeLoss,
    "logistic": LogisticLoss,
}

#: Canonical loss names accepted by :func:`get_loss`.
LOSS_NAMES: tuple[str, ...] = tuple(_LOSSES)

#: Alternative spellings and the canonical name each stands for.
LOSS_ALIASES: dict[str, str] = {"least_squares": "squared"}

# Well-known losses that are refused because they are not convex (Wang et al. (2022) needs
# convexity).
_NON_CONVEX = ("ramp", "truncated_hinge", "sigmoid", "zero_one", "tukey", "cauchy", "savage")


def get_loss(name: str | LinearLoss, **params: float) -> LinearLoss:
    """Return the loss called ``name``, built with ``params`` (``q`` for q-norm losses, ``delta``).

    Known names: ``squared`` (alias ``least_squares``; (z - y)^2 / 2), ``absolute``, ``qnorm``
    (needs ``q`` in [1, 2]), ``huber`` (``delta``, default 1), ``hinge``, ``squared_hinge``,
    ``qnorm_hinge`` (needs ``q`` in [1, 2]), ``logistic``. A :class:`LinearLoss` instance is
    returned unchanged (without params). q < 1 and the names of well-known non-convex losses
    raise ``ValueError``: Wang et al.'s (2022) stability and privacy analysis needs a convex loss.

    >>> get_loss("qnorm_hinge", q=1.5).holder(x_bound=1.0)
    HolderConstants(alpha=0.5, L=1.5)
    """
    if isinstance(name, LinearLoss):
        if params:
            raise ValueError(
                f"Got a loss instance {name!r} together with parameters {sorted(params)}; set the "
                "parameters when building the loss."
            )
        return name
    if not isinstance(name, str):
        raise ValueError(f"Expected a loss name (str) or a LinearLoss, got {name!r}.")
    key = name.strip().lower().replace("-", "_")
    key = LOSS_ALIASES.get(key, key)
    if key in _NON_CONVEX:
        raise ValueError(
            f"Loss {name!r} is not convex; Wang et al.'s (2022) stability and privacy analysis "
            f"(docs/theory/non-smooth-sgd.md) needs a convex loss. Convex losses: "
            f"{', '.join(LOSS_NAMES)}."
        )
    if key not in _LOSSES:
        known = ", ".join([*LOSS_NAMES, *(f"{a} (= {c})" for a, c in LOSS_ALIASES.items())])
        raise ValueError(f"Unknown loss {name!r}. Known losses: {known}.")
    cls = _LOSSES[key]
    accepted = [f for f in dataclasses.fields(cls) if f.init]
    unexpected = sorted(set(params) - {f.name for f in accepted})
    if unexpected:
        takes = ", ".join(f.name for f in accepted) or "no parameters"
        raise ValueError(f"Loss {key!r} takes {takes}; got unexpected {unexpected}.")
    missing = [
        f.name
        for f in accepted
        if f.name not in params
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(
            f"Loss {key!r} needs parameter(s) {missing}, e.g. get_loss({key!r}, {missing[0]}=1.5)."
        )
    return cls(**params)
