"""geometry.gauge: generators of SU(N_f) x SU(2) x U(1), Wilson lines in three modes (orthogonality,
convergence, error orders), gauge transformations acting on the connection (covariance of the
lines, invariance of transported inner products), composition and hierarchical cells."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geometry import gauge as G
from tests.conftest import ball_points

F64 = torch.float64
D, K = 3, 8


def make_connection(dtype=F64, seed=0, linear=1.0, k=K, d=D):
    gens = G.gauge_generators(k, n_colors=2, dtype=dtype).stacked(1.0, 0.7, 0.4)
    g = torch.Generator().manual_seed(seed)
    c0 = torch.randn(d, gens.shape[0], generator=g, dtype=F64).to(dtype)
    c1 = linear * torch.randn(d, d, gens.shape[0], generator=g, dtype=F64).to(dtype)
    return G.affine_connection(gens, c0, c1), gens


# --------------------------------------------------------------------------- generators


def test_gell_mann():
    for n in [1, 2, 3, 4]:
        lam = G.gell_mann(n)
        assert lam.shape == (n * n - 1, n, n)
        torch.testing.assert_close(lam, lam.conj().transpose(-1, -2))
        if n > 1:
            torch.testing.assert_close(
                torch.einsum("aii->a", lam), torch.zeros(n * n - 1, dtype=lam.dtype)
            )
            gram = torch.einsum("aij,bji->ab", lam, lam)
            torch.testing.assert_close(gram, 2 * torch.eye(n * n - 1, dtype=lam.dtype))


def test_realify_is_an_algebra_homomorphism():
    g = torch.Generator().manual_seed(1)
    a = torch.complex(
        torch.randn(4, 4, generator=g, dtype=F64), torch.randn(4, 4, generator=g, dtype=F64)
    )
    b = torch.complex(
        torch.randn(4, 4, generator=g, dtype=F64), torch.randn(4, 4, generator=g, dtype=F64)
    )
    torch.testing.assert_close(G.realify(a @ b), G.realify(a) @ G.realify(b))
    torch.testing.assert_close(G.realify(a + b), G.realify(a) + G.realify(b))
    q, _ = torch.linalg.qr(a)  # unitary -> orthogonal
    rq = G.realify(q)
    torch.testing.assert_close(rq @ rq.T, torch.eye(8, dtype=F64))


def test_generators_skew_with_su2_algebra_and_commuting_factors():
    gens = G.gauge_generators(16, n_colors=2, dtype=F64)
    assert gens.binding.shape == (3, 16, 16) and gens.error.shape == (3, 16, 16)
    assert gens.opportunity.shape == (1, 16, 16)
    allg = gens.stacked(1.0, 1.0, 1.0)
    torch.testing.assert_close(allg, -allg.transpose(-1, -2))

    def comm(x, y):
        return x @ y - y @ x

    t = gens.error  # realified -i sigma/2: [t_a, t_b] = eps_abc t_c
    torch.testing.assert_close(comm(t[0], t[1]), t[2])
    torch.testing.assert_close(comm(t[1], t[2]), t[0])
    torch.testing.assert_close(comm(t[2], t[0]), t[1])
    for x in gens.binding:
        for y in torch.cat([gens.error, gens.opportunity]):
            assert comm(x, y).abs().max() < 1e-12  # product group: factors commute
    for y in gens.error:
        assert comm(gens.opportunity[0], y).abs().max() < 1e-12
    with pytest.raises(ValueError):
        G.gauge_generators(12, n_colors=2)


# --------------------------------------------------------------------------- Wilson lines


def test_path_ordered_lines_are_orthogonal(dtype):
    conn, _ = make_connection(dtype=dtype)
    z = ball_points(64, D, 0.95, dtype=dtype, seed=2)
    u = G.wilson_line_to_origin(conn, z, mode="path_ordered", segments=16)
    err = (u @ u.transpose(-1, -2) - torch.eye(K, dtype=dtype)).abs().max().item()
    # float64: 1e-12. float32: each factor is orthogonal to rounding (~1e-7 x |H|), and the
    # product of 16 accumulates it, so 1e-5 there
    assert err < (1e-5 if dtype == torch.float32 else 1e-12), err
    ue = G.wilson_line_to_origin(conn, z, mode="exp")
    assert (ue @ ue.transpose(-1, -2) - torch.eye(K, dtype=dtype)).abs().max() < 1e-5
    u1 = G.wilson_line_to_origin(conn, z, mode="first_order")
    assert (
        u1 @ u1.transpose(-1, -2) - torch.eye(K, dtype=dtype)
    ).abs().max() > 1e-2  # I + H is not


def _loglog_slope(xs, ys):
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def test_path_ordered_converges_at_second_order_in_segments():
    conn, _ = make_connection()
    z = ball_points(16, D, 0.9, seed=3, min_norm=0.6)
    ref = G.wilson_line_to_origin(conn, z, segments=2048)
    segs = [4, 8, 16, 32, 64]
    errs = [(G.wilson_line_to_origin(conn, z, segments=s) - ref).abs().max().item() for s in segs]
    assert all(a > b for a, b in zip(errs, errs[1:], strict=False)), errs
    slope = _loglog_slope(segs, errs)
    assert -2.3 < slope < -1.7, (slope, errs)


def test_first_order_errs_as_square_of_displacement():
    conn, _ = make_connection()
    z = ball_points(16, D, 0.9, seed=4, min_norm=0.8)
    ts = [0.2, 0.1, 0.05, 0.025]
    errs = []
    for t in ts:
        exact = G.wilson_line_to_origin(conn, t * z, segments=256)
        errs.append(
            (G.wilson_line_to_origin(conn, t * z, mode="first_order") - exact).abs().max().item()
        )
    slope = _loglog_slope(ts, errs)
    assert 1.8 < slope < 2.2, (slope, errs)


def test_exp_is_exact_only_for_commuting_path_increments():
    const, _ = make_connection(linear=0.0)  # constant connection: increments commute
    z = ball_points(16, D, 0.95, seed=5)
    torch.testing.assert_close(
        G.wilson_line_to_origin(const, z, mode="exp"),
        G.wilson_line_to_origin(const, z, mode="path_ordered", segments=3),
        rtol=1e-12,
        atol=1e-12,
    )
    conn, _ = make_connection(linear=2.0)
    exact = G.wilson_line_to_origin(conn, z, segments=1024)
    err_exp = (G.wilson_line_to_origin(conn, z, mode="exp") - exact).abs().max()
    assert err_exp > 1e-3  # P exp != exp of the integral when the connection does not commute


def _richardson_reference(conn, z, segments=2048):
    """The true transport to O(S^-4) without Magnus: the midpoint-exponential product is a
    symmetric method (error even in 1 / S), so (4 U_2S - U_S) / 3 cancels its S^-2 term."""
    fine = G.wilson_line_to_origin(conn, z, mode="path_ordered", segments=2 * segments)
    coarse = G.wilson_line_to_origin(conn, z, mode="path_ordered", segments=segments)
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
        (G.wilson_line_to_origin(conn, z, mode="magnus4", segments=s) - ref).abs().max().item()
        for s in (2, 4, 8, 16)
    ]
    assert all(r >= 12.0 for r in _ratios(errs)), errs
    const, _ = make_connection(linear=0.0)
    exact = G.wilson_line_to_origin(const, z, mode="exp")
    for s in (1, 3):
        one = G.wilson_line_to_origin(const, z, mode="magnus4", segments=s)
        torch.testing.assert_close(one, exact, rtol=1e-12, atol=1e-12)


def test_bracket_is_the_matrix_commutator_of_the_generators():
    """bracket(u, v) = the coefficients of [u . T, v . T] (SU(2)-type blocks: g u x v; U(1): 0),
    for every colour count, couplings 0 included, and its VJP against autograd."""
    g = torch.Generator().manual_seed(30)
    for n_colors, g_s in ((1, 1.0), (2, 1.3), (3, 0.8), (2, 0.0)):
        group = G.GaugeGroup(n_colors, g_s=g_s, g_2=0.7, g_1=0.4, hypercharge=1.3)
        gens = group.generators()
        u = torch.randn(5, group.n_generators, generator=g, dtype=F64, requires_grad=True)
        v = torch.randn(5, group.n_generators, generator=g, dtype=F64, requires_grad=True)
        mu, mv = (torch.einsum("bg,gij->bij", w, gens) for w in (u, v))
        want = mu @ mv - mv @ mu
        got = torch.einsum("bg,gij->bij", G.bracket(group, u, v), gens)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        w = torch.randn(5, group.n_generators, generator=g, dtype=F64)
        ref = torch.autograd.grad((G.bracket(group, u, v) * w).sum(), (u, v))
        for a, b in zip(G._bracket_vjp(group, u, v, w), ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_compose_via_origin_is_transport_along_the_broken_path():
    conn, _ = make_connection()
    z, zp = ball_points(8, D, 0.9, seed=6), ball_points(8, D, 0.9, seed=7)
    origin = torch.zeros_like(z)
    u_z = G.wilson_line_to_origin(conn, z, segments=32)
    u_zp = G.wilson_line_to_origin(conn, zp, segments=32)
    broken = G.wilson_line(conn, origin, z, segments=32) @ G.wilson_line(
        conn, zp, origin, segments=32
    )
    torch.testing.assert_close(G.compose_via_origin(u_z, u_zp), broken, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- gauge transformations


def test_omega_is_orthogonal_and_its_derivative_matches_finite_differences():
    _, gens = make_connection()
    field = G.random_gauge_field(gens, D, generator=torch.Generator().manual_seed(8))
    z = ball_points(8, D, 0.9, seed=9)
    dz = torch.randn(8, D, dtype=F64)
    om = G.gauge_omega(field, z)
    torch.testing.assert_close(om @ om.transpose(-1, -2), torch.eye(K, dtype=F64).expand(8, K, K))
    h = 1e-6
    fd = (G.gauge_omega(field, z + h * dz) - G.gauge_omega(field, z - h * dz)) / (2 * h)
    torch.testing.assert_close(G.gauge_omega_derivative(field, z, dz), fd, rtol=1e-6, atol=1e-8)
    # the transformed connection is still skew
    conn, _ = make_connection()
    a_t = G.gauge_transform_connection(conn, field)(z, dz)
    torch.testing.assert_close(a_t, -a_t.transpose(-1, -2))


def test_wilson_lines_transform_covariantly_when_the_connection_is_transformed():
    """U'(0 <- z) = Omega(0) U(0 <- z) Omega(z)^T (seed 003 Def 280), recomputed from A'."""
    conn, gens = make_connection()
    field = G.random_gauge_field(gens, D, generator=torch.Generator().manual_seed(10))
    conn_t = G.gauge_transform_connection(conn, field)
    z = ball_points(16, D, 0.9, seed=11)
    om_0 = G.gauge_omega(field, torch.zeros_like(z))
    om_z = G.gauge_omega(field, z)
    errs = []
    for s in [16, 64, 256]:
        u = G.wilson_line_to_origin(conn, z, segments=s)
        u_t = G.wilson_line_to_origin(conn_t, z, segments=s)
        errs.append((u_t - om_0 @ u @ om_z.transpose(-1, -2)).abs().max().item())
    assert errs[-1] < 1e-5 and errs[0] > errs[1] > errs[2], errs


def test_magnus4_covariance_defect_falls_at_fourth_order():
    """|U'(0 <- z) - Omega(0) U Omega(z)^T| with U' recomputed from the transformed (no longer
    affine) connection: Magnus-4's defect falls >= 12x per doubling of segments, 2 to 16."""
    conn, gens = make_connection()
    field = G.random_gauge_field(gens, D, scale=0.5, generator=torch.Generator().manual_seed(10))
    conn_t = G.gauge_transform_connection(conn, field)
    z = ball_points(16, D, 0.9, seed=11)
    om_0 = G.gauge_omega(field, torch.zeros_like(z))
    om_z = G.gauge_omega(field, z)
    errs = []
    for s in (2, 4, 8, 16):
        u = G.wilson_line_to_origin(conn, z, mode="magnus4", segments=s)
        u_t = G.wilson_line_to_origin(conn_t, z, mode="magnus4", segments=s)
        errs.append((u_t - om_0 @ u @ om_z.transpose(-1, -2)).abs().max().item())
    assert all(r >= 12.0 for r in _ratios(errs)), errs


