"""The mechanisms of a training run by name: one spelling each, tuned to the run's pattern.

==============  ====================================================================
name            the mechanism chosen for T steps and the run's participation pattern
==============  ====================================================================
``dpsgd``       independent noise (B = I), with Poisson sampling in the trainers
``blt``         :func:`~privopt.noise.optimize_blt` on the mean error
``banded``      banded Toeplitz C with L <= min-separation bands (``choose_bands``),
                coefficients by ``optimize_banded_toeplitz`` on the mean error
``nu-dpftrl``   nu-DP-FTRL with nu from :func:`~privopt.noise.tune_nu`
``optimal-cc``  optimal continual counting (nu = 0)
``tree``        Honaker-tree increments, restarted every m epochs, m by the objective
                sens^2 ||A B||_F^2 (:func:`~privopt.noise.tuning.tree_restart_candidates`)
==============  ====================================================================

Every choice depends on (T, participation) only, which are public, so it costs no privacy.
``privopt.torch``, the CLI and the reproductions read names here. ``privopt.torch``'s amplified
``mechanism="banded"`` (cyclic Poisson over L parts) asks for ``bands=L`` with single
participation: the sensitivity that scales its noise is C's largest column norm
(:mod:`privopt.torch.amplified`). Older spellings
(``dp-sgd``, ``nu-dp-ftrl``, underscores) are accepted with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from typing import Any

from privopt.noise.base import Mechanism, Participation

__all__ = ["MECHANISM_NAMES", "canonical_mechanism", "tuned_mechanism"]

#: the names, in the README's spelling
MECHANISM_NAMES = ("dpsgd", "blt", "banded", "nu-dpftrl", "optimal-cc", "tree")
#: older spellings still accepted (with a DeprecationWarning)
_ALIASES = {"dp-sgd": "dpsgd", "nu-dp-ftrl": "nu-dpftrl"}


def canonical_mechanism(name: str, *, stacklevel: int = 2) -> str:
    """``name`` in its one spelling (an older one warns); a clear error for an unknown one."""
    if not isinstance(name, str):
        raise ValueError(f"Expected a mechanism name in {MECHANISM_NAMES}, got {name!r}.")
    key = name.strip().lower().replace("_", "-")
    if key in MECHANISM_NAMES:
        if key != name:
            _deprecated(name, key, stacklevel)
        return key
    if key in _ALIASES:
        _deprecated(name, _ALIASES[key], stacklevel)
        return _ALIASES[key]
    raise ValueError(f"Expected a mechanism name in {MECHANISM_NAMES}, got {name!r}.")


def _deprecated(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(
        f"mechanism {old!r} is spelled {new!r}; the old spelling will be removed.",
        DeprecationWarning,
        stacklevel=stacklevel + 2,
    )


def tuned_mechanism(
    name: str, steps: int, participation: Participation, *, bands: int | None = None
) -> tuple[Mechanism, dict[str, Any]]:
    """The mechanism ``name`` chosen for ``steps`` and ``participation`` (module table), and
    the public choices made (for the run's record). ``bands`` fixes the banded mechanism's L
    instead of ``choose_bands`` (a reproduction's stated choice)."""
    from privopt.noise import independent, nu_dpftrl, optimal_cc, optimize_blt, tune_nu
    from privopt.noise.banded import choose_bands, optimize_banded_toeplitz
    from privopt.noise.tuning import participation_pattern, tree_restart_candidates

    name = canonical_mechanism(name, stacklevel=3)
    pattern = participation_pattern(participation)
    if name == "dpsgd":
        return independent(), {}
    if name == "blt":
        mech = optimize_blt(steps, error="mean", **pattern)
        return mech, {
            "buf_decay": mech.buf_decay.tolist(),
            "output_scale": mech.output_scale.tolist(),
        }
    if name == "banded":
        if bands is None:
            bands = choose_bands(steps, **pattern, error="mean").bands
        mech = optimize_banded_toeplitz(steps, bands, **pattern, error="mean")
        return mech, {"bands": bands, "coefficients": mech.coefficients.tolist()}
    if name == "nu-dpftrl":
        nu = tune_nu(steps, **pattern).nu
        return nu_dpftrl(nu), {"nu": nu}
    if name == "optimal-cc":
        return optimal_cc(), {"nu": 0.0}
    scored = list(tree_restart_candidates(steps, participation))
    _, epochs_per_block, mech = min(scored, key=lambda item: item[0])
    return mech, {
        "restart_every_epochs": epochs_per_block,
        "restart_objective": {str(m): float(v) for v, m, _ in scored},
    }
