"""world_model/attention/ida.py: the all-pairs distances against geoopt and the geometry module,
float32 accuracy near coincident points, the weights against their definition, masks and masses,
finite values and gradients at coincident points and near the ball's boundary, gradchecks, and
one clear error per kind of bad input."""

from __future__ import annotations

import math

import geoopt
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from geometry import poincare, sphere
from tests.conftest import ball_points
from world_model.attention import ida

BALL = geoopt.PoincareBall(c=1.0)
SPHERE = geoopt.Sphere()


def unit(n, d, seed, dtype=torch.float64):
    x = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return (x / x.norm(dim=-1, keepdim=True)).to(dtype)


def points(metric, n, d, seed, dtype=torch.float64, max_norm=0.95):
    if metric == "sphere":
        return unit(n, d, seed, dtype)
    return ball_points(n, d, max_norm, dtype=dtype, seed=seed)


def geoopt_sqdist(metric, x, y):
    """Independent reference: geoopt's distances (float64), broadcast over pairs."""
    xb, yb = x[..., :, None, :], y[..., None, :, :]
    if metric == "poincare":
        return BALL.dist(xb, yb).square()
    if metric == "sphere":
        return SPHERE.dist(xb, yb).square()
    return (xb - yb).square().sum(-1)


# --------------------------------------------------------------------------- distances


@pytest.mark.parametrize("form", ida.FORMS)
@pytest.mark.parametrize("metric", ida.METRICS)
def test_squared_distance_matrix_matches_geoopt(metric, form, dtype):
    x, y = points(metric, 33, 5, 1), points(metric, 21, 5, 2)
    ref = geoopt_sqdist(metric, x, y)
    got = ida.squared_distance_matrix(x.to(dtype), y.to(dtype), metric, form)
    assert got.dtype == dtype and got.shape == (33, 21)
    # float32: the inputs themselves are rounded to 6e-8 relative; d^2 inherits ~1e-6
    tol = dict(rtol=1e-9, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-5, atol=1e-6)
    torch.testing.assert_close(got.double(), ref, **tol)


