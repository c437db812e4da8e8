"""The per-user norm methods of user-level clipping (:mod:`privopt.torch._groups`,
:mod:`privopt.torch._user_conv`): every tiling of the ghost pair sums, the materialised route and
the convolution routes are exact against a float64 loop over users; a non-finite user never
reaches the norm of a user sharing its tile; the record-level sums are untouched by a user-level
step; the tilings lay out every example once."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import privopt.torch._groups as groups_module  # noqa: E402
import privopt.torch._user_conv as user_conv  # noqa: E402
from privopt.torch._groups import Groups  # noqa: E402
from privopt.torch.clipping import GradientClipper  # noqa: E402
from torch import nn  # noqa: E402

G = 0.3
B = 17

LAYOUTS = {  # user slot of each of the B examples
    # sizes 5, 4, 3, 2, 1, 1, 1 scattered through the batch (padding, several users a tile)
    "scattered": np.array([2, 0, 1, 0, 3, 2, 1, 0, 4, 1, 6, 0, 2, 5, 1, 3, 0]),
    # user after user as the loader yields them; slots 3 and 6 without examples
    "contiguous": np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 4, 5, 5, 7, 8]),
    "singletons": np.arange(B),
    "equal": np.repeat(np.arange(B // 4 + 1), 4)[:B],  # 4 users of 4, one of 1
}


def _ce(out, y):
    return nn.functional.cross_entropy(out, y, reduction="none")


def per_user_loop(model, loss_fn, x, y, users, clip):
    """float64 reference: each user's summed gradient alone, clipped; a user whose gradient is
    not finite contributes zero."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    for u in np.unique(users):
        idx = torch.as_tensor(np.flatnonzero(users == u))
        out = model(x[idx])
        grads = torch.autograd.grad(loss_fn(out, y[idx]).sum(), list(params.values()))
        norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
        if not math.isfinite(norm):
            continue
        for n, g in zip(params, grads, strict=True):
            total[n] += min(1.0, clip / norm) * g if norm > 0 else g
    return total


def _assert_exact(got, expected, rel=1e-10):
    scale = max(float(v.abs().max()) for v in expected.values())
    for name, value in expected.items():
        assert float((got[name] - value).abs().max()) <= rel * scale, name


class Tokens(nn.Module):
    """Embedding -> Linear over T = 4 positions -> tanh -> Linear (T = 4) -> mean."""

    def __init__(self):
        super().__init__()
        self.emb, self.mid, self.head = nn.Embedding(11, 6), nn.Linear(6, 5), nn.Linear(5, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.mid(self.emb(x)))).mean(1)


def _linear_case(kind, gen):
    if kind == "tokens":
        return Tokens(), torch.randint(0, 11, (B, 4), generator=gen)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    return model, torch.randn(B, 5, generator=gen)


def _only(choice):
    """A ``_linear_costs`` that makes ``choice`` (a predicate on the method keys) the cheapest."""
    costs = groups_module._linear_costs

    def forced(*args):
        out = costs(*args)
        keys = sorted((k for k in out if choice(k)), key=str)
        assert keys, f"no method of {list(out)} is chosen"
        return {k: float(k != keys[0]) for k in out}

    return forced


CHOICES = {
    "whole-batch": lambda k: k == ("tiles", ()),
    "one-class": lambda k: k[0] == "tiles" and len(k[1]) == 1,
    "two-classes": lambda k: k[0] == "tiles" and len(k[1]) == 2,
    "per-user-one-class": lambda k: k[0] == "users" and len(k[1]) == 1,
    "per-user-two-classes": lambda k: k[0] == "users" and len(k[1]) == 2,
    "materialised": lambda k: k == "materialised",
}


KINDS_CHOICES = [  # per-user gradients are considered over T > 1 positions only
    (kind, choice)
    for kind in ("mlp", "tokens")
    for choice in CHOICES
    if kind == "tokens" or not choice.startswith("per-user")
]


