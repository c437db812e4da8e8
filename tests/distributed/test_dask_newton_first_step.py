"""Noisy Newton's first step on Dask: with private bounds its clip is three released target
sigmas (:func:`privopt.releases.quantile_bounds.first_step_clip`), below the target radius, the
same as in memory, so the two backends' fits stay equal; with public bounds it is T on both."""

import numpy as np
import pytest
from dask_helpers import as_dask, assert_same_fit, estimator

from privopt.distributed import methods
from privopt.estimators import _regression_methods
from privopt.releases.quantile_bounds import FIRST_STEP_SIGMAS, first_step_clip


@pytest.mark.parametrize("public", [False, True], ids=["private-bounds", "public-bounds"])
def test_first_clip_is_the_same_on_dask_and_in_memory(synchronous, data, public, monkeypatch):
    X, y = data
    seen = {"memory": [], "dask": []}

    def spy(where):
        def choose(bounds):
            seen[where].append((bounds, first_step_clip(bounds)))
            return seen[where][-1][1]

        return choose

    monkeypatch.setattr(_regression_methods, "first_step_clip", spy("memory"))
    monkeypatch.setattr(methods, "first_step_clip", spy("dask"))
    in_memory = estimator("newton", public).fit(X, y)
    on_dask = estimator("newton", public).fit(*as_dask(X, y, 3))
    assert_same_fit(in_memory, on_dask)
    (bounds, clip), (dask_bounds, dask_clip) = seen["memory"][0], seen["dask"][0]
    assert clip == dask_clip
    first = on_dask.fit_info_["residual_clips"][0]
    assert first == pytest.approx(in_memory.fit_info_["residual_clips"][0], rel=1e-12)
    if public:
        assert clip is None and first == dask_bounds.y_radius
    else:  # the clip acts (below T), so the equality above covers it
        assert clip == pytest.approx(FIRST_STEP_SIGMAS * bounds.y_scale)
        assert first == pytest.approx(clip, rel=1e-12) and clip < bounds.y_radius
    assert np.all(np.isfinite(on_dask.coef_))