@pytest.mark.parametrize("metric", ida.METRICS)
def test_squared_distance_matrix_batched_and_elementwise(metric):
    x, y = points(metric, 24, 3, 3).reshape(2, 12, 3), points(metric, 14, 3, 4).reshape(2, 7, 3)
    got = ida.squared_distance_matrix(x, y, metric)
    for b in range(2):
        ref = ida.squared_distance_matrix(x[b], y[b], metric, "difference")
        torch.testing.assert_close(got[b], ref, rtol=1e-9, atol=1e-12)
        pair = ida.squared_distance(x[b][:, None, :], y[b][None, :, :], metric)
        torch.testing.assert_close(pair, ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("sep", [1e-5, 1e-3, 1e-1])
@pytest.mark.parametrize("metric", ida.METRICS)
def test_float32_relative_accuracy_near_coincident_points(metric, sep):
    """|x|^2 + |y|^2 - 2x.y in float32 (what torch.cdist computes for > 25 points) loses all
    relative accuracy at small distances: measured 3.6e3 at |x - y| = 1e-5, 0.31 at 1e-3. Every
    form here keeps d^2 to < 2e-5 relative (measured <= 8e-6), the float64 reference being
    explicit differences on the same rounded float32 points."""
    x = points(metric, 128, 16, 5)
    u = unit(128, 16, 6)
    y = x + sep * u
    if metric == "sphere":
        y = sphere.normalize(y)
    if metric == "poincare":
        y = poincare.project(y, 0.999)
    x32, y32 = x.float(), y.float()
    ref = ida.squared_distance_matrix(x32.double(), y32.double(), metric, "difference").diagonal()
    for form in ida.FORMS:
        got = ida.squared_distance_matrix(x32, y32, metric, form).diagonal().double()
        assert ((got - ref) / ref).abs().max() < 2e-5, form
    naive = x32.square().sum(-1)[:, None] + y32.square().sum(-1)[None] - 2 * x32 @ y32.T
    e_ref = (x32.double() - y32.double()).square().sum(-1)
    naive_err = ((naive.diagonal().double() - e_ref) / e_ref).abs().max()
    if sep <= 1e-3:
        assert naive_err > 0.1  # the float32 expanded form is unusable here


def test_poincare_matrix_form_near_the_boundary_matches_geometry():
    """Points at |z| = 1 - 1e-5 (float64): the matrix form agrees with geometry.poincare.dist."""
    x = ball_points(40, 4, 1 - 1e-5, seed=7, min_norm=1 - 1e-5)
    y = ball_points(30, 4, 1 - 1e-5, seed=8, min_norm=0.9)
    ref = poincare.pairwise_dist(x, y).square()
    for form in ida.FORMS:
        got = ida.squared_distance_matrix(x, y, "poincare", form)
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- weights


@pytest.mark.parametrize("metric", ida.METRICS)
def test_attention_matches_its_definition(metric):
    """W_ij = (d_ij^2 + eps)^-1 / sum_m (d_im^2 + eps)^-1 and out = W v, from geoopt distances;
    batched with broadcasting keys."""
    q = points(metric, 2 * 9, 4, 9).reshape(2, 9, 4)
    k = points(metric, 13, 4, 10)
    v = torch.randn(13, 3, dtype=torch.float64)
    eps = 0.05
    out, w = ida.inverse_distance_attention(q, k, v, eps, metric)
    kernel = 1.0 / (geoopt_sqdist(metric, q, k) + eps)
    ref_w = kernel / kernel.sum(-1, keepdim=True)
    torch.testing.assert_close(w, ref_w, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(out, ref_w @ v, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 9, dtype=torch.float64))


def test_large_eps_gives_uniform_weights_and_small_eps_retrieves():
    k = points("poincare", 50, 3, 11)
    q = k[:5]
    _, w = ida.inverse_distance_attention(
        q, k, torch.eye(50, dtype=torch.float64), 1e12, "poincare"
    )
    torch.testing.assert_close(w, torch.full_like(w, 1 / 50), rtol=1e-9, atol=0)
    _, w = ida.inverse_distance_attention(
        q, k, torch.eye(50, dtype=torch.float64), 1e-12, "poincare"
    )
    assert (w.diagonal() > 1 - 1e-9).all()


def test_key_mass_counts_a_key_as_coincident_copies():
    q, k = points("poincare", 6, 3, 12), points("poincare", 5, 3, 13)
    v = torch.randn(5, 2, dtype=torch.float64)
    mass = torch.tensor([1.0, 3.0, 0.0, 2.0, 1.0], dtype=torch.float64)
    out, w = ida.inverse_distance_attention(q, k, v, 0.1, "poincare", key_mass=mass)
    reps = torch.tensor([1, 3, 0, 2, 1])
    dup_k, dup_v = k.repeat_interleave(reps, 0), v.repeat_interleave(reps, 0)
    ref_out, _ = ida.inverse_distance_attention(q, dup_k, dup_v, 0.1, "poincare")
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    assert (w[:, 2] == 0).all()


def test_mask_restricts_attention_and_empty_rows_are_zero():
    q, k = points("euclidean", 4, 3, 14), points("euclidean", 6, 3, 15)
    q, k = q.float().requires_grad_(True), k.float().requires_grad_(True)
    v = torch.randn(6, 2)
    mask = torch.tensor(
        [[1, 1, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 0, 0]],
        dtype=torch.bool,
    )
    out, w = ida.inverse_distance_attention(q, k, v, 1e-3, "euclidean", mask)
    assert (w[~mask] == 0).all() and (w[1] == 0).all() and (out[1] == 0).all()
    for i in (0, 2, 3):
        sub_out, _ = ida.inverse_distance_attention(
            q[i : i + 1], k[mask[i]], v[mask[i]], 1e-3, "euclidean"
        )
        torch.testing.assert_close(out[i : i + 1], sub_out, rtol=1e-5, atol=1e-6)
    out.square().sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
    assert (q.grad[1] == 0).all()


# --------------------------------------------------------------------------- coincident points


@pytest.mark.parametrize("eps", [1e-2, 1e-6, 1e-12])
@pytest.mark.parametrize("form", ida.FORMS)
@pytest.mark.parametrize("metric", ida.METRICS)
def test_query_equal_to_key_is_finite_and_retrieves(metric, form, eps, dtype):
    """Never NaN when a query equals a key; the matched weight obeys seed 000 Prop 2.3's bound
    W_jj >= 1 / (1 + eps (n - 1) / (d_min^2 + eps)) (up to float32 rounding)."""
    k = points(metric, 24, 4, 16, dtype)
    if metric == "sphere":  # an antipodal pair as well: the other singular point of d_S
        k = torch.cat([k, -k[:1]])
    k = k.requires_grad_(True)
    q = k.detach().clone().requires_grad_(True)
    v = torch.randn(k.shape[0], 3, dtype=dtype)
    out, w = ida.inverse_distance_attention(q, k, v, eps, metric, form=form)
    (out.square().sum() + w.diagonal().sum()).backward()
    for t in (out, w, q.grad, k.grad):
        assert torch.isfinite(t).all()
    d2 = ida.squared_distance_matrix(k.detach().double(), k.detach().double(), metric, "difference")
    n = k.shape[0]
    d_min2 = d2[~torch.eye(n, dtype=torch.bool)].min()
    bound = 1.0 / (1.0 + eps * (n - 1) / (d_min2 + eps))
    slack = 1e-9 if dtype == torch.float64 else 2e-6
    assert (w.diagonal().double() >= bound - slack).all()


radius = st.floats(min_value=0.0, max_value=1.0 - 1e-5)
direction = st.lists(st.floats(-1, 1), min_size=3, max_size=3).filter(
    lambda u: sum(a * a for a in u) > 1e-4
)


@settings(max_examples=60, deadline=None)
@given(radius, direction, radius, direction, st.sampled_from(ida.FORMS))
def test_float32_values_and_gradients_finite_near_boundary(r1, u1, r2, u2, form):
    """Hypothesis: float32 queries/keys anywhere up to |z| = 1 - 1e-5, including a query equal
    to a key, give finite outputs and gradients (Poincare)."""
    a = torch.tensor(u1) / torch.tensor(u1).norm() * r1
    b = torch.tensor(u2) / torch.tensor(u2).norm() * r2
    k = torch.stack([a, b, -a, 0.5 * b]).float().requires_grad_(True)
    q = torch.stack([a, b, 0.999 * a]).float().requires_grad_(True)
    v = torch.randn(4, 2)
    out, w = ida.inverse_distance_attention(q, k, v, 1e-4, "poincare", form=form)
    out.square().sum().backward()
    for t in (out, w, q.grad, k.grad):
        assert torch.isfinite(t).all()


@pytest.mark.parametrize("form", ["expanded", "difference"])
@pytest.mark.parametrize("metric", ida.METRICS)
def test_gradcheck(metric, form):
    q = points(metric, 4, 3, 17, max_norm=0.8).requires_grad_(True)
    k = points(metric, 5, 3, 18, max_norm=0.8).requires_grad_(True)
    v = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)

    def fn(q, k, v):
        return ida.inverse_distance_attention(q, k, v, 0.1, metric, form=form, check_inputs=False)

    assert torch.autograd.gradcheck(fn, (q, k, v))


