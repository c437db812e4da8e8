"""Shared test configuration: hypothesis profiles sized for a 2-core CI machine, and the tests
that `make test` leaves to `make test-all` by their measured time."""

import os
from pathlib import Path

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


#: Tests measured at 2 s or more each in the fast suite on a quiet 2-core machine (12 s or more
#: under load; ``tests/slow_tests.txt`` lists each node id with its time):
#: they run in ``make test-all``, which CI runs. Marked by node id, parameters included, so the
#: fast cases of the same function stay in ``make test``. A line is the node id (which may hold
#: spaces) and then its measured time.
SLOW_BY_MEASUREMENT = frozenset(
    line.rsplit(None, 1)[0]
    for line in (Path(__file__).with_name("slow_tests.txt")).read_text().splitlines()
    if line.strip() and not line.startswith("#")
)


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        if item.nodeid in SLOW_BY_MEASUREMENT:
            item.add_marker(pytest.mark.slow)
