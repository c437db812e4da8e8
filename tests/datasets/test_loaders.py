"""Tests of the CSV/Parquet loaders: exact round trips on small files, and every refusal."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privopt.datasets import Table, load_adult, load_features, load_power_plant, load_table
from privopt.datasets.adult import ADULT_COLUMNS
from privopt.datasets.bundled import bundled_path

SMALL_CSV = "a,target,b,c\n1,10.5,0.25,true\n2,-3,6.25e-2,false\n3,0,-7.125,true\n"
SMALL_X = np.array([[1.0, 0.25, 1.0], [2.0, 0.0625, 0.0], [3.0, -7.125, 1.0]])
SMALL_Y = np.array([10.5, -3.0, 0.0])


def _write_csv(tmp_path: Path, text: str, name: str = "data.csv") -> Path:
    path = tmp_path / name
    if name.lower().endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _write_parquet(tmp_path: Path, columns: dict, name: str = "data.parquet") -> Path:
    path = tmp_path / name
    pq.write_table(pa.table(columns), path)
    return path


def _small_parquet_columns() -> dict:
    return {
        "a": pa.array([1, 2, 3], pa.int32()),
        "target": pa.array([10.5, -3.0, 0.0]),
        "b": pa.array([0.25, 0.0625, -7.125], pa.float32()),  # exact in float32
        "c": pa.array([True, False, True]),
    }


# --- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["data.csv", "data.csv.gz", "DATA.CSV"])
def test_csv_round_trip(tmp_path: Path, name: str) -> None:
    table = load_table(_write_csv(tmp_path, SMALL_CSV, name), "target")
    assert isinstance(table, Table)
    assert table.feature_names == ("a", "b", "c")
    assert table.target == "target"
    assert table.X.dtype == np.float64 and table.y.dtype == np.float64
    assert table.X.flags.c_contiguous
    np.testing.assert_array_equal(table.X, SMALL_X)
    np.testing.assert_array_equal(table.y, SMALL_Y)


@pytest.mark.parametrize("name", ["data.parquet", "data.pq"])
def test_parquet_round_trip(tmp_path: Path, name: str) -> None:
    table = load_table(_write_parquet(tmp_path, _small_parquet_columns(), name), "target")
    assert table.feature_names == ("a", "b", "c")
    np.testing.assert_array_equal(table.X, SMALL_X)
    np.testing.assert_array_equal(table.y, SMALL_Y)


def test_features_select_and_order_columns(tmp_path: Path) -> None:
    path = _write_csv(tmp_path, SMALL_CSV)
    features = ["c", "a"]
    table = load_table(path, "b", features=features)
    assert features == ["c", "a"]  # the argument is not modified
    assert table.feature_names == ("c", "a")
    np.testing.assert_array_equal(table.X, SMALL_X[:, [2, 0]])
    np.testing.assert_array_equal(table.y, SMALL_X[:, 1])


def test_load_features_matches_load_table(tmp_path: Path) -> None:
    path = _write_csv(tmp_path, SMALL_CSV)
    table = load_table(path, "target")
    np.testing.assert_array_equal(load_features(path, table.feature_names), table.X)
    np.testing.assert_array_equal(load_features(path, ("target",)), SMALL_Y[:, None])
    # A prediction file may lack the target column.
    no_target = _write_csv(tmp_path, "a,b,c\n1,2,3\n", "predict.csv")
    np.testing.assert_array_equal(load_features(no_target, ["c", "a"]), [[3.0, 1.0]])


def test_file_is_not_modified(tmp_path: Path) -> None:
    path = _write_csv(tmp_path, SMALL_CSV)
    load_table(path, "target")
    assert path.read_text() == SMALL_CSV


# --- refusals -----------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.csv"):
        load_table(tmp_path / "nope.csv", "y")
    with pytest.raises(FileNotFoundError, match=r"nope\.parquet"):
        load_features(tmp_path / "nope.parquet", ["x"])


@pytest.mark.parametrize("name", ["data.txt", "data.xlsx", "data.tsv", "data", "data.gz"])
def test_unknown_extension(tmp_path: Path, name: str) -> None:
    path = _write_csv(tmp_path, SMALL_CSV, name)
    with pytest.raises(ValueError, match=r"unknown file type \(supported: .csv, .csv.gz"):
        load_table(path, "target")


def test_missing_target_lists_available_columns(tmp_path: Path) -> None:
    path = _write_csv(tmp_path, SMALL_CSV)
    with pytest.raises(
        ValueError, match=r"Column 'y' is not in .*available columns: 'a', 'target'"
    ):
        load_table(path, "y")


def test_missing_feature(tmp_path: Path) -> None:
    path = _write_csv(tmp_path, SMALL_CSV)
    with pytest.raises(ValueError, match="Column 'd' is not in"):
        load_table(path, "target", features=["a", "d"])
    with pytest.raises(ValueError, match="Column 'd' is not in"):
        load_features(path, ["d"])


def test_non_numeric_column_is_named_by_row_never_by_value(tmp_path: Path) -> None:
    path = _write_csv(tmp_path, "x,age,y\n1,39,0\n2,SECRET-AGE,1\n")
    with pytest.raises(ValueError, match=r"Column 'age' is not numeric \(type string; ") as e:
        load_table(path, "y")
    assert "first non-number in row 1" in str(e.value)
    assert "SECRET" not in str(e.value)
    parquet = _write_parquet(tmp_path, {"x": [1.0], "label": ["yes"]})
    with pytest.raises(ValueError, match=r"Column 'label' is not numeric") as e:
        load_table(parquet, "label")
    assert "yes" not in str(e.value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("x,y\n1,1\n,2\n3,3\n4,4\n", "Column 'x' has 1 missing or NaN values out of 4"),
        ("x,y\n1,1\nNaN,2\nnan,3\n", "Column 'x' has 2 missing or NaN values out of 3"),
        ("x,y\n1,1\n2,inf\n3,-inf\n", "Column 'y' has 2 infinite values out of 3"),
        ("x,y\ninf,1\n,2\n", "Column 'x' has 1 missing or NaN and 1 infinite values out of 2"),
        ("x,y\n,1\n,2\n", "Column 'x' has 2 missing values out of 2"),
    ],
)
def test_missing_and_infinite_values_are_counted(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_table(_write_csv(tmp_path, text), "y")


def test_parquet_nulls_and_nans_are_counted(tmp_path: Path) -> None:
    columns = {"x": pa.array([1.0, None, float("nan"), 2.0]), "y": pa.array([1, None, 3, 4])}
    path = _write_parquet(tmp_path, columns)
    with pytest.raises(ValueError, match="Column 'y' has 1 missing or NaN values out of 4"):
        load_table(path, "y")
    with pytest.raises(ValueError, match="Column 'x' has 2 missing or NaN values out of 4"):
        load_features(path, ["x"])


def test_empty_table(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="has no rows"):
        load_table(_write_csv(tmp_path, "x,y\n"), "y")
    empty = _write_parquet(
        tmp_path, {"x": pa.array([], pa.float64()), "y": pa.array([], pa.int64())}
    )
    with pytest.raises(ValueError, match="has no rows"):
        load_features(empty, ["x"])


def test_ambiguous_and_conflicting_column_requests(tmp_path: Path) -> None:
    path = _write_csv(tmp_path, SMALL_CSV)
    with pytest.raises(ValueError, match="appears 2 times"):
        load_table(_write_csv(tmp_path, "x,y,x\n1,2,3\n", "dup.csv"), "y")
    with pytest.raises(ValueError, match="Expected distinct features, got 'a'"):
        load_table(path, "target", features=["a", "b", "a"])
    with pytest.raises(ValueError, match="is the target and cannot also be a feature"):
        load_table(path, "target", features=["a", "target"])
    with pytest.raises(ValueError, match="sequence of column names"):
        load_table(path, "target", features="a")
    with pytest.raises(ValueError, match="at least one column"):
        load_table(path, "target", features=[])
    with pytest.raises(ValueError, match="column names"):
        load_features(path, ["a", 1])
    with pytest.raises(ValueError, match="target to be a column name"):
        load_table(path, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no columns besides the target 'y'"):
        load_table(_write_csv(tmp_path, "y\n1\n", "only.csv"), "y")


def test_unparseable_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="as CSV"):
        load_table(_write_csv(tmp_path, "x,y\n1,2\n3,4,5\n"), "y")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match="as Parquet"):
        load_table(bad, "y")


# --- the bundled real datasets ------------------------------------------------------------------


def test_power_plant_is_bundled_with_description_and_source() -> None:
    # UCI Combined Cycle Power Plant: 9,568 rows, columns AT, V, AP, RH, PE; target PE in MW.
    table = load_power_plant()
    assert table.X.shape == (9568, 4)
    assert table.X.dtype == np.float64
    assert table.feature_names == ("AT", "V", "AP", "RH")
    assert table.target == "PE"
    np.testing.assert_array_equal(table.X[0], [8.34, 40.77, 1010.84, 90.01])
    assert table.y[0] == 480.48
    assert 400.0 < table.y.min() < table.y.max() < 500.0
    assert "9,568" in table.description and "CC BY 4.0" in table.source


def test_power_plant_equals_load_table_on_the_same_file() -> None:
    table = load_table(bundled_path("ccpp_power_plant.csv.gz"), "PE")
    bundled = load_power_plant()
    np.testing.assert_array_equal(table.X, bundled.X)
    np.testing.assert_array_equal(table.y, bundled.y)
    assert table.description == "" and table.source == ""


def test_adult_is_bundled_with_description_and_source() -> None:
    data = load_adult()
    assert data.X.shape == (32561, 14)
    assert data.feature_names == ADULT_COLUMNS and data.target == "income"
    assert set(np.unique(data.y)) == {-1.0, 1.0}
    assert np.mean(data.y == 1.0) == pytest.approx(0.2408, abs=5e-4)  # 24.1% earn >50K
    assert data.X[0, 0] == 39.0 and data.X[0, 1] == "State-gov"
    assert "32,561" in data.description and "CC BY 4.0" in data.source


def test_adult_from_a_path_and_its_refusals(tmp_path) -> None:
    with gzip.open(bundled_path("adult.csv.gz"), "rt") as handle:
        lines = handle.read().splitlines()[:6]
    plain = tmp_path / "adult.csv"
    plain.write_text("\n".join(lines) + "\n")
    data = load_adult(plain)
    assert data.X.shape == (5, 14) and data.source == ""
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("\n".join([*lines[:2], lines[2] + ",extra"]) + "\n")
    with pytest.raises(ValueError, match="does not have 15 cells"):
        load_adult(ragged)
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="is not the Adult table"):
        load_adult(other)


def test_adult_numeric_columns_load_and_categorical_ones_are_refused(tmp_path) -> None:
    path = tmp_path / "adult.csv.gz"
    path.write_bytes(bundled_path("adult.csv.gz").read_bytes())
    table = load_table(path, "hours_per_week", features=["age", "education_num", "capital_gain"])
    assert table.X.shape == (32561, 3)
    with pytest.raises(ValueError, match=r"Column 'income' is not numeric .*row 0") as e:
        load_table(path, "income", features=["age"])
    assert "50K" not in str(e.value)  # a cell's value is never quoted
    with pytest.raises(ValueError, match=r"Column 'workclass' is not numeric"):
        load_table(path, "age")
