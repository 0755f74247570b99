"""The unit sphere S^{d-1} and the maps from the Poincare ball onto it, as pure functions.

Seed 000 §4 (great-circle distance), §8.1 (SIDA works on it) and §8.2 (cross-geometric
mapping of ball prototypes to the sphere). The learnable map phi_C = MLP(c)/|MLP(c)| is a module
(it has parameters) and lives with the prototype pool; it calls :func:`normalize`.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "normalize",
    "dist",
    "pairwise_dist",
    "ball_to_sphere_norm",
    "ball_to_sphere_stereographic",
]

MIN_NORM = 1e-15


def normalize(x: Tensor) -> Tensor:
    """x / |x| over the last dim. A zero vector stays zero (it has no direction); callers that
    need a point on the sphere for it must decide what that means. Its derivatives there are 0
    (x / max(|x|, MIN_NORM) had slope 1 / MIN_NORM = 1e15 at 0, and a NaN second derivative:
    |x|'s backward at 0 is a masked 0 / 0; a kick differentiated by autograd differentiates the
    KRR kernel's normalised queries twice, and its force at z = 0 read 1e12). A zero row's norm
    is read off a nonzero stand-in, so no 0 / 0 is formed."""
    zero = (x == 0).all(dim=-1, keepdim=True)  # [..., 1]
    n = (x + zero.to(x.dtype)).norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)  # [..., 1]
    return torch.where(zero, 0.0, x / n)


def dist(x: Tensor, y: Tensor, keepdim: bool = False) -> Tensor:
    """Great-circle distance between unit vectors (seed 000 §4: d_S(x, y) = arccos<x, y>),
    evaluated as 2 atan2(|x - y|, |x + y|).

    arccos loses half the digits near 0 and pi (its derivative is infinite there); the atan2
    form is accurate over [0, pi] and has finite gradients at x = y and at x = -y.
    """
    a = (x - y).norm(dim=-1, keepdim=True)  # [..., 1]  = 2 sin(theta / 2)
    b = (x + y).norm(dim=-1, keepdim=True)  # [..., 1]  = 2 cos(theta / 2)
    d = 2.0 * torch.atan2(a, b)
    return d if keepdim else d.squeeze(-1)


def pairwise_dist(x: Tensor, y: Tensor) -> Tensor:
    """All-pairs great-circle distance: x [..., N, d], y [..., M, d] -> [..., N, M]."""
    return dist(x.unsqueeze(-2), y.unsqueeze(-3))


def ball_to_sphere_norm(c: Tensor) -> Tensor:
    """phi_A(c) = c / |c|: ball point -> S^{d-1} (seed 000 §8.2). Forgets the radius, so the
    origin has no image: it maps to 0 (see :func:`normalize`)."""
    return normalize(c)  # [..., d]


def ball_to_sphere_stereographic(c: Tensor) -> Tensor:
    """phi_B(c) = (2c / (1 + |c|^2), (1 - |c|^2) / (1 + |c|^2)): ball point -> S^d in R^{d+1}
    (seed 000 §8.2; inverse stereographic projection from the south pole). Injective: the
    ball's origin goes to the north pole, the unit sphere |c| = 1 to the equator."""
    c2 = (c * c).sum(-1, keepdim=True)  # [..., 1]
    den = 1.0 + c2
    return torch.cat([2.0 * c / den, (1.0 - c2) / den], dim=-1)  # [..., d + 1]
