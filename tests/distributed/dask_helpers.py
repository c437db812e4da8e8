"""Constants and assertions shared by the Dask backend's tests (fixtures: conftest.py)."""

import math

import numpy as np

#: rows and features of the test data: DP-SGD runs ceil(5 / (256 / N)) = 49 steps on it
N_ROWS, N_FEATURES = 2_500, 3
#: the estimator settings every equality test uses (public bounds wide enough to clip little)
PUBLIC = {"feature_bounds": [(-4.0, 4.0)] * N_FEATURES, "target_bounds": (-15.0, 15.0)}
#: |dask - numpy| allowed on coefficients: the fits differ only in the order of floating-point
#: sums (about 1e-15 relative, measured); 1e-8 is the issue's bound
TOLERANCE = 1e-8


def _close(a, b, path=""):
    """Recursive equality of report dictionaries, floats to 1e-9 relative."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            _close(u, v, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or a == b, (path, a, b)
    else:
        assert a == b, (path, a, b)


def assert_same_fit(reference, fitted):
    """The dask fit equals the in-memory fit: coefficients to TOLERANCE, the same report."""
    np.testing.assert_allclose(fitted.coef_, reference.coef_, rtol=0, atol=TOLERANCE)
    assert abs(fitted.intercept_ - reference.intercept_) <= TOLERANCE
    _close(reference.privacy_report_.to_dict(), fitted.privacy_report_.to_dict())
    assert fitted.fit_info_["method"] == reference.fit_info_["method"]


def estimator(method, public, seed=11, **extra):
    from privopt.estimators import DPLinearRegression

    bounds = PUBLIC if public else {}
    return DPLinearRegression(
        epsilon=2.0, delta=1e-6, method=method, random_state=seed, **bounds, **extra
    )


_REFERENCES = {}


def reference(method, public, X, y, seed=11):
    """The in-memory fit (cached per configuration: the data fixture is session-wide)."""
    key = (method, public, seed)
    if key not in _REFERENCES:
        _REFERENCES[key] = estimator(method, public, seed).fit(X, y)
    return _REFERENCES[key]


def as_dask(X, y, partitions):
    """(X, y) as dask arrays cut into ``partitions`` blocks of unequal sizes."""
    import dask.array as da

    n = X.shape[0]
    cuts = np.unique(np.linspace(0, n, partitions + 1).astype(int) + np.arange(partitions + 1) % 3)
    cuts[0], cuts[-1] = 0, n
    sizes = tuple(int(s) for s in np.diff(cuts))
    assert len(sizes) == partitions
    return (
        da.from_array(X, chunks=(sizes, X.shape[1])),
        da.from_array(y, chunks=(sizes,)),
    )