# --------------------------------------------------------------------------- bad input


def test_bad_input_gets_one_clear_error():
    q, k, v = ball_points(3, 2, 0.5), ball_points(4, 2, 0.5), torch.randn(4, 5, dtype=torch.float64)
    f = ida.inverse_distance_attention
    cases = [
        (lambda: f(q, k, v, 0.0, "poincare"), "eps must be"),
        (lambda: f(q, k, v, math.nan, "poincare"), "eps must be"),
        (lambda: f(q, k, v, 0.1, "hyperbolic"), "metric must be one of"),
        (lambda: f(q, k, v, 0.1, "poincare", form="fast"), "form must be one of"),
        (lambda: f(q, k[:, :1], v, 0.1, "euclidean"), "share their last dim"),
        (lambda: f(q, k, v[:3], 0.1, "euclidean"), "same number of entries"),
        (lambda: f(q.float(), k, v, 0.1, "euclidean"), "share a dtype"),
        (lambda: f(q[0], k, v, 0.1, "euclidean"), "^queries must have shape"),
        (lambda: f(q, k[0], v, 0.1, "euclidean"), "^keys must have shape"),
        (lambda: f(q, k, v, 0.1, "euclidean", torch.ones(3, 4)), "bool tensor"),
        (
            lambda: f(q, k, v, 0.1, "euclidean", torch.ones(2, 4, dtype=torch.bool)),
            "does not broadcast",
        ),
        (lambda: f(q.expand(2, 3, 2), k.expand(3, 4, 2), v, 0.1, "euclidean"), "do not broadcast"),
        (  # queries and keys agree, the values' batch does not
            lambda: f(q.expand(2, 3, 2), k.expand(2, 4, 2), v.expand(3, 4, 5), 0.1, "euclidean"),
            "do not broadcast",
        ),
        (
            lambda: f(q, 1.5 * k / k.norm(dim=-1, keepdim=True), v, 0.1, "poincare"),
            "^keys must lie",
        ),
        (lambda: f(1.5 * q / q.norm(dim=-1, keepdim=True), k, v, 0.1, "poincare"), "^queries must"),
        (lambda: f(q, k, v, 0.1, "sphere"), "unit vectors"),
        (lambda: f(q * math.nan, k, v, 0.1, "euclidean"), "NaN or inf"),
        (lambda: f(q, k, v.long(), 0.1, "euclidean"), "values must be a floating-point tensor"),
        (  # broadcastable, but to a bigger shape than [Nq, Nk] = [3, 4]
            lambda: f(q, k, v, 0.1, "euclidean", torch.ones(2, 3, 4, dtype=torch.bool)),
            "does not broadcast to",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_points_rounded_onto_the_boundary_are_accepted_and_finite():
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0 - 1e-9]], dtype=torch.float32)  # |k| rounds to 1
    q = torch.tensor([[0.5, 0.0]], dtype=torch.float32)
    out, w = ida.inverse_distance_attention(q, k, torch.eye(2), 1e-3, "poincare")
    assert torch.isfinite(out).all() and torch.isfinite(w).all()


