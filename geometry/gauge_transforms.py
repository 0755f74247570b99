"""Gauge transformations of seed 003 (Def 280, Thm 98), the ones diagnostic node 67 applies
(world_model.diagnostics.gauge_invariance_check): a smooth orthogonal field Omega(z) in the
gauge group (GaugeField, random_gauge_field), its value and directional derivative
(gauge_omega, gauge_omega_derivative), and its action on a connection
(gauge_transform_connection).

A gauge transformation psi -> Omega psi acts on the *connection*:
A_mu -> Omega A_mu Omega^T + Omega d_mu Omega^T, and then U(b <- a) -> Omega(b) U Omega(a)^T,
the lines recomputed from the transformed connection by geometry.wilson_lines. (Rotating
vectors without transforming A tests nothing: docs/architecture.md, "Where the seeds are
wrong".)
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from .wilson_lines import ConnectionFn

__all__ = [
    "GaugeField",
    "random_gauge_field",
    "gauge_omega",
    "gauge_omega_derivative",
    "gauge_transform_connection",
]


@dataclasses.dataclass(frozen=True)
class GaugeField:
    """A smooth orthogonal field Omega(z) = prod_j exp(phi_j(z) X_j) (j = 0 .. J-1, left to
    right) with phi_j(z) = a_j . z + b_j sin(w_j . z + c_j). Its derivative is closed-form."""

    X: Tensor  # [J, k, k] skew (combinations of gauge generators: Omega stays in the group)
    a: Tensor  # [J, d]
    b: Tensor  # [J]
    w: Tensor  # [J, d]
    c: Tensor  # [J]


def random_gauge_field(
    generators: Tensor,
    d: int,
    n_factors: int = 3,
    scale: float = 1.0,
    generator: torch.Generator | None = None,
) -> GaugeField:
    """A random smooth gauge transformation built from `generators` [G, k, k]."""
    dtype = generators.dtype
    g = generators.shape[0]

    def rnd(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)

    mix = rnd(n_factors, g)
    x = torch.einsum("jg,gkl->jkl", mix, generators)
    x = x / x.flatten(1).norm(dim=-1).clamp_min(1e-12)[:, None, None]
    return GaugeField(
        X=x,
        a=scale * rnd(n_factors, d),
        b=scale * rnd(n_factors),
        w=3.0 * rnd(n_factors, d),
        c=rnd(n_factors),
    )


def _phi_and_dphi(field: GaugeField, z: Tensor, dz: Tensor | None):
    arg = torch.einsum("...d,jd->...j", z, field.w) + field.c  # [..., J]
    phi = torch.einsum("...d,jd->...j", z, field.a) + field.b * torch.sin(arg)  # [..., J]
    if dz is None:
        return phi, None
    dphi = torch.einsum("...d,jd->...j", dz, field.a) + field.b * torch.cos(arg) * torch.einsum(
        "...d,jd->...j", dz, field.w
    )
    return phi, dphi


def gauge_omega(field: GaugeField, z: Tensor) -> Tensor:
    """Omega(z): z [..., d] -> [..., k, k] orthogonal."""
    phi, _ = _phi_and_dphi(field, z, None)
    facs = torch.linalg.matrix_exp(phi[..., None, None] * field.X)  # [..., J, k, k]
    out = facs[..., 0, :, :]
    for j in range(1, facs.shape[-3]):
        out = out @ facs[..., j, :, :]
    return out


def gauge_omega_derivative(field: GaugeField, z: Tensor, dz: Tensor) -> Tensor:
    """Directional derivative (dz . d) Omega(z) by the product rule over the factors:
    sum_j E_0..E_{j-1} (dphi_j X_j E_j) E_{j+1}..E_{J-1}. z, dz [..., d] -> [..., k, k]."""
    phi, dphi = _phi_and_dphi(field, z, dz)
    facs = torch.linalg.matrix_exp(phi[..., None, None] * field.X)  # [..., J, k, k]
    n = facs.shape[-3]
    eye = torch.eye(facs.shape[-1], dtype=z.dtype, device=z.device).expand_as(facs[..., 0, :, :])
    prefix = [eye]
    for j in range(n - 1):
        prefix.append(prefix[-1] @ facs[..., j, :, :])
    out = torch.zeros_like(eye)
    suffix = eye
    for j in reversed(range(n)):
        d_fac = dphi[..., j, None, None] * (field.X[j] @ facs[..., j, :, :])
        out = out + prefix[j] @ d_fac @ suffix
        suffix = facs[..., j, :, :] @ suffix
    return out


def gauge_transform_connection(conn: ConnectionFn, field: GaugeField) -> ConnectionFn:
    """A'_mu = Omega A_mu Omega^T + Omega d_mu Omega^T, contracted with dx (see module doc)."""

    def transformed(x: Tensor, dx: Tensor) -> Tensor:
        om = gauge_omega(field, x)
        d_om = gauge_omega_derivative(field, x, dx)
        return om @ conn(x, dx) @ om.transpose(-1, -2) + om @ d_om.transpose(-1, -2)

    return transformed
