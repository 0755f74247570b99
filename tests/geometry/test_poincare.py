"""geometry.poincare against geoopt (float64, interior), against high-precision closed forms
(near the boundary, where geoopt clamps), against autograd (Christoffel symbols, kinetic-energy
gradient, Hamilton's equations), and for finite float32 values/gradients up to |z| = 1 - 1e-5."""

from __future__ import annotations

import math

import geoopt
import mpmath
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from geometry import poincare as P
from geometry import potentials
from tests.conftest import ball_points

BALL = geoopt.PoincareBall(c=1.0)
D = 4


# --------------------------------------------------------------------------- against geoopt


@pytest.mark.parametrize("max_norm", [0.3, 0.9, 0.99])
def test_matches_geoopt_in_float64(max_norm):
    x = ball_points(64, D, max_norm, seed=1)
    y = ball_points(64, D, max_norm, seed=2)
    v = 0.7 * torch.randn(64, D, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    tol = dict(rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(P.conformal_factor(x), BALL.lambda_x(x, keepdim=True), **tol)
    torch.testing.assert_close(P.mobius_add(x, y), BALL.mobius_add(x, y), **tol)
    torch.testing.assert_close(P.gyro_difference(x, y), BALL.mobius_add(-x, y), **tol)
    torch.testing.assert_close(P.dist(x, y), BALL.dist(x, y), **tol)
    torch.testing.assert_close(P.expmap0(v), BALL.expmap0(v), **tol)
    torch.testing.assert_close(P.logmap0(y), BALL.logmap0(y), **tol)
    vx = v / P.conformal_factor(x)  # metric length ~0.7: stays where geoopt does not clamp
    torch.testing.assert_close(P.expmap(x, vx), BALL.expmap(x, vx), **tol)
    torch.testing.assert_close(P.logmap(x, y), BALL.logmap(x, y), **tol)
    torch.testing.assert_close(P.parallel_transport(x, y, v), BALL.transp(x, y, v), **tol)


def test_gyration_matches_its_definition():
    u, v = ball_points(32, D, 0.9, seed=4), ball_points(32, D, 0.9, seed=5)
    w = torch.randn(32, D, dtype=torch.float64)
    definition = P.mobius_add(-P.mobius_add(u, v), P.mobius_add(u, P.mobius_add(v, w)))
    torch.testing.assert_close(P.gyration(u, v, w), definition, rtol=1e-9, atol=1e-11)


def test_pairwise_dist_matches_broadcast_geoopt():
    x, y = ball_points(7, D, 0.95, seed=6), ball_points(5, D, 0.95, seed=7)
    ref = BALL.dist(x[:, None, :], y[None, :, :])
    torch.testing.assert_close(P.pairwise_dist(x, y), ref, rtol=1e-9, atol=1e-11)


# --------------------------------------------------------------------------- near the boundary

mpmath.mp.dps = 50


def _mp_vec(t):
    return [mpmath.mpf(float(a)) for a in t]


def _mp_dist(x, y):
    x, y = _mp_vec(x), _mp_vec(y)
    nx = sum(a * a for a in x)
    ny = sum(a * a for a in y)
    dxy = sum((a - b) ** 2 for a, b in zip(x, y, strict=True))
    return mpmath.acosh(1 + 2 * dxy / ((1 - nx) * (1 - ny)))


def _mp_mobius_add(x, y):
    xy = sum(a * b for a, b in zip(x, y, strict=True))
    x2, y2 = sum(a * a for a in x), sum(b * b for b in y)
    den = 1 + 2 * xy + x2 * y2
    return [((1 + 2 * xy + y2) * a + (1 - x2) * b) / den for a, b in zip(x, y, strict=True)]


def _mp_expmap(x, v):
    x, v = _mp_vec(x), _mp_vec(v)
    lam = 2 / (1 - sum(a * a for a in x))
    nv = mpmath.sqrt(sum(a * a for a in v))
    second = [mpmath.tanh(lam * nv / 2) * a / nv for a in v]
    return _mp_mobius_add(x, second)


@pytest.mark.parametrize("gap", [1e-3, 1e-4, 1e-5])
def test_dist_near_boundary_against_high_precision(gap):
    """geoopt clamps at |z| <= 1 - 1e-5 in float64, so the reference here is the closed form
    evaluated with 50 digits from the same float64 inputs."""
    x = ball_points(16, D, 1 - gap, min_norm=1 - gap, seed=8)
    y = ball_points(16, D, 1 - gap, min_norm=0.5, seed=9)
    ours = P.dist(x, y)
    ref = torch.tensor(
        [float(_mp_dist(a, b)) for a, b in zip(x, y, strict=True)], dtype=torch.float64
    )
    torch.testing.assert_close(ours, ref, rtol=1e-9, atol=0)
    # two nearby points both at the boundary: the regime where arcosh(1 + tiny) fails
    y2 = x + 1e-9 * torch.randn_like(x)
    ref2 = torch.tensor(
        [float(_mp_dist(a, b)) for a, b in zip(x, y2, strict=True)], dtype=torch.float64
    )
    torch.testing.assert_close(P.dist(x, y2), ref2, rtol=1e-6, atol=0)


@pytest.mark.parametrize("gap", [1e-3, 1e-5])
def test_expmap_logmap_near_boundary_against_high_precision(gap):
    x = ball_points(8, D, 1 - gap, min_norm=1 - gap, seed=10)
    v = (
        1e-3
        * gap
        * torch.randn(8, D, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    )
    ours = P.expmap(x, v)
    ref = torch.tensor(
        [[float(c) for c in _mp_expmap(a, b)] for a, b in zip(x, v, strict=True)],
        dtype=torch.float64,
    )
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-15)
    # log is the inverse of exp; tangent vectors there are tiny (lambda ~ 1/gap), so compare
    # relative to |v|
    back = P.logmap(x, ours)
    rel = ((back - v).norm(dim=-1) / v.norm(dim=-1)).max()
    assert rel < 1e-4, rel


def test_float32_small_distances_keep_relative_accuracy():
    """|x|^2 + |y|^2 - 2<x,y> loses up to ~9% at small distances in float32
    (docs/architecture.md, "Numerics"); the asinh-of-difference form must stay within 1e-3
    relative of the float64 value."""
    x64 = ball_points(256, 8, 0.9, seed=12)
    for scale in [1e-3, 1e-4, 1e-5]:
        y64 = x64 + scale * torch.randn_like(x64) / 8**0.5
        x32, y32 = x64.float(), y64.float()
        ref = P.dist(x32.double(), y32.double())  # same (rounded) inputs, exact arithmetic
        rel = ((P.dist(x32, y32).double() - ref).abs() / ref).max().item()
        assert rel < 1e-3, (scale, rel)
        # the expanded form on the same inputs, for the record (it is what we avoid)
        expanded = (
            x32.square().sum(-1) + y32.square().sum(-1) - 2 * (x32 * y32).sum(-1)
        ).clamp_min(0)
        exp_rel = (
            (
                (expanded.double() - (x32.double() - y32.double()).square().sum(-1)).abs()
                / (x32.double() - y32.double()).square().sum(-1)
            )
            .max()
            .item()
        )
        assert exp_rel > rel  # the expanded squared distance is worse than our distance


# ----------------------------------------------------------------- finite near the boundary


def _ball_point(draw_r, draw_dir):
    d = torch.tensor(draw_dir, dtype=torch.float64)
    d = d / d.norm().clamp_min(1e-12)
    return (draw_r * d).float()


radius = st.one_of(
    st.floats(0.0, 1 - 1e-5), st.sampled_from([0.0, 1 - 1e-3, 1 - 1e-4, 1 - 2e-5, 1 - 1e-5])
)
direction = st.lists(st.floats(-1, 1), min_size=D, max_size=D).filter(
    lambda l: sum(a * a for a in l) > 1e-6
)
tangent = st.lists(st.floats(-1e3, 1e3), min_size=D, max_size=D)


@settings(max_examples=150, deadline=None)
@given(radius, direction, radius, direction, tangent)
def test_float32_values_and_gradients_finite_near_boundary(r1, d1, r2, d2, t):
    x = _ball_point(r1, d1).requires_grad_(True)
    y = _ball_point(r2, d2).requires_grad_(True)
    v = torch.tensor(t, dtype=torch.float32, requires_grad=True)
    outs = {
        "lambda": P.conformal_factor(x),
        "tau": P.metric_temperature(x, 32),
        "dist": P.dist(x, y),
        "dist_self": P.dist(x, x),
        "expmap": P.expmap(x, v),
        "expmap0": P.expmap0(v),
        "logmap": P.logmap(x, y),
        "logmap0": P.logmap0(y),
        "mobius": P.mobius_add(x, y),
        "transport": P.parallel_transport(x, y, v),
        "christoffel": P.christoffel_contract(x, v),
        "kinetic_grad": P.kinetic_energy_grad(x, v),
        "project": P.project(P.expmap(x, v), 1 - 1e-5),
        "flow_z": P.geodesic_flow(x, v, 0.05)[0],
        "flow_p": P.geodesic_flow(x, v, 0.05)[1],
        "drift_z": P.geodesic_drift(x, v, 0.05, y, 1 - 1e-5)[0],
        "drift_p": P.geodesic_drift(x, v, 0.05, y, 1 - 1e-5)[1],
        "wells_force": potentials.gaussian_wells(x, torch.stack([y, x]), *WELLS)[1],
    }
    for name, out in outs.items():
        assert torch.isfinite(out).all(), name
        grads = torch.autograd.grad(out.sum(), [x, y, v], allow_unused=True)
        for g in grads:
            assert g is None or torch.isfinite(g).all(), name
    assert (P.project(P.expmap(x, v), 1 - 1e-5).norm() <= 1 - 1e-5 + 1e-7).all()


def test_dist_to_itself_is_zero_with_zero_gradient():
    x = ball_points(4, D, 0.99, dtype=torch.float32).requires_grad_(True)
    d = P.dist(x, x.detach())
    assert (d == 0).all()
    (g,) = torch.autograd.grad(d.sum(), x)
    assert torch.isfinite(g).all() and (g == 0).all()


# --------------------------------------------------------------------------- identities


def test_exp_log_round_trips(dtype):
    x = ball_points(64, D, 0.9, dtype=dtype, seed=13)
    y = ball_points(64, D, 0.9, dtype=dtype, seed=14)
    tol = dict(rtol=1e-4, atol=2e-5) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(P.expmap(x, P.logmap(x, y)), y, **tol)
    torch.testing.assert_close(P.expmap0(P.logmap0(y)), y, **tol)
    v = 0.5 * torch.randn(64, D, dtype=dtype) / P.conformal_factor(x)
    torch.testing.assert_close(P.logmap(x, P.expmap(x, v)), v, **tol)
    # distance is the metric length of log
    torch.testing.assert_close(
        P.dist(x, y), (P.conformal_factor(x) * P.logmap(x, y)).norm(dim=-1), **tol
    )


def test_metric_factors_and_temperature():
    z = ball_points(32, D, 0.999, seed=15)
    lam = P.conformal_factor(z)
    torch.testing.assert_close(lam, 2 / (1 - z.square().sum(-1, keepdim=True)))
    torch.testing.assert_close(
        P.metric_factor(z) * P.inverse_metric_factor(z), torch.ones_like(lam)
    )
    for d_k in [1, 16, 32]:  # Thm 99: tau(z) lambda(z) = sqrt(d_k), and d_k / tau^2 = lambda^2
        tau = P.metric_temperature(z, d_k)
        torch.testing.assert_close(tau * lam, torch.full_like(lam, d_k**0.5))
        torch.testing.assert_close(d_k / tau.square(), P.metric_factor(z))


def test_project():
    z = ball_points(64, D, 0.999999, seed=16)
    out = P.project(z, 0.99)
    assert (out.norm(dim=-1) <= 0.99 + 1e-12).all()
    inside = z.norm(dim=-1) <= 0.99
    torch.testing.assert_close(out[inside], z[inside])
    torch.testing.assert_close(
        out / out.norm(dim=-1, keepdim=True), z / z.norm(dim=-1, keepdim=True)
    )
    with pytest.raises(ValueError):
        P.project(z, 1.0)


def test_parallel_transport_is_an_isometry():
    x, y = ball_points(32, D, 0.95, seed=17), ball_points(32, D, 0.95, seed=18)
    u, w = torch.randn(32, D, dtype=torch.float64), torch.randn(32, D, dtype=torch.float64)
    lx, ly = P.conformal_factor(x), P.conformal_factor(y)
    pu, pw = P.parallel_transport(x, y, u), P.parallel_transport(x, y, w)
    torch.testing.assert_close(
        (ly.square() * pu * pw).sum(-1), (lx.square() * u * w).sum(-1), rtol=1e-9, atol=1e-9
    )
    # transporting back returns the vector
    torch.testing.assert_close(P.parallel_transport(y, x, pu), u, rtol=1e-9, atol=1e-9)


def _christoffel_autograd(z: torch.Tensor) -> torch.Tensor:
    """Gamma^k_ij = 1/2 g^kl (d_i g_lj + d_j g_li - d_l g_ij) from g(z) = lambda(z)^2 I."""
    d = z.shape[-1]

    def metric(zz):
        return P.metric_factor(zz) * torch.eye(d, dtype=zz.dtype)  # [d, d]

    dg = torch.autograd.functional.jacobian(metric, z)  # dg[l, j, i] = d_i g_lj
    g_inv = torch.linalg.inv(metric(z))
    d_i_g_lj = dg.permute(0, 2, 1)  # [l, i, j]
    d_j_g_li = dg  # [l, i, j]
    d_l_g_ij = dg.permute(2, 0, 1)  # [l, i, j]
    gamma = 0.5 * torch.einsum("kl,lij->kij", g_inv, d_i_g_lj + d_j_g_li - d_l_g_ij)
    return gamma


def test_christoffel_contract_matches_autograd_symbols():
    zs = ball_points(6, 3, 0.95, seed=19)
    vs = torch.randn(6, 3, dtype=torch.float64)
    refs = []
    for z, v in zip(zs, vs, strict=True):
        gamma = _christoffel_autograd(z)
        refs.append(torch.einsum("kij,i,j->k", gamma, v, v))
        torch.testing.assert_close(P.christoffel_contract(z, v), refs[-1], rtol=1e-10, atol=1e-10)
    batched = P.christoffel_contract(zs, vs)  # [6, 3]: each row its own contraction
    torch.testing.assert_close(batched, torch.stack(refs), rtol=1e-10, atol=1e-10)


def test_kinetic_energy_gradient_matches_autograd():
    z = ball_points(32, D, 0.999, seed=20).requires_grad_(True)
    p = torch.randn(32, D, dtype=torch.float64)
    (g,) = torch.autograd.grad(P.kinetic_energy(z, p).sum(), z)
    torch.testing.assert_close(P.kinetic_energy_grad(z, p), g, rtol=1e-10, atol=1e-12)


def test_gaussian_wells_are_the_potential_of_their_force():
    """Phi against the formula through P.dist; the closed-form force against -autograd of Phi,
    also at a well's centre (where the force has a removable 0/0) and near the boundary."""
    z = ball_points(32, D, 0.999, seed=21)
    centers = torch.cat([ball_points(4, D, 0.8, seed=22), z[:1]])  # a centre on a query point
    depths = torch.tensor([0.6, -0.3, 0.5, 0.2, 0.4], dtype=torch.float64)
    widths = torch.tensor([0.5, 0.4, 1.3, 0.7, 0.6], dtype=torch.float64)
    zq = z.clone().requires_grad_(True)
    phi, force = potentials.gaussian_wells(zq, centers, depths, widths)
    dist = P.dist(z.unsqueeze(-2), centers)  # [32, 5]
    ref = -(depths * torch.exp(-dist.square() / (2 * widths.square()))).sum(-1)
    torch.testing.assert_close(phi, ref, rtol=1e-10, atol=1e-12)
    (grad,) = torch.autograd.grad(phi.sum(), zq)
    torch.testing.assert_close(force, -grad, rtol=1e-8, atol=1e-10)
    assert torch.isfinite(force).all()


WELLS = (torch.tensor([0.5, -0.2]), torch.tensor([0.4, 0.9]))  # depths, widths (float32)


def test_geodesic_flow_is_the_hamiltonian_flow_of_the_kinetic_energy():
    """RK4 on Hamilton's equations (dz/dt = dK/dp, dp/dt = -dK/dz, both by autograd) with a tiny
    step, against the closed-form flow exp_z(t v) with parallel-transported p."""
    z0 = ball_points(8, 3, 0.8, seed=21)
    p0 = 2.0 * torch.randn(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(22))

    def rhs(z, p):
        z = z.detach().requires_grad_(True)
        p = p.detach().requires_grad_(True)
        dz, dp = torch.autograd.grad(P.kinetic_energy(z, p).sum(), [p, z])
        return dz, -dp

    z, p, dt, t_end = z0.clone(), p0.clone(), 2e-3, 0.6
    for _ in range(round(t_end / dt)):
        k1 = rhs(z, p)
        k2 = rhs(z + 0.5 * dt * k1[0], p + 0.5 * dt * k1[1])
        k3 = rhs(z + 0.5 * dt * k2[0], p + 0.5 * dt * k2[1])
        k4 = rhs(z + dt * k3[0], p + dt * k3[1])
        z = z + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        p = p + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    z_flow, p_flow = P.geodesic_flow(z0, p0, t_end)
    torch.testing.assert_close(z_flow, z, rtol=1e-8, atol=1e-9)
    torch.testing.assert_close(p_flow, p, rtol=1e-7, atol=1e-8)
    # energy conserved and the flow is reversible (p -> -p)
    torch.testing.assert_close(P.kinetic_energy(z_flow, p_flow), P.kinetic_energy(z0, p0))
    z_back, p_back = P.geodesic_flow(z_flow, -p_flow, t_end)
    torch.testing.assert_close(z_back, z0, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(-p_back, p0, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("radius", [0.5, 0.99, 1 - 1e-5])
def test_geodesic_drift_is_the_composed_exp_map_transport_and_metric(radius):
    """The one-pass drift equals expmap, project, parallel_transport and metric_factor composed
    (each checked against geoopt / high precision above), with and without a correction and
    with the projection active (steps long enough to leave |z| <= 0.97)."""
    g = torch.Generator().manual_seed(31)
    z = ball_points(32, D, radius, seed=32)
    p = 3.0 * torch.randn(32, D, dtype=torch.float64, generator=g)
    delta = torch.randn(32, D, dtype=torch.float64, generator=g)
    for correction in (None, delta):
        for max_norm in (None, 0.97):
            v = p * P.inverse_metric_factor(z)
            step = v if correction is None else v + correction / P.conformal_factor(z)
            z_ref = P.expmap(z, 0.5 * step)
            if max_norm is not None:
                z_ref = P.project(z_ref, max_norm)
            p_ref = P.parallel_transport(z, z_ref, v) * P.metric_factor(z_ref)
            z_new, p_new = P.geodesic_drift(z, p, 0.5, correction, max_norm)
            torch.testing.assert_close(z_new, z_ref, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(p_new, p_ref, rtol=1e-8, atol=1e-10)


# --------------------------------------------------------------------------- gradcheck


def test_gradcheck_every_formula():
    g = torch.Generator().manual_seed(23)
    x = ball_points(3, 3, 0.9, seed=24).requires_grad_(True)
    y = ball_points(3, 3, 0.9, seed=25).requires_grad_(True)
    v = torch.randn(3, 3, dtype=torch.float64, generator=g).requires_grad_(True)
    checks = {
        "conformal_factor": (P.conformal_factor, (x,)),
        "metric_temperature": (lambda a: P.metric_temperature(a, 16), (x,)),
        "inverse_metric_factor": (P.inverse_metric_factor, (x,)),
        "mobius_add": (P.mobius_add, (x, y)),
        "gyro_difference": (P.gyro_difference, (x, y)),
        "gyration": (P.gyration, (x, y, v)),
        "dist": (P.dist, (x, y)),
        "expmap0": (P.expmap0, (v,)),
        "logmap0": (P.logmap0, (y,)),
        "expmap": (P.expmap, (x, v)),
        "logmap": (P.logmap, (x, y)),
        "project": (lambda a: P.project(a, 0.5), (x,)),
        "parallel_transport": (P.parallel_transport, (x, y, v)),
        "christoffel_contract": (P.christoffel_contract, (x, v)),
        "kinetic_energy": (P.kinetic_energy, (x, v)),
        "kinetic_energy_grad": (P.kinetic_energy_grad, (x, v)),
        "geodesic_flow": (lambda a, b: P.geodesic_flow(a, b, 0.3), (x, v)),
        "geodesic_drift": (lambda a, b, c: P.geodesic_drift(a, b, 0.3, c, 0.95), (x, v, y)),
    }
    for name, (fn, args) in checks.items():
        assert torch.autograd.gradcheck(fn, args), name


@pytest.mark.parametrize("radius", [0.0, 1e-3, 0.049, 0.051, 0.4, 0.99, 1 - 1e-5])
def test_logmap0_vjp_matches_autograd_across_the_series_switch(radius):
    """The closed-form vector-Jacobian product of log_0 (series below |y| = 0.05) equals
    autograd in float64 and stays finite and close in float32 near the boundary."""
    g = torch.Generator().manual_seed(9)
    y = torch.randn(5, 6, generator=g, dtype=torch.float64)
    y = radius * y / y.norm(dim=-1, keepdim=True)
    w = torch.randn(5, 6, generator=g, dtype=torch.float64)
    yr = y.clone().requires_grad_(True)
    (ref,) = torch.autograd.grad((P.logmap0(yr) * w).sum(), yr)
    torch.testing.assert_close(P.logmap0_vjp(y, w), ref, rtol=1e-9, atol=1e-12)
    out32 = P.logmap0_vjp(y.float(), w.float())
    assert torch.isfinite(out32).all()
    if radius < 0.99:  # float32 |y| rounds at the boundary; the value itself is ~1/(1 - r^2)
        torch.testing.assert_close(out32.double(), ref, rtol=1e-4, atol=1e-5)


def test_distance_from_the_origin_is_one_function_of_the_norm():
    """dist0(z) = 2 artanh|z| is dist(0, z) (float64, up to |z| = 0.999), gyro_norm_dist the
    same map of a norm; the confining potential and force are d^2 / 2 and minus its gradient."""
    z = ball_points(64, D, 0.999, seed=31)
    torch.testing.assert_close(P.dist0(z), P.dist(torch.zeros_like(z), z), rtol=1e-9, atol=1e-12)
    assert P.dist0(z, keepdim=True).shape == (64, 1) and P.dist0(z[:1]).shape == (1,)
    assert P.dist(z, z.flip(0), keepdim=True).shape == (64, 1) and P.dist(z[:1], z[:1]).shape == (
        1,
    )
    assert torch.equal(P.dist0(z, keepdim=True).squeeze(-1), P.dist0(z))
    assert torch.equal(P.dist0(z), P.gyro_norm_dist(z.norm(dim=-1)))
    zq = z.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(potentials.confining_potential(zq).sum(), zq)
    torch.testing.assert_close(potentials.confining_force(z), -grad, rtol=1e-9, atol=1e-12)
    assert torch.equal(potentials.confining_force(torch.zeros(2, D)), torch.zeros(2, D))


def test_pairwise_t_is_the_distances_argument_to_float32_relative_accuracy():
    """pairwise_t's matrix product (float64-accumulated) gives d = dist_from_t(t) equal to the
    explicit-difference distance, to float32 relative accuracy at small and large distances."""
    x = ball_points(7, 4, 0.95).float()
    y = torch.cat([x[:3] + 1e-5, ball_points(5, 4, 0.95, seed=1).float()])  # some near x
    reference = P.pairwise_dist(x.double(), y.double())  # [7, 8], of the float32 points
    t = P.pairwise_t(x, y).clamp_min(torch.finfo(torch.float32).tiny)
    assert t.dtype == torch.float32
    torch.testing.assert_close(P.dist_from_t(t).double(), reference, rtol=1e-5, atol=1e-9)


def test_pairwise_t_over_a_batch_of_banks_in_every_float_dtype():
    """x [B, N, d], y [B, M, d]: each batch element's own pairs (t = |x - y|^2 / (a_x a_y)
    written out), in float64 and float32 (accumulated in float64 either way)."""
    x = ball_points(6, 3, 0.9, seed=2).reshape(2, 3, 3)
    y = ball_points(8, 3, 0.9, seed=3).reshape(2, 4, 3)
    a_x, a_y = 1 - x.square().sum(-1), 1 - y.square().sum(-1)  # [2, 3], [2, 4]
    explicit = (x.unsqueeze(-2) - y.unsqueeze(-3)).square().sum(-1)
    explicit = explicit / (a_x.unsqueeze(-1) * a_y.unsqueeze(-2))  # [2, 3, 4]
    for dtype in (torch.float64, torch.float32):
        got = P.pairwise_t(x.to(dtype), y.to(dtype))
        assert got.dtype == dtype and got.shape == (2, 3, 4)
        torch.testing.assert_close(
            got.double(), explicit, rtol=1e-6 if dtype == torch.float32 else 1e-12, atol=0
        )


@pytest.mark.parametrize("t", [0.0, 1e-12, 1e-8, 1e-5, 1e-3, 9.9e-3, 1.01e-2, 0.3, 20.0])
def test_distance_over_gyro_norm_and_its_slope_across_the_series_switch(t):
    """d_H / |(-z) (+) z_i| as a function of t (the memory read's ratio) and its derivative, in
    float32, against mpmath's 2 asinh(sqrt t) sqrt((1 + t) / t) (limit 2, slope 2/3 at t = 0):
    the float32 quotient's own derivative is off by 2e-4 at t = 1e-3 and is noise below 1e-8."""
    ratio = lambda s: 2 * mpmath.asinh(mpmath.sqrt(s)) * mpmath.sqrt((1 + s) / s)  # noqa: E731
    with mpmath.workdps(40):
        value = 2.0 if t == 0 else float(ratio(mpmath.mpf(t)))
        slope = 2.0 / 3.0 if t == 0 else float(mpmath.diff(ratio, mpmath.mpf(t)))
    s = torch.tensor(t, dtype=torch.float32, requires_grad=True)
    out = potentials._dist_over_gyro_norm(s)
    (grad,) = torch.autograd.grad(out, s)
    assert abs(float(out.detach()) - value) <= 1e-6 * value
    assert abs(float(grad) - slope) <= 1e-4 * abs(slope) + 1e-6


def test_transported_velocity_error_is_the_metric_norm_of_geoopts_transport_error():
    """lambda(z*)^2 |P_{z->z*} v - v*|^2 with v = G^-1 p, v* = G^-1 p*, P from geoopt's parallel
    transport; 0 for the exact geodesic step (p* from geodesic_drift) and positive off it, on
    a batch [2, 3]."""
    z = ball_points(6, 3, 0.8, seed=21).reshape(2, 3, 3)
    z_t = ball_points(6, 3, 0.8, seed=22).reshape(2, 3, 3)
    g = torch.Generator().manual_seed(23)
    p = torch.randn(2, 3, 3, generator=g, dtype=torch.float64)
    p_t = torch.randn(2, 3, 3, generator=g, dtype=torch.float64)
    lam, lam_t = P.conformal_factor(z), P.conformal_factor(z_t)
    moved = BALL.transp(z, z_t, p / lam.square())
    want = (lam_t.squeeze(-1) * (moved - p_t / lam_t.square()).norm(dim=-1)).square()
    got = P.transported_velocity_error(z, p, z_t, p_t)
    assert got.shape == (2, 3)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    z1, p1 = P.geodesic_drift(z, p, 0.3)
    assert P.transported_velocity_error(z, p, z1, p1).abs().max() < 1e-20


@pytest.mark.parametrize("radius", [0.0, 1e-3, 0.02, 0.0499, 0.0501, 0.2])
def test_logmap0_jacobian_scalars_against_mpmath_on_both_sides_of_the_series_switch(radius):
    """f = artanh(r) / r and g = (1 / (1 - r^2) - f) / r^2 (limits 1 and 2/3 at 0) in float64:
    below r = 0.05 f's series to 4e-16 (every coefficient counts there) and g's to the 1e-10
    its truncation after r^6 leaves (5.2e-11 at the switch); above it the exact forms to the
    1e-13 g's difference allows. Below the switch float32's g is the series' to 1e-6 (the
    quotient's difference would cancel to ~1e-4 at r = 0.02)."""
    with mpmath.workdps(50):
        r = mpmath.mpf(radius)
        f = mpmath.mpf(1) if radius == 0 else mpmath.atanh(r) / r
        g = mpmath.mpf(2) / 3 if radius == 0 else (1 / (1 - r**2) - f) / r**2
    y = torch.zeros(1, 3, dtype=torch.float64)
    y[0, 0] = radius
    got_f, got_g = P.logmap0_jacobian(y)
    rtol_f, rtol_g = (4e-16, 1e-10) if radius < 0.05 else (1e-13, 1e-13)
    assert abs(float(got_f) - float(f)) <= rtol_f * float(f)
    assert abs(float(got_g) - float(g)) <= rtol_g * float(g)
    if 0 < radius < 0.05:
        _, g32 = P.logmap0_jacobian(y.float())
        assert abs(float(g32) - float(g)) <= 1e-6 * float(g)


def test_logmap0_on_the_boundary_and_with_a_given_jacobian():
    """A float32 point rounded onto the boundary (|y| = 1) reads artanh at 1 - eps: finite; the
    VJP uses the (f, g) it is given (a caller's, computed with log_0) instead of its own."""
    y = torch.tensor([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]])
    f, g = P.logmap0_jacobian(y)
    assert torch.isfinite(f).all() and torch.isfinite(g).all()
    assert float(f[0]) == pytest.approx(math.atanh(1 - 2.0**-23), rel=1e-6)
    w = torch.tensor([[0.3, -1.0, 2.0], [1.0, 1.0, 1.0]])
    given = (2 * f, 3 * g)
    want = given[0] * w + given[1] * (y * w).sum(-1, keepdim=True) * y
    torch.testing.assert_close(P.logmap0_vjp(y, w, given), want)
    assert not torch.allclose(P.logmap0_vjp(y, w), want)


def test_logmap0_below_its_series_switch_and_on_the_boundary():
    """artanh(r) / r from its series below r = 1e-3, to mpmath at float64's rounding; a float32
    point on the unit sphere (|y| = 1 after rounding) maps to a finite vector; project refuses
    a max_norm outside (0, 1) in one line."""
    for radius in (9.99e-4, 3e-4):
        y = torch.tensor([[radius, 0.0]], dtype=torch.float64)
        with mpmath.workdps(40):
            want = float(mpmath.atanh(mpmath.mpf(radius)))
        assert abs(float(P.logmap0(y)[0, 0]) - want) <= 4e-16 * want
    edge = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    assert torch.isfinite(P.logmap0(edge)).all()
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"^max_norm must lie in \(0, 1\), got {bad}$"):
            P.project(edge, bad)
