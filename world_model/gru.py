"""GRU latent dynamics: the flat baseline every geometric piece is measured against.

The deterministic path of an RSSM (Hafner et al., "Learning Latent Dynamics for Planning from
Pixels", 2019) with TD-MPC2's latent normalisation:

    h_0     = norm(enc(obs))                                 encoder, obs [B, O] -> h [B, D]
    x_t     = act(LN(W [h_t, a_t]))                           input network, [B, D + A] -> [B, I]
    h_{t+1} = norm(GRUCell(x_t, h_t))                         recurrent step, -> [B, D]

norm is SimNorm (softmax over groups of `simnorm_dim`, TD-MPC2), tanh or nothing. The model is
deterministic: `next(..., stochastic=True)` is the same step. Its consistency loss is the MSE of
h (the `Dynamics` default). Seed 003 Prop 96 lists what such a flat model does not guarantee
(metric, gauge, symplectic and boundary structure); it is the honest baseline, trained with the
same losses, horizon and planner as the geodesic model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from world_model.layers import ACTIVATIONS, mlp, simnorm
from world_model.model import Dynamics, DynamicsConfig, LatentState

__all__ = ["GRUConfig", "GRUState", "GRUDynamics"]

LATENT_NORMS = ("simnorm", "tanh", "none")


@dataclass
class GRUConfig(DynamicsConfig):
    """GRU dynamics (defaults tuned on Pendulum-v1 for a 2-core CPU)."""

    latent_dim: int = 128
    """size D of the hidden state h"""
    encoder_dim: int = 128
    """width of the encoder's hidden layers"""
    encoder_layers: int = 1
    """hidden layers of the encoder MLP"""
    input_dim: int = 128
    """width I of the GRU cell's input network (reads [h, a])"""
    activation: str = "silu"
    """activation of the encoder and input network: silu, mish or elu"""
    latent_norm: str = "simnorm"
    """normalisation of h after the encoder and after every step: simnorm, tanh or none"""
    simnorm_dim: int = 8
    """group size of SimNorm (must divide latent_dim)"""

    def __post_init__(self):
        for name in ("latent_dim", "encoder_dim", "input_dim", "simnorm_dim"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"GRUConfig.{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(self.encoder_layers, int) and self.encoder_layers >= 0):
            raise ValueError(f"GRUConfig.encoder_layers must be >= 0, got {self.encoder_layers!r}")
        if self.latent_norm not in LATENT_NORMS:
            raise ValueError(
                f"GRUConfig.latent_norm must be one of {LATENT_NORMS}, got {self.latent_norm!r}"
            )
        if self.latent_norm == "simnorm" and self.latent_dim % self.simnorm_dim:
            raise ValueError(
                f"GRUConfig: simnorm_dim {self.simnorm_dim} must divide latent_dim "
                f"{self.latent_dim}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"GRUConfig.activation must be one of {sorted(ACTIVATIONS)}, "
                f"got {self.activation!r}"
            )


@dataclass
class GRUState(LatentState):
    h: Tensor  # [B, latent_dim]


class GRUDynamics(Dynamics):
    state_type = GRUState

    def __init__(self, obs_dim: int, action_dim: int, config: GRUConfig | None = None):
        super().__init__()
        cfg = config or GRUConfig()
        self.config = cfg
        self.feature_dim = cfg.latent_dim
        self.encoder = mlp(
            obs_dim, [cfg.encoder_dim] * cfg.encoder_layers, cfg.latent_dim, cfg.activation
        )
        self.input_net = nn.Sequential(
            nn.Linear(cfg.latent_dim + action_dim, cfg.input_dim),
            nn.LayerNorm(cfg.input_dim),
            ACTIVATIONS[cfg.activation](),
        )
        self.cell = nn.GRUCell(cfg.input_dim, cfg.latent_dim)

    def _norm(self, h: Tensor) -> Tensor:
        if self.config.latent_norm == "simnorm":
            return simnorm(h, self.config.simnorm_dim)
        if self.config.latent_norm == "tanh":
            return torch.tanh(h)
        return h

    def encode(self, obs: Tensor) -> GRUState:
        if obs.dim() != 2:
            raise ValueError(f"GRUDynamics.encode expects obs [B, O], got shape {tuple(obs.shape)}")
        return GRUState(self._norm(self.encoder(obs)))  # [B, D]

    def next(
        self, state: GRUState, action: Tensor, context: Any = None, *, stochastic: bool = False
    ) -> GRUState:
        x = self.input_net(torch.cat([state.h, action], dim=-1))  # [B, I]
        return GRUState(self._norm(self.cell(x, state.h)))  # [B, D]

    def features(self, state: GRUState) -> Tensor:
        return state.h  # [B, D]

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {
            "encoder": list(self.encoder.parameters()),
            "dynamics": [*self.input_net.parameters(), *self.cell.parameters()],
        }
