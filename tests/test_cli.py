"""The privopt command line: JSON outputs, tables, and one-line errors with non-zero exit."""

import json
import subprocess
import sys

import numpy as np
import pytest

from cli_runner import run


@pytest.mark.parametrize(
    ("argv", "key", "value"),
    [
        (["account", "gaussian", "--sigma", "1", "--delta", "1e-5"], "epsilon", 4.377178),
        (["account", "zcdp", "--rho", "1", "--delta", "1e-5"], "epsilon", 7.07720),
        (["account", "zcdp", "--epsilon", "8", "--delta", "1e-5"], "rho", 1.229715),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "0.01",
                "--steps",
                "1000",
                "--delta",
                "1e-5",
                "--accountant",
                "rdp",
            ],
            "epsilon",
            2.10137,
        ),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "0.01",
                "--steps",
                "1000",
                "--delta",
                "1e-5",
                "--accountant",
                "pld",
            ],
            "epsilon",
            1.82824,
        ),
        (
            ["account", "calibrate-gaussian", "--epsilon", "1", "--delta", "1e-5"],
            "sigma",
            3.7306316,
        ),
        (["account", "gdp", "--mu", "1", "--delta", "1e-5"], "epsilon", 4.377178),
    ],
)
def test_json_outputs(capsys, argv, key, value):
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 0
    data = json.loads(out)
    assert data[key] == pytest.approx(value, abs=1e-3)


def test_json_echoes_inputs(capsys):
    _, out, _ = run(
        capsys,
        "account",
        "gaussian",
        "--sigma",
        "2",
        "--sensitivity",
        "3",
        "--delta",
        "1e-6",
        "--json",
    )
    data = json.loads(out)
    assert data["sigma"] == 2.0 and data["sensitivity"] == 3.0 and data["delta"] == 1e-6


def test_table_output(capsys):
    code, out, _ = run(capsys, "account", "calibrate-gaussian", "--epsilon", "1", "--delta", "1e-5")
    assert code == 0
    assert "sigma" in out and "3.7306316" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["account", "gaussian", "--sigma", "-1", "--delta", "1e-5"], "sigma"),
        (["account", "gaussian", "--sigma", "nan", "--delta", "1e-5"], "sigma"),
        (["account", "gaussian", "--sigma", "1", "--delta", "2"], "delta"),
        (["account", "gaussian", "--sigma", "abc", "--delta", "1e-5"], "--sigma"),
        (["account", "calibrate-gaussian", "--epsilon", "0", "--delta", "1e-5"], "epsilon"),
        (["account", "calibrate-gaussian", "--epsilon", "inf", "--delta", "1e-5"], "epsilon"),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "1.5",
                "--steps",
                "10",
                "--delta",
                "1e-5",
            ],
            "sample_rate",
        ),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "0.1",
                "--steps",
                "-3",
                "--delta",
                "1e-5",
            ],
            "steps",
        ),
        (
            [
                "account",
                "dpsgd",
                "--sigma",
                "1",
                "--sample-rate",
                "0.1",
                "--steps",
                "3",
                "--delta",
                "1e-5",
                "--accountant",
                "moments",
            ],
            "accountant",
        ),
        (["account", "zcdp", "--delta", "1e-5"], "--rho"),
        (["account", "gaussian", "--delta", "1e-5"], "--sigma"),
    ],
)
def test_bad_arguments_exit_nonzero_with_one_line(capsys, argv, needle):
    code, _out, err = run(capsys, *argv)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and needle in lines[0]


def test_demo_runs(capsys):
    code, out, _ = run(capsys, "demo", "--n-samples", "40000", "--n-features", "5")
    assert code == 0
    for needle in ("OLS (not private)", "auto (default", "ambssgd", "dpsgd", "adassp", "x OLS"):
        assert needle in out


def test_console_script_entry_point():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "privopt.cli",
            "account",
            "gdp",
            "--mu",
            "0.5",
            "--delta",
            "1e-5",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["mu"] == 0.5


