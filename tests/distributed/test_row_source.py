"""The estimator reaches rows held elsewhere through its row-source protocol (issue 28 item 6):
privopt.distributed implements it, and privopt.estimators never imports privopt.distributed."""

import subprocess
import sys

import numpy as np
import pytest

from privopt import DPLinearRegression
from privopt.estimators._row_source import (
    MethodRequest,
    RowSource,
    as_row_source,
    is_partitioned_input,
)

BOUNDS = {"feature_bounds": (-1.0, 1.0), "target_bounds": (-4.0, 4.0)}


class MemoryRows:
    """A row source over numpy arrays: the method is the estimator's in-memory runner."""

    backend = "memory"
    methods = ("adassp", "dpsgd")

    def __init__(self, X, y):
        self.X, self.y = X, y
        self.taken: list[np.ndarray] = []

    n_rows = property(lambda self: self.X.shape[0])
    n_features = property(lambda self: self.X.shape[1])
    feature_names = None

    def take(self, rows):
        self.taken.append(rows)
        return self.X[rows], self.y[rows]

    def run_method(self, request: MethodRequest):
        keep = np.ones(self.n_rows, dtype=bool)
        keep[request.excluded] = False
        Z, t = request.bounds.transform(self.X[keep], self.y[keep])
        est = request.estimator
        return est._run(
            request.method, Z, t, request.bounds, request.budget, request.rng, request.ledger,
            float(request.n_main),
        )  # fmt: skip


def data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    return X, X @ np.array([1.0, -0.5, 2.0]) + 0.1 * rng.standard_normal(n)


@pytest.mark.parametrize(("method", "bounds"), [("adassp", BOUNDS), ("dpsgd", {})])
def test_a_row_source_fits_exactly_as_the_rows_in_memory(method, bounds):
    X, y = data()
    source = MemoryRows(X, y)
    assert isinstance(source, RowSource) and is_partitioned_input(source)
    common = {"epsilon": 1.0, "method": method, "random_state": 3, **bounds}
    via = DPLinearRegression(**common).fit(source, None)
    direct = DPLinearRegression(**common).fit(X, y)
    np.testing.assert_array_equal(via.coef_, direct.coef_)
    assert via.intercept_ == direct.intercept_
    assert via.privacy_report_.epsilon == direct.privacy_report_.epsilon
    assert via.fit_info_["backend"] == "memory"
    # rows are gathered by index through take: the quality release's rows (adassp: shared
    # with the fit; dpsgd: its held-out slice), and for dpsgd the private bounds' slice first
    assert len(source.taken) == (2 if method == "dpsgd" else 1)
    assert via.private_r2_ == direct.private_r2_ and np.isfinite(via.private_r2_)


def test_a_row_source_refuses_a_method_it_does_not_run():
    X, y = data()
    with pytest.raises(ValueError, match=r"method='newton' does not run on memory; .*adassp"):
        DPLinearRegression(method="newton", **BOUNDS).fit(MemoryRows(X, y), None)


def test_sample_weight_is_refused_before_the_rows_are_touched():
    X, y = data()
    source = MemoryRows(X, y)
    with pytest.raises(ValueError, match="sample_weight is not supported"):
        DPLinearRegression(**BOUNDS).fit(source, None, sample_weight=np.ones(len(y)))
    assert source.taken == []


def test_unknown_partitioned_input_is_refused_with_the_way_out(monkeypatch):
    import privopt.estimators._row_source as row_source

    monkeypatch.setattr(row_source, "_ADAPTERS", [])  # as if no backend had been imported

    class Collection:  # a Dask-like collection that no registered backend adapts
        def __dask_graph__(self):
            return {}

    assert is_partitioned_input(Collection())
    with pytest.raises(ValueError, match=r"import privopt\.distributed"):
        as_row_source(Collection(), None)


def test_importing_the_estimators_does_not_import_the_dask_backend():
    code = (
        "import sys; import privopt.estimators; "
        "print(any(m.startswith('privopt.distributed.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # privopt/__init__ imports the package privopt.distributed (no dask, no submodule) to
    # register its adapter; none of its modules is loaded by the estimators
    assert out.stdout.strip() == "False"


# -- issue 33: a refusal names the global row, as the in-memory fit of the same rows would ----
def _bad_array(kind):
    X, y = data(400)
    if kind == "nan":
        X[250, 1] = np.nan
        return X, y
    X = X.astype(object)
    X[250, 1] = "unreadable"
    return X, y


@pytest.mark.parametrize("kind", ["nan", "str"])
def test_dask_array_refusals_name_the_global_row(kind):
    da = pytest.importorskip("dask.array")
    X, y = _bad_array(kind)
    dx, dy = da.from_array(X, chunks=(100, 3)), da.from_array(y, chunks=100)
    with pytest.raises(ValueError, match=r"partition 2: .*row 250 \(row 50 of the partition\)"):
        DPLinearRegression(**BOUNDS).fit(dx, dy)


def test_dask_frame_refusals_name_the_global_row():
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    X, y = _bad_array("nan")
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(t=y)
    ddf = dd.from_pandas(frame, npartitions=4)
    with pytest.raises(ValueError, match=r"column 'b' .*row 250 \(row 50 of the partition\)"):
        DPLinearRegression(**BOUNDS).fit(ddf[["a", "b", "c"]], ddf["t"])


# -- the one budget a method gets (in memory and on a row source alike) ----------------------
def test_a_shared_budget_gives_no_epsilon_target():
    from privopt.estimators._regression_methods import MethodBudget

    assert MethodBudget(1.0, 1e-6, 0.5).target("dpsgd") == (1.0, 1e-6)
    with pytest.raises(ValueError, match=r"'dpsgd' calibrates to .* disjoint slice"):
        MethodBudget(1.0, 1e-6, 0.5, shared=True).target("dpsgd")


@pytest.mark.parametrize(("method", "shared"), [("newton", True), ("dpsgd", False)])
def test_the_estimator_hands_the_method_its_budget(method, shared):
    est = DPLinearRegression(epsilon=0.7, delta=1e-7)
    budget = est._method_budget(method, 0.25)
    assert (budget.epsilon, budget.delta, budget.mu, budget.shared) == (0.7, 1e-7, 0.25, shared)
