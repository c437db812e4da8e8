"""The label set of a classifier: given as public, or released privately.

A classifier's ``classes_`` is structure taken from the data: ``np.unique(y)`` tells whether any
record holds a label no other record holds (replace one record's label by a new one and the label
set, the shape of the model and the one-vs-rest split of the budget all change: epsilon =
infinity). privopt never releases it. Two ways remain:

* **Public labels** (:func:`check_public_labels`): the caller states the label set before the
  data are read (``classes=``). A record whose label is outside it is refused with an error that
  names no value.
* **A private label set** (:func:`release_label_set`): the thresholded Gaussian histogram of
  the labels (Korolova, Kenthapadi, Mishra & Ntoulas 2009; in its Gaussian form Wilson, Zhang,
  Lam, Desfontaines, Simmons-Marengo & Gipson 2020, Sec. 3). For every label k present in the
  data, c~_k = c_k + N(0, sigma^2); the released set is {k : c~_k > tau}, sorted. Nothing else
  (no count) is released.

Privacy of the private label set. Let D, D' be neighbours. Keys present in both data sets form
a count vector whose l2 sensitivity is sqrt(2) under replace-one (one record moves from label a
to label b: two counts change by 1) and 1 under zero-out (one count drops by 1); on those keys
the mechanism is a Gaussian mechanism, mu = sensitivity / sigma GDP (Dong, Roth & Su 2022,
Thm 2.7). A key present in only one of the two data sets has count exactly 1 there (only one
record differs), so it is released with probability at most
P(1 + Z > tau) = Phi_bar((tau - 1) / sigma) =: p. The outputs of M(D) and of the Gaussian
mechanism restricted to the shared keys differ only on that event, so M is, for every delta,
as private as the Gaussian mechanism at delta - p; composed with everything that follows
(which only sees the released set), p adds to delta. The ledger records exactly this: a
:class:`~privopt.accounting.GaussianEvent` of the count vector and a
:class:`~privopt.accounting.SamplingFailureEvent` of probability p (whose effect on the
accounting, delta reduced by p before the other events are composed, is the argument above).
tau = 1 + sigma Phi_bar^-1(p).

Where it runs. An estimator releases the label set from a disjoint secret slice of the records
(:func:`label_slice_rows` of them, drawn independently of the data) at its full budget, and fits
on the other records: the slice and the fit are disjoint, so by parallel composition the label
set costs rows, not budget, and the fit keeps its exact calibration (a release shared by every
record would have to be composed with fits whose accountants differ). A label needs about
tau + 3 sigma records in the slice to be released reliably (tau is printed in the report; about
33 at epsilon = 1, delta = 1e-6, so about 0.5% of N for a slice of 10%); the records of a label
outside the released set count as negatives of every class.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable
from typing import Any

import numpy as np
from scipy.stats import norm

from privopt.accounting import GaussianEvent, PrivacyLedger, SamplingFailureEvent, gdp_mu
from privopt.accounting.events import Neighbouring
from privopt.noise.rng import gaussian_noise
from privopt.training.calibrate import gaussian_release_std

__all__ = [
    "LABEL_FAILURE_SHARE",
    "LABEL_SLICE_FRACTION",
    "LABEL_SLICE_MAX",
    "check_public_labels",
    "label_count_sensitivity",
    "label_slice_rows",
    "observed_labels",
    "release_label_set",
]

#: Share of the records in the label-set slice (at most :data:`LABEL_SLICE_MAX` records).
LABEL_SLICE_FRACTION = 0.1
#: Largest label-set slice: 20,000 records release every label of frequency 0.3% or more at
#: epsilon = 1.
LABEL_SLICE_MAX = 20_000
#: Share of delta that the threshold's failure probability p takes (the rest goes to the
#: Gaussian counts).
LABEL_FAILURE_SHARE = 0.1


def check_public_labels(classes: Any, y: np.ndarray) -> np.ndarray:
    """The public label set ``classes`` (sorted, distinct, at least two), after checking that
    every label of ``y`` is in it.

    The error for a label outside the set names no value (labels are private data).
    """
    try:
        labels = np.unique(np.asarray(classes).ravel())
    except TypeError:
        raise ValueError("classes must be a list of label values of one type.") from None
    if labels.size < 2:
        raise ValueError(f"classes must hold at least two distinct labels, got {labels.size}.")
    if labels.dtype.kind == "f" and not np.all(np.isfinite(labels)):
        raise ValueError("classes must hold finite labels.")
    try:
        inside = np.isin(np.asarray(y), labels)
    except TypeError:
        inside = np.zeros(len(y), dtype=bool)
    if not np.all(inside):
        raise ValueError(
            "y holds labels outside the public classes= given (their values are not shown: "
            "they are private data); add them to classes, or remove those records before fitting."
        )
    return labels


def label_slice_rows(n: int) -> int:
    """Records in the label-set slice: 10% of N, at least 1, at most :data:`LABEL_SLICE_MAX`
    (public N only)."""
    return int(min(max(1, math.ceil(LABEL_SLICE_FRACTION * n)), LABEL_SLICE_MAX))


def observed_labels(y: np.ndarray, ledger: PrivacyLedger, who: str) -> np.ndarray:
    """``np.unique(y)`` on the caller's explicit request (``classes="observed"``): NOT private.

    Warns with :class:`~privopt.PrivacyLeakWarning` and records the release with
    ``ledger.disclose``, so the report lists it under the releases without privacy.
    """
    from privopt._leak import PrivacyLeakWarning

    warnings.warn(
        f"{who}(classes='observed') takes the label set from the data without privacy: "
        "whether a record holds a label no other record holds is released. Give the public "
        "label set with classes=[...], or leave classes=None to release it privately.",
        PrivacyLeakWarning,
        stacklevel=4,
    )
    ledger.disclose("the label set np.unique(y), taken from the data (classes='observed')")
    labels = np.unique(np.asarray(y))
    if labels.size < 2:
        raise ValueError(
            f"{who} needs two or more classes in y, got {labels.size} class (classes='observed')."
        )
    return labels


def label_count_sensitivity(relation: Neighbouring | str) -> float:
    """l2 sensitivity of the shared keys' counts: sqrt(2) (replace-one) or 1 (zero-out)."""
    relation = Neighbouring.parse(relation)
    if relation is Neighbouring.REPLACE_ONE:
        return math.sqrt(2.0)
    if relation is Neighbouring.ZERO_OUT:
        return 1.0
    raise ValueError(
        "A private label set is analysed under replace-one or zero-out neighbours (the number of "
        f"records public), got {relation.value!r}."
    )