def _score_change(mode: str, segments: int = 256) -> float:
    """max |<U_z psi, U_z' phi> - <U'_z Omega psi, U'_z' Omega phi>| over random pairs."""
    conn, gens = make_connection(seed=12)
    field = G.random_gauge_field(gens, D, generator=torch.Generator().manual_seed(13))
    conn_t = G.gauge_transform_connection(conn, field)
    z, zp = ball_points(32, D, 0.9, seed=14), ball_points(32, D, 0.9, seed=15)
    psi, phi = torch.randn(32, K, dtype=F64), torch.randn(32, K, dtype=F64)

    def transported(c, x, v):
        return torch.einsum(
            "bij,bj->bi", G.wilson_line_to_origin(c, x, mode=mode, segments=segments), v
        )

    before = (transported(conn, z, psi) * transported(conn, zp, phi)).sum(-1)
    psi_t = torch.einsum("bij,bj->bi", G.gauge_omega(field, z), psi)
    phi_t = torch.einsum("bij,bj->bi", G.gauge_omega(field, zp), phi)
    after = (transported(conn_t, z, psi_t) * transported(conn_t, zp, phi_t)).sum(-1)
    return (before - after).abs().max().item()


def test_transported_inner_products_are_gauge_invariant_only_with_exact_transport():
    assert _score_change("path_ordered", segments=1024) < 1e-5  # O(S^-2): 4e-5 at S = 256
    assert _score_change("magnus4", segments=32) < 1e-5  # O(S^-4)
    assert _score_change("first_order") > 1e-2  # measurably not invariant


