"""Black-box audits of the private bounds of the bounds-free default: the coarse bounds at small
epsilon, the binary-column screen (:func:`audit_binary_screen`) and the intercept-only model of
the fewest rows (:func:`audit_intercept_only`).

The white-box pipeline audits (:mod:`privopt.audit.pipeline_audits`) put canaries into the
Gaussian releases of the fit; the private bounds are exponential-mechanism releases of
quantiles, which a canary column cannot reach. This audit tests them the black-box way
(Jagielski, Ullman & Oprea 2020, "Auditing Differentially Private Machine Learning: How
Private is Private SGD?", arXiv:2006.07709; the threshold test and Clopper-Pearson bound of
:func:`~privopt.audit.blackbox.audit_scores`): ``DPLinearRegression(epsilon, delta)`` with no
bounds is fitted ``runs`` times on a dataset D and ``runs`` times on its neighbour D', and the
released target centre (the private median of the coarse bounds,
:func:`~privopt.releases.coarse_bounds.coarse_quantile_bounds`) is the score.

The pair is built so that the exact median differs: D holds k targets at 0, k at 10 and the
audited record (target 10); in D' that record is replaced by the zero record (target 0). The
exact median is then 10 on D and 0 on D'. A correct exponential mechanism scores the
candidates of the gap between the two atoms alike on both (each count moves by at most one),
so the two score distributions nearly coincide and the lower bound stays below the claim. The
planted bug (``planted=True``) releases every coarse-bounds quantile without noise (the exact
empirical quantile, with the ledger entries of the correct release, so the fit claims what a
correct one does): the score then separates D from D' every time and the lower bound exceeds
the claim.

Replacing a record by the zero record is a replace-one pair; the scored release (a quantile
with count scores) has sensitivity 1 under replace-one and zero-out alike, and its budget is a
share of the fit's, so its epsilon is at most the fit's claim under either relation.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from unittest import mock

import numpy as np

from privopt._validate import check_count, check_positive
from privopt.audit.blackbox import AuditResult, audit_scores
from privopt.clipping.quantiles import QuantileRelease

__all__ = [
    "audit_binary_screen",
    "audit_coarse_bounds",
    "audit_intercept_only",
    "bounds_audit_data",
    "intercept_only_audit_data",
    "screen_audit_data",
]


def bounds_audit_data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y of D, y of D'): ``rows`` odd; two uniform features; the last record is audited."""
    rows = check_count("rows", rows, minimum=5)
    if rows % 2 == 0:
        raise ValueError(f"Expected an odd number of rows, got {rows}.")
    k = (rows - 1) // 2
    rng = np.random.default_rng([seed, 37])
    X = rng.uniform(-1.0, 1.0, (rows, 2))
    y = np.concatenate([np.zeros(k), np.full(k, 10.0), [10.0]])
    y[:-1] += 0.5 * X[:-1, 0]  # a little signal, atoms kept apart (0.5 < the gap of 10)
    y_neighbour = y.copy()
    y_neighbour[-1] = 0.0
    return X, y, y_neighbour


@contextlib.contextmanager
def _capture_and_maybe_plant(planted: bool) -> Iterator[list[float]]:
    """Record the target centre of every coarse-bounds release; with ``planted`` make each of
    their quantiles exact (the bug)."""
    import privopt.estimators.linear_regression as estimator_module
    import privopt.releases.coarse_bounds as coarse_module

    centres: list[float] = []
    original_bounds = estimator_module.coarse_quantile_bounds
    original_quantile = coarse_module.private_interval_quantile

    def bounds(*args, **kwargs):
        released = original_bounds(*args, **kwargs)
        centres.append(float(released.y_center))
        return released

    def exact(sorted_values, q, grid, *, mu, rng, n):
        correct = original_quantile(sorted_values, q, grid, mu=mu, rng=rng, n=n)
        index = min(int(q * sorted_values.size), sorted_values.size - 1)
        return QuantileRelease(float(sorted_values[index]), q, correct.epsilon, correct.mu)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(estimator_module, "coarse_quantile_bounds", bounds))
        if planted:
            stack.enter_context(
                mock.patch.object(coarse_module, "private_interval_quantile", exact)
            )
        yield centres


def audit_coarse_bounds(
    *,
    epsilon: float = 0.3,
    delta: float = 1e-6,
    rows: int = 2001,
    runs: int = 100,
    planted: bool = False,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, AuditResult]:
    """(claimed epsilon, black-box audit) of the released target centre over ``runs`` fits on
    D and ``runs`` on D' (module docstring). Raises if the fits did not take the coarse
    bounds (the audit would then test nothing)."""

    check_positive("epsilon", epsilon)
    runs = check_count("runs", runs, minimum=8)
    X, y, y_neighbour = bounds_audit_data(rows, seed)
    missing = (
        f"The fit at epsilon={epsilon:g} on {rows} rows did not release coarse bounds; choose a "
        "smaller epsilon or fewer rows."
    )
    with _capture_and_maybe_plant(planted) as centres:
        pairs = ((X, y), (X, y_neighbour))
        return _paired_fits(pairs, centres, missing, epsilon, delta, runs, seed, confidence)


def _paired_fits(pairs, released, missing, epsilon, delta, runs, seed, confidence):
    """(claimed epsilon, audit) of ``runs`` default fits on each of ``pairs`` = ((X, y) with the
    canary, (X', y') without), each fit's score the one value it appended to ``released``."""
    from privopt.estimators import DPLinearRegression

    scores: dict[bool, list[float]] = {True: [], False: []}
    claimed = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # utility warnings of a data set built for the audit
        for k in range(runs):
            for present, (features, target) in zip((True, False), pairs, strict=True):
                fit_seed = (seed * 1_000_003 + 2 * k + int(present)) % 2**32
                model = DPLinearRegression(epsilon=epsilon, delta=delta, random_state=fit_seed)
                model.fit(features, target)
                if len(released) != 1:
                    raise RuntimeError(missing)
                scores[present].append(released.pop())
                claimed = max(claimed, float(model.privacy_report_.epsilon))
    result = audit_scores(
        np.array(scores[True]), np.array(scores[False]), delta=delta, confidence=confidence
    )
    return claimed, result


