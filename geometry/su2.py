"""SU(2) pieces of seed 003: complex Pauli matrices, the chiral projector, commitment strength.

The seed's listing builds the projector from a *real* proxy for sigma_2 ([[0, -1], [1, 0]]),
which makes Pi = (I + n.sigma) / 2 non-idempotent whenever n_2 != 0 (tests/geometry/test_su2.py
shows it). Here the Pauli matrices are the complex ones, so Pi is an exact rank-1 Hermitian
projector for every unit n.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .tables import constant_table

__all__ = [
    "complex_dtype_for",
    "pauli",
    "su2_exp",
    "su2_exp_jacobian_vjp",
    "su2_element",
    "adjoint_rotation",
    "su2_quaternion",
    "quaternion_product",
    "quaternion_adjoint",
    "chiral_projector",
    "commitment_strength",
]

DEGENERATE_NORM = 1e-6  # |P grad V| below this: no preferred direction, no commitment


def complex_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """float32 -> complex64, float64 -> complex128 (complex dtypes map to themselves)."""
    if dtype in (torch.complex64, torch.complex128):
        return dtype
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def pauli(dtype: torch.dtype = torch.complex128, device=None) -> Tensor:
    """sigma_1, sigma_2, sigma_3 stacked: [3, 2, 2] complex Hermitian, sigma_a sigma_b =
    delta_ab I + i eps_abc sigma_c. A fresh tensor (see _pauli_and_identity for the cached,
    read-only pair the hot paths use)."""
    s = torch.zeros(3, 2, 2, dtype=complex_dtype_for(dtype), device=device)
    s[0, 0, 1] = s[0, 1, 0] = 1
    s[1, 0, 1], s[1, 1, 0] = -1j, 1j
    s[2, 0, 0], s[2, 1, 1] = 1, -1
    return s


@constant_table
def _pauli_and_identity(dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """(pauli [3, 2, 2], I [2, 2]) in the complex dtype for `dtype`, built once per dtype and
    device (building them is ~10 small ops, paid on every projector otherwise). Read only."""
    sig = pauli(dtype, device)
    return sig, torch.eye(2, dtype=sig.dtype, device=device)


def su2_exp(theta: Tensor) -> Tensor:
    """exp(-i theta . sigma / 2) = cos(|theta|/2) I - i sin(|theta|/2) theta_hat . sigma in closed
    form (no matrix exponential; the coefficients are su2_quaternion's, smooth at theta = 0).
    theta [..., 3] real -> [..., 2, 2] complex."""
    cos, a, b, c = su2_quaternion(theta).unbind(-1)  # [...] each: a, b, c = sin(|t|/2) t_hat
    # cos I - i (a sigma_1 + b sigma_2 + c sigma_3) = [[cos - i c, -b - i a], [b - i a, cos + i c]]
    top = torch.stack([torch.complex(cos, -c), torch.complex(-b, -a)], dim=-1)
    bottom = torch.stack([torch.complex(b, -a), torch.complex(cos, c)], dim=-1)
    return torch.stack([top, bottom], dim=-2)


def su2_quaternion(theta: Tensor) -> Tensor:
    """exp(-i theta . sigma / 2) = q_0 I - i (q_1 sigma_1 + q_2 sigma_2 + q_3 sigma_3) as its unit
    quaternion q = (cos(|theta|/2), sin(|theta|/2) theta_hat) (su2_exp's matrix, in real
    arithmetic). theta [..., 3] -> [..., 4].

    Functions of t^2 = |theta|^2, smooth to every order at theta = 0 (a kick differentiated by
    autograd differentiates the Wilson lines twice; through |theta| the second derivative at 0
    is NaN): cos(t/2) and sin(t/2)/t from their series below t = 1e-2 (truncation < 1e-16),
    and from the same angle t/2 above (|q| = 1 to rounding at any |theta|)."""
    t2 = theta.square().sum(-1, keepdim=True)  # [..., 1]
    small = t2 < 1e-4
    t = torch.where(small, torch.ones_like(t2), t2).sqrt()
    cos = torch.where(small, 1.0 - t2 / 8 * (1.0 - t2 / 48), torch.cos(0.5 * t))
    sin_t = torch.where(small, 0.5 - t2 / 48 * (1.0 - t2 / 80), torch.sin(0.5 * t) / t)
    return torch.cat([cos, sin_t * theta], -1)


@constant_table
def _quaternion_tables(dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """With the basis E_0 = I, E_a = -i sigma_a (su2_quaternion's U = sum_i q_i E_i):
    the product table C, E_i E_j = sum_k C[i, j, k] E_k, and the adjoint table D,
    E_i^H E_a E_j = sum_b D[i, j, a, b] E_b (a, b = 1..3), both flattened to matrices in i.
    Projected from the Pauli matrices (Tr(E_k^H E_l) = 2 delta_kl), so no sign is written by
    hand; read only."""
    sig = pauli(torch.complex128)
    basis = torch.cat([torch.eye(2, dtype=sig.dtype)[None], -1j * sig])  # [4, 2, 2]
    herm = basis.conj().transpose(-1, -2)  # E_k^H
    # C[i, j, k] = Tr(E_k^H E_i E_j) / 2
    c = 0.5 * torch.einsum("kxy,iyz,jzx->ijk", herm, basis, basis).real
    # D[i, j, a, b] = Tr(E_b^H E_i^H E_a E_j) / 2
    d = 0.5 * torch.einsum("bwx,ixy,ayz,jzw->ijab", herm[1:], herm, basis[1:], basis).real
    # as matrices in the first factor: left[i, (k, j)] = C[i, j, k], adjoint[i, (j, a, b)]
    left = c.permute(0, 2, 1).reshape(4, 16)
    return left.to(device, dtype), d.reshape(4, 36).to(device, dtype)


def quaternion_product(q: Tensor, p: Tensor) -> Tensor:
    """The unit quaternion of U(q) U(p) (U(q) = q_0 I - i q . sigma, su2_quaternion's):
    q, p [..., 4] -> [..., 4], as L(q) p with L(q) [..., 4, 4] linear in q (two matrix
    products, whose backward needs no broadcast reductions)."""
    left, _ = _quaternion_tables(q.dtype, q.device)
    return ((q @ left).unflatten(-1, (4, 4)) @ p.unsqueeze(-1)).squeeze(-1)


def quaternion_adjoint(q: Tensor) -> Tensor:
    """R [..., 3, 3] with U^H E_a U = sum_b R[a, b] E_b for U = U(q), E_a = -i sigma_a / 2
    (the rotation conjugation by U applies to su(2), quadratic in q): q [..., 4]."""
    _, adjoint = _quaternion_tables(q.dtype, q.device)
    half = (q @ adjoint).unflatten(-1, (4, 9))  # [..., 4 (j), 9 (a, b)]: sum_i q_i D[i, j]
    return (q.unsqueeze(-2) @ half).squeeze(-2).unflatten(-1, (3, 3))


def su2_exp_jacobian_vjp(theta: Tensor, e: Tensor) -> Tensor:
    """J^T e for the left-trivialised derivative of U = su2_exp(theta) = exp(theta . E),
    E_a = -i sigma_a / 2 ([E_a, E_b] = eps_abc E_c, the so(3) cross product):
    U^-1 dU/dtheta_a = sum_b J[b, a] E_b with the SO(3) right Jacobian
    J = I - (1 - cos t)/t^2 [theta]_x + (t - sin t)/t^3 [theta]_x^2, t = |theta|, so
    J^T e = e + (1 - cos t)/t^2 theta x e + (t - sin t)/t^3 (theta (theta . e) - t^2 e)
    ((1 - cos t)/t^2 = sinc(t/2)^2/2 is smooth; (t - sin t)/t^3 uses its series below 1e-2).
    theta, e [..., 3] -> [..., 3]."""
    t2 = theta.square().sum(-1, keepdim=True)  # [..., 1]
    t = theta.norm(dim=-1, keepdim=True)  # not t2.sqrt(): its gradient at 0 is 0 * inf = NaN
    a = 0.5 * torch.sinc(t / (2 * math.pi)).square()  # (1 - cos t) / t^2
    small = t < 1e-2
    t_safe = torch.where(small, torch.ones_like(t), t)
    b = torch.where(small, 1 / 6 - t2 / 120, (t_safe - torch.sin(t_safe)) / t_safe**3)
    cross = torch.linalg.cross(theta, e, dim=-1)
    return e + a * cross + b * (theta * (theta * e).sum(-1, keepdim=True) - t2 * e)


def su2_element(theta: Tensor) -> Tensor:
    """U = exp(-i theta . sigma / 2) in SU(2): theta [..., 3] real -> [..., 2, 2] complex."""
    return su2_exp(theta)


def adjoint_rotation(u: Tensor) -> Tensor:
    """The SO(3) image of U in SU(2): R_ab = 1/2 Tr(sigma_a U sigma_b U^dagger), so that
    U (n . sigma) U^dagger = (R n) . sigma. [..., 2, 2] complex -> [..., 3, 3] real."""
    sig, _ = _pauli_and_identity(u.dtype, u.device)
    rot = torch.einsum("aij,...jk,bkl,...il->...ab", sig, u, sig, u.conj())
    return 0.5 * rot.real


def chiral_projector(n: Tensor, eps: float = DEGENERATE_NORM) -> tuple[Tensor, Tensor]:
    """Pi = 1/2 (I + n_hat . sigma), n_hat = n / |n|  (seed 003 Def 285).

    n: [..., 3] real (the projected value gradient P grad V). Returns (Pi [..., 2, 2] complex,
    degenerate [...] bool). Where |n| < eps the direction is undefined: the flag is set and Pi is
    the zero matrix, so the commitment Psi^dagger Pi Psi is 0 (no commitment in ambiguous
    regions) -- never NaN, and never a fake projector such as I/2.
    """
    norm = n.norm(dim=-1, keepdim=True)  # [..., 1]
    degenerate = norm.squeeze(-1) < eps  # [...]
    n_hat = n / norm.clamp_min(eps)  # finite on both branches, so the where() backward is too
    sig, eye = _pauli_and_identity(n.dtype, n.device)
    proj = 0.5 * (eye + torch.einsum("...a,aij->...ij", n_hat.to(sig.dtype), sig))
    proj = torch.where(degenerate[..., None, None], torch.zeros_like(proj), proj)
    return proj, degenerate


def commitment_strength(psi: Tensor, proj: Tensor) -> Tensor:
    """c = Psi^dagger Pi Psi per feature channel (seed 003 Def 285, gauge invariant by Thm 101).

    psi: [..., 2, m] doublet (complex, or real promoted to complex), proj: [..., 2, 2].
    Returns [..., m] real, in [0, |Psi|^2] for a projector.
    """
    psi = psi.to(proj.dtype)
    return torch.einsum("...im,...ij,...jm->...m", psi.conj(), proj, psi).real
