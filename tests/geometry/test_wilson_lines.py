"""geometry.wilson_lines: Wilson lines in four modes (orthogonality, convergence, error orders),
composition via the origin, hierarchical cells, gradients, and the closed-form lines in the
group (equal to the generic lines; the segmented line and its VJP)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geometry.gauge_transforms import gauge_omega, gauge_transform_connection, random_gauge_field
from geometry.group_exponential import group_exp
from geometry.lie_algebra import GaugeGroup, gauge_generators
from geometry.wilson_lines import (
    WILSON_MODES,
    affine_connection,
    affine_connection_coefficients,
    affine_segment_exponents,
    affine_segment_exponents_vjp,
    affine_wilson_line_to_origin,
    cell_centers,
    compose_via_origin,
    hierarchical_wilson_line_to_origin,
    line_from_integral,
    segmented_group_line,
    segmented_group_line_vjp,
    wilson_line,
    wilson_line_in_group,
    wilson_line_to_origin,
)
from tests.conftest import ball_points

F64 = torch.float64
D, K = 3, 8


def make_connection(dtype=F64, seed=0, linear=1.0, k=K, d=D):
    gens = gauge_generators(k, n_colors=2, dtype=dtype).stacked(1.0, 0.7, 0.4)
    g = torch.Generator().manual_seed(seed)
    c0 = torch.randn(d, gens.shape[0], generator=g, dtype=F64).to(dtype)
    c1 = linear * torch.randn(d, d, gens.shape[0], generator=g, dtype=F64).to(dtype)
    return affine_connection(gens, c0, c1), gens


def test_path_ordered_lines_are_orthogonal(dtype):
    conn, _ = make_connection(dtype=dtype)
    z = ball_points(64, D, 0.95, dtype=dtype, seed=2)
    u = wilson_line_to_origin(conn, z, mode="path_ordered", segments=16)
    err = (u @ u.transpose(-1, -2) - torch.eye(K, dtype=dtype)).abs().max().item()
    # float64: 1e-12. float32: each factor is orthogonal to rounding (~1e-7 x |H|), and the
    # product of 16 accumulates it, so 1e-5 there
    assert err < (1e-5 if dtype == torch.float32 else 1e-12), err
    ue = wilson_line_to_origin(conn, z, mode="exp")
    assert (ue @ ue.transpose(-1, -2) - torch.eye(K, dtype=dtype)).abs().max() < 1e-5
    u1 = wilson_line_to_origin(conn, z, mode="first_order")
    assert (
        u1 @ u1.transpose(-1, -2) - torch.eye(K, dtype=dtype)
    ).abs().max() > 1e-2  # I + H is not


def _loglog_slope(xs, ys):
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def test_path_ordered_converges_at_second_order_in_segments():
    conn, _ = make_connection()
    z = ball_points(16, D, 0.9, seed=3, min_norm=0.6)
    ref = wilson_line_to_origin(conn, z, segments=2048)
    segs = [4, 8, 16, 32, 64]
    errs = [(wilson_line_to_origin(conn, z, segments=s) - ref).abs().max().item() for s in segs]
    assert all(a > b for a, b in zip(errs, errs[1:], strict=False)), errs
    slope = _loglog_slope(segs, errs)
    assert -2.3 < slope < -1.7, (slope, errs)


def test_first_order_errs_as_square_of_displacement():
    conn, _ = make_connection()
    z = ball_points(16, D, 0.9, seed=4, min_norm=0.8)
    ts = [0.2, 0.1, 0.05, 0.025]
    errs = []
    for t in ts:
        exact = wilson_line_to_origin(conn, t * z, segments=256)
        errs.append(
            (wilson_line_to_origin(conn, t * z, mode="first_order") - exact).abs().max().item()
        )
    slope = _loglog_slope(ts, errs)
    assert 1.8 < slope < 2.2, (slope, errs)


def test_exp_is_exact_only_for_commuting_path_increments():
    const, _ = make_connection(linear=0.0)  # constant connection: increments commute
    z = ball_points(16, D, 0.95, seed=5)
    torch.testing.assert_close(
        wilson_line_to_origin(const, z, mode="exp"),
        wilson_line_to_origin(const, z, mode="path_ordered", segments=3),
        rtol=1e-12,
        atol=1e-12,
    )
    conn, _ = make_connection(linear=2.0)
    exact = wilson_line_to_origin(conn, z, segments=1024)
    err_exp = (wilson_line_to_origin(conn, z, mode="exp") - exact).abs().max()
    assert err_exp > 1e-3  # P exp != exp of the integral when the connection does not commute


def _richardson_reference(conn, z, segments=2048):
    """The true transport to O(S^-4) without Magnus: the midpoint-exponential product is a
    symmetric method (error even in 1 / S), so (4 U_2S - U_S) / 3 cancels its S^-2 term."""
    fine = wilson_line_to_origin(conn, z, mode="path_ordered", segments=2 * segments)
    coarse = wilson_line_to_origin(conn, z, mode="path_ordered", segments=segments)
    return (4.0 * fine - coarse) / 3.0


def _ratios(errs):
    return [a / b for a, b in zip(errs, errs[1:], strict=False)]


def test_magnus4_converges_at_fourth_order_and_is_exact_for_a_constant_connection():
    """Magnus-4's error against an independent reference (Richardson-extrapolated midpoint
    products) falls >= 12x per doubling of the segments from 2 to 16 (16x asymptotically);
    for a constant connection one segment is exact (= exp of the integral)."""
    conn, _ = make_connection(linear=1.5)
    z = ball_points(16, D, 0.9, seed=3, min_norm=0.6)
    ref = _richardson_reference(conn, z)
    errs = [
        (wilson_line_to_origin(conn, z, mode="magnus4", segments=s) - ref).abs().max().item()
        for s in (2, 4, 8, 16)
    ]
    assert all(r >= 12.0 for r in _ratios(errs)), errs
    const, _ = make_connection(linear=0.0)
    exact = wilson_line_to_origin(const, z, mode="exp")
    for s in (1, 3):
        one = wilson_line_to_origin(const, z, mode="magnus4", segments=s)
        torch.testing.assert_close(one, exact, rtol=1e-12, atol=1e-12)


def test_compose_via_origin_is_transport_along_the_broken_path():
    conn, _ = make_connection()
    z, zp = ball_points(8, D, 0.9, seed=6), ball_points(8, D, 0.9, seed=7)
    origin = torch.zeros_like(z)
    u_z = wilson_line_to_origin(conn, z, segments=32)
    u_zp = wilson_line_to_origin(conn, zp, segments=32)
    broken = wilson_line(conn, origin, z, segments=32) @ wilson_line(conn, zp, origin, segments=32)
    torch.testing.assert_close(compose_via_origin(u_z, u_zp), broken, rtol=1e-12, atol=1e-12)


def test_hierarchical_lines_approach_straight_lines_and_stay_covariant():
    conn, gens = make_connection(seed=16)
    field = random_gauge_field(gens, D, generator=torch.Generator().manual_seed(17))
    conn_t = gauge_transform_connection(conn, field)
    z = ball_points(64, D, 0.9, seed=18)
    exact = wilson_line_to_origin(conn, z, segments=256)
    om_0, om_z = gauge_omega(field, torch.zeros_like(z)), gauge_omega(field, z)
    dev, cov = [], []
    for level in [1, 2, 3, 4, 5]:
        u = hierarchical_wilson_line_to_origin(conn, z, level, segments=64)
        u_t = hierarchical_wilson_line_to_origin(conn_t, z, level, segments=64)
        dev.append((u - exact).abs().max().item())
        cov.append((u_t - om_0 @ u @ om_z.transpose(-1, -2)).abs().max().item())
    assert dev[-1] < dev[0] / 8, dev
    assert cov[-1] < cov[0] / 8, cov  # only the first-order hop inside the cell breaks covariance
    centres = cell_centers(z, 3)
    assert ((centres - z).abs() <= 2.0 / 8 / 2 + 1e-12).all()
    # Def 290: the path-ordered line from each cell's centre times the first-order hop to it
    centres = cell_centers(z, 2)
    hop = wilson_line(conn, z, centres, mode="first_order")
    want = wilson_line_to_origin(conn, centres, mode="path_ordered", segments=64) @ hop
    got = hierarchical_wilson_line_to_origin(conn, z, 2, 64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    corners = torch.tensor([[1.0, -1.0], [-0.6, 0.2]], dtype=F64)  # the closed square's edges
    assert cell_centers(corners, 2).tolist() == [[0.75, -0.75], [-0.75, 0.25]]


def test_gradcheck_wilson_lines():
    gens = gauge_generators(4, n_colors=1, dtype=F64).stacked(1.0, 0.5, 0.3)
    g = torch.Generator().manual_seed(19)
    c0 = torch.randn(2, gens.shape[0], generator=g, dtype=F64).requires_grad_(True)
    c1 = torch.randn(2, 2, gens.shape[0], generator=g, dtype=F64).requires_grad_(True)
    z = ball_points(3, 2, 0.8, seed=20).requires_grad_(True)
    for mode in WILSON_MODES:

        def fn(a, b, x, mode=mode):
            return wilson_line_to_origin(affine_connection(gens, a, b), x, mode=mode, segments=4)

        assert torch.autograd.gradcheck(fn, (c0, c1, z)), mode
    field = random_gauge_field(gens, 2, generator=g)
    assert torch.autograd.gradcheck(lambda x: gauge_omega(field, x), (z,))


@pytest.mark.parametrize("n_colors", [1, 2, 3])
@pytest.mark.parametrize("mode", WILSON_MODES)
def test_closed_form_lines_in_the_group_equal_the_generic_lines(n_colors, mode):
    """wilson_line_in_group (closed-form SU(2) factors, exact U(1) phase, factorised ordering)
    is the same map as wilson_line on the stacked generators."""
    group = GaugeGroup(n_colors, g_s=1.0, g_2=0.7, g_1=0.4, hypercharge=1.3)
    gens = group.generators()
    g = torch.Generator().manual_seed(21)
    c0 = torch.randn(D, group.n_generators, generator=g, dtype=F64)
    c1 = torch.randn(D, D, group.n_generators, generator=g, dtype=F64)
    z = ball_points(16, D, 0.9, seed=22)
    ref = wilson_line_to_origin(affine_connection(gens, c0, c1), z, mode=mode, segments=6)
    fast = wilson_line_in_group(
        group, affine_connection_coefficients(c0, c1), z, torch.zeros_like(z), mode, 6
    )
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-10)
    affine = affine_wilson_line_to_origin(group, c0, c1, z, mode, 6)  # closed-form integral
    torch.testing.assert_close(affine, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(
        group_exp(group, c0[0]),
        torch.linalg.matrix_exp(torch.einsum("g,gij->ij", c0[0], gens)),
        rtol=1e-10,
        atol=1e-10,
    )


@pytest.mark.parametrize("n_colors", [1, 2])
def test_segmented_line_and_its_gradient_in_the_pieces(n_colors):
    """segmented_group_line is the ordered product of the pieces' group exponentials (later on
    the left), and segmented_group_line_vjp (the prefixes' adjoint action on e0) is autograd's
    gradient of <kappa, U psi> in the pieces."""
    group = GaugeGroup(n_colors, g_s=1.1, g_2=0.7, g_1=0.4, hypercharge=1.3)
    gens = group.generators()
    g = torch.Generator().manual_seed(40)
    pieces = 0.8 * torch.randn(5, 2, 3, group.n_generators, generator=g, dtype=F64)
    kappa = torch.randn(2, 3, group.dim, generator=g, dtype=F64)  # two batch axes
    psi = torch.randn(2, 3, group.dim, generator=g, dtype=F64)
    line, prefixes = segmented_group_line(group, pieces)
    want = group_exp(group, pieces[0])
    for s in range(1, pieces.shape[0]):
        want = group_exp(group, pieces[s]) @ want
    torch.testing.assert_close(line, want, rtol=1e-12, atol=1e-12)
    leaf = pieces.clone().requires_grad_(True)
    u, _ = segmented_group_line(group, leaf)
    (ref,) = torch.autograd.grad((kappa * (u @ psi.unsqueeze(-1)).squeeze(-1)).sum(), leaf)
    y = (line.transpose(-1, -2) @ kappa.unsqueeze(-1)).squeeze(-1)
    e0 = torch.einsum("...i,gij,...j->...g", y, gens, psi)
    got = segmented_group_line_vjp(group, pieces, prefixes, e0)
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)


def test_segmented_line_refuses_three_colours():
    """The segmented line's closed form holds for SU(2)-type factors only: N_f = 3 is refused
    with a message, not computed wrong."""
    group = GaugeGroup(3, g_s=1.1, g_2=0.7, g_1=0.4, hypercharge=1.3)
    with pytest.raises(ValueError, match="N_f <= 2"):
        segmented_group_line(group, torch.zeros(2, 1, group.n_generators, dtype=F64))


@pytest.mark.parametrize("mode", ["exp", "path_ordered", "magnus4"])
def test_affine_segment_exponents_vjp_is_autograds_gradient(mode):
    """The closed-form VJP of the pieces' exponents in (p, q), for every mode with pieces (one
    for exp; S with magnus4's bracket [p, q] / (12 S^3)), against autograd on a [2, 3] batch."""
    group = GaugeGroup(2, g_s=1.1, g_2=0.7, g_1=0.4, hypercharge=1.3)
    g = torch.Generator().manual_seed(41)
    p = torch.randn(2, 3, group.n_generators, generator=g, dtype=F64, requires_grad=True)
    q = torch.randn(2, 3, group.n_generators, generator=g, dtype=F64, requires_grad=True)
    pieces = affine_segment_exponents(group, p, q, mode, 4)
    assert pieces.shape == (1 if mode == "exp" else 4, 2, 3, group.n_generators)
    grad = torch.randn(pieces.shape, generator=g, dtype=F64)
    ref_p, ref_q = torch.autograd.grad((pieces * grad).sum(), (p, q))
    got_p, got_q = affine_segment_exponents_vjp(group, p.detach(), q.detach(), mode, 4, grad)
    torch.testing.assert_close(got_p, ref_p, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_q, ref_q, rtol=1e-12, atol=1e-12)


def test_a_line_from_an_integral_names_the_modes_it_knows():
    group = GaugeGroup(1, g_s=1.0, g_2=0.7, g_1=0.4, hypercharge=1.3)
    h = torch.zeros(group.n_generators, dtype=F64)
    with pytest.raises(
        ValueError, match="^unknown Wilson-line mode 'magnus' \\(exp or first_order\\)$"
    ):
        line_from_integral(group, h, "magnus")


def test_lines_in_the_group_integrate_a_curved_connection_as_the_generic_lines_do():
    """A connection whose coefficients are not polynomial (sin of the position): the integrated
    connection's quadrature is not exact, so the exp and first-order lines in the group agree
    with wilson_line's only because both take the same Gauss-Legendre points."""
    group = GaugeGroup(2, g_s=1.0, g_2=0.7, g_1=0.4, hypercharge=1.3)
    c0 = torch.randn(D, group.n_generators, generator=torch.Generator().manual_seed(7), dtype=F64)

    def coefficients(x, dx):  # [..., G]
        return torch.einsum("...m,mg->...g", torch.sin(4.0 * x) * dx, c0)

    def conn(x, dx):  # [..., r, r]
        return torch.einsum("...g,gij->...ij", coefficients(x, dx), group.generators())

    z = ball_points(6, D, 0.9, seed=23)
    for mode in ("exp", "first_order"):
        fast = wilson_line_in_group(group, coefficients, z, torch.zeros_like(z), mode, 4)
        torch.testing.assert_close(
            fast, wilson_line_to_origin(conn, z, mode=mode), rtol=1e-12, atol=1e-12
        )
    with pytest.raises(ValueError, match="^unknown Wilson-line mode 'magnus'$"):
        wilson_line_in_group(group, coefficients, z, torch.zeros_like(z), "magnus", 4)
    with pytest.raises(
        ValueError,
        match="^affine_segment_exponents takes exp, path_ordered or magnus4: 'first_order'$",
    ):
        affine_segment_exponents(group, z, z, "first_order", 4)


@pytest.mark.parametrize("mode", ["path_ordered", "magnus4"])
def test_one_segment_is_a_line_and_none_is_refused(mode):
    """segments = 1 is one piece over the whole path (for path_ordered, the midpoint's exp);
    0 is refused in one line."""
    conn, _ = make_connection(seed=9)
    a, b = ball_points(2, D, 0.8, seed=10), ball_points(2, D, 0.8, seed=11)
    one = wilson_line(conn, a, b, mode=mode, segments=1)
    assert torch.isfinite(one).all()
    if mode == "path_ordered":
        want = torch.linalg.matrix_exp(-conn(0.5 * (a + b), b - a))
        torch.testing.assert_close(one, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="^segments must be >= 1$"):
        wilson_line(conn, a, b, mode=mode, segments=0)
    with pytest.raises(ValueError, match="^unknown Wilson-line mode 'magnus'$"):
        wilson_line(conn, a, b, mode="magnus")
    if mode == "path_ordered":  # the defaults: path-ordered in 8 segments
        eight = wilson_line(conn, a, b, mode=mode, segments=8)
        assert torch.equal(wilson_line(conn, a, b), eight)
        assert torch.equal(wilson_line_to_origin(conn, a), wilson_line(conn, a, 0 * a, mode, 8))