@pytest.mark.parametrize(
    ("argv", "key", "value"),
    [
        (
            ["noise", "sensitivity", "--mechanism", "nu-dpftrl", "--nu", "0.01", "--anytime"],
            "sensitivity_squared",
            2.1368782611,
        ),
        (
            ["noise", "sensitivity", "--mechanism", "optimal-cc", "--steps", "1024"],
            "sensitivity_squared",
            3.2725541503,
        ),
        (
            ["noise", "sensitivity", "--mechanism", "tree", "--steps", "1024"],
            "sensitivity_squared",
            11.0,
        ),
        (
            ["noise", "sensitivity", "--mechanism", "anti-pgd", "--steps", "37"],
            "sensitivity_squared",
            37.0,
        ),
        (
            [
                "noise",
                "sensitivity",
                "--mechanism",
                "nu-dpftrl",
                "--nu",
                "0.05",
                "--steps",
                "200",
                "--min-sep",
                "20",
                "--participations",
                "10",
            ],
            "sensitivity_squared",
            19.6000,
        ),
        (
            ["noise", "sensitivity", "--mechanism", "independent", "--steps", "10"],
            "sensitivity",
            1.0,
        ),
        (
            ["noise", "tune-nu", "--steps", "2000", "--min-sep", "100", "--participations", "20"],
            "loss",
            993938.4,
        ),
    ],
)
def test_noise_json_outputs(capsys, argv, key, value):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    assert json.loads(out)[key] == pytest.approx(value, rel=1e-6)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["noise", "sensitivity", "--mechanism", "optimal-cc", "--anytime"], "infinite"),
        (["noise", "sensitivity", "--mechanism", "nu-dpftrl", "--steps", "10"], "--nu"),
        (["noise", "sensitivity", "--mechanism", "nu-dpftrl", "--nu", "1.5", "--steps", "9"], "nu"),
        (["noise", "sensitivity", "--mechanism", "foo", "--steps", "10"], "--mechanism"),
        (["noise", "sensitivity", "--mechanism", "tree"], "--steps"),
        (
            ["noise", "sensitivity", "--mechanism", "tree", "--steps", "10", "--min-sep", "3"],
            "--participations",
        ),
        (
            ["noise", "tune-nu", "--steps", "100", "--min-sep", "50", "--participations", "5"],
            "steps",
        ),
    ],
)
def test_noise_bad_arguments(capsys, argv, needle):
    code, _out, err = run(capsys, *argv)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], err


