"""geometry.sphere against geoopt's Sphere (float64), against 50-digit arccos near 0 and pi, and
the seed 000 §8.2 ball -> sphere maps."""

from __future__ import annotations

import geoopt
import mpmath
import pytest
import torch

from geometry import sphere as S
from tests.conftest import ball_points

mpmath.mp.dps = 50


def unit(n, d, seed, dtype=torch.float64):
    x = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return (x / x.norm(dim=-1, keepdim=True)).to(dtype)


def _mp_angle(x, y):
    x = [mpmath.mpf(float(a)) for a in x]
    y = [mpmath.mpf(float(a)) for a in y]
    nx = mpmath.sqrt(sum(a * a for a in x))
    ny = mpmath.sqrt(sum(a * a for a in y))
    return mpmath.acos(sum(a * b for a, b in zip(x, y, strict=True)) / (nx * ny))


def test_dist_matches_geoopt():
    x, y = unit(128, 5, 1), unit(128, 5, 2)
    torch.testing.assert_close(S.dist(x, y), geoopt.Sphere().dist(x, y), rtol=1e-9, atol=1e-10)
    ref = geoopt.Sphere().dist(x[:, None, :], y[None, :7, :])
    torch.testing.assert_close(S.pairwise_dist(x, y[:7]), ref, rtol=1e-9, atol=1e-10)
    kept = S.dist(x, y, keepdim=True)
    assert kept.shape == (128, 1)
    torch.testing.assert_close(kept.squeeze(-1), S.dist(x, y))


@pytest.mark.parametrize("angle", [1e-7, 1e-4, 3.14159, 3.1415926])
def test_dist_accurate_near_zero_and_pi(angle):
    """arccos<x, y> loses half the digits near 0 and pi; the atan2 form does not."""
    x = unit(16, 4, 3)
    perp = unit(16, 4, 4)
    perp = perp - (perp * x).sum(-1, keepdim=True) * x
    perp = perp / perp.norm(dim=-1, keepdim=True)
    y = (
        torch.cos(torch.tensor(angle, dtype=torch.float64)) * x
        + torch.sin(torch.tensor(angle, dtype=torch.float64)) * perp
    )
    ref = torch.tensor(
        [float(_mp_angle(a, b)) for a, b in zip(x, y, strict=True)], dtype=torch.float64
    )
    ours = S.dist(x, y)
    gap = torch.minimum(ref, torch.pi - ref)  # the scale that matters near 0 / pi
    assert ((ours - ref).abs() / gap).max() < 1e-6
    naive = torch.arccos((x * y).sum(-1).clamp(-1, 1))
    assert ((ours - ref).abs()).max() <= ((naive - ref).abs()).max() + 1e-15


def test_gradients_finite_at_equal_and_antipodal_points():
    x = unit(8, 3, 5, dtype=torch.float32).requires_grad_(True)
    for y in (x.detach().clone(), -x.detach().clone()):
        d = S.dist(x, y)
        (g,) = torch.autograd.grad(d.sum(), x)
        assert torch.isfinite(d).all() and torch.isfinite(g).all()
    torch.testing.assert_close(S.dist(x, -x.detach()), torch.full((8,), torch.pi))


def test_ball_to_sphere_maps():
    c = ball_points(64, 3, 0.999, seed=6)
    a = S.ball_to_sphere_norm(c)
    torch.testing.assert_close(a.norm(dim=-1), torch.ones(64, dtype=torch.float64))
    assert (S.ball_to_sphere_norm(torch.zeros(2, 3)) == 0).all()  # no direction, no image

    b = S.ball_to_sphere_stereographic(c)
    assert b.shape == (64, 4)
    torch.testing.assert_close(b.norm(dim=-1), torch.ones(64, dtype=torch.float64))
    # injective: stereographic projection from the south pole inverts it
    torch.testing.assert_close(b[:, :3] / (1 + b[:, 3:]), c)
    origin = S.ball_to_sphere_stereographic(torch.zeros(1, 3, dtype=torch.float64))
    torch.testing.assert_close(origin, torch.tensor([[0.0, 0.0, 0.0, 1.0]], dtype=torch.float64))
    edge = S.ball_to_sphere_stereographic(unit(5, 3, 7))
    torch.testing.assert_close(edge[:, 3], torch.zeros(5, dtype=torch.float64))  # |c|=1 -> equator
    # nearby ball points stay nearby on the sphere (continuity), unlike the norm map at 0
    eps = 1e-6 * unit(1, 3, 8)
    assert S.dist(S.ball_to_sphere_stereographic(eps), S.ball_to_sphere_stereographic(-eps)) < 1e-5
    assert S.dist(S.ball_to_sphere_norm(eps), S.ball_to_sphere_norm(-eps)) > 3.0


def test_gradcheck():
    x, y = unit(3, 4, 9).requires_grad_(True), unit(3, 4, 10).requires_grad_(True)
    c = ball_points(3, 4, 0.9, seed=11).requires_grad_(True)
    assert torch.autograd.gradcheck(S.dist, (x, y))
    assert torch.autograd.gradcheck(S.ball_to_sphere_norm, (c,))
    assert torch.autograd.gradcheck(S.ball_to_sphere_stereographic, (c,))
