"""Private classification of Adult (categorical features) in a scikit-learn pipeline.

The categories and numeric ranges come from the dataset's public documentation
(privopt.datasets.adult), so the preprocessing learns nothing from the private rows and costs no
privacy; the classifier spends (epsilon, delta) and reports it.

    python examples/adult_classifier.py [path/to/adult.csv]
"""

import sys
from pathlib import Path

from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

from privopt import DPLinearClassifier
from privopt.datasets.adult import adult_preprocessor, load_adult

DEFAULT = None  # the copy bundled with privopt


def main(path: Path | None = DEFAULT) -> None:
    data = load_adult(path)
    X_train, X_test, y_train, y_test = train_test_split(
        data.X, data.y, test_size=0.2, random_state=0
    )
    private = make_pipeline(
        adult_preprocessor(),  # public category lists and ranges: every column in [0, 1]
        DPLinearClassifier(loss="hinge", epsilon=1.0, delta=1e-6, feature_bounds=(0.0, 1.0)),
    ).fit(X_train, y_train)
    baseline = make_pipeline(adult_preprocessor(), LogisticRegression(max_iter=3000))
    baseline.fit(X_train, y_train)
    print(f"private hinge, epsilon = 1: {private.score(X_test, y_test):.3f}")
    print(f"non-private logistic:      {baseline.score(X_test, y_test):.3f}")
    private[-1].privacy_report_.render()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
