"""The mathematics of privopt.losses: gradients, Hölder constants, gradient and value bounds.

Each loss is ℓ(w; x, y) = φ(<w, x>, y). Checked here, for every loss and several q and δ:

* gradients equal central finite differences away from kinks;
* ``||∇ℓ(w) - ∇ℓ(w')|| <= L ||w - w'||^α`` with the stated (α, L) on random, nearby, far and
  kink-straddling pairs, data at the stated bounds; and L is attained (the constants are tight);
* the α = 0 and α = 1 special cases (bounded subgradient jumps; exact linearity);
* the constants equal the closed forms of docs/theory/non-smooth-sgd.md#losses and the bounds G, M,
M_0 hold on
  samples and are attained by worst-case data;
* Lemma 19's self-bounding inequality ``||∇ℓ|| <= c_{α,1} ℓ^{α/(1+α)}``
(docs/theory/non-smooth-sgd.md#lemmas).
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from privopt.losses import (
    HuberLoss,
    LinearLoss,
    LogisticLoss,
    MarginLoss,
    QNormLoss,
    SquaredLoss,
    get_loss,
)

BX, BY, R = 1.7, 2.5, 0.8  # public bounds ||x|| <= BX, |y| <= BY, domain ||w|| <= R
D = 5

LOSSES = [
    get_loss("squared"),
    get_loss("absolute"),
    *(get_loss("qnorm", q=q) for q in (1.0, 1.25, 1.5, 2.0)),
    get_loss("huber", delta=0.5),
    get_loss("huber", delta=3.0),
    get_loss("hinge"),
    get_loss("squared_hinge"),
    *(get_loss("qnorm_hinge", q=q) for q in (1.0, 1.3, 1.5, 2.0)),
    get_loss("logistic"),
]
IDS = [repr(loss) for loss in LOSSES]


def sphere(rng: np.random.Generator, n: int, radius: float) -> np.ndarray:
    """n rows in R^D of norm exactly ``radius`` (up to one rounding): data at the bound."""
    v = rng.standard_normal((n, D))
    return radius * v / np.linalg.norm(v, axis=1, keepdims=True)


def labels(loss: LinearLoss, rng: np.random.Generator, n: int) -> np.ndarray:
    """±1 labels, or targets in [-BY, BY] with a tenth of them at ±BY."""
    if loss.task == "classification":
        return rng.choice([-1.0, 1.0], n)
    y = rng.uniform(-BY, BY, n)
    y[: n // 10] = BY * rng.choice([-1.0, 1.0], n // 10)
    return y


def kinks(loss: LinearLoss, y: np.ndarray) -> list[np.ndarray]:
    """Margins z at which φ' is not differentiable (where φ'' jumps or blows up)."""
    if isinstance(loss, LogisticLoss | SquaredLoss):
        return []
    if isinstance(loss, HuberLoss):
        return [y - loss.delta, y + loss.delta]
    return [y]  # hinge family: y z = 1 <=> z = y; q-norm regression: z - y = 0