@pytest.mark.parametrize("layout", ["scattered", "contiguous", "equal"])
@pytest.mark.parametrize("kind,choice", KINDS_CHOICES)
def test_every_linear_per_user_norm_method_is_exact(kind, choice, layout, monkeypatch):
    monkeypatch.setattr(groups_module, "_linear_costs", _only(CHOICES[choice]))
    gen = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    model, x = _linear_case(kind, gen)
    model = model.double()
    x = x.double() if x.is_floating_point() else x
    y = torch.randint(0, 3, (B,), generator=gen)
    users = LAYOUTS[layout]
    clipper = GradientClipper(model)
    got, _ = clipper.clipped_sum(_ce, x, y, G, groups=users)
    clipper.remove()
    _assert_exact(got, per_user_loop(model, _ce, x, y, users, G))


EDGES = {  # 14 examples
    "pad-after-last-row": np.array([0, 1, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5]),
    "empty-slots": np.array([0, 0, 2, 2, 2, 5, 5, 5, 5, 5, 5, 5, 5, 9]),
    "sizes-1-1-2-5-5": np.array([4, 0, 0, 3, 1, 2, 2, 3, 3, 3, 3, 0, 0, 0]),
}


@pytest.mark.parametrize("edge", list(EDGES))
@pytest.mark.parametrize("choice", ["one-class", "two-classes"])
def test_padding_edge_cases_are_exact(choice, edge, monkeypatch):
    """A padded tile right after row B - 1 (whose rows look contiguous), slots without
    examples, users of equal sizes in different tiles."""
    monkeypatch.setattr(groups_module, "_linear_costs", _only(CHOICES[choice]))
    gen = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    x = torch.randn(14, 5, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (14,), generator=gen)
    users = EDGES[edge]
    clipper = GradientClipper(model)
    got, _ = clipper.clipped_sum(_ce, x, y, G, groups=users)
    clipper.remove()
    expected = per_user_loop(model, _ce, x, y, users, G)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=0, atol=1e-12)


@pytest.mark.parametrize("frozen", ["bias", "weight"])
@pytest.mark.parametrize("choice", ["one-class", "per-user-two-classes", "materialised"])
def test_a_linear_layer_with_a_frozen_weight_or_bias_is_exact(frozen, choice, monkeypatch):
    """The ghost route folds the bias into the Gram (<a_r, a_s> + 1): with the bias frozen the
    "+ 1" must go, with the weight frozen only the bias's segment sums remain."""
    monkeypatch.setattr(groups_module, "_linear_costs", _only(CHOICES[choice]))
    gen = torch.Generator().manual_seed(5)
    torch.manual_seed(5)
    model, x = _linear_case("tokens", gen)
    model = model.double()
    getattr(model.mid, frozen).requires_grad_(False)
    y = torch.randint(0, 3, (B,), generator=gen)
    users = LAYOUTS["scattered"]
    clipper = GradientClipper(model)
    got, _ = clipper.clipped_sum(_ce, x, y, G, groups=users)
    clipper.remove()
    _assert_exact(got, per_user_loop(model, _ce, x, y, users, G))


@pytest.mark.parametrize("bad_user", [3, 2])  # user 2 holds row 0, which the padding takes
@pytest.mark.parametrize(
    "choice", ["whole-batch", "one-class", "two-classes", "per-user-one-class"]
)
def test_a_non_finite_user_does_not_reach_the_users_sharing_its_tile(choice, bad_user, monkeypatch):
    """Tiles hold several users and padding rows (copies of row 0); the cross-user entries of
    the Grams (inf or nan here) are dropped by a select, not multiplied by zero, and the
    padding of per-user gradients is zeroed on both sides, so the other users are exact."""
    monkeypatch.setattr(groups_module, "_linear_costs", _only(CHOICES[choice]))
    gen = torch.Generator().manual_seed(6)
    torch.manual_seed(6)
    users = LAYOUTS["scattered"]
    bad = np.flatnonzero(users == bad_user)
    if choice.startswith("per-user"):  # over T = 4 positions: a token whose embedding is inf
        model, x = _linear_case("tokens", gen)
        model = model.double()
        x = x % 10
        x[bad[0], 1] = 10
        with torch.no_grad():
            model.emb.weight[10] = float("inf")
    else:
        model, x = _linear_case("mlp", gen)
        model, x = model.double(), x.double()
        x[bad[0], 1] = float("inf")
    y = torch.randint(0, 3, (B,), generator=gen)
    clipper = GradientClipper(model)
    got, _ = clipper.clipped_sum(_ce, x, y, G, groups=users)
    clipper.remove()
    keep = users != bad_user
    expected = per_user_loop(model, _ce, x[keep], y[keep], users[keep], G)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=0, atol=1e-12)