def _write_csv(path, X, y, names=("a", "b", "c"), target="y"):
    lines = [",".join([*names, target])]
    lines += [",".join(f"{v:.10g}" for v in [*row, t]) for row, t in zip(X, y, strict=True)]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def regression_csv(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30_000, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 3.0 + rng.normal(size=30_000)
    path = tmp_path / "train.csv"
    _write_csv(path, X, y)
    return path, X, y


def test_fit_json_and_predict(capsys, tmp_path, regression_csv):
    path, X, _ = regression_csv
    model_path = tmp_path / "model.json"
    bounds = tmp_path / "bounds.json"
    bounds.write_text(
        json.dumps({"features": {"a": [-5, 5], "b": [-5, 5], "c": [-5, 5]}, "target": [-15, 20]})
    )
    args = ["fit", str(path), "--target", "y", "--epsilon", "2", "--delta", "1e-6"]
    args += ["--method", "adassp", "--out", str(model_path), "--seed", "0", "--json"]
    code, out, err = run(capsys, *args, "--bounds", str(bounds))
    assert code == 0, err
    data = json.loads(out)
    for key in ("epsilon", "delta", "rho", "method", "coef", "intercept"):
        assert key in data
    assert data["epsilon"] <= 2.0 + 1e-9 and data["method"] == "adassp"
    np.testing.assert_allclose(data["coef"], [1.0, -2.0, 0.5], atol=0.1)
    assert data["intercept"] == pytest.approx(3.0, abs=0.1)
    # the private estimate of the fit's own quality (a recorded release): R^2 is about 0.84 here
    assert data["private_r2"] == pytest.approx(0.84, abs=0.05) and data["private_r2_se"] > 0
    assert any("quality" in e["label"] for e in data["privacy_report"]["events"])
    saved = json.loads(model_path.read_text())
    assert saved["coef"] == data["coef"] and saved["private_r2"] == data["private_r2"]
    code, out, err = run(capsys, "predict", str(model_path), str(path), "--json")
    assert code == 0, err
    predictions = np.array(json.loads(out)["predictions"])
    # the CSV holds X to 10 significant digits
    expected = X @ np.array(data["coef"]) + data["intercept"]
    np.testing.assert_allclose(predictions, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.slow  # a second fit on 30,000 rows; the JSON test checks the value in make test
def test_fit_prints_the_private_quality_estimate(capsys, tmp_path, regression_csv):
    path, _, _ = regression_csv
    bounds = tmp_path / "bounds.json"
    bounds.write_text(
        json.dumps({"features": {"a": [-5, 5], "b": [-5, 5], "c": [-5, 5]}, "target": [-15, 20]})
    )
    args = ["fit", str(path), "--target", "y", "--epsilon", "2", "--method", "adassp"]
    args += ["--bounds", str(bounds), "--out", str(tmp_path / "m.json"), "--seed", "0"]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert "Private estimate of the model's R^2 on its training rows: 0.8" in " ".join(out.split())


def test_fit_with_public_bounds_parquet_and_table_output(capsys, tmp_path, regression_csv):
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, X, y = regression_csv
    parquet = tmp_path / "train.parquet"
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "y": y}), parquet)
    bounds = tmp_path / "bounds.json"
    bounds.write_text(
        json.dumps({"features": {"a": [-5, 5], "b": [-5, 5], "c": [-5, 5]}, "target": [-15, 20]})
    )
    model_path = tmp_path / "m.json"
    code, out, err = run(
        capsys,
        "fit",
        str(parquet),
        "--target",
        "y",
        "--bounds",
        str(bounds),
        "--out",
        str(model_path),
        "--seed",
        "1",
    )
    assert code == 0, err
    assert "Privacy report" in out and "public bounds" in out
    preds = tmp_path / "p.csv"
    code, _, err = run(capsys, "predict", str(model_path), str(parquet), "--out", str(preds))
    assert code == 0, err
    assert preds.read_text().splitlines()[0] == "prediction"
    assert len(preds.read_text().splitlines()) == X.shape[0] + 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--target", "missing"], "missing"),
        (["--target", "y", "--epsilon", "0"], "epsilon"),
        (["--target", "y", "--delta", "2"], "delta"),
        (["--target", "y", "--method", "magic"], "method"),
    ],
)
def test_fit_bad_arguments(capsys, tmp_path, regression_csv, args, needle):
    path, _, _ = regression_csv
    code, _, err = run(capsys, "fit", str(path), "--out", str(tmp_path / "m.json"), *args)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[-1], err


