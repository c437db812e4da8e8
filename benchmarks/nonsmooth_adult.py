"""Wang et al. (2022) on Adult: test accuracy against epsilon for each classification loss and both
perturbations, and the time per fit (issue 6's benchmark).

80/20 split (random_state 0), the public-knowledge preprocessor of privopt.datasets.adult,
public feature bounds (0, 1), delta = 1e-6, default estimator settings otherwise (T = 16 n steps,
radius "auto"). One seed per cell (the fits are deterministic given random_state).
Run: ``python benchmarks/nonsmooth_adult.py --out benchmarks/nonsmooth_adult_results.json``
(about 10 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

from privopt import DPLinearClassifier
from privopt.datasets.adult import adult_preprocessor, load_adult

ADULT = None  # the copy bundled with privopt
EPSILONS = (0.1, 0.5, 1.0, 2.0, 8.0)
LOSSES = ("hinge", "squared_hinge", "qnorm_hinge", "logistic")
PERTURBATIONS = ("gradient", "output")


def run(path: Path | None = ADULT, epsilons=EPSILONS, losses=LOSSES) -> dict:
    data = load_adult(path)
    X_train, X_test, y_train, y_test = train_test_split(
        data.X, data.y, test_size=0.2, random_state=0
    )
    baseline = make_pipeline(adult_preprocessor(), LogisticRegression(max_iter=3000))
    start = time.perf_counter()
    baseline_accuracy = baseline.fit(X_train, y_train).score(X_test, y_test)
    rows = [
        {
            "method": "non-private logistic regression",
            "accuracy": baseline_accuracy,
            "seconds": time.perf_counter() - start,
        }
    ]
    for perturbation in PERTURBATIONS:
        for loss in losses:
            for epsilon in epsilons:
                model = make_pipeline(
                    adult_preprocessor(),
                    DPLinearClassifier(
                        loss=loss,
                        perturbation=perturbation,
                        epsilon=epsilon,
                        delta=1e-6,
                        feature_bounds=(0.0, 1.0),
                        random_state=0,
                    ),
                )
                start = time.perf_counter()
                model.fit(X_train, y_train)
                seconds = time.perf_counter() - start
                fitted = model[-1]
                rows.append(
                    {
                        "perturbation": perturbation,
                        "loss": loss,
                        "epsilon": epsilon,
                        "accuracy": model.score(X_test, y_test),
                        "reported_epsilon": fitted.privacy_report_.epsilon,
                        "accountant": fitted.privacy_report_.accountant,
                        "sigma": fitted.fit_info_["sigma"],
                        "steps": fitted.fit_info_["steps"],
                        "seconds": seconds,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    return {"baseline_accuracy": baseline_accuracy, "delta": 1e-6, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/nonsmooth_adult_results.json"))
    args = parser.parse_args()
    if not ADULT.exists():
        raise SystemExit(f"{ADULT} is not available")
    args.out.write_text(json.dumps(run(), indent=2))


if __name__ == "__main__":
    main()
