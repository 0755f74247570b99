"""Area-law screening of seed 003 (Def 286, Thm 102, Prop 100, Prop 104, Prop 105) as pure
functions on tensors: the string-area proxies, the screening factor, confinement radii, and the
geodesic reach of a proxy (where the proxy's screening actually falls to a given level).

Two area proxies:

- ``string_area``: the seed's A(z, z') = lambda(z)^2 |z - z'|^2 / 2 (Def 286). It is the square
  of the first-order geodesic distance d_G ~ lambda(z) |z - z'| measured with the metric *at the
  query only*, so it is not symmetric and under-/over-estimates d_G^2 / 2 once |z - z'| is
  comparable to the scale 1 - |z| on which lambda changes (tests/geometry/test_screening.py
  measures by how much).
- ``geodesic_string_area``: d_G(z, z')^2 / 2, the area that Prop 100 and Prop 104 assume when
  they derive r_conf = sqrt(2 / sigma) and r_eps = sqrt(2 log(1/eps) / sigma).

Curvature -1, points in the unit ball; shapes ``[..., d]`` for points, per-pair results drop
the last dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .poincare import conformal_factor, dist, one_minus_sqnorm, sqnorm

__all__ = [
    "string_area",
    "pairwise_string_area",
    "weighted_string_area_grad",
    "geodesic_string_area",
    "pairwise_geodesic_string_area",
    "screening_factor",
    "confinement_radius",
    "proxy_euclidean_reach",
    "proxy_geodesic_reach",
    "soft_mask_width",
]


def string_area(z: Tensor, z_prime: Tensor) -> Tensor:
    """A(z, z') = lambda(z)^2 |z - z'|^2 / 2  (seed 003 Def 286, Prop 105), with lambda taken at
    the query z. z, z' [..., d] -> [...]. Reads z - z' directly (no |z|^2 + |z'|^2 - 2 z.z'
    cancellation at small separations)."""
    lam = conformal_factor(z).squeeze(-1)  # [...]
    return 0.5 * lam.square() * sqnorm(z - z_prime, keepdim=False)  # [...]


def pairwise_string_area(z: Tensor, z_prime: Tensor) -> Tensor:
    """All pairs of :func:`string_area`: z [..., Q, d], z' [..., N, d] -> [..., Q, N]."""
    return string_area(z.unsqueeze(-2), z_prime.unsqueeze(-3))


def weighted_string_area_grad(
    z: Tensor,
    z_prime: Tensor,
    b: Tensor,
    lam: Tensor | None = None,
    delta2: Tensor | None = None,
) -> Tensor:
    """sum_j b_j grad_z A(z, z'_j) for the proxy A = lambda(z)^2 |z - z'_j|^2 / 2 (Def 286), in
    closed form: grad_z A = lambda^2 (z - z') + |z - z'|^2 lambda^3 z (d lambda/dz = lambda^2 z).
    z [B, d], z' [Bc, N, d] (Bc = 1 or B), b [B, N] -> [B, d]; `lam` = lambda(z) [B, 1] and
    `delta2` = |z - z'_j|^2 [B, N] when the caller already has them (the area itself needs both)."""
    if lam is None:
        lam = conformal_factor(z)  # [B, 1]
    if delta2 is None:
        delta2 = sqnorm(z.unsqueeze(-2) - z_prime, keepdim=False)  # [B, N]
    b_sum = b.sum(-1, keepdim=True)  # [B, 1]
    if z_prime.shape[0] == 1:  # shared entries: one matrix product
        b_zp = b @ z_prime[0]  # [B, d]
    else:  # per-query entries (a few window states): a broadcast product, whose backward is
        b_zp = (b.unsqueeze(-1) * z_prime).sum(-2)  # cheaper than a unit-dimension bmm's
    lam2 = lam.square()
    return lam2 * (b_sum * z - b_zp) + lam2 * lam * (b * delta2).sum(-1, keepdim=True) * z


def geodesic_string_area(z: Tensor, z_prime: Tensor) -> Tensor:
    """A_G(z, z') = d_G(z, z')^2 / 2, the area Prop 100 / Prop 104 assume (symmetric, exact in
    geodesic units). z, z' [..., d] -> [...]."""
    return 0.5 * dist(z, z_prime).square()


def pairwise_geodesic_string_area(z: Tensor, z_prime: Tensor) -> Tensor:
    """All pairs of :func:`geodesic_string_area`: [..., Q, d], [..., N, d] -> [..., Q, N]."""
    return geodesic_string_area(z.unsqueeze(-2), z_prime.unsqueeze(-3))


def screening_factor(area: Tensor, sigma: Tensor | float) -> Tensor:
    """exp(-sigma A)  (seed 003 Def 286); sigma >= 0 broadcasts against area."""
    return torch.exp(-sigma * area)


def confinement_radius(sigma: Tensor | float, eps: float = math.exp(-1.0)) -> Tensor | float:
    """r_eps = sqrt(2 log(1/eps) / sigma): the geodesic distance at which exp(-sigma d_G^2 / 2)
    equals eps (seed 003 Prop 104; eps = e^-1 gives Prop 100's r_conf = sqrt(2 / sigma)).
    sigma = 0 gives inf (no screening). Exact only for :func:`geodesic_string_area`."""
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps must lie in (0, 1), got {eps}")
    log_inv = -math.log(eps)
    if isinstance(sigma, Tensor):
        return torch.sqrt(2.0 * log_inv / sigma)  # sigma = 0 -> inf
    return math.inf if sigma == 0 else math.sqrt(2.0 * log_inv / sigma)


def proxy_euclidean_reach(z: Tensor, sigma: float, eps: float = math.exp(-1.0)) -> Tensor:
    """Euclidean separation |z - z'| at which the Def 286 proxy screening exp(-sigma A) equals
    eps, from the query z: sqrt(2 log(1/eps) / sigma) / lambda(z)  (the Gaussian of Prop 105).
    z [..., d] -> [...]."""
    return confinement_radius(sigma, eps) / conformal_factor(z).squeeze(-1)


def proxy_geodesic_reach(
    z: Tensor, direction: Tensor, sigma: float, eps: float = math.exp(-1.0)
) -> Tensor:
    """Geodesic distance from z to the point z + t* u (u = direction / |direction|) where the
    Def 286 proxy screening falls to eps, t* = :func:`proxy_euclidean_reach`; inf where the ray
    leaves the ball first (the proxy never screens that much along it).

    Compare with :func:`confinement_radius` (what Prop 100 / 104 predict under A = d_G^2 / 2).
    z, direction [..., d] -> [...].
    """
    u = direction / direction.norm(dim=-1, keepdim=True)
    t = proxy_euclidean_reach(z, sigma, eps)  # [...]
    target = z + t.unsqueeze(-1) * u  # [..., d]
    inside = sqnorm(target, keepdim=False) < 1.0
    # evaluate the distance only at points inside the ball (one_minus_sqnorm floors the rest)
    safe = torch.where(inside.unsqueeze(-1), target, z)
    reach = dist(z, safe)
    # a ray that leaves the ball gives inf; also when 1 - |target|^2 is at the floor
    at_floor = one_minus_sqnorm(safe).squeeze(-1) <= torch.finfo(z.dtype).eps
    return torch.where(inside & ~at_floor, reach, torch.full_like(reach, math.inf))


def soft_mask_width(z: Tensor, sigma: float) -> Tensor:
    """Width w = 1 / (sqrt(sigma) lambda(z)) of the Gaussian soft mask
    M = exp(-|z - z'|^2 / (2 w^2)) of seed 003 Prop 105. z [..., d] -> [...]."""
    return 1.0 / (math.sqrt(sigma) * conformal_factor(z).squeeze(-1))
