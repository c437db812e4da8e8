"""Private model selection: choose the method and hyper-parameters with the whole cost recorded.

:class:`PrivateGridSearchCV` trains every candidate of a grid on a secret training split, scores
each on the validation split with a sensitivity-1 utility and selects one by the exponential
mechanism; its ``privacy_report_`` covers training, evaluation, selection and the optional refit.
scikit-learn's ``GridSearchCV`` / ``cross_val_score`` around a private estimator spend a budget
per fit that no report composes (privopt warns: :class:`privopt.PrivacyLeakWarning`).
"""

from privopt.model_selection._scoring import record_utilities
from privopt.model_selection._search import PrivateGridSearchCV, candidate_target

__all__ = ["PrivateGridSearchCV", "candidate_target", "record_utilities"]
