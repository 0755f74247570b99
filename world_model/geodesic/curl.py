"""The value curl of the Boris kick (seed 003 Def 278; docs/seed_map.md, "Def 278"): a learned
one-form A(z) and its 2-form F = dA, the field of the Lorentz force beta_curl G^-1 F z' that
the kick integrates by Boris' rotation (geometry.langevin.boris_rotation).

    A_j(z) = sum_k W_kj tanh(u_k . z + b_k)                         one-form [B, d]
    F_mj = d_m A_j - d_j A_m = (U^T D W - W^T D U)_mj,  D = diag(1 - tanh^2(U z + b))

F is exact (F = dA, so dF = 0: a magnetic field, not an arbitrary antisymmetric one) and of rank
at most 2K, K = `rank`. W starts at 0 (F = 0: the curl-free model at the start); beta_curl is
inside W. The force is velocity-dependent and does no work, so the Hamiltonian
(GeodesicCrossAttention.hamiltonian) is unchanged by it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["ValueCurl"]


class ValueCurl(nn.Module):
    """A(z) and F = dA in closed form (module docstring). z [B, d]."""

    def __init__(self, dim: int, rank: int):
        super().__init__()
        self.inner = nn.Linear(dim, rank)  # U [K, d], b [K]
        self.outer = nn.Parameter(torch.zeros(rank, dim))  # W [K, d]: no curl at the start

    def one_form(self, z: Tensor) -> Tensor:
        """A(z) = W^T tanh(U z + b): [B, d] (the reference for `two_form`: F = dA)."""
        return torch.tanh(self.inner(z)) @ self.outer

    def two_form(self, z: Tensor) -> Tensor:
        """F(z) = U^T D W - (U^T D W)^T: [B, d, d], antisymmetric."""
        slope = 1.0 - torch.tanh(self.inner(z)).square()  # D [B, K]
        grad = (self.inner.weight.t() * slope.unsqueeze(-2)) @ self.outer  # U^T D W [B, d, d]
        return grad - grad.transpose(-1, -2)