def pair_gradients(loss: LinearLoss, W: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Row i: ∇ℓ(W_i; X_i, y_i). ``test_gradients_match_derivative_formula`` ties this to
    ``loss.gradients``; it lets one call evaluate many different w."""
    return loss.derivative(np.einsum("ij,ij->i", W, X), y)[:, None] * X


# -- per-example gradients --------------------------------------------------------------------


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_gradients_match_finite_differences(loss):
    rng = np.random.default_rng(0)
    n, h = 400, 1e-6
    X, y = sphere(rng, n, BX), labels(loss, rng, n)
    w = rng.standard_normal(D)
    z = X @ w
    away = np.ones(n, dtype=bool)
    for k in kinks(loss, y):
        away &= np.abs(z - k) > 0.05
    assert away.sum() > n // 4  # enough smooth points are tested
    fd = np.empty((n, D))
    for j in range(D):
        e = np.zeros(D)
        e[j] = h
        fd[:, j] = (loss.value(w + e, X, y) - loss.value(w - e, X, y)) / (2 * h)
    # Central differences: truncation h^2 |φ'''| ||x||^3 / 6 < 1e-12 * 5 * 0.05^-2 ~ 2e-9 at
    # >= 0.05 from a kink; cancellation eps |φ| / h < 1e-16 * 50 / 1e-6 = 5e-9. 1e-7 has margin.
    np.testing.assert_allclose(fd[away], loss.gradients(w, X, y)[away], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_gradients_match_derivative_formula(loss):
    rng = np.random.default_rng(1)
    X, y = sphere(rng, 50, BX), labels(loss, rng, 50)
    w = 3 * rng.standard_normal(D)
    grads = loss.gradients(w, X, y)
    assert grads.shape == (50, D)
    np.testing.assert_array_equal(grads, loss.derivative(X @ w, y)[:, None] * X)
    W = np.tile(w, (50, 1))
    np.testing.assert_allclose(pair_gradients(loss, W, X, y), grads, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_norms_sum_and_values_are_consistent(loss):
    rng = np.random.default_rng(2)
    X, y = sphere(rng, 60, BX) * rng.uniform(0, 1, (60, 1)), labels(loss, rng, 60)
    w = 2 * rng.standard_normal(D)
    grads = loss.gradients(w, X, y)
    np.testing.assert_allclose(
        loss.gradient_norms(w, X, y), np.linalg.norm(grads, axis=1), rtol=1e-12, atol=1e-15
    )
    np.testing.assert_allclose(
        loss.gradient_sum(w, X, y), grads.sum(axis=0), rtol=1e-12, atol=1e-12
    )
    values = loss.value(w, X, y)
    np.testing.assert_array_equal(values, loss.phi(X @ w, y))
    assert np.all(values >= 0)  # nonnegative, as docs/theory/non-smooth-sgd.md#setting requires
    assert loss.mean_value(w, X, y) == pytest.approx(values.mean(), rel=1e-15)


def test_subgradient_choice_at_kinks_is_minimum_norm():
    # docs/theory/non-smooth-sgd.md#projected-sgd: a deterministic subgradient; privopt takes the
    # minimum-norm one.
    y = np.array([1.0, -1.0])
    for name in ("hinge", "absolute"):
        assert np.all(get_loss(name).derivative(y, y) == 0.0)  # z = y: y z = 1, resp. r = 0
    assert np.all(get_loss("qnorm_hinge", q=1.0).derivative(y, y) == 0.0)
    # just inside the hinge: full slope
    np.testing.assert_array_equal(get_loss("hinge").derivative(0.999 * y, y), -y)


def test_logistic_is_stable_at_extreme_margins():
    loss = get_loss("logistic")
    z = np.array([-1e4, -50.0, 0.0, 50.0, 1e4])
    y = np.ones(5)
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # underflow to 0 is right
        values, slopes = loss.phi(z, y), loss.derivative(z, y)
    np.testing.assert_allclose(values[[0, 2]], [1e4, math.log(2)], rtol=1e-15)
    assert values[3] == pytest.approx(math.exp(-50), rel=1e-12) and values[4] == 0.0
    np.testing.assert_allclose(slopes, [-1.0, -1.0, -0.5, -math.exp(-50), 0.0], rtol=1e-12)


# -- Hölder smoothness ------------------------------------------------------------------------


def holder_pairs(loss: LinearLoss, rng: np.random.Generator, n: int):
    """Rows (w, w', x, y), x at the bound BX: a quarter each far apart, nearby (down to 1e-7),
    straddling a kink with w - w' parallel to x (the worst direction), and nearby straddling
    pairs with symmetric margins around the kink (r' = -r for q-norm regression)."""
    X, y = sphere(rng, n, BX), labels(loss, rng, n)
    q = n // 4
    scale = 10.0 ** rng.uniform(-3, 1, (n, 1))
    W = sphere(rng, n, 1.0) * scale
    W2 = sphere(rng, n, 1.0) * 10.0 ** rng.uniform(-3, 1, (n, 1))
    near = slice(q, 2 * q)
    W2[near] = W[near] + sphere(rng, q, 1.0) * 10.0 ** rng.uniform(-7, 0, (q, 1))
    ks = kinks(loss, y) or [np.zeros(n)]
    k = ks[0] if len(ks) == 1 else np.where(rng.random(n) < 0.5, ks[0], ks[1])
    a = 10.0 ** rng.uniform(-7, 0.5, n) * rng.choice([-1.0, 1.0], n)
    b = np.where(np.arange(n) >= 3 * q, -a, -a * 10.0 ** rng.uniform(-2, 2, n))
    s = slice(2 * q, n)
    base, xs = W[s], X[s]
    offset = k[s] - np.einsum("ij,ij->i", base, xs)
    along = xs / BX**2  # <along, x> = 1: moves the margin only, parallel to x
    W[s] = base + (offset + a[s])[:, None] * along  # margin k + a
    W2[s] = base + (offset + b[s])[:, None] * along  # margin k + b, on the other side
    return W, W2, X, y


def assert_holder(loss: LinearLoss, W, W2, X, y) -> float:
    """Assert the Hölder inequality row by row; return the largest ratio lhs / rhs."""
    h = loss.holder(x_bound=BX, y_bound=BY)
    lhs = np.linalg.norm(pair_gradients(loss, W, X, y) - pair_gradients(loss, W2, X, y), axis=1)
    rhs = h.bound(np.linalg.norm(W - W2, axis=1))
    # Margins |z| <= 17 carry rounding ~2e-14, against |z - z'| >= BX 1e-7 for the nearest
    # pairs: the computed gap is within a relative 1e-6 of the true one, so rtol 1e-6 (raised to
    # the power α <= 1) plus an absolute 1e-12 L covers floating point and nothing more.
    assert np.all(lhs <= rhs * (1 + 1e-6) + 1e-12 * h.L), np.max(lhs / rhs)
    return float(np.max(lhs / rhs))


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_holder_inequality_on_random_nearby_and_kink_pairs(loss):
    assert_holder(loss, *holder_pairs(loss, np.random.default_rng(3), 4000))


@given(
    q=st.floats(1.0, 2.0),
    family=st.sampled_from(["qnorm", "qnorm_hinge"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_holder_inequality_for_any_q(q, family, seed):
    loss = get_loss(family, q=q)
    assert loss.holder(BX).alpha == pytest.approx(q - 1, abs=1e-15)
    assert_holder(loss, *holder_pairs(loss, np.random.default_rng(seed), 400))


@pytest.mark.parametrize(
    "name, q", [("absolute", None), ("qnorm", 1.25), ("hinge", None), ("qnorm_hinge", 1.5)]
)
def test_holder_holds_through_public_gradients(name, q):
    # One w per call, through loss.gradients itself (no helper): 800 pairs, 8 rows a call.
    loss = get_loss(name) if q is None else get_loss(name, q=q)
    rng = np.random.default_rng(4)
    W, W2, X, y = holder_pairs(loss, rng, 800)
    h = loss.holder(BX, BY)
    for i in range(0, 800, 8):
        rows = slice(i, i + 8)
        for j in range(i, i + 8):
            g = loss.gradients(W[j], X[rows], y[rows])[j - i]
            g2 = loss.gradients(W2[j], X[rows], y[rows])[j - i]
            dist = np.linalg.norm(W[j] - W2[j])
            assert np.linalg.norm(g - g2) <= h.bound(dist) * (1 + 1e-6) + 1e-12 * h.L


def worst_pair(loss: LinearLoss, gap: float) -> tuple[float, float, float]:
    """Margins (z, z') and label y at which |φ'(z) - φ'(z')| = L_φ |z - z'|^α (in the limit)."""
    if isinstance(loss, LogisticLoss):
        return gap / 2, -gap / 2, 1.0  # φ'' = 1/4 at z = 0 only
    if isinstance(loss, MarginLoss):
        # z' just past the hinge, φ'(z') = 0; exactly at it, a margin rounded to 1 - 1e-16 would
        # give |φ'| = q (1e-16)^(q-1), e.g. 1.6e-5 q for q = 1.3.
        return 1.0 - gap, 1.0 + 1e-9 * gap, 1.0
    if isinstance(loss, QNormLoss):
        return gap / 2, -gap / 2, 0.0  # residuals r' = -r: the 2^{1-p} of concavity
    return gap / 2, -gap / 2, 0.0  # squared, Huber: quadratic zone around r = 0


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_holder_constant_is_attained(loss):
    # The stated L is not just valid but tight: with x parallel to w - w' (Cauchy–Schwarz is an
    # equality) and the margins of worst_pair, lhs / rhs reaches 1.
    h = loss.holder(BX, BY)
    u = np.ones(D) / math.sqrt(D)
    x = BX * u
    ratios = []
    for gap in (1e-3, 0.01, 0.2):
        z, z2, y = worst_pair(loss, gap)
        w, w2 = (z / BX) * u, (z2 / BX) * u
        g = loss.gradients(w, x[None], [y])[0]
        g2 = loss.gradients(w2, x[None], [y])[0]
        ratios.append(np.linalg.norm(g - g2) / h.bound(np.linalg.norm(w - w2)))
    assert max(ratios) <= 1 + 1e-9
    # Exact (up to rounding) except logistic, whose φ'' = σ(z)σ(-z) = 1/4 - z^2/16 + ... gives
    # 1 - 6e-8 at gap 1e-3.
    assert max(ratios) >= 1 - 1e-6


# -- alpha = 0 and alpha = 1 ---------------------------------------------------------------------


@pytest.mark.parametrize("name, jump", [("hinge", 1.0), ("absolute", 2.0)])
def test_alpha_zero_subgradients_jump_by_at_most_L(name, jump):
    loss = get_loss(name)
    h = loss.holder(BX, BY)
    assert (h.alpha, h.L) == (0.0, jump * BX)
    rng = np.random.default_rng(5)
    n = 2000
    X, y = sphere(rng, n, BX), labels(loss, rng, n)
    W, W2 = 1e3 * rng.standard_normal((n, D)), 1e3 * rng.standard_normal((n, D))
    diff = np.linalg.norm(pair_gradients(loss, W, X, y) - pair_gradients(loss, W2, X, y), axis=1)
    assert np.all(diff <= h.L * (1 + 1e-12))  # whatever the distance: far pairs too
    # Crossing the kink by 1e-12 jumps by the full L: no smaller L (and no α > 0) is valid.
    u = np.ones(D) / math.sqrt(D)
    y0 = 1.0 if name == "hinge" else 0.0
    w, w2 = (1 - 1e-12) * u / BX, (1 + 1e-12) * u / BX
    if name == "absolute":
        w, w2 = w - u / BX, w2 - u / BX  # residuals -1e-12 and +1e-12
    gap = np.linalg.norm(
        loss.gradients(w, (BX * u)[None], [y0]) - loss.gradients(w2, (BX * u)[None], [y0])
    )
    assert gap == pytest.approx(h.L, rel=1e-12)


def test_alpha_one_least_squares_gradient_is_linear():
    loss = get_loss("squared")
    h = loss.holder(BX, BY)
    assert (h.alpha, h.L) == (1.0, BX**2)
    rng = np.random.default_rng(6)
    X, y = sphere(rng, 100, BX), labels(loss, rng, 100)
    w, v = rng.standard_normal(D), rng.standard_normal(D)
    # ∇ℓ(w + v) - ∇ℓ(w) = x <x, v> exactly: the map is affine with slope x x^T, norm ||x||^2.
    np.testing.assert_allclose(
        loss.gradients(w + v, X, y) - loss.gradients(w, X, y),
        X * (X @ v)[:, None],
        rtol=1e-10,
        atol=1e-12,
    )
    # Equality in the Hölder bound for v parallel to x.
    x = X[0]
    g_gap = loss.gradients(w + 0.3 * x, x[None], y[:1]) - loss.gradients(w, x[None], y[:1])
    assert np.linalg.norm(g_gap) == pytest.approx(h.bound(0.3 * BX), rel=1e-12)


def test_alpha_one_constants():
    for name, L_phi in (("squared_hinge", 2.0), ("logistic", 0.25), ("huber", 1.0)):
        h = get_loss(name).holder(BX)
        assert h.alpha == 1.0 and h.L == pytest.approx(L_phi * BX**2, rel=1e-15)


# -- closed-form constants (docs/theory/non-smooth-sgd.md#losses)
# -------------------------------------------------


def huber(r: float, delta: float) -> float:
    return r * r / 2 if abs(r) <= delta else delta * (abs(r) - delta / 2)


def expected(loss: LinearLoss) -> dict[str, float]:
    """docs/theory/non-smooth-sgd.md#losses table (least squares ½-scaled), written out
    independently of the code."""
    t = BX * R + BY  # largest |residual| on the ball with |y| <= BY
    sig = 1 / (1 + math.exp(-BX * R))
    q = getattr(loss, "q", None)
    table = {
        "squared": (1, BX**2, BY * BX, BY**2 / 2, BX * t, math.inf),
        "absolute": (0, 2 * BX, BX, BY, BX, BX),
        "hinge": (0, BX, BX, 1, BX, BX),
        "squared_hinge": (1, 2 * BX**2, 2 * BX, 1, 2 * BX * (1 + BX * R), math.inf),
        "logistic": (1, BX**2 / 4, BX / 2, math.log(2), BX * sig, BX),
    }
    if loss.name == "qnorm":
        unbounded = math.inf if q > 1 else BX
        row = (q - 1, q * 2 ** (2 - q) * BX**q, q * BY ** (q - 1) * BX, BY**q)
        table["qnorm"] = (*row, q * BX * t ** (q - 1), unbounded)
    if loss.name == "qnorm_hinge":
        unbounded = math.inf if q > 1 else BX
        table["qnorm_hinge"] = (
            q - 1,
            q * BX**q,
            q * BX,
            1,
            q * BX * (1 + BX * R) ** (q - 1),
            unbounded,
        )
    if loss.name == "huber":
        dl = loss.delta
        table["huber"] = (1, BX**2, min(BY, dl) * BX, huber(BY, dl), BX * min(dl, t), dl * BX)
    keys = ("alpha", "L", "M", "M0", "G", "G_unbounded")
    return dict(zip(keys, table[loss.name], strict=True))


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_constants_match_notes_table(loss):
    exp = expected(loss)
    c = loss.constants(x_bound=BX, y_bound=BY, radius=R)
    got = {
        "alpha": c.alpha,
        "L": c.L,
        "M": c.M,
        "M0": c.M0,
        "G": c.lipschitz,
        "G_unbounded": loss.lipschitz(BX, BY, radius=None),
    }
    for key, value in exp.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert c.paper_gradient_bound == pytest.approx(c.M + c.L * R**c.alpha, rel=1e-12)
    assert c.lipschitz <= c.paper_gradient_bound * (1 + 1e-12)  # tight G never exceeds M + L R^α
    assert c.value_bound <= (c.M0 + c.M * R + c.L * R ** (1 + c.alpha)) * (1 + 1e-12)


def test_regression_without_target_bound():
    assert math.isinf(get_loss("squared").gradient_bound_at_zero(BX))
    assert math.isinf(get_loss("qnorm", q=1.5).lipschitz(BX, radius=R))
    assert math.isinf(get_loss("absolute").value_bound_at_zero(BX))
    assert get_loss("absolute").lipschitz(BX) == BX  # derivative bounded whatever y
    assert get_loss("huber", delta=0.7).lipschitz(BX) == pytest.approx(0.7 * BX, rel=1e-15)


def test_paper_bound_on_unbounded_domain():
    # docs/theory/non-smooth-sgd.md#unbounded-domains: α = 0 keeps M + L on R^d; α > 0 is unbounded.
    assert get_loss("hinge").paper_gradient_bound(BX) == pytest.approx(2 * BX, rel=1e-15)
    assert get_loss("absolute").paper_gradient_bound(BX) == pytest.approx(3 * BX, rel=1e-15)
    assert math.isinf(get_loss("logistic").paper_gradient_bound(BX))


def ball_samples(loss: LinearLoss, rng: np.random.Generator, n: int, radius: float):
    """w in the ball (half on its sphere), x at the bound, y in range; a tenth of the rows are
    the worst case x parallel to w with the label that maximises |φ'| and φ."""
    W = sphere(rng, n, radius) * np.where(rng.random((n, 1)) < 0.5, 1.0, rng.random((n, 1)))
    X, y = sphere(rng, n, BX), labels(loss, rng, n)
    m = n // 10
    W[:m] = sphere(rng, m, radius)
    X[:m] = -BX * W[:m] / radius if radius > 0 else X[:m]
    y[:m] = 1.0 if loss.task == "classification" else BY  # z = -BX R: margin -BX R / residual -t
    return W, X, y


@pytest.mark.parametrize("radius", [0.0, R, 7.0])
@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_gradient_and_value_bounds_hold_and_are_attained(loss, radius):
    rng = np.random.default_rng(7)
    W, X, y = ball_samples(loss, rng, 3000, radius)
    G = loss.lipschitz(BX, BY, radius)
    V = loss.value_bound(BX, BY, radius)
    norms = np.linalg.norm(pair_gradients(loss, W, X, y), axis=1)
    values = loss.phi(np.einsum("ij,ij->i", W, X), y)
    # 1e-12: a margin computed from rows of norm BX (up to one rounding) and w of norm radius.
    assert np.all(norms <= G * (1 + 1e-12)) and np.all(values <= V * (1 + 1e-12))
    assert np.max(norms) == pytest.approx(G, rel=1e-12)
    assert np.max(values) == pytest.approx(V, rel=1e-12)
    if radius == 0.0:
        assert G == loss.gradient_bound_at_zero(BX, BY) and V == loss.value_bound_at_zero(BX, BY)


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_unbounded_domain_lipschitz(loss):
    G = loss.lipschitz(BX, BY, radius=None)
    big = loss.lipschitz(BX, BY, radius=1e6)
    if math.isinf(G):
        # grows without bound with the radius: no Lipschitz constant on R^d
        assert big > loss.lipschitz(BX, BY, radius=1e3) > loss.lipschitz(BX, BY, radius=1.0)
    else:
        assert big <= G and big == pytest.approx(G, rel=1e-9)  # approached on large balls
    assert loss.lipschitz(BX, BY, radius=math.inf) == G


@pytest.mark.parametrize("loss", [s for s in LOSSES if s.holder(1.0).alpha > 0], ids=repr)
def test_self_bounding_lemma_19(loss):
    # Lemma 19 (docs/theory/non-smooth-sgd.md#lemmas): ||∇ℓ|| <= c_{α,1} ℓ^{α/(1+α)} for nonnegative
    # convex
    # α-Hölder losses, c_{α,1} = (1 + 1/α)^{α/(1+α)} L^{1/(1+α)}: a check that (α, L) are
    # consistent with the values, near the minimiser (small ℓ) as well as far away.
    h = loss.holder(BX, BY)
    c = (1 + 1 / h.alpha) ** (h.alpha / (1 + h.alpha)) * h.L ** (1 / (1 + h.alpha))
    rng = np.random.default_rng(8)
    n = 3000
    y = labels(loss, rng, n)
    # z = y is the kink (y z = 1) of a margin loss and the minimiser (r = 0) of a residual loss
    z = y + rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 1, n)
    norms = np.abs(loss.derivative(z, y)) * BX
    assert np.all(norms <= c * loss.phi(z, y) ** (h.alpha / (1 + h.alpha)) * (1 + 1e-9) + 1e-12)
