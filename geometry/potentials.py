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
    w = P.gyro_difference(z.unsqueeze(-2), centers)  # (-z) (+) c_j [..., M, d]
    n = w.norm(dim=-1).clamp_min(P.MIN_NORM)  # [..., M]
    d = P.gyro_norm_dist(n)  # d_H(z, c_j) [..., M]
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
    bank holds no entry. Finite at z = z_i (d / |(-z) (+) z_i| -> 2). The offsets
    (-z) (+) z_i enter only through their weighted sum, so a shared bank (a plan's root) is read
    by matrix products with no [B, C, d] tensor (eager: 0.35x the explicit offsets' time at
    B = 256, C = 64, d = 16; compiled plans fuse either form: docs/measurements.md)."""
    shared = keys.shape[0] == 1 and z.shape[0] != 1  # one bank for every row: plain matmuls
    t = _bank_t(z, keys, shared).clamp_min(torch.finfo(z.dtype).tiny)  # [B, C]
    d2 = P.dist_from_t(t).square()  # d_H(z, z_i)^2 [B, C]
    logits = -torch.log(d2 + eps) - 0.5 * tension * d2  # [B, C]
    held = mask.any(-1, keepdim=True)  # [Bk, 1]
    logits = logits.masked_fill(~mask, -torch.inf).masked_fill(~held, 0.0)
    weights = torch.softmax(logits, dim=-1) * mask  # [B, C]; a bank without entries: 0
    # phi_i(z) = <f_i, z_i> - <f_i, z> [B, C]
    patches = (keys * slopes).sum(-1) - _bank_apply(slopes, z, shared)
    phi = (weights * patches).sum(-1)  # [B]
    # grad log w_i = (2 / (d^2 + eps) + sigma) (d / n) lambda(z) w_i, w_i = (-z) (+) z_i
    coeff = weights * (patches - phi.unsqueeze(-1)) * (2.0 / (d2 + eps) + tension)
    coeff = coeff * _dist_over_gyro_norm(t)  # [B, C]
    # (-z) (+) z_i = (a_z (z_i - z) - |z - z_i|^2 z) / (a_z a_i (1 + t_i)): Mobius addition with
    # its denominator 1 - 2<z, z_i> + |z|^2 |z_i|^2 = a_z a_i + |z - z_i|^2, so that
    # lambda(z) sum_i c_i w_i = (2 / a_z) [e @ keys - z (sum_i e_i + sum_i c_i t_i / (1 + t_i))]
    # with e_i = c_i / (a_i (1 + t_i)): matrix products, no [B, C, d] offsets
    e = coeff / (P.one_minus_sqnorm(keys).squeeze(-1) * (1.0 + t))  # [B, C]
    scale = e.sum(-1, keepdim=True) + (coeff * t / (1.0 + t)).sum(-1, keepdim=True)  # [B, 1]
    pull = _bank_combine(e, keys, shared) - z * scale  # [B, d]
    average = _bank_combine(weights, slopes, shared)  # sum_i W_i f_i [B, d]
    force = average - P.conformal_factor(z) * pull
    return phi, force


def _bank_t(z: Tensor, keys: Tensor, shared: bool) -> Tensor:
    """t(z_b, z_i) = |z_b - z_i|^2 / (a_b a_i): z [B, d], keys [Bk, C, d] -> [B, C]. A shared
    bank: geometry.poincare.pairwise_t's matrix product; per-row banks: explicit differences
    (the matrix product would be B products of one row each)."""
    if shared:
        return P.pairwise_t(z, keys[0])
    diff2 = (z.unsqueeze(-2) - keys).square().sum(-1)  # [B, C]
    return diff2 / (P.one_minus_sqnorm(z) * P.one_minus_sqnorm(keys).squeeze(-1))


def _bank_apply(values: Tensor, z: Tensor, shared: bool) -> Tensor:
    """<v_i, z_b>: values [Bk, C, d], z [B, d] -> [B, C]."""
    if shared:
        return z @ values[0].transpose(0, 1)
    return (values * z.unsqueeze(-2)).sum(-1)


def _bank_combine(c: Tensor, values: Tensor, shared: bool) -> Tensor:
    """sum_i c_bi v_i: c [B, C], values [Bk, C, d] -> [B, d]."""
    if shared:
        return c @ values[0]
    return (c.unsqueeze(-1) * values).sum(-2)


def _dist_over_gyro_norm(t: Tensor) -> Tensor:
    """d_H / |(-z) (+) z_i| from t (`geometry.poincare.pairwise_t`): |(-z) (+) z_i| =
    sqrt(t / (1 + t)), so the ratio is 2 asinh(sqrt t) sqrt((1 + t) / t), 2 at t = 0. Below
    t = 1e-2 its series 2 (1 + t/3 - 2t^2/15 + 8t^3/105) (error < 2e-9) replaces the quotient,
    whose float32 derivative there is cancellation noise (relative error 2e-4 at t = 1e-3, ~1e4
    at 1e-12). t [...] >= 0 -> [...]."""
    small = t < 1e-2
    safe = torch.where(small, torch.ones_like(t), t)
    exact = P.dist_from_t(safe) * torch.sqrt((1.0 + safe) / safe)
    series = 2.0 + t * (2.0 / 3.0 + t * (-4.0 / 15.0 + t * (16.0 / 105.0)))
    return torch.where(small, series, exact)