def test_fit_rejects_non_numeric_and_small_data(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,y\nx,1\ny,2\n")
    code, _, err = run(capsys, "fit", str(bad), "--target", "y", "--out", str(tmp_path / "m"))
    assert (code == 2 and "non-numeric" in err.lower()) or "numeric" in err
    small = tmp_path / "small.csv"
    rng = np.random.default_rng(0)
    _write_csv(small, rng.normal(size=(100, 3)), rng.normal(size=100))
    code, _, err = run(capsys, "fit", str(small), "--target", "y", "--out", str(tmp_path / "m"))
    assert code == 2 and "rows" in err


def test_predict_rejects_a_non_model(capsys, tmp_path, regression_csv):
    path, _, _ = regression_csv
    fake = tmp_path / "fake.json"
    fake.write_text("{}")
    code, _, err = run(capsys, "predict", str(fake), str(path))
    assert code == 2 and "model" in err


def test_fit_with_private_bounds(capsys, tmp_path, regression_csv):
    path, _, _ = regression_csv
    args = ["fit", str(path), "--target", "y", "--out", str(tmp_path / "m.json")]
    code, out, err = run(capsys, *args, "--seed", "0", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["epsilon"] <= 1.0 + 1e-9
    labels = {e["label"] for e in data["privacy_report"]["events"]}
    # the private bounds are releases of their own (issue 16: private quantiles)
    assert any(label.startswith("private ") for label in labels)
    # the default (method "auto") chose noisy Newton for this table and says so in model.json
    assert any(label.startswith("noisy-Newton") for label in labels)
    assert data["method"] == "newton"


def test_reproduce_fig1(capsys, tmp_path):
    code, out, err = run(capsys, "reproduce", "fig1", "--out", str(tmp_path), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["ratio"]["0.01"] == pytest.approx(0.090868, abs=5e-7)
    assert data["ratio"]["1"] == pytest.approx(1.0)
    assert (tmp_path / "fig1.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "fig1.json").read_text())["figure"] == "fig1"
    code, _, err = run(capsys, "reproduce", "fig9", "--out", str(tmp_path))
    assert code == 2 and "fig1" in err


def test_every_registered_reproduction_takes_out_and_quick():
    import importlib
    import inspect

    from privopt.cli import REPRODUCTIONS

    assert set(REPRODUCTIONS) == {
        "fig1",
        "fig2",
        "fig3",
        "cifar-style",
        "overparam",
        "single-epoch",
        "federated",
    }
    for module, function, _ in REPRODUCTIONS.values():
        signature = inspect.signature(getattr(importlib.import_module(module), function))
        assert "quick" in signature.parameters and next(iter(signature.parameters)) == "out"


@pytest.mark.parametrize("method", ["dpsgd", "adassp"])
def test_fit_model_file_states_a_relation_that_keeps_n_public(
    capsys, tmp_path, regression_csv, method
):
    # Issue 12 item 4: the model file holds n_rows, so the relation must keep N fixed.
    path, X, _ = regression_csv
    bounds = tmp_path / "bounds.json"
    bounds.write_text(
        json.dumps({"features": {"a": [-5, 5], "b": [-5, 5], "c": [-5, 5]}, "target": [-15, 20]})
    )
    model_path = tmp_path / "model.json"
    args = ["fit", str(path), "--target", "y", "--method", method, "--out", str(model_path)]
    code, _, err = run(capsys, *args, "--bounds", str(bounds), "--seed", "1", "--json")
    assert code == 0, err
    saved = json.loads(model_path.read_text())
    assert saved["n_rows"] == X.shape[0]
    assert saved["neighbouring"] == saved["privacy_report"]["neighbouring"]
    assert saved["neighbouring"] in ("replace-one", "zero-out")
    assert "public size N" in saved["privacy_report"]["neighbouring_description"]
    assert any("N is public" in a for a in saved["privacy_report"]["assumptions"])
    assert any("seed" in a and "secret" in a for a in saved["privacy_report"]["assumptions"])


def test_fit_secure_mode_and_its_conflict_with_seed(capsys, tmp_path, regression_csv):
    path, _, _ = regression_csv
    bounds = tmp_path / "bounds.json"
    bounds.write_text(
        json.dumps({"features": {"a": [-5, 5], "b": [-5, 5], "c": [-5, 5]}, "target": [-15, 20]})
    )
    args = ["fit", str(path), "--target", "y", "--method", "adassp", "--bounds", str(bounds)]
    code, _, err = run(capsys, *args, "--out", str(tmp_path / "a.json"), "--secure", "--seed", "1")
    assert code == 2 and "--secure" in err and len(err.strip().splitlines()) == 1
    code, out, err = run(capsys, *args, "--out", str(tmp_path / "b.json"), "--secure", "--json")
    assert code == 0, err
    report = json.loads(out)["privacy_report"]
    assert any("secure mode" in a for a in report["assumptions"])


def test_fit_neighbouring_option(capsys, tmp_path, regression_csv):
    path, _, _ = regression_csv
    bounds = tmp_path / "bounds.json"
    bounds.write_text(
        json.dumps({"features": {"a": [-5, 5], "b": [-5, 5], "c": [-5, 5]}, "target": [-15, 20]})
    )
    args = ["fit", str(path), "--target", "y", "--bounds", str(bounds), "--seed", "0"]
    code, out, err = run(
        capsys, *args, "--method", "adassp", "--neighbouring", "zero-out", "--json",
        "--out", str(tmp_path / "m.json"),
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["neighbouring"] == "zero-out"
    code, _, err = run(
        capsys, *args, "--method", "dpsgd", "--neighbouring", "replace-one",
        "--out", str(tmp_path / "n.json"),
    )  # fmt: skip
    assert code == 2 and "zero-out" in err and len(err.strip().splitlines()) == 1


def test_missing_input_and_unwritable_output_are_one_line_errors(capsys, tmp_path, regression_csv):
    path, _, _ = regression_csv
    code, _, err = run(capsys, "fit", str(tmp_path / "nosuch.csv"), "--target", "y",
                       "--out", str(tmp_path / "m.json"))  # fmt: skip
    assert code == 2 and "nosuch.csv" in err and len(err.strip().splitlines()) == 1
    bounds = tmp_path / "bounds.json"
    bounds.write_text(
        json.dumps({"features": {"a": [-5, 5], "b": [-5, 5], "c": [-5, 5]}, "target": [-15, 20]})
    )
    out = str(tmp_path / "missing" / "m.json")
    code, _, err = run(capsys, "fit", str(path), "--target", "y", "--bounds", str(bounds),
                       "--method", "adassp", "--out", out)  # fmt: skip
    assert code == 2 and "missing" in err and len(err.strip().splitlines()) == 1


def test_noise_blt(capsys):
    # issue 14's golden: n = 2000, single participation, 4 buffers within 0.1% of the optimal
    # Toeplitz (12.14995); min-sep mean loss below a tuned nu-DP-FTRL's
    code, out, err = run(capsys, "noise", "blt", "--steps", "2000", "--buffers", "4", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["buf_decay"]) == len(data["output_scale"]) == 4
    assert data["max_loss"] == pytest.approx(12.15658, rel=1e-5)
    assert 1.0 <= data["loss_ratio_to_reference"] <= 1.001
    args = ["noise", "blt", "--steps", "2000", "--min-sep", "100", "--participations", "20"]
    code, out, err = run(capsys, *args, "--error", "mean", "--buffers", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["loss_ratio_to_reference"] < 0.95
    for bad in (["--error", "median"], ["--min-sep", "100"]):
        code, _, err = run(capsys, "noise", "blt", "--steps", "2000", *bad)
        assert code == 2 and len(err.strip().splitlines()) == 1


def test_noise_compare(capsys):
    # closed forms: independent noise has max loss n and mean loss (n + 1) / 2 (sensitivity 1);
    # the tree's max loss is levels x the largest popcount (11 x 10 at n = 2000)
    code, out, err = run(capsys, "noise", "compare", "--steps", "2000", "--json")
    assert code == 0, err
    rows = json.loads(out)["mechanisms"]
    assert rows["independent"]["max_loss"] == pytest.approx(2000.0)
    assert rows["independent"]["mean_loss"] == pytest.approx(1000.5)
    assert rows["tree"]["max_loss"] == pytest.approx(110.0)
    assert rows["optimal-cc"]["max_loss"] == pytest.approx(12.14995, rel=1e-6)
    blt = next(v for k, v in rows.items() if k.startswith("blt"))
    assert blt["state_vectors"] <= 10 and blt["max_loss"] <= 1.01 * rows["optimal-cc"]["max_loss"]
    code, _, err = run(capsys, "noise", "compare", "--steps", "100000")
    assert code == 2 and len(err.strip().splitlines()) == 1