# --------------------------------------------------------------------------- effective rank


def test_points_at_the_ball_rounding_tolerance_are_accepted_one_ulp_beyond_refused():
    """check_points("poincare") accepts |x|^2 up to 1 + 8 eps exactly (float64 squares that
    round there: (1 + 4 eps)^2 = 1 + 8 eps), and refuses 1 + 9 eps (adding 2^-52)."""
    eps = torch.finfo(torch.float64).eps
    edge = torch.tensor([[1.0 + 4 * eps, 0.0]], dtype=torch.float64)
    beyond = torch.tensor([[1.0 + 4 * eps, 2.0**-26]], dtype=torch.float64)
    assert poincare.sqnorm(edge).item() == 1.0 + 8 * eps
    assert poincare.sqnorm(beyond).item() == 1.0 + 9 * eps
    ida.check_points(edge, "poincare", "keys")
    with pytest.raises(ValueError, match="^keys must lie in the Poincare ball"):
        ida.check_points(beyond, "poincare", "keys")


def test_effective_rank_is_the_eigenvalue_ratio():
    x = points("euclidean", 30, 4, 19)
    kernel = 1.0 / (ida.squared_distance_matrix(x, x, "euclidean") + 0.3)
    lam = torch.linalg.eigvalsh(kernel)
    torch.testing.assert_close(ida.effective_rank(kernel), lam.sum() ** 2 / (lam**2).sum())
    assert 1.0 <= float(ida.effective_rank(kernel)) <= 30.0
    stacked = torch.stack([kernel, kernel @ kernel])  # a batch [2, n, n]: each its own ratio
    each = torch.stack([ida.effective_rank(k) for k in stacked])
    torch.testing.assert_close(ida.effective_rank(stacked), each, rtol=1e-12, atol=0)
    # a non-symmetric (diagonalisable) kernel in a batch: still the ratio of its eigenvalues
    basis = torch.eye(30, dtype=torch.float64) + 0.3 * torch.triu(points("euclidean", 30, 30, 21))
    skew = torch.stack([basis @ torch.diag(lam) @ torch.linalg.inv(basis), kernel])  # [2, n, n]
    assert not torch.allclose(skew[0], skew[0].mT)
    expected = torch.stack([lam.sum() ** 2 / (lam**2).sum(), ida.effective_rank(kernel)])
    torch.testing.assert_close(ida.effective_rank(skew), expected, rtol=1e-9, atol=0)