def release_label_set(
    y: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    partition: Hashable | None = "labels",
) -> np.ndarray:
    """The sorted label set of ``y`` released by the thresholded Gaussian histogram (module
    notes), (epsilon, delta)-DP: the threshold's failure probability p takes
    :data:`LABEL_FAILURE_SHARE` of delta, the Gaussian counts are exact mu-GDP with mu the
    largest that gives ``epsilon`` at delta - p. Both are recorded in ``ledger`` under
    ``partition`` (default ``"labels"``: the caller passes the rows of a disjoint slice).

    The noise comes from a child generator spawned from ``rng`` (where the generator supports
    it), so the number of distinct labels never shifts the noise of later releases.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"Expected a finite epsilon > 0, got {epsilon!r}.")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"Expected delta in (0, 1), got {delta!r}.")
    failure = LABEL_FAILURE_SHARE * delta
    # a relative 1e-9 below the target so that the ledger's inverse never prints above it
    mu = gdp_mu(epsilon * (1.0 - 1e-9), delta - failure)
    sensitivity = label_count_sensitivity(ledger.neighbouring)
    std = gaussian_release_std(sensitivity, mu)
    threshold = 1.0 + std * float(norm.isf(failure))
    keys, counts = np.unique(np.asarray(y), return_counts=True)
    try:
        child = rng.spawn(1)[0]
    except (AttributeError, TypeError, ValueError):  # a bit generator without a seed sequence
        child = rng
    noisy = counts + gaussian_noise(child, std, keys.size)
    released = keys[noisy > threshold]
    ledger.record(
        GaussianEvent(sensitivity, std, label="label set: noisy label counts"),
        partition=partition,
    )
    ledger.record(
        SamplingFailureEvent(
            failure, label="label set: a label held by one record passes the threshold"
        ),
        partition=partition,
    )
    ledger.assume(
        f"the label set was released privately (thresholded Gaussian histogram, std {std:.3g}, "
        f"threshold {threshold:.4g} records); labels outside it count as negatives of every class"
    )
    return released
