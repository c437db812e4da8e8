"""One mechanism registry, one spelling per name (issue 28 item 4)."""

import pytest

from privopt.noise import Participation
from privopt.noise.registry import MECHANISM_NAMES, canonical_mechanism, tuned_mechanism


def test_the_readme_spellings_are_the_names():
    assert set(MECHANISM_NAMES) == {"dpsgd", "blt", "banded", "nu-dpftrl", "optimal-cc", "tree"}
    for name in MECHANISM_NAMES:
        assert canonical_mechanism(name) == name


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("dp-sgd", "dpsgd"),
        ("nu-dp-ftrl", "nu-dpftrl"),
        ("optimal_cc", "optimal-cc"),
        ("BLT", "blt"),
    ],
)
def test_older_spellings_warn_and_map(old, new):
    with pytest.warns(DeprecationWarning, match=f"spelled '{new}'"):
        assert canonical_mechanism(old) == new


@pytest.mark.parametrize("bad", ["adam", "", None, 3])
def test_unknown_names_are_refused_with_the_list(bad):
    with pytest.raises(ValueError, match="Expected a mechanism name in"):
        canonical_mechanism(bad)


def test_every_name_is_tuned_from_public_quantities():
    pattern = Participation.multiple(10, 3)
    for name in MECHANISM_NAMES:
        mech, info = tuned_mechanism(name, 30, pattern)
        assert mech.decoder_matrix(4).shape[0] == 4  # the tree has more noise sources
        assert isinstance(info, dict)
    _, banded = tuned_mechanism("banded", 30, pattern, bands=4)
    assert banded["bands"] == 4


def test_torch_and_the_reproduction_read_the_registry():
    torch = pytest.importorskip("torch")  # noqa: F841
    from privopt.torch import MECHANISMS, build_plan

    assert tuple(MECHANISMS) == MECHANISM_NAMES
    with pytest.warns(DeprecationWarning):
        _plan, info = build_plan("nu-dp-ftrl", 640, batch_size=32, epochs=2, clip_norm=1.0)
    assert info["mechanism"] == "nu-dpftrl"
    with pytest.raises(ValueError, match="Expected mechanism in"):
        build_plan("adam", 640, batch_size=32, epochs=2, clip_norm=1.0)
