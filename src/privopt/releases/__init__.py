"""One-shot private statistics: each reads the private rows once (or a fixed number of times),
releases a few Gaussian or exponential-mechanism answers recorded in a ledger, and is done.

The iterative training algorithms (:mod:`privopt.algorithms`) run many noisy steps through a
:class:`~privopt.training.TrainingPlan`; the releases here set their public configuration
(bounds, second moments, label sets) or are whole fits by themselves (AdaSSP, noisy Newton):

* :mod:`~privopt.releases.preprocess`: public bounds, private centres and radii on disjoint
  chunks, a private second moment (:class:`LinearBounds`, :class:`SecondMoment`).
* :mod:`~privopt.releases.quantile_bounds`: private centres, scales, boxes and the row-norm
  bound from quantiles chosen by the exponential mechanism.
* :mod:`~privopt.releases.adassp`: AdaSSP (Wang 2018), sufficient-statistics perturbation with
  an adaptive ridge, in exact GDP (``privopt.releases.adassp`` is the module; its function is
  ``privopt.releases.adassp.adassp``).
* :mod:`~privopt.releases.newton`: noisy Newton, a noisy Gram matrix and a few full-batch
  gradient steps whose residual clip follows a private quantile.
* :mod:`~privopt.releases.label_set`: a classifier's label set (public, or a thresholded
  Gaussian histogram on its own slice).
"""

from privopt.releases.adassp import adassp_release, adassp_sensitivities
from privopt.releases.newton import dp_newton, dp_newton_rows
from privopt.releases.preprocess import (
    LinearBounds,
    SecondMoment,
    private_bounds,
    private_second_moment,
    public_bounds,
)
from privopt.releases.quantile_bounds import private_quantile_bounds, tighten_public_bounds

__all__ = [
    "LinearBounds",
    "SecondMoment",
    "adassp_release",
    "adassp_sensitivities",
    "dp_newton",
    "dp_newton_rows",
    "private_bounds",
    "private_quantile_bounds",
    "private_second_moment",
    "public_bounds",
    "tighten_public_bounds",
]
