"""The Lie algebra of seed 003's gauge group G = SU(N_f)_C x SU(2)_L x U(1)_Y (Def 279) in a
real representation: generalised Gell-Mann matrices, the realification C^n -> R^2n, the real
skew generators on R^k (GaugeGenerators, gauge_generators), the group with its couplings on its
minimal representation R^r, r = 4 N_f (GaugeGroup), and its structure constants and bracket
(with the bracket's VJP, which the Magnus exponents' gradient needs).

Convention (seed 003 Def 279-280 with -iA written as a real skew matrix): features live in R^k,
the realification of C^(k/2); the unitary gauge group acts by orthogonal k x k matrices and
its algebra by skew-symmetric ones.

Beside it: the algebra's exponentials in geometry.group_exponential, connections and Wilson
lines in geometry.wilson_lines, gauge transformations in geometry.gauge_transforms.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import Tensor

from .su2 import complex_dtype_for, pauli
from .tables import constant_table

__all__ = [
    "GaugeGenerators",
    "gell_mann",
    "realify",
    "gauge_generators",
    "GaugeGroup",
    "structure_constants",
    "bracket",
]


# --------------------------------------------------------------------------- generators


def gell_mann(n: int, dtype: torch.dtype = torch.complex128) -> Tensor:
    """Generalised Gell-Mann matrices of SU(n): [n^2 - 1, n, n] Hermitian, traceless,
    Tr(l_a l_b) = 2 delta_ab (n = 2 gives the Pauli matrices up to order, n = 1 gives none)."""
    mats = []
    for j in range(n):
        for k in range(j + 1, n):
            s = torch.zeros(n, n, dtype=dtype)
            s[j, k] = s[k, j] = 1
            a = torch.zeros(n, n, dtype=dtype)
            a[j, k], a[k, j] = -1j, 1j
            mats += [s, a]
    for l in range(1, n):
        diag = torch.zeros(n, dtype=dtype)
        diag[:l] = 1
        diag[l] = -l
        mats.append(torch.diag(diag) * np.sqrt(2.0 / (l * (l + 1))))
    return torch.stack(mats) if mats else torch.zeros(0, n, n, dtype=dtype)


def realify(m: Tensor) -> Tensor:
    """Complex [..., n, n] acting on C^n -> real [..., 2n, 2n] acting on (Re psi, Im psi):
    [[Re M, -Im M], [Im M, Re M]]. A Lie-algebra homomorphism; unitary -> orthogonal,
    anti-Hermitian -> skew-symmetric."""
    re, im = m.real, m.imag
    top = torch.cat([re, -im], dim=-1)
    bottom = torch.cat([im, re], dim=-1)
    return torch.cat([top, bottom], dim=-2)


@dataclasses.dataclass(frozen=True)
class GaugeGenerators:
    """Real skew generators of G = SU(N_f)_C x SU(2)_L x U(1)_Y on R^k (seed 003 Def 279).

    R^k is the realification of C^(k/2) = C^(N_f) (colour) (x) C^2 (doublet) (x) C^m (channels);
    the three factors act on different tensor factors, so they commute with each other.
    """

    binding: Tensor  # [N_f^2 - 1, k, k]  realified -i lambda_a / 2   (SU(N_f)_C, coupling g_s)
    error: Tensor  # [3, k, k]           realified -i sigma_b / 2    (SU(2)_L, coupling g_2)
    opportunity: Tensor  # [1, k, k]     realified -i Y / 2          (U(1)_Y, coupling g_1)

    def stacked(self, g_s: float, g_2: float, g_1: float) -> Tensor:
        """All generators with their couplings folded in: [G, k, k], G = N_f^2 - 1 + 3 + 1."""
        return torch.cat([g_s * self.binding, g_2 * self.error, g_1 * self.opportunity], dim=0)

    @property
    def dim(self) -> int:
        return self.binding.shape[-1]


def gauge_generators(
    k: int, n_colors: int = 2, hypercharge: float = 1.0, dtype: torch.dtype = torch.float32
) -> GaugeGenerators:
    """Generators of SU(n_colors) x SU(2) x U(1) acting on R^k; needs k divisible by 4 n_colors."""
    if n_colors < 1 or k % (4 * n_colors) != 0:
        raise ValueError(f"k={k} must be a positive multiple of 4 * n_colors = {4 * n_colors}")
    m = k // (4 * n_colors)
    cdt = complex_dtype_for(dtype)
    eye_c, eye_2, eye_m = (torch.eye(s, dtype=cdt) for s in (n_colors, 2, m))

    def lift(colour: Tensor, doublet: Tensor) -> Tensor:  # [n_c, n_c], [2, 2] -> [k, k] real
        return realify(-0.5j * torch.kron(torch.kron(colour, doublet), eye_m)).to(dtype)

    binding = [lift(lam, eye_2) for lam in gell_mann(n_colors, cdt)]
    error = [lift(eye_c, sig) for sig in pauli(cdt)]
    opportunity = [lift(hypercharge * eye_c, eye_2)]
    empty = torch.zeros(0, k, k, dtype=dtype)
    return GaugeGenerators(
        binding=torch.stack(binding) if binding else empty,
        error=torch.stack(error),
        opportunity=torch.stack(opportunity),
    )


# --------------------------------------------------------------------------- group and bracket


@dataclasses.dataclass(frozen=True)
class GaugeGroup:
    """SU(N_f)_C x SU(2)_L x U(1)_Y with its couplings, acting on the minimal representation
    R^r, r = 4 N_f (realified C^{N_f} (x) C^2): the layout and generator order of
    ``gauge_generators(r, n_colors, hypercharge).stacked(g_s, g_2, g_1)``.

    A connection given by its coefficients h_g on those generators has Wilson lines that factor
    over the three commuting factors: exp(sum_g h_g T_g) = realify(U_C (x) U_2 e^{-i phi}), with
    U_2 = exp(-i g_2 h_2 . sigma / 2) in closed form (geometry.su2.su2_exp), U_C likewise for
    N_f = 2 (its Gell-Mann matrices are the Pauli matrices) and a small N_f x N_f exponential
    otherwise, and the U(1) phase phi = g_1 Y h_1 / 2 exact. Path ordering factors the same way
    (components in commuting factors commute at every point), and the abelian phase needs no
    ordering at all.
    """

    n_colors: int
    g_s: float
    g_2: float
    g_1: float
    hypercharge: float = 1.0

    @property
    def n_generators(self) -> int:
        return self.n_colors**2 - 1 + 3 + 1

    @property
    def dim(self) -> int:
        return 4 * self.n_colors

    def generators(self, dtype: torch.dtype = torch.float64) -> Tensor:
        """The stacked generators T_g [G, r, r] with couplings folded in."""
        gens = gauge_generators(self.dim, self.n_colors, self.hypercharge, torch.float64)
        return gens.stacked(self.g_s, self.g_2, self.g_1).to(dtype)


@constant_table
def structure_constants(group: GaugeGroup, dtype: torch.dtype, device: torch.device) -> Tensor:
    """f [G, G, G] with [T_a, T_b] = sum_c f[a, b, c] T_c for the stacked generators (couplings
    folded in): block diagonal over the commuting factors, g eps_abc on an SU(2)-type block
    ([-i s_a / 2, -i s_b / 2] = eps_abc (-i s_c / 2)), g f_abc of SU(N_f) on the colour block,
    0 on U(1). Computed from the unit-coupling generators X (projection on the trace-orthogonal
    X_c), then scaled by each block's coupling (well defined at coupling 0); read only."""
    unit = dataclasses.replace(group, g_s=1.0, g_2=1.0, g_1=1.0)
    gens = unit.generators(torch.float64)  # [G, r, r]
    comm = gens.unsqueeze(1) @ gens.unsqueeze(0) - gens.unsqueeze(0) @ gens.unsqueeze(1)
    norms = torch.einsum("cij,cij->c", gens, gens)  # the Gram matrix is diagonal
    f = torch.einsum("abij,cij->abc", comm, gens) / norms
    f = torch.where(f.abs() < 1e-12, torch.zeros_like(f), f)
    n = group.n_colors
    couplings = [group.g_s] * (n * n - 1) + [group.g_2] * 3 + [group.g_1]
    return (f * torch.tensor(couplings, dtype=f.dtype)).to(device, dtype)


def bracket(group: GaugeGroup, u: Tensor, v: Tensor) -> Tensor:
    """Coefficients of [sum_a u_a T_a, sum_b v_b T_b] on the generators: u, v [..., G] ->
    [..., G] (on an SU(2)-type block, g (u x v); the U(1) component 0)."""
    f = structure_constants(group, u.dtype, u.device)
    n = f.shape[0]
    return (u.unsqueeze(-1) * v.unsqueeze(-2)).flatten(-2) @ f.reshape(n * n, n)


def _bracket_vjp(group: GaugeGroup, u: Tensor, v: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    """Gradients of <g, bracket(u, v)> in u and in v: [..., G] each."""
    f = structure_constants(group, u.dtype, u.device)
    n = f.shape[0]
    # d/du_a = sum_bc f[a, b, c] v_b g_c ; d/dv_b = sum_ac f[a, b, c] u_a g_c
    vg = (v.unsqueeze(-1) * g.unsqueeze(-2)).flatten(-2)  # [..., (b, c)]
    ug = (u.unsqueeze(-1) * g.unsqueeze(-2)).flatten(-2)  # [..., (a, c)]
    return vg @ f.reshape(n, n * n).T, ug @ f.transpose(0, 1).reshape(n, n * n).T
