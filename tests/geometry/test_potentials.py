"""geometry.potentials.inverse_distance_patches (the episodic memory's potential) against a
float64 reference written from its definition with the explicit distance d_H: its value, and its
force as autograd's -grad of that value; for one bank shared by every query (the matrix-product
path) and for a bank per query, with masked entries, empty banks and screening."""

from __future__ import annotations

import mpmath
import pytest
import torch

from geometry import poincare as P
from geometry import potentials
from geometry.potentials import inverse_distance_patches
from tests.conftest import ball_points

F64 = torch.float64


def reference(z, keys, slopes, mask, eps, tension):
    """Phi(z) = sum_i W_i <f_i, z_i - z>, W = softmax over held entries of
    -log(d_H^2 + eps) - tension d_H^2 / 2; 0 without entries. z [B, d], banks [B, C, ...]."""
    d2 = P.dist(z.unsqueeze(-2), keys).square()  # [B, C]
    logits = (-torch.log(d2 + eps) - 0.5 * tension * d2).masked_fill(~mask, -torch.inf)
    held = mask.any(-1)
    weights = torch.softmax(logits.masked_fill(~held.unsqueeze(-1), 0.0), -1) * mask
    patches = (slopes * (keys - z.unsqueeze(-2))).sum(-1)  # [B, C]
    return (weights * patches).sum(-1)


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("tension", [0.0, 0.8])
def test_value_and_force_are_the_definition_and_its_gradient(shared, tension):
    g = torch.Generator().manual_seed(5)
    b, c, d, eps = 6, 7, 3, 1e-2
    z = ball_points(b, d, 0.9, seed=8)
    bk = 1 if shared else b
    keys = ball_points(bk * c, d, 0.95, seed=9).reshape(bk, c, d)
    slopes = torch.randn(bk, c, d, generator=g, dtype=F64)
    mask = torch.rand(bk, c, generator=g) < 0.7
    mask[0, :2] = True  # some entries in the first bank
    if not shared:
        mask[-1] = False  # a query whose bank holds no entry
    phi, force = inverse_distance_patches(z, keys, slopes, mask, eps, tension)
    assert phi.shape == (b,) and force.shape == (b, d)
    zq = z.clone().requires_grad_(True)
    expand = lambda x: x.expand(b, *x.shape[1:])  # noqa: E731
    want = reference(zq, expand(keys), expand(slopes), expand(mask), eps, tension)
    (grad,) = torch.autograd.grad(want.sum(), zq)
    torch.testing.assert_close(phi, want.detach(), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(force, -grad, rtol=1e-8, atol=1e-10)
    if not shared:
        assert phi[-1] == 0 and not force[-1].any()
    assert force.abs().max() > 0.1  # not vacuous


@pytest.mark.parametrize("entries", [1, 3])
def test_per_query_banks_of_two_queries_are_each_querys_own(entries):
    """Two queries with a bank each (one entry, or three): the same as each query alone with its
    bank, so neither reads the other's."""
    g = torch.Generator().manual_seed(7)
    z = ball_points(2, 3, 0.8, seed=3)
    keys = ball_points(2 * entries, 3, 0.9, seed=4).reshape(2, entries, 3)
    slopes = torch.randn(2, entries, 3, generator=g, dtype=F64)
    mask = torch.ones(2, entries, dtype=torch.bool)
    both = inverse_distance_patches(z, keys, slopes, mask, 1e-2, 0.3)
    for row in range(2):
        alone = inverse_distance_patches(
            z[row : row + 1], keys[row : row + 1], slopes[row : row + 1], mask[row : row + 1],
            1e-2, 0.3,
        )  # fmt: skip
        for got, want in zip(both, alone, strict=True):
            torch.testing.assert_close(got[row : row + 1], want, rtol=1e-12, atol=1e-14)


def test_a_shared_bank_reads_as_the_same_bank_given_to_every_query():
    """The matrix-product path (one bank) and the explicit path (the bank tiled per query) agree,
    in float32 too, also at a query on an entry (d -> 0)."""
    g = torch.Generator().manual_seed(6)
    keys = ball_points(9, 4, 0.9, seed=1).unsqueeze(0)
    slopes = torch.randn(1, 9, 4, generator=g, dtype=F64)
    mask = torch.ones(1, 9, dtype=torch.bool)
    z = torch.cat([ball_points(4, 4, 0.9, seed=2), keys[0, :1]])
    for dtype, tol in ((F64, 1e-10), (torch.float32, 1e-4)):
        args = [t.to(dtype) for t in (z, keys, slopes)]
        shared = inverse_distance_patches(args[0], args[1], args[2], mask, 1e-3, 0.5)
        tiled = inverse_distance_patches(
            args[0], args[1].expand(5, -1, -1), args[2].expand(5, -1, -1), mask.expand(5, -1),
            1e-3, 0.5,
        )  # fmt: skip
        for got, want in zip(shared, tiled, strict=True):
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    unscreened = inverse_distance_patches(z, keys, slopes, mask, 1e-3)  # tension 0 by default
    for got, want in zip(
        unscreened, inverse_distance_patches(z, keys, slopes, mask, 1e-3, 0.0), strict=True
    ):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("t, bound", [(1e-3, 2e-13), (9.9e-3, 1e-9), (2e-2, 1e-15)])
def test_distance_over_gyro_norm_in_float64_to_its_series_truncation(t, bound):
    """2 asinh(sqrt t) sqrt((1 + t) / t) in float64 against mpmath: the series (below 1e-2) to
    its truncation after t^3 (5e-14 at 1e-3, 4.8e-10 at 9.9e-3), the quotient above."""
    with mpmath.workdps(40):
        s = mpmath.mpf(t)
        want = float(2 * mpmath.asinh(mpmath.sqrt(s)) * mpmath.sqrt((1 + s) / s))
    got = float(potentials._dist_over_gyro_norm(torch.tensor(t, dtype=F64)))
    assert abs(got - want) <= bound * want
