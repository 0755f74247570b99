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

The kick at z reads F_mem(z) = g * sum_i W_i(z) f_hat_i with a HIDA operator's weights
W_i ∝ (d_H(z, z_i)^2 + eps)^-1 over the entries (dense | fp | l | c: seed 000 M1-M4,
world_model/attention/hida.py) and a learned gate g (0 at the start: the memory-free model). The
inverse-distance average over neighbours is what averages the thermostat noise out of one-step
residuals. F_mem is not the gradient of any potential: with it the kick is non-conservative
(docs/measurements.md measures the energy drift it causes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from world_model.attention.hida import (
    CHIDA,
    FPHIDA,
    LHIDA,
    CHIDAConfig,
    DenseHIDA,
    DenseHIDAConfig,
    FPHIDAConfig,
    LHIDAConfig,
)

__all__ = ["MemoryOperator", "MemoryInputs", "MemoryBank", "EpisodicMemory", "empirical_residual"]

MemoryOperator = Literal["none", "dense", "fp", "l", "c"]  # none: no memory (ContextConfig.memory)


@dataclass
class MemoryInputs:
    """The raw transitions a batch's memories hold: U distinct transitions (obs [U, O], action
    [U, A], next_obs [U, O]) and, per sample, its C entries as indices into them (index [C, B],
    oldest first) with mask [C, B] (False: no such entry, e.g. before the episode's start)."""

    obs: Tensor
    action: Tensor
    next_obs: Tensor
    index: Tensor
    mask: Tensor

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

    def to(self, device) -> MemoryInputs:
        return MemoryInputs(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

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


# The HIDA operators on the Poincare ball, (eps, dim, anchors) -> module, without per-call input
# checks (the model's own states are inside the ball; MemoryInputs checks shapes once).
# `anchors`: L's anchors and C's summaries.
_OPERATORS: dict[str, Callable[[float, int, int], nn.Module]] = {
    "dense": lambda eps, dim, anchors: DenseHIDA(
        DenseHIDAConfig(eps=eps, fused=False, check_inputs=False)
    ),
    # the query stands after the newest entry: the memory's time order
    "fp": lambda eps, dim, anchors: FPHIDA(
        FPHIDAConfig(eps=eps, query_time="now", check_inputs=False)
    ),
    "l": lambda eps, dim, anchors: LHIDA(
        LHIDAConfig(n_anchors=anchors, dim=dim, eps=eps, check_inputs=False)
    ),
    "c": lambda eps, dim, anchors: CHIDA(
        CHIDAConfig(n_summaries=anchors, key_dim=dim, value_dim=dim, eps=eps, check_inputs=False)
    ),
}


class EpisodicMemory(nn.Module):
    """Reads a MemoryBank at kick positions with a HIDA operator and a learned gate (module
    docstring). Building the bank (keys and residuals) needs the model's encoder and kick, so
    GeodesicDynamics.memory_bank does it; this module holds the operator and the gate."""

    def __init__(self, operator: str, dim: int, eps: float = 1e-3, anchors: int = 16):
        super().__init__()
        self.operator_name = operator
        if operator not in _OPERATORS:
            raise ValueError(
                f"memory operator must be one of {tuple(_OPERATORS)}, got {operator!r}"
            )
        self.operator = _OPERATORS[operator](eps, dim, anchors)
        self.gate = nn.Parameter(torch.zeros(()))  # 0: the memory-free model at the start

    def forward(self, z: Tensor, bank: MemoryBank) -> Tensor:
        """F_mem(z) [B, d] at z [B, d] (bank of batch B or 1); 0 for a sample without entries.
        A bank of batch 1 (a plan's root, shared by its rows) is read as one operator call with
        the B rows as its queries: one matrix product against the keys, not B of one row each."""
        keys, values, mask = bank
        held = mask.any(-1, keepdim=True)  # [B or 1, 1]
        # a sample without entries reads its first (masked) slot instead of 0 / 0, then 0
        mask = mask | (~held & (torch.arange(mask.shape[-1], device=mask.device) == 0))
        shared = keys.shape[0] == 1
        queries = z.unsqueeze(0) if shared else z.unsqueeze(-2)  # [1, B, d] or [B, 1, d]
        out, _ = self.operator(queries, keys, values, mask.unsqueeze(-2), need_weights=False)
        out = out.squeeze(0) if shared else out.squeeze(-2)  # [B, d]
        return self.gate * torch.where(held, out, 0.0)
