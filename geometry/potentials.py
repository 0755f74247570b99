"""Potentials on the Poincare ball and their forces, in closed form: the confining term
d_H(0, z)^2 / 2 and Gaussian wells in hyperbolic distance. The one place these formulas live:
the disk environment's Hamiltonian (`envs/poincare_disk.py`) and the geodesic world model's known
forces (`world_model/geodesic/integrator.py`) both call them (docs/seed_map.md, Geometry); and
the episodic memory's potential, an inverse-distance blend of linear patches
(`inverse_distance_patches`, world_model/memory/episodic.py).

Shapes: points z [..., d]; forces are covectors [..., d] (-dPhi/dz in coordinates).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import poincare as P

__all__ = ["confining_potential", "confining_force", "gaussian_wells", "inverse_distance_patches"]


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


def _offsets(z: Tensor, points: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """w_j = (-z) (+) c_j, n_j = |w_j| (floored at MIN_NORM) and d_H(z, c_j) = 2 artanh n_j:
    z [..., d], points c [..., M, d] (broadcast) -> ([..., M, d], [..., M], [..., M])."""
    w = P.gyro_difference(z.unsqueeze(-2), points)
    n = w.norm(dim=-1).clamp_min(P.MIN_NORM)
    return w, n, P.gyro_norm_dist(n)


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
    w, n, d = _offsets(z, centers)  # [..., M, d], [..., M], [..., M]
    e = torch.exp(-0.5 * (d / widths).square())  # [..., M]
    phi = -(depths * e).sum(-1)  # [...]
    coeff = depths / widths.square() * e * (d / n)  # [..., M]
    force = P.conformal_factor(z) * (coeff.unsqueeze(-1) * w).sum(-2)  # [..., d]
    return phi, force


def inverse_distance_patches(
    z: Tensor,
    keys: Tensor,
    slopes: Tensor,
    mask: Tensor,
    eps: Tensor | float,
    tension: Tensor | float = 0.0,
) -> tuple[Tensor, Tensor]:
    """A potential from forces sampled at points, and its force, in closed form.

    Each entry i (a point z_i with a force covector f_i observed there) is a linear patch
    phi_i(z) = -<f_i, z - z_i>, whose force -grad phi_i is f_i everywhere. The patches are blended
    by hyperbolic inverse-distance weights (seed 000 §2.1 / §4, HIDA's kernel), screened by the
    area law exp(-sigma d^2 / 2) of seed 003 Def 286 with the geodesic area
    (geometry/screening.py, `tension` sigma):

        Phi(z) = sum_i W_i(z) phi_i(z),  W_i ∝ (d_H(z, z_i)^2 + eps)^-1 exp(-sigma d_H^2 / 2),

    Shepard's interpolation with linear nodal functions. Its force is the exact gradient,
    -grad Phi = sum_i W_i f_i - sum_i W_i (phi_i - Phi) grad log w_i, with
    grad log w_i = (2 / (d_i^2 + eps) + sigma) lambda(z) d_i u_i (the coordinate gradient of
    d_H(z, c)^2 / 2 is -lambda(z) d_H u, u the unit vector of (-z) (+) c; `gaussian_wells`).
    The first term is the inverse-distance average of the observed forces; the second makes the
    sum a gradient, so a kick that reads it conserves energy with the geodesic drift.

    z [B, d]; keys [Bk, C, d] and slopes [Bk, C, d] with Bk = B or 1 (one bank for every
    query); mask [Bk, C] (False: no entry). -> (Phi [B], force [B, d]); both 0 for a query whose
    bank holds no entry. Finite at z = z_i (d / |(-z) (+) z_i| -> 2)."""
    w, n, d = _offsets(z, keys)  # [B, C, d], [B, C], d_H(z, z_i) [B, C]
    d2 = d.square()
    logits = -torch.log(d2 + eps) - 0.5 * tension * d2  # [B, C]
    held = mask.any(-1, keepdim=True)  # [Bk, 1]
    logits = logits.masked_fill(~mask, -torch.inf).masked_fill(~held, 0.0)
    weights = torch.softmax(logits, dim=-1) * mask  # [B, C]; a bank without entries: 0
    patches = ((keys - z.unsqueeze(-2)) * slopes).sum(-1)  # phi_i(z) = <f_i, z_i - z> [B, C]
    phi = (weights * patches).sum(-1)  # [B]
    grad_log = (2.0 / (d2 + eps) + tension) * d / n  # [B, C], times lambda(z) w_i
    coeff = weights * (patches - phi.unsqueeze(-1)) * grad_log  # [B, C]
    average = (weights.unsqueeze(-1) * slopes).sum(-2)  # sum_i W_i f_i [B, d]
    force = average - P.conformal_factor(z) * (coeff.unsqueeze(-1) * w).sum(-2)
    return phi, force
