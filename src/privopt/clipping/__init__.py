"""Clipping and private thresholds: per-example clipping and DP-STAT.

``clipping`` knows nothing of accounting: private threshold estimators return the parameters of
the release (queries, noise std) and the calling algorithm records the event in its ledger.
"""

from privopt.clipping.clip import clip_factors, clip_rows, row_norms
from privopt.clipping.dp_stat import DPStatResult, dp_stat, dp_stat_margin

__all__ = [
    "DPStatResult",
    "clip_factors",
    "clip_rows",
    "dp_stat",
    "dp_stat_margin",
    "row_norms",
]
