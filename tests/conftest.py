"""Shared test configuration: hypothesis profiles sized for a 2-core CI machine."""

import os

from hypothesis import HealthCheck, settings

# "ci" (the default) is derandomized: make test explores the same examples on every run, so a
# fuzzer finding is reproducible and never a coin flip in CI. HYPOTHESIS_PROFILE=explore
# searches new examples (run it when changing an entry point; add what it finds as a test).
settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