def test_hierarchical_lines_approach_straight_lines_and_stay_covariant():
    conn, gens = make_connection(seed=16)
    field = G.random_gauge_field(gens, D, generator=torch.Generator().manual_seed(17))
    conn_t = G.gauge_transform_connection(conn, field)
    z = ball_points(64, D, 0.9, seed=18)
    exact = G.wilson_line_to_origin(conn, z, segments=256)
    om_0, om_z = G.gauge_omega(field, torch.zeros_like(z)), G.gauge_omega(field, z)
    dev, cov = [], []
    for level in [1, 2, 3, 4, 5]:
        u = G.hierarchical_wilson_line_to_origin(conn, z, level, segments=64)
        u_t = G.hierarchical_wilson_line_to_origin(conn_t, z, level, segments=64)
        dev.append((u - exact).abs().max().item())
        cov.append((u_t - om_0 @ u @ om_z.transpose(-1, -2)).abs().max().item())
    assert dev[-1] < dev[0] / 8, dev
    assert cov[-1] < cov[0] / 8, cov  # only the first-order hop inside the cell breaks covariance
    centres = G.cell_centers(z, 3)
    assert ((centres - z).abs() <= 2.0 / 8 / 2 + 1e-12).all()


def test_gradcheck_wilson_lines():
    gens = G.gauge_generators(4, n_colors=1, dtype=F64).stacked(1.0, 0.5, 0.3)
    g = torch.Generator().manual_seed(19)
    c0 = torch.randn(2, gens.shape[0], generator=g, dtype=F64).requires_grad_(True)
    c1 = torch.randn(2, 2, gens.shape[0], generator=g, dtype=F64).requires_grad_(True)
    z = ball_points(3, 2, 0.8, seed=20).requires_grad_(True)
    for mode in G.WILSON_MODES:

        def fn(a, b, x, mode=mode):
            return G.wilson_line_to_origin(
                G.affine_connection(gens, a, b), x, mode=mode, segments=4
            )

        assert torch.autograd.gradcheck(fn, (c0, c1, z)), mode
    field = G.random_gauge_field(gens, 2, generator=g)
    assert torch.autograd.gradcheck(lambda x: G.gauge_omega(field, x), (z,))