def screen_audit_data(
    rows: int, seed: int, count: str = "binary"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X of D, X of D', y): feature 0 in {0, 1} except the audited last record, which is 0.5 in
    D and 1 in D' (so the screen's count of feature 0's rows neither 0 nor 1 differs by one),
    or with ``count="unit"`` 0.5 in D and 2 in D' (its count of rows outside [0, 1] differs by
    one, the other count not); feature 1 and the target normal (so only feature 0 can be
    found)."""
    rows = check_count("rows", rows, minimum=5)
    rng = np.random.default_rng([seed, 41])
    X = np.c_[rng.random(rows) < 0.3, rng.normal(0.0, 3.0, rows)].astype(float)
    y = 2.0 * X[:, 0] + X[:, 1] + rng.normal(0.0, 1.0, rows)
    X[-1, 0] = 0.5
    X_neighbour = X.copy()
    X_neighbour[-1, 0] = {"binary": 1.0, "unit": 2.0}[count]
    return X, X_neighbour, y


def audit_binary_screen(
    *,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    rows: int = 3001,
    runs: int = 40,
    planted: bool = False,
    confidence: float = 0.95,
    seed: int = 0,
    count: str = "binary",
) -> tuple[float, AuditResult]:
    """(claimed epsilon, black-box audit) of the binary-column screen
    (:func:`~privopt.releases.known_columns.screen_binary_columns`) of the bounds-free default:
    the score is feature 0's released noisy count of rows neither 0 nor 1 (``count="unit"``:
    of rows outside [0, 1]), over ``runs`` fits on D and ``runs`` on D'
    (:func:`screen_audit_data`; a replace-one pair whose counts differ by one). The planted bug
    releases the exact counts (the ledger unchanged). Raises if a fit released no screen, or
    no [0, 1] counts for ``count="unit"`` (the audit would then test nothing)."""
    import privopt.releases.known_columns as screen_module

    check_positive("epsilon", epsilon)
    runs = check_count("runs", runs, minimum=8)
    X, X_neighbour, y = screen_audit_data(rows, seed, count)
    # feature 0's count: the first entry of the binary vector (d + 2 counts) or of the [0, 1]
    # vector (d counts)
    size = X.shape[1] + 2 if count == "binary" else X.shape[1]
    original = screen_module.noisy_counts
    released: list[float] = []

    def tapped(counts, std, rng):
        noisy = original(counts, std, rng)
        if counts.size == size:
            released.append(float(counts[0] if planted else noisy[0]))
        return noisy

    missing = (
        f"The fit at epsilon={epsilon:g} on {rows} rows released no binary-column screen"
        f"{' with [0, 1] counts' if count == 'unit' else ''}; choose a larger epsilon or more "
        "rows."
    )
    with mock.patch.object(screen_module, "noisy_counts", tapped):
        pairs = ((X, y), (X_neighbour, y))
        return _paired_fits(pairs, released, missing, epsilon, delta, runs, seed, confidence)


def intercept_only_audit_data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y of D, y of D'): two uniform features, every target 0 but the audited last record's,
    which is far above (1,000) in D and 0 in D' (its features are 0 in both: the zero record).
    The targets' median is then 0 on both and their spread collapses, so the clipped mean moves
    by a whole clip radius over m between D and D' and nothing else differs."""
    rows = check_count("rows", rows, minimum=5)
    rng = np.random.default_rng([seed, 43])
    X = rng.uniform(-1.0, 1.0, (rows, 2))
    X[-1] = 0.0
    y = np.zeros(rows)
    y[-1] = 1_000.0
    return X, y, np.zeros(rows)


def audit_intercept_only(
    *,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    rows: int = 301,
    runs: int = 200,
    planted: bool = False,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, AuditResult]:
    """(claimed epsilon, black-box audit) of the intercept-only fallback of the bounds-free
    default (:func:`~privopt.releases.coarse_bounds.intercept_only_bounds`), the score the
    fitted intercept, over ``runs`` fits on D and on D' (:func:`intercept_only_audit_data`).
    The planted bug releases the clipped mean without its Gaussian noise (the ledger
    unchanged). Raises if a fit was not intercept-only (the audit would then test nothing)."""
    import privopt.estimators.linear_regression as estimator_module
    import privopt.releases.coarse_bounds as coarse_module

    check_positive("epsilon", epsilon)
    runs = check_count("runs", runs, minimum=8)
    X, y, y_neighbour = intercept_only_audit_data(rows, seed)
    original = estimator_module.intercept_only_bounds
    released: list[float] = []

    def tapped(*args, **kwargs):
        bounds = original(*args, **kwargs)
        released.append(float(bounds.y_center))  # the model's intercept
        return bounds

    missing = (
        f"The fit at epsilon={epsilon:g} on {rows} rows was not intercept-only; choose fewer "
        "rows or a smaller epsilon."
    )
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(estimator_module, "intercept_only_bounds", tapped))
        if planted:
            noiseless = mock.patch.object(coarse_module, "gaussian_noise", lambda *a, **k: 0.0)
            stack.enter_context(noiseless)
        pairs = ((X, y), (X, y_neighbour))
        return _paired_fits(pairs, released, missing, epsilon, delta, runs, seed, confidence)
