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


def _factors(field: GaugeField, phi: Tensor) -> Tensor:
    """exp(phi_j X_j) for each factor: phi [..., J] -> [..., J, k, k], in closed form from the
    spectrum of each skew X_j. With i X_j = sum_b mu_b v_b v_b^H (Hermitian, eigh) and
    C_b + i S_b = v_b v_b^H:

        exp(phi X_j) = sum_b Re(e^{-i phi mu_b} v_b v_b^H)
                     = sum_b cos(phi mu_b) C_b + sin(phi mu_b) S_b

    one real product per point, where torch.linalg.matrix_exp's scaling and squaring is redone
    per point (node 67 evaluates Omega at every quadrature node of every Wilson line: ~45x
    faster at 2e5 points of R^8, equal to 1e-6 in float32)."""
    mu, vec = torch.linalg.eigh(1j * field.X.to(torch.complex128))  # [J, k], [J, k, k]
    outer = torch.einsum("jab,jcb->jbac", vec, vec.conj())  # [J, k (b), k, k]
    basis = torch.cat([outer.real, outer.imag], dim=1).to(phi.dtype)  # [J, 2k, k, k]
    theta = phi.unsqueeze(-1) * mu.to(phi.dtype)  # [..., J, k]
    trig = torch.cat([theta.cos(), theta.sin()], dim=-1)  # [..., J, 2k]
    return torch.einsum("...jb,jbac->...jac", trig, basis)  # [..., J, k, k]


def _omega_and_derivative(
    field: GaugeField, facs: Tensor, dphi: Tensor | None
) -> tuple[Tensor, Tensor | None]:
    """Omega = E_0 ... E_{J-1} and, given dphi [..., J], its directional derivative by the
    product rule, sum_j dphi_j P_j X_j S_j with P_j = E_0..E_{j-1}, S_j = E_j..E_{J-1} (X_j
    commutes with E_j = exp(phi_j X_j)). facs [..., J, k, k] -> [..., k, k] (and [..., k, k])."""
    n, x = facs.shape[-3], field.X.to(facs.dtype)
    suffix = [facs[..., n - 1, :, :]]  # S_{J-1}, then S_{J-2}, ..., S_0 = Omega
    for j in reversed(range(n - 1)):
        suffix.append(facs[..., j, :, :] @ suffix[-1])
    suffix.reverse()  # suffix[j] = S_j
    if dphi is None:
        return suffix[0], None
    out = dphi[..., 0, None, None] * torch.matmul(x[0], suffix[0])  # P_0 = I
    prefix = facs[..., 0, :, :]  # P_1
    for j in range(1, n):
        out = out + dphi[..., j, None, None] * (prefix @ torch.matmul(x[j], suffix[j]))
        if j + 1 < n:
            prefix = prefix @ facs[..., j, :, :]
    return suffix[0], out


def gauge_omega(field: GaugeField, z: Tensor) -> Tensor:
    """Omega(z): z [..., d] -> [..., k, k] orthogonal."""
    phi, _ = _phi_and_dphi(field, z, None)
    return _omega_and_derivative(field, _factors(field, phi), None)[0]


def gauge_omega_derivative(field: GaugeField, z: Tensor, dz: Tensor) -> Tensor:
    """Directional derivative (dz . d) Omega(z) by the product rule over the factors:
    sum_j E_0..E_{j-1} (dphi_j X_j E_j) E_{j+1}..E_{J-1}. z, dz [..., d] -> [..., k, k]."""
    phi, dphi = _phi_and_dphi(field, z, dz)
    return _omega_and_derivative(field, _factors(field, phi), dphi)[1]


def gauge_transform_connection(conn: ConnectionFn, field: GaugeField) -> ConnectionFn:
    """A'_mu = Omega A_mu Omega^T + Omega d_mu Omega^T, contracted with dx (see module doc)."""

    def transformed(x: Tensor, dx: Tensor) -> Tensor:
        phi, dphi = _phi_and_dphi(field, x, dx)
        om, d_om = _omega_and_derivative(field, _factors(field, phi), dphi)
        return om @ conn(x, dx) @ om.transpose(-1, -2) + om @ d_om.transpose(-1, -2)

    return transformed
