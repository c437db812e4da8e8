"""Small pieces the reproductions share: argument checks and the run environment."""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
from collections.abc import Iterator, Sequence

from privopt._validate import check_count

__all__ = ["check_epsilons", "reproduction_environment"]


def check_epsilons(epsilons: Sequence[float]) -> tuple[float, ...]:
    """A non-empty tuple of finite epsilons > 0 (booleans refused)."""
    values = tuple(epsilons)
    if not values:
        raise ValueError("Expected at least one epsilon.")
    for value in values:
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Real)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ValueError(f"Expected finite epsilons > 0, got {value!r}.")
    return tuple(float(v) for v in values)


@contextlib.contextmanager
def reproduction_environment(
    blas_threads: int | None = 1, *, mute_accounting_notices: bool = True
) -> Iterator[None]:
    """Cap BLAS threads (threadpoolctl, a scikit-learn dependency; None leaves them) and mute
    dp_accounting's "order excluded" RDP notices for the duration of a run.

    The reproductions' matrices are small: multi-threaded BLAS only adds overhead on a busy
    2-core machine (40x slower measured), and the notices are not actionable.
    """
    from threadpoolctl import threadpool_limits

    absl = logging.getLogger("absl")
    level = absl.level
    if mute_accounting_notices:
        absl.setLevel(logging.ERROR)
    try:
        if blas_threads is None:
            yield
        else:
            limit = check_count("blas_threads", blas_threads)
            with threadpool_limits(limits=limit, user_api="blas"):
                yield
    finally:
        absl.setLevel(level)
