"""Fast sibling of the generator benchmark: the suite runs and reports sane numbers at tiny d."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from noise_generators import run


def test_generator_benchmark_runs_at_small_size():
    results = run(dim=1000, steps=20, sample_steps=[1, 19])
    assert results["dim"] == 1000
    for name in ("independent", "tree", "tree-honaker", "anti-pgd (history)"):
        assert results[name]["total_s"] > 0
        assert results[name]["peak_mib"] > 0
    history = results["nu-dpftrl (history), step t"]
    assert history["19"]["state_mib"] > history["1"]["state_mib"]
    assert results["nu-dpftrl (regenerate), step t"]["19"]["state_mib"] == 0.0