@pytest.mark.parametrize("n_colors", [1, 2, 3])
@pytest.mark.parametrize("mode", G.WILSON_MODES)
def test_closed_form_lines_in_the_group_equal_the_generic_lines(n_colors, mode):
    """wilson_line_in_group (closed-form SU(2) factors, exact U(1) phase, factorised ordering)
    is the same map as wilson_line on the stacked generators."""
    group = G.GaugeGroup(n_colors, g_s=1.0, g_2=0.7, g_1=0.4, hypercharge=1.3)
    gens = group.generators()
    g = torch.Generator().manual_seed(21)
    c0 = torch.randn(D, group.n_generators, generator=g, dtype=F64)
    c1 = torch.randn(D, D, group.n_generators, generator=g, dtype=F64)
    z = ball_points(16, D, 0.9, seed=22)
    ref = G.wilson_line_to_origin(G.affine_connection(gens, c0, c1), z, mode=mode, segments=6)
    fast = G.wilson_line_in_group(
        group, G.affine_connection_coefficients(c0, c1), z, torch.zeros_like(z), mode, 6
    )
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-10)
    affine = G.affine_wilson_line_to_origin(group, c0, c1, z, mode, 6)  # closed-form integral
    torch.testing.assert_close(affine, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(
        G.group_exp(group, c0[0]),
        torch.linalg.matrix_exp(torch.einsum("g,gij->ij", c0[0], gens)),
        rtol=1e-10,
        atol=1e-10,
    )


@pytest.mark.parametrize("n_colors", [1, 2])
def test_group_exp_vjp_is_the_gradient_of_a_transported_field(n_colors):
    """d/dh <y, U(h) psi> = M(h)^T e with e_g = <U^T y, T_g psi> (group_exp_vjp), against
    autograd through the closed-form exponential; the identity (h = 0) included."""
    group = G.GaugeGroup(n_colors, g_s=1.0, g_2=0.7, g_1=0.4, hypercharge=1.3)
    gens = group.generators()  # [G, r, r]
    g = torch.Generator().manual_seed(5)
    h = torch.randn(6, group.n_generators, generator=g, dtype=F64)
    h[0] = 0.0
    y = torch.randn(6, group.dim, generator=g, dtype=F64)
    psi = torch.randn(6, group.dim, generator=g, dtype=F64)
    h_req = h.clone().requires_grad_(True)
    u = G.group_exp(group, h_req)
    (ref,) = torch.autograd.grad((y * (u @ psi.unsqueeze(-1)).squeeze(-1)).sum(), h_req)
    e = torch.einsum(
        "bi,gij,bj->bg", (u.detach().transpose(-1, -2) @ y.unsqueeze(-1))[..., 0], gens, psi
    )
    torch.testing.assert_close(G.group_exp_vjp(group, h, e), ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="N_f <= 2"):
        G.group_exp_vjp(G.GaugeGroup(3, 1.0, 0.5, 0.3), torch.zeros(12, dtype=F64), torch.zeros(12))


@pytest.mark.parametrize("n_colors", [1, 2])
def test_segmented_line_and_its_gradient_in_the_pieces(n_colors):
    """segmented_group_line is the ordered product of the pieces' group exponentials (later on
    the left), and segmented_group_line_vjp (the prefixes' adjoint action on e0) is autograd's
    gradient of <kappa, U psi> in the pieces."""
    group = G.GaugeGroup(n_colors, g_s=1.1, g_2=0.7, g_1=0.4, hypercharge=1.3)
    gens = group.generators()
    g = torch.Generator().manual_seed(40)
    pieces = 0.8 * torch.randn(5, 4, group.n_generators, generator=g, dtype=F64)
    kappa = torch.randn(4, group.dim, generator=g, dtype=F64)
    psi = torch.randn(4, group.dim, generator=g, dtype=F64)
    line, prefixes = G.segmented_group_line(group, pieces)
    want = G.group_exp(group, pieces[0])
    for s in range(1, pieces.shape[0]):
        want = G.group_exp(group, pieces[s]) @ want
    torch.testing.assert_close(line, want, rtol=1e-12, atol=1e-12)
    leaf = pieces.clone().requires_grad_(True)
    u, _ = G.segmented_group_line(group, leaf)
    (ref,) = torch.autograd.grad((kappa * (u @ psi.unsqueeze(-1)).squeeze(-1)).sum(), leaf)
    y = (line.transpose(-1, -2) @ kappa.unsqueeze(-1)).squeeze(-1)
    e0 = torch.einsum("bi,gij,bj->bg", y, gens, psi)
    got = G.segmented_group_line_vjp(group, pieces, prefixes, e0)
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)