def test_sphere_points_are_accepted_within_1e3_of_unit_norm():
    """check_points("sphere"): | |x| - 1 | up to 1e-3 is accepted (rounding of normalised
    points), 2e-3 is refused; the Poincare ball accepts |x| = 1 exactly (rounded onto the
    boundary) and refuses 1 + 1e-6."""
    x = unit(4, 3, 20)
    ida.check_points(x * (1 + 5e-4), "sphere", "keys")
    ida.check_points(x * (1 - 5e-4), "sphere", "keys")
    for scale in (1 + 2e-3, 1 - 2e-3):
        with pytest.raises(ValueError, match="largest \\| \\|x\\| - 1 \\| is 0.002"):
            ida.check_points(x * scale, "sphere", "keys")
    ida.check_points(torch.tensor([[1.0, 0.0]], dtype=torch.float64), "poincare", "keys")
    with pytest.raises(ValueError, match="largest norm is 1"):
        ida.check_points(torch.tensor([[1.0 + 1e-6, 0.0]], dtype=torch.float64), "poincare", "k")


def test_the_cdist_form_takes_batched_keys_and_the_exact_path_near_antipodes():
    """form="cdist": batched Poincare keys [2, M, d] against geoopt (the conformal factors'
    axes), and on the sphere near-antipodal float32 points (|x + y| ~ 1e-3, more than cdist's
    25-row switch to a matrix product) keep d_S^2 to float32 rounding against the float64
    distance of the same points; the product path would lose ~5e-5 there."""
    x = points("poincare", 4, 3, seed=70)
    y = points("poincare", 10, 3, seed=71).reshape(2, 5, 3)
    got = ida.squared_distance_matrix(x, y, "poincare", form="cdist")
    torch.testing.assert_close(got, geoopt_sqdist("poincare", x, y), rtol=1e-10, atol=1e-12)
    g = torch.Generator().manual_seed(72)
    a = torch.randn(40, 5, generator=g, dtype=torch.float64)
    b = -a + 1e-3 * torch.randn(40, 5, generator=g, dtype=torch.float64)
    a32 = (a / a.norm(dim=-1, keepdim=True)).float()
    b32 = (b / b.norm(dim=-1, keepdim=True)).float()
    ref = ida.squared_distance_matrix(a32.double(), b32.double(), "sphere", form="difference")
    got = ida.squared_distance_matrix(a32, b32, "sphere", form="cdist").double()
    assert ((got - ref).abs() / ref).max() < 2e-6
    # float64 pairs 1e-7 apart: the exact path keeps d^2 ~ 1e-14 to 1e-6 (the matrix product
    # of the expanded form cancels |x|^2 + |y|^2 - 2 x.y ~ 1 down to ~1e-16: 1e-2 relative)
    near = a + 1e-7 * torch.randn(40, 5, generator=g, dtype=torch.float64)
    exact = (a[:, None] - near[None]).square().sum(-1)
    got = ida.squared_distance_matrix(a, near, "euclidean", form="cdist")
    assert ((got - exact).abs() / exact).max() < 1e-6