class Convs(nn.Module):
    """Conv2d (padding, stride 2, dilation), a grouped Conv2d called twice, Conv1d."""

    def __init__(self, bias=True):
        super().__init__()
        self.c1 = nn.Conv2d(2, 4, 3, stride=2, padding=1, dilation=1, bias=bias)
        self.c2 = nn.Conv2d(4, 4, 2, groups=2, dilation=2, bias=bias)
        self.c3 = nn.Conv1d(4, 3, 2, bias=bias)
        self.head = nn.Linear(3 * 4, 3)

    def forward(self, x):
        h = torch.tanh(self.c1(x))  # (4, 4, 4)
        h = torch.tanh(self.c2(self.c2(nn.functional.pad(h, (2, 2, 2, 2)))))  # twice: (4, 4, 4)
        h = torch.tanh(self.c3(h.mean(2)))  # (3, 3) -> Conv1d on (4, 4): (3, 3)
        return self.head(nn.functional.pad(h, (0, 1)).flatten(1))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layout", ["scattered", "singletons", "contiguous"])
@pytest.mark.parametrize("method", ["ghost", "materialised"])
def test_every_convolution_per_user_norm_method_is_exact(method, layout, bias, monkeypatch):
    monkeypatch.setattr(user_conv, "method_override", method)
    gen = torch.Generator().manual_seed(7)
    torch.manual_seed(7)
    model = Convs(bias).double()
    x = torch.randn(B, 2, 7, 7, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (B,), generator=gen)
    users = LAYOUTS[layout]
    clipper = GradientClipper(model)
    got, _ = clipper.clipped_sum(_ce, x, y, G, groups=users)
    clipper.remove()
    _assert_exact(got, per_user_loop(model, _ce, x, y, users, G))


@pytest.mark.parametrize("widths", ["whole-batch", "one-class", "two-classes"])
def test_every_tiling_of_the_convolution_ghost_is_exact(widths, monkeypatch):
    monkeypatch.setattr(user_conv, "method_override", "ghost")
    choose = CHOICES[widths]
    chosen = groups_module.ghost_choice

    def forced(groups, t, width):
        keys = sorted((k for k in groups.candidates() if choose(("tiles", k))), key=str)
        return keys[0], chosen(groups, t, width)[1]

    monkeypatch.setattr(user_conv, "ghost_choice", forced)
    gen = torch.Generator().manual_seed(8)
    torch.manual_seed(8)
    model = Convs().double()
    x = torch.randn(B, 2, 7, 7, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (B,), generator=gen)
    users = LAYOUTS["scattered"]
    clipper = GradientClipper(model)
    got, _ = clipper.clipped_sum(_ce, x, y, G, groups=users)
    clipper.remove()
    _assert_exact(got, per_user_loop(model, _ce, x, y, users, G))


