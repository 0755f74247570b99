"""geometry.gauge_transforms: gauge transformations acting on the connection (Omega orthogonal,
its derivative, covariance of the lines recomputed from the transformed connection, invariance
of transported inner products only with exact transport)."""

from __future__ import annotations

import pytest
import torch

from geometry.gauge_transforms import (
    gauge_omega,
    gauge_omega_derivative,
    gauge_transform_connection,
    random_gauge_field,
)
from geometry.lie_algebra import gauge_generators
from geometry.wilson_lines import wilson_line_to_origin
from tests.conftest import ball_points
from tests.geometry.test_wilson_lines import _ratios, make_connection

F64 = torch.float64
D, K = 3, 8


def test_omega_is_orthogonal_and_its_derivative_matches_finite_differences():
    _, gens = make_connection()
    field = random_gauge_field(gens, D, generator=torch.Generator().manual_seed(8))
    z = ball_points(8, D, 0.9, seed=9)
    dz = torch.randn(8, D, dtype=F64)
    om = gauge_omega(field, z)
    torch.testing.assert_close(om @ om.transpose(-1, -2), torch.eye(K, dtype=F64).expand(8, K, K))
    h = 1e-6
    fd = (gauge_omega(field, z + h * dz) - gauge_omega(field, z - h * dz)) / (2 * h)
    torch.testing.assert_close(gauge_omega_derivative(field, z, dz), fd, rtol=1e-6, atol=1e-8)
    # the transformed connection is still skew
    conn, _ = make_connection()
    a_t = gauge_transform_connection(conn, field)(z, dz)
    torch.testing.assert_close(a_t, -a_t.transpose(-1, -2))


@pytest.mark.parametrize("k, n_colors", [(8, 2), (16, 2), (12, 3)])
def test_omega_is_the_product_of_its_factors_matrix_exponentials(k, n_colors):
    """gauge_omega's closed form (each factor's spectrum) against torch.linalg.matrix_exp of
    phi_j(z) X_j, multiplied in order; SU(N) x SU(2) x U(1) generators give repeated eigenvalues."""
    gens = gauge_generators(k, n_colors=n_colors, dtype=F64).stacked(1.0, 0.7, 0.4)
    field = random_gauge_field(gens, D, n_factors=4, generator=torch.Generator().manual_seed(5))
    z = ball_points(64, D, 0.99, seed=6)
    phi = z @ field.a.T + field.b * torch.sin(z @ field.w.T + field.c)  # [64, J]
    expected = torch.eye(k, dtype=F64).expand(64, k, k)
    for j in range(field.X.shape[0]):
        expected = expected @ torch.linalg.matrix_exp(phi[:, j, None, None] * field.X[j])
    torch.testing.assert_close(gauge_omega(field, z), expected, rtol=0, atol=1e-12)
    low = random_gauge_field(
        gens.float(), D, n_factors=4, generator=torch.Generator().manual_seed(5)
    )
    torch.testing.assert_close(gauge_omega(low, z.float()), expected.float(), rtol=0, atol=5e-6)


def test_wilson_lines_transform_covariantly_when_the_connection_is_transformed():
    """U'(0 <- z) = Omega(0) U(0 <- z) Omega(z)^T (seed 003 Def 280), recomputed from A'."""
    conn, gens = make_connection()
    field = random_gauge_field(gens, D, generator=torch.Generator().manual_seed(10))
    conn_t = gauge_transform_connection(conn, field)
    z = ball_points(16, D, 0.9, seed=11)
    om_0 = gauge_omega(field, torch.zeros_like(z))
    om_z = gauge_omega(field, z)
    errs = []
    for s in [16, 64, 256]:
        u = wilson_line_to_origin(conn, z, segments=s)
        u_t = wilson_line_to_origin(conn_t, z, segments=s)
        errs.append((u_t - om_0 @ u @ om_z.transpose(-1, -2)).abs().max().item())
    assert errs[-1] < 1e-5 and errs[0] > errs[1] > errs[2], errs


def test_magnus4_covariance_defect_falls_at_fourth_order():
    """|U'(0 <- z) - Omega(0) U Omega(z)^T| with U' recomputed from the transformed (no longer
    affine) connection: Magnus-4's defect falls >= 12x per doubling of segments, 2 to 16."""
    conn, gens = make_connection()
    field = random_gauge_field(gens, D, scale=0.5, generator=torch.Generator().manual_seed(10))
    conn_t = gauge_transform_connection(conn, field)
    z = ball_points(16, D, 0.9, seed=11)
    om_0 = gauge_omega(field, torch.zeros_like(z))
    om_z = gauge_omega(field, z)
    errs = []
    for s in (2, 4, 8, 16):
        u = wilson_line_to_origin(conn, z, mode="magnus4", segments=s)
        u_t = wilson_line_to_origin(conn_t, z, mode="magnus4", segments=s)
        errs.append((u_t - om_0 @ u @ om_z.transpose(-1, -2)).abs().max().item())
    assert all(r >= 12.0 for r in _ratios(errs)), errs


def _score_change(mode: str, segments: int = 256) -> float:
    """max |<U_z psi, U_z' phi> - <U'_z Omega psi, U'_z' Omega phi>| over random pairs."""
    conn, gens = make_connection(seed=12)
    field = random_gauge_field(gens, D, generator=torch.Generator().manual_seed(13))
    conn_t = gauge_transform_connection(conn, field)
    z, zp = ball_points(32, D, 0.9, seed=14), ball_points(32, D, 0.9, seed=15)
    psi, phi = torch.randn(32, K, dtype=F64), torch.randn(32, K, dtype=F64)

    def transported(c, x, v):
        return torch.einsum(
            "bij,bj->bi", wilson_line_to_origin(c, x, mode=mode, segments=segments), v
        )

    before = (transported(conn, z, psi) * transported(conn, zp, phi)).sum(-1)
    psi_t = torch.einsum("bij,bj->bi", gauge_omega(field, z), psi)
    phi_t = torch.einsum("bij,bj->bi", gauge_omega(field, zp), phi)
    after = (transported(conn_t, z, psi_t) * transported(conn_t, zp, phi_t)).sum(-1)
    return (before - after).abs().max().item()


def test_transported_inner_products_are_gauge_invariant_only_with_exact_transport():
    assert _score_change("path_ordered", segments=1024) < 1e-5  # O(S^-2): 4e-5 at S = 256
    assert _score_change("magnus4", segments=32) < 1e-5  # O(S^-4)
    assert _score_change("first_order") > 1e-2  # measurably not invariant


def test_a_random_field_is_drawn_in_float64_whatever_its_dtype():
    """The same generator seed gives the same field in float32 as in float64 (drawn in one dtype,
    then cast), and its factors' directions X have unit norm, also from weak generators."""
    gens = gauge_generators(K, n_colors=2, dtype=torch.float64).stacked(1.0, 0.7, 0.4)
    high = random_gauge_field(gens, D, generator=torch.Generator().manual_seed(3))
    low = random_gauge_field(gens.float(), D, generator=torch.Generator().manual_seed(3))
    for name in ("X", "a", "b", "w", "c"):
        torch.testing.assert_close(getattr(low, name), getattr(high, name).float(), msg=name)
    weak = random_gauge_field(0.01 * gens, D, generator=torch.Generator().manual_seed(3))
    norms = torch.cat([high.X.flatten(1).norm(dim=-1), weak.X.flatten(1).norm(dim=-1)])
    torch.testing.assert_close(norms, torch.ones_like(norms), rtol=1e-12, atol=1e-12)
