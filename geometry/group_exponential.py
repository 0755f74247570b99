"""Exponentials of the gauge algebra in closed form, and their VJPs (seed 003 Def 279-280, on
the minimal representation R^r of geometry.lie_algebra.GaugeGroup): exp(sum_g h_g T_g) factors
over the three commuting factors, so for N_f <= 2 it is one product of the SU(2)-type factors'
unit quaternions and the U(1) phase with a constant basis (group_exp), and its gradient in h
is given by the factors' right Jacobians (group_exp_vjp); N_f > 2 assembles a small N_f x N_f
matrix exponential for the colour factor.

The private pieces (the factors' elements, rotation vectors, phase, and the assembly of a line
from them) are also what geometry.wilson_lines multiplies for a Wilson line in the group.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from .lie_algebra import GaugeGroup, gell_mann, realify
from .su2 import complex_dtype_for, pauli, su2_exp, su2_exp_jacobian_vjp, su2_quaternion
from .tables import constant_table

__all__ = ["group_exp", "group_exp_vjp"]


def _factor_elements(group: GaugeGroup, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """exp of the algebra element sum_g h_g T_g, per factor, for N_f > 2 (N_f <= 2 takes the
    quaternion form, _quaternion_element): (U_C [..., N, N], U_2 [..., 2, 2], phase [...]
    complex). h [..., G]."""
    n = group.n_colors
    h_c, h_2, h_1 = h[..., : n * n - 1], h[..., n * n - 1 : n * n + 2], h[..., -1]
    u_2 = su2_exp(group.g_2 * h_2)
    lam = gell_mann(n, complex_dtype_for(h.dtype)).to(h.device)
    gen = torch.einsum("...a,aij->...ij", (group.g_s * h_c).to(lam.dtype), lam)
    u_c = torch.linalg.matrix_exp(-0.5j * gen)
    phi = 0.5 * group.g_1 * group.hypercharge * h_1  # [...]
    phase = torch.polar(torch.ones_like(phi), -phi)
    return u_c, u_2, phase


def _assemble(u_c: Tensor, u_2: Tensor, phase: Tensor) -> Tensor:
    """realify(U_C (x) U_2 phase) -> [..., r, r] real (colour index outer, doublet inner, as in
    gauge_generators)."""
    n = u_c.shape[-1]
    full = (u_c[..., :, None, :, None] * u_2[..., None, :, None, :]).reshape(
        *u_2.shape[:-2], 2 * n, 2 * n
    )
    return realify(full * phase[..., None, None])


def _factor_angles(group: GaugeGroup, x: Tensor) -> Tensor:
    """The SU(2)-type factors' rotation vectors with their couplings, stacked (colour first when
    N_f = 2): x [..., G] -> [..., F, 3], F = 1 or 2 (N_f <= 2)."""
    n = group.n_colors
    k = n * n - 1
    if n == 1:
        return (group.g_2 * x[..., :3]).unsqueeze(-2)
    return x[..., : k + 3].unflatten(-1, (2, 3)) * _factor_couplings(group, x.dtype, x.device)


@constant_table
def _factor_couplings(group: GaugeGroup, dtype: torch.dtype, device: torch.device) -> Tensor:
    """[[g_s], [g_2]]: the couplings of the two SU(2)-type factors, built once; read only."""
    return torch.tensor([[group.g_s], [group.g_2]], dtype=dtype, device=device)


@constant_table
def _group_exp_basis(group: GaugeGroup, dtype: torch.dtype, device: torch.device) -> Tensor:
    """realify(U_C (x) U_2 e^(-i phi)) is linear in each of the factors' unit quaternions q
    (U = q_0 I - i q . sigma, geometry.su2.su2_quaternion) and in (cos phi, sin phi): its
    coefficients on the products of their components, [4^F * 2, r * r] (F SU(2)-type factors,
    colour outer as in _assemble). Built once per group, dtype and device; read only."""
    sig = pauli(torch.float64)
    quaternion_basis = [torch.eye(2, dtype=sig.dtype)] + [-1j * sig[a] for a in range(3)]
    phase_basis = (1.0, -1j)  # e^(-i phi) = cos phi - i sin phi
    factors = 2 if group.n_colors == 2 else 1
    rows = []
    for combo in itertools.product(*[quaternion_basis] * factors):
        full = combo[0] if factors == 1 else torch.kron(combo[0], combo[1])
        rows += [realify(full * phase).flatten() for phase in phase_basis]
    return torch.stack(rows).to(device, dtype)


def group_exp(group: GaugeGroup, h: Tensor) -> Tensor:
    """exp(sum_g h_g T_g) in closed form (see GaugeGroup): h [..., G] -> [..., r, r] orthogonal.
    N_f <= 2: every factor is SU(2)-type, so the line is one product of its factors' unit
    quaternions and phase with a constant basis (real arithmetic, no complex tensors: a few
    dozen small ops where the complex assembly took ~80); N_f > 2 assembles the factors."""
    if group.n_colors > 2:
        return _assemble(*_factor_elements(group, h))
    return _quaternion_element(group, su2_quaternion(_factor_angles(group, h)), _phase(group, h))


def _phase(group: GaugeGroup, h: Tensor) -> Tensor:
    """The U(1) angle phi = g_1 Y h_1 / 2 of exp(sum_g h_g T_g) = ... e^(-i phi): [..., 1]."""
    return (0.5 * group.g_1 * group.hypercharge) * h[..., -1:]


def _quaternion_element(group: GaugeGroup, q: Tensor, phi: Tensor) -> Tensor:
    """realify(U_C (x) U_2 e^(-i phi)) from the factors' unit quaternions q [..., F, 4] and the
    phase phi [..., 1] (N_f <= 2): [..., r, r], linear in each (_group_exp_basis)."""
    coeff = torch.cat([torch.cos(phi), torch.sin(phi)], dim=-1)  # [..., 2]
    for f in range(q.shape[-2] - 1, -1, -1):  # products, first factor outermost
        coeff = (q[..., f, :, None] * coeff.unsqueeze(-2)).flatten(-2)
    r = group.dim
    return (coeff @ _group_exp_basis(group, q.dtype, q.device)).unflatten(-1, (r, r))


def group_exp_vjp(group: GaugeGroup, h: Tensor, e: Tensor) -> Tensor:
    """M(h)^T e, where U^-1 dU/dh_g = sum_g' M[g', g] T_g' for U = group_exp(group, h) and T_g
    the stacked generators (couplings folded in): M is block diagonal over the commuting
    factors, the SU(2)-type blocks the right Jacobians of geometry.su2.su2_exp_jacobian_vjp at
    (g_s h_C) and (g_2 h_2), 1 for U(1). So for a covector y, <y, dU/dh_g psi> summed as
    e_g' = <U^T y, T_g' psi> gives the gradient in h as M^T e. N_f <= 2 (closed form).
    h, e [..., G] -> [..., G]."""
    n = group.n_colors
    if n > 2:
        raise ValueError(f"group_exp_vjp has a closed form for N_f <= 2, got {n}")
    k = n * n - 1 + 3  # the SU(2)-type components, then U(1)
    blocks = su2_exp_jacobian_vjp(_factor_angles(group, h), e[..., :k].unflatten(-1, (-1, 3)))
    return torch.cat([blocks.flatten(-2), e[..., k:]], dim=-1)
