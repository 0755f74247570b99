"""HyperGate, seed 000 §7 (M6): three levels of gating of the unified block's output.

- dimension level (the seed's): G_i = diag(sigma(W_g u_i + b_g)), h_i = G_i u_i, on the block's
  combined representation u_i (the gate reads the vector it gates, as in Thm 7.1);
- head level kappa_h and token level beta_i: the seed names them ("head-level kappa_h,
  token-level boundary beta_i") and defines neither. Here, from the Poincare-ball positions
  q_{h,i} of the HIDA heads' queries:
    kappa_h = sigma(a_h m_h + c_h), m_h = mean_i log(1 - |q_{h,i}|^2)
      (the head's mean log metric temperature up to a constant: tau(q) = sqrt(d_k) (1 - |q|^2)
      / 2, geometry/poincare.py ``metric_temperature``; a head whose queries sit near the
      boundary has a cold, sharp kernel), one learned pair (a_h, c_h) per head;
    beta_i = sigma(a_beta rho_i + c_beta), rho_i = mean_h d_H(0, q_{h,i}) (the token's distance
      from the origin, i.e. how near the boundary it sits), one learned pair.
  kappa_h scales head h's main-path output, beta_i the memory path's output:
    u_i = concat_h(kappa_h o_{h,i}) + beta_i m_i.

Theorem 7.1 in a checkable form. With z = W_g u + b_g and h = sigma(z) * u,
    dh/du = diag(sigma(z)) + diag(sigma'(z) u) W_g,
so (Weyl) sigma_min(dh/du) >= min_k sigma(z_k) - max_k |sigma'(z_k) u_k| |W_g|_2
                          >= min_k sigma(z_k) - (1/4) |u|_inf |W_g|_2
(:func:`gate_jacobian_bounds`; checked against autograd Jacobians in
tests/world_model/memory/test_hypergate.py). The seed's conclusion "gradients do not vanish
due to gating alone" does not follow: the bound is vacuous (<= 0) once |u|_inf |W_g|_2 >=
4 min_k sigma(z_k), which is the usual case at initialisation, and a saturated gate
(min sigma(z_k) -> 0) makes sigma_min(dh/du) -> 0. The bound is about the dimension gate
alone; kappa_h and beta_i multiply it by kappa_h beta_i-like factors and add terms through
q (not covered). Measured: benchmarks/memory_modules.py, docs/measurements.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from geometry import poincare

__all__ = [
    "HyperGateConfig",
    "dimension_gate",
    "gate_jacobian_bounds",
    "head_gate",
    "token_gate",
    "HyperGate",
]


def dimension_gate(u: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """h = sigma(W_g u + b_g) * u: u [..., D], weight [D, D], bias [D] -> [..., D]."""
    return torch.sigmoid(u @ weight.T + bias) * u


def gate_jacobian_bounds(u: Tensor, weight: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
    """Lower bounds on sigma_min(dh/du) for :func:`dimension_gate`: u [..., D] -> (sharp,
    seed_form), each [...]: min sigma(z) - max|sigma'(z) u| |W|_2 and min sigma(z) -
    |u|_inf |W|_2 / 4 (module docstring)."""
    s = torch.sigmoid(u @ weight.T + bias)  # [..., D]
    spectral = torch.linalg.matrix_norm(weight, ord=2)
    lead = s.amin(-1)
    sharp = lead - (s * (1 - s) * u).abs().amax(-1) * spectral
    seed_form = lead - 0.25 * u.abs().amax(-1) * spectral
    return sharp, seed_form


def head_gate(positions: Tensor, slope: Tensor, offset: Tensor) -> Tensor:
    """kappa_h = sigma(a_h mean_i log(1 - |q_{h,i}|^2) + c_h): positions [..., N, H, d] (ball),
    slope, offset [H] -> [..., H]."""
    log_temp = torch.log(poincare.one_minus_sqnorm(positions)).squeeze(-1)  # [..., N, H]
    return torch.sigmoid(slope * log_temp.mean(-2) + offset)


def token_gate(positions: Tensor, slope: Tensor, offset: Tensor) -> Tensor:
    """beta_i = sigma(a rho_i + c), rho_i = mean_h d_H(0, q_{h,i}): positions [..., N, H, d],
    slope, offset scalars -> [..., N]."""
    rho = poincare.dist0(positions).mean(-1)  # [..., N]
    return torch.sigmoid(slope * rho + offset)


@dataclass
class HyperGateConfig:
    """HyperGate (seed 000 §7; module docstring).

    Attributes:
        dim: D, the width of the gated representation (= heads x head width).
        heads: H, the number of main-path heads.
        gate_bias: initial b_g of the dimension gate (2: sigma = 0.88, the gate starts open).
        head_bias: initial c_h of kappa_h.
        token_bias: initial c_beta of beta_i.
    """

    dim: int = 64
    heads: int = 4
    gate_bias: float = 2.0
    head_bias: float = 2.0
    token_bias: float = 0.0

    def __post_init__(self):
        for name in ("dim", "heads"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"HyperGateConfig.{name} must be an integer >= 1, got {v!r}")
        if self.dim % self.heads:
            raise ValueError(
                f"HyperGateConfig.dim ({self.dim}) must be a multiple of heads ({self.heads})"
            )


class HyperGate(nn.Module):
    """h_i = G_i u_i, u_i = concat_h(kappa_h o_{h,i}) + beta_i m_i (module docstring)."""

    def __init__(self, config: HyperGateConfig | None = None):
        super().__init__()
        cfg = self.config = config or HyperGateConfig()
        self.gate = nn.Linear(cfg.dim, cfg.dim)
        nn.init.constant_(self.gate.bias, cfg.gate_bias)
        self.head_slope = nn.Parameter(torch.zeros(cfg.heads))
        self.head_offset = nn.Parameter(torch.full((cfg.heads,), cfg.head_bias))
        self.token_slope = nn.Parameter(torch.zeros(()))
        self.token_offset = nn.Parameter(torch.full((), cfg.token_bias))

    def forward(
        self, main: Tensor, positions: Tensor, memory: Tensor | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """main [..., N, H, dh] (per-head outputs), positions [..., N, H, d] (the heads' ball
        queries), memory [..., N, D] or None -> h [..., N, D] and the gates (kappa [..., H],
        beta [..., N], dimension gate [..., N, D])."""
        kappa = head_gate(positions, self.head_slope, self.head_offset)  # [..., H]
        u = (kappa.unsqueeze(-2).unsqueeze(-1) * main).flatten(-2)  # [..., N, D]
        beta = token_gate(positions, self.token_slope, self.token_offset)  # [..., N]
        if memory is not None:
            u = u + beta.unsqueeze(-1) * memory
        g = torch.sigmoid(self.gate(u))  # [..., N, D]
        return g * u, {"kappa": kappa, "beta": beta, "gate": g}
