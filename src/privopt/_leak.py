"""PrivacyLeakWarning: private data reaching a fit without a private mechanism.

privopt cannot see what happens outside its own fits, but two common leaks show on the call
stack of a private estimator's ``fit``, and are detected there (no counters, no global state):

* **A non-private transformer before it in a Pipeline.** ``Pipeline.fit`` fits every earlier
  step on the same rows; a fitted scaler, imputer or encoder learned means, scales or categories
  from the private data, and the model and its predictions carry them outside the guarantee.
  Steps that learn nothing from the data are clean: stateless ones (scikit-learn's tag
  ``requires_fit`` is False, e.g. ``FunctionTransformer`` with public constants, ``Normalizer``),
  encoders with explicit public categories, privopt's private estimators and transformers, and
  ``"passthrough"``. Nested pipelines and column transformers are inspected step by step.
* **A scikit-learn routine that fits it repeatedly on the same rows** (``GridSearchCV``,
  ``cross_val_score``, ``RFE``, ``OneVsRestClassifier``, bagging...): each fit spends its own
  budget, and no report composes them, so the selected model's report understates the spend.
  :class:`privopt.model_selection.PrivateGridSearchCV` accounts for the whole search.

Detection inspects the caller frames (module names and the ``self`` of ``Pipeline.fit``). Fits
run in joblib worker processes warn there, where the warning may not reach the caller.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

__all__ = ["PrivacyLeakWarning", "check_for_leaks", "leak_checks_suppressed"]

#: scikit-learn packages whose routines fit an estimator several times on the same rows.
REPEATED_FIT_MODULES = (
    "sklearn.model_selection",
    "sklearn.feature_selection",
    "sklearn.calibration",
    "sklearn.multiclass",
    "sklearn.multioutput",
    "sklearn.ensemble",
    "sklearn.inspection",
)
#: How many caller frames are inspected.
MAX_FRAMES = 200

_SUPPRESSED: ContextVar[bool] = ContextVar("privopt_leak_checks_suppressed", default=False)


class PrivacyLeakWarning(RuntimeWarning):
    """Private data reached a fit, or a release, without a private mechanism."""


@contextlib.contextmanager
def leak_checks_suppressed() -> Iterator[None]:
    """Within: no leak checks (for privopt's own accounted repeated fits, e.g. private search)."""
    token = _SUPPRESSED.set(True)
    try:
        yield
    finally:
        _SUPPRESSED.reset(token)


def check_for_leaks(estimator: Any, stacklevel: int = 3) -> list[str]:
    """Warn (:class:`PrivacyLeakWarning`) about the leaks above; returns the messages."""
    if _SUPPRESSED.get():
        return []
    messages: list[str] = []
    name = type(estimator).__name__
    frame = sys._getframe(1)
    repeated = None
    for _ in range(MAX_FRAMES):
        if frame is None:
            break
        module = frame.f_globals.get("__name__", "")
        if repeated is None and module.startswith(REPEATED_FIT_MODULES):
            repeated = f"{module}.{frame.f_code.co_name}"
        if module == "sklearn.pipeline" and frame.f_code.co_name == "fit":
            messages.extend(_pipeline_leaks(frame.f_locals.get("self"), estimator))
        frame = frame.f_back
    if repeated is not None:
        messages.append(
            f"{name} is fitted by scikit-learn's {repeated}, which fits it several times on "
            "the same private rows: each fit spends its own (epsilon, delta) and no privacy "
            "report composes them, so the selected model's report understates the spend. Use "
            "privopt.model_selection.PrivateGridSearchCV (accounted private selection) or a "
            "privopt.PrivacyBudget shared by the fits."
        )
    for message in dict.fromkeys(messages):
        warnings.warn(message, PrivacyLeakWarning, stacklevel=stacklevel)
    return messages


def _pipeline_leaks(pipeline: Any, estimator: Any) -> list[str]:
    steps = getattr(pipeline, "steps", None)
    if not isinstance(steps, list):
        return []
    position = next((i for i, (_, s) in enumerate(steps) if s is estimator), None)
    if position is None:
        return []
    out = []
    for step_name, step in steps[:position]:
        for culprit in _non_private_parts(step):
            out.append(
                f"{type(culprit).__name__} (pipeline step {step_name!r}) was fitted on the same "
                f"private rows as {type(estimator).__name__} without a private mechanism: what "
                "it learned (means, scales, categories...) reaches the model and its "
                "predictions outside the privacy guarantee. Use public constants "
                "(FunctionTransformer, feature_bounds) or privopt's private preprocessing "
                "(feature_bounds=None)."
            )
    return out


def _non_private_parts(step: Any) -> list[Any]:
    """The parts of a pipeline step that learn from the rows they are fitted on."""
    if step is None or isinstance(step, str):  # "passthrough", "drop"
        return []
    if getattr(step, "__privopt_private__", False):
        return []
    from privopt.estimators._base import PrivateEstimator

    if isinstance(step, PrivateEstimator):
        return []
    children = _children(step)
    if children is not None:
        return [part for child in children for part in _non_private_parts(child)]
    if _public_encoder(step):
        return []
    try:
        from sklearn.utils import get_tags

        if not get_tags(step).requires_fit:
            return []
    except (AttributeError, TypeError, ValueError):
        pass
    return [step]


def _children(step: Any) -> list[Any] | None:
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import FeatureUnion, Pipeline

    if isinstance(step, Pipeline):
        return [s for _, s in step.steps]
    if isinstance(step, ColumnTransformer):
        rest = [step.remainder] if not isinstance(step.remainder, str) else []
        return [t for _, t, _ in step.transformers] + rest
    if isinstance(step, FeatureUnion):
        return [t for _, t in step.transformer_list]
    return None


def _public_encoder(step: Any) -> bool:
    """An encoder given its categories: it learns nothing from the rows."""
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

    if not isinstance(step, OneHotEncoder | OrdinalEncoder):
        return False
    params = step.get_params(deep=False)
    return (
        params.get("categories") != "auto"
        and params.get("min_frequency") is None
        and params.get("max_categories") is None
    )
