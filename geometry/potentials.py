"""Potentials on the Poincare ball and their forces, in closed form: the confining term
d_H(0, z)^2 / 2 and Gaussian wells in hyperbolic distance. The one place these formulas live:
the disk environment's Hamiltonian (`envs/poincare_disk.py`) and the geodesic world model's known
forces (`world_model/geodesic/integrator.py`) both call them (docs/seed_map.md, Geometry).

Shapes: points z [..., d]; forces are covectors [..., d] (-dPhi/dz in coordinates).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import poincare as P

__all__ = ["confining_potential", "confining_force", "gaussian_wells"]


def confining_potential(z: Tensor) -> Tensor:
    """Phi_c(z) = d_H(0, z)^2 / 2 (grows with hyperbolic distance, so exp(-Phi_c / T) is
    normalisable on the ball; docs/seed_map.md, Environments). z [..., d] -> [...]."""
    return 0.5 * P.dist0(z).square()


def confining_force(z: Tensor) -> Tensor:
    """-grad_z Phi_c = -d_H(0, z) lambda(z) z / |z|  (d_H(0, z) = 2 artanh|z| has coordinate
    gradient lambda(z) z / |z|; docs/seed_map.md, Def 287 step 1/5). z [..., d] -> [..., d];
    0 at the origin (|z| floored at 1e-12)."""
    n = z.norm(dim=-1, keepdim=True).clamp_min(1e-12)  # [..., 1]
    radius = P.gyro_norm_dist(n)  # d_H(0, z) [..., 1]
    return -radius * P.conformal_factor(z) * z / n


def gaussian_wells(
    z: Tensor, centers: Tensor, depths: Tensor, widths: Tensor
) -> tuple[Tensor, Tensor]:
    """Gaussian wells in hyperbolic distance and their force (closed form; docs/seed_map.md,
    Environments: the disk's landscape, and the model's `potential_wells`):
    Phi(z) = -sum_j a_j exp(-d(z, c_j)^2 / (2 w_j^2)),
    -dPhi/dz = lambda(z) sum_j (a_j / w_j^2) e_j d_j u_j,
    since the coordinate gradient of d(z, c)^2 / 2 is -G(z) log_z(c) = -lambda(z) d(z, c) u with
    u the unit vector of (-z) (+) c (log_z c = (2 / lambda(z)) artanh|w| w / |w|). Finite at
    z = c_j (d_j / |w_j| -> 2). z [..., d], centers [M, d], depths a [M] (< 0: a bump),
    widths w [M] > 0 -> (Phi [...], force covector [..., d])."""
    w = P.gyro_difference(z.unsqueeze(-2), centers)  # [..., M, d]
    n = w.norm(dim=-1, keepdim=True).clamp_min(P.MIN_NORM).squeeze(-1)  # [..., M]
    d = P.gyro_norm_dist(n)  # d(z, c_j) [..., M]
    e = torch.exp(-0.5 * (d / widths).square())  # [..., M]
    phi = -(depths * e).sum(-1)  # [...]
    coeff = depths / widths.square() * e * (d / n)  # [..., M]
    force = P.conformal_factor(z) * (coeff.unsqueeze(-1) * w).sum(-2)  # [..., d]
    return phi, force