def test_the_cost_model_takes_the_ghost_route_for_a_deep_convolution_of_singletons():
    """Few output positions, many channels, one record per user: the per-user ghost norm is far
    cheaper than the materialised gradients, and it is what the rule takes by itself."""
    from privopt.torch._conv import ConvRule

    conv = nn.Conv2d(64, 64, 3).double()
    a = torch.randn(B, 64, 4, 4, dtype=torch.float64)
    g = torch.randn(B, 64, 2, 2, dtype=torch.float64)
    rule = ConvRule(conv, [((a,), {}, g)], dict(conv.named_parameters()), B)
    groups = Groups(LAYOUTS["singletons"], B, torch.device("cpu"))
    costs = user_conv.conv_costs(rule, groups)
    assert costs["ghost"][0] < costs["materialised"][0]
    got = user_conv.conv_group_norms(rule, groups, torch.float64)
    assert rule._weight is None  # nothing materialised
    expected = rule.squared_norms()  # singletons: the record-level norms
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("kind", ["conv", "mlp"])
def test_record_level_sums_are_bit_identical_after_a_user_level_step(kind):
    """A user-level step may change a rule's method (a ghost convolution materialised); rules
    are rebuilt per step, so a record-level step afterwards is the fresh clipper's, bit for
    bit."""
    gen = torch.Generator().manual_seed(9)
    torch.manual_seed(9)
    if kind == "conv":
        model = nn.Sequential(nn.Conv2d(16, 16, 3), nn.Tanh(), nn.Flatten(), nn.Linear(16 * 4, 3))
        x = torch.randn(B, 16, 4, 4, generator=gen)
    else:
        model, x = _linear_case("mlp", gen)
    y = torch.randint(0, 3, (B,), generator=gen)
    fresh = GradientClipper(model)
    before, _ = fresh.clipped_sum(_ce, x, y, G)
    fresh.remove()
    clipper = GradientClipper(model)
    clipper.clipped_sum(_ce, x, y, G, groups=LAYOUTS["scattered"])
    after, _ = clipper.clipped_sum(_ce, x, y, G)
    clipper.remove()
    for name in before:
        assert torch.equal(before[name], after[name]), name


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_tiling_lays_out_each_example_once_with_its_whole_user(layout):
    users = LAYOUTS[layout]
    groups = Groups(users, B, torch.device("cpu"))
    assert groups.candidates(), layout
    for widths in groups.candidates():
        tiling = groups.tiling(widths)
        rows = tiling.take(torch.arange(B)[:, None, None]).reshape(-1).numpy()
        owner = tiling.users.numpy()
        real = owner < groups.size
        assert np.array_equal(users[rows[real]], owner[real])  # each row's user
        assert sorted(rows[real].tolist()) == list(range(B)), widths  # each example once
        assert sum(c.tiles * c.width for c in tiling.classes) == len(rows)
        for c in tiling.classes:
            per_tile = owner[c.start : c.start + c.tiles * c.width].reshape(c.tiles, c.width)
            for u in np.unique(per_tile[per_tile < groups.size]):  # a user: in one tile, whole
                assert (per_tile == u).any(1).sum() == 1
                assert (per_tile == u).sum() == (users == u).sum()
            if c.single:  # no mask: one user a tile, no padding
                assert (per_tile == per_tile[:, :1]).all() and (per_tile < groups.size).all()
    if layout == "equal":  # users of 4 in batch order: a view, one user a tile, no mask
        groups = Groups(users[:16], 16, torch.device("cpu"))
        tiling = groups.tiling((4,))
        (c,) = tiling.classes
        assert isinstance(tiling.rows, slice) and c.single and c.tiles == 4
    if layout == "singletons":  # a large user first, then single records: two views
        groups = Groups(np.concatenate([[0, 0, 0], users[3:] - 2]), B, torch.device("cpu"))
        tiling = groups.tiling((1, 3))
        assert isinstance(tiling.rows, slice) and all(c.single for c in tiling.classes)


def test_float32_user_norms_match_float64_within_float32_rounding():
    gen = torch.Generator().manual_seed(10)
    torch.manual_seed(10)
    model, x = _linear_case("tokens", gen)
    y = torch.randint(0, 3, (B,), generator=gen)
    users = LAYOUTS["scattered"]
    clipper = GradientClipper(model)
    got, _ = clipper.clipped_sum(_ce, x, y, G, groups=users)
    clipper.remove()
    expected = per_user_loop(model.double(), _ce, x, y, users, G)
    for name, value in expected.items():
        torch.testing.assert_close(got[name].double(), value, rtol=1e-4, atol=1e-6)
