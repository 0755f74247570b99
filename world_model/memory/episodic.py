"""HIDA episodic memory: what this episode has shown, as a force field read by inverse distance
(docs/architecture.md, the memory provider; seed 003 Prop 101 with an empirical bank).

With a learned encoder there is no known potential whose gradients could be stored, and storing
the model's own force adds nothing. What experience adds is the **empirical residual**: for a
stored transition (o, a, o') with (z, p) = enc(o), (z', p') = enc(o'),

    f_hat = (p' - p) / h - F_kick(z, a)

the part of the observed momentum change that the model's kick (its force head, confinement,
wells and control; the prototypes' bank, no memory, no chiral gate) does not explain, in the
latent coordinates at z. Keys and values depend on the current encoder and parameters, so the
memory holds the raw transitions and recomputes both at every read (`MemoryInputs`: the
distinct transitions of a batch once, each sample's entries an index into them), under no_grad:
they are data for the read-out, not a path for gradients.

The memory is a **potential** (docs/seed_map.md, "Def 287 step 1/5"): each entry is a linear
patch phi_i(z) = -<f_hat_i, z - z_i> (its force is the observed residual f_hat_i), and the kick's
potential gains

    Phi_mem(z) = g * sum_i W_i(z) phi_i(z),  W_i ∝ (d_H(z, z_i)^2 + eps)^-1 exp(-sigma d_H^2 / 2)

with HIDA's inverse-distance weights over the entries (eps a learned bandwidth: with seed 000's
eps = 1e-3 the patches' potential is rough between entries, and frictionless rollouts drifted
in energy by 2.4 over 200 steps; docs/measurements.md), screened by the area law at the texture
level (the entries are this episode's states, as the window's are; sigma the kick head's
texture string tension), and a learned gate g (0 at the start: the memory-free model). Its force
-grad Phi_mem is computed in closed form (geometry.potentials.inverse_distance_patches): the
inverse-distance average of the residuals, which averages the thermostat noise out of one-step
residuals, plus the term that makes the sum a gradient. So the kick stays conservative and
GeodesicCrossAttention.hamiltonian() includes Phi_mem. The read-out is Dense-HIDA's (M1): FP-,
L- and C-HIDA (M2-M4) were measured as memories before it became a potential and read worse
(FP 0.76x of the fixed prototypes' error against Dense's 0.69x; docs/measurements.md), and as
potentials their forces would need autograd's second derivative of the distance, which is not
finite at a query on an entry; they remain attention operators (world_model/attention/hida.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from geometry import poincare, potentials

__all__ = ["MemoryOperator", "MemoryInputs", "MemoryBank", "EpisodicMemory", "empirical_residual"]

MemoryOperator = Literal["none", "dense"]  # none: no memory (ContextConfig.memory)


@dataclass
class MemoryInputs:
    """The raw transitions a batch's memories hold: U distinct transitions (obs [U, O], action
    [U, A], next_obs [U, O]) and, per sample, its C entries as indices into them (index [C, B],
    oldest first) with mask [C, B] (False: no such entry, e.g. before the episode's start).
    `next_row` [U] (optional): j >= 0 where next_obs[i] is obs[j], the same observation (the
    transition after i in its episode is held too), -1 where not: the reader encodes each
    observation once."""

    obs: Tensor
    action: Tensor
    next_obs: Tensor
    index: Tensor
    mask: Tensor
    next_row: Tensor | None = None

    def __post_init__(self) -> None:
        u = self.obs.shape[0]
        if self.action.shape[0] != u or self.next_obs.shape != self.obs.shape:
            raise ValueError(
                "MemoryInputs: obs, action and next_obs need one row per transition, got "
                f"{tuple(self.obs.shape)}, {tuple(self.action.shape)}, {tuple(self.next_obs.shape)}"
            )
        if self.index.shape != self.mask.shape or self.index.dim() != 2:
            raise ValueError(
                f"MemoryInputs: index and mask must both be [C, B], got "
                f"{tuple(self.index.shape)} and {tuple(self.mask.shape)}"
            )
        if self.next_row is not None and tuple(self.next_row.shape) != (u,):
            raise ValueError(
                f"MemoryInputs: next_row must be [U] = [{u}], got {tuple(self.next_row.shape)}"
            )

    def to(self, device) -> MemoryInputs:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return MemoryInputs(**{k: None if t is None else t.to(device) for k, t in moved.items()})

    @property
    def capacity(self) -> int:
        return self.index.shape[0]

    @property
    def batch_size(self) -> int:
        return self.index.shape[1]


class MemoryBank(NamedTuple):
    """A rollout's memory entries: keys [B, C, d] (latent positions), values [B, C, d] (empirical
    residual forces), mask [B, C]; B may be 1 (a plan's root, shared by its samples)."""

    keys: Tensor
    values: Tensor
    mask: Tensor

    @property
    def entries(self) -> Tensor:
        """Entries held per sample [B]."""
        return self.mask.sum(-1)


def empirical_residual(p: Tensor, p_next: Tensor, kick: Tensor, dt: float) -> Tensor:
    """f_hat = (p' - p) / h - F_kick: the momentum change per unit time the kick does not explain
    (module docstring). p, p_next, kick [..., d] -> [..., d]."""
    return (p_next - p) / dt - kick


class EpisodicMemory(nn.Module):
    """Reads a MemoryBank at kick positions as a gated potential and its force (module
    docstring). Building the bank (keys and residuals) needs the model's encoder and kick, so
    GeodesicDynamics.memory_bank does it; this module holds the bandwidth and the gate."""

    def __init__(self, eps: float = 0.3):
        super().__init__()
        if not eps > 0:
            raise ValueError(f"EpisodicMemory: eps must be > 0, got {eps!r}")
        self.log_eps = nn.Parameter(torch.tensor(math.log(eps)))  # the learned bandwidth
        self.gate = nn.Parameter(torch.zeros(()))  # 0: the memory-free model at the start

    @property
    def eps(self) -> Tensor:
        """The kernel's bandwidth eps in W ∝ (d_H^2 + eps)^-1 (learned, > 0)."""
        return self.log_eps.exp()

    def forward(
        self, z: Tensor, bank: MemoryBank, tension: Tensor | float = 0.0
    ) -> tuple[Tensor, Tensor]:
        """(Phi_mem [B], F_mem = -grad Phi_mem [B, d]) at z [B, d]; a bank of batch B, or of
        batch 1 (a plan's root, shared by its rows: one read with the B rows as its queries).
        Both 0 for a sample without entries. `tension`: the area law's sigma."""
        phi, force = potentials.inverse_distance_patches(z, *bank, self.eps, tension=tension)
        return self.gate * phi, self.gate * force

    def screened_mass(self, z: Tensor, bank: MemoryBank, tension: Tensor | float) -> Tensor:
        """Node 70 for the memory's entries (texture-level, screened by the area law): the
        fraction of the inverse-distance kernel's mass at z that screening lets through,
        sum_i k_i exp(-sigma d_i^2 / 2) / sum_i k_i with k_i = (d_H(z, z_i)^2 + eps)^-1 over
        the held entries (1: unscreened; small: the episode's entries far from z are confined).
        z [B, d] with a bank of batch B or 1 -> [B]; 0 for a sample without entries."""
        d2 = poincare.dist(z.unsqueeze(-2), bank.keys).square()  # [B, C]
        kernel = (d2 + self.eps).reciprocal() * bank.mask
        passed = (kernel * torch.exp(-0.5 * tension * d2)).sum(-1)
        return passed / kernel.sum(-1).clamp_min(torch.finfo(z.dtype).tiny)
