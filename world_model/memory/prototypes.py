"""A pool of learned prototypes in the Poincare ball: the macro-level context of the BAOAB heads.

Each prototype has a position c_j in the ball (a geoopt ManifoldParameter on PoincareBall, so
Riemannian Adam keeps it inside: plain Adam pushed prototypes out of the disk in the feasibility
study, docs/architecture.md) and, per head kind, its own learned key and value features: a force
bank read by the kick heads (seed 003 Prop 101: keys as a gradient bank, values as force vectors)
and a correction bank read by the drift heads (Prop 102: values as displacement corrections).
Prototypes are macro entries (level 0, colour-neutral, exempt from area-law screening;
docs/architecture.md, screening levels).

The pool has a fixed size and every rollout reads all of it; a pool grown by seed 000's DMG and
read through GSR's top-K is routed_prototypes.py (`--routing gsr`).
"""

from __future__ import annotations

from dataclasses import dataclass

import geoopt
import torch
from torch import Tensor, nn

from geometry import poincare
from world_model.attention.context import MACRO_LEVEL, ContextBank

__all__ = ["PrototypeConfig", "PrototypePool", "ball_points_parameter"]


def ball_points_parameter(
    count: int, dim: int, init_scale: float, max_norm: float
) -> geoopt.ManifoldParameter:
    """`count` learned points in the d-ball [count, dim], initialised at exp_0 of Gaussian tangent
    vectors of std `init_scale` (projected to |c| <= max_norm), for Riemannian Adam. The
    PoincareBall is held by the parameter, not registered: its curvature is fixed (c = 1), so it
    must not appear among the owning module's parameters."""
    init = poincare.project(poincare.expmap0(init_scale * torch.randn(count, dim)), max_norm)
    return geoopt.ManifoldParameter(init, manifold=geoopt.PoincareBall(c=1.0))


@dataclass
class PrototypeConfig:
    """The prototype pool."""

    count: int = 64
    """number M of prototypes"""
    feature_dim: int = 16
    """size of each prototype's key and value features (per bank)"""
    init_scale: float = 0.7
    """std of the tangent vectors at the origin whose exponential maps give the initial positions
    (0.7: typical |c| around 0.6 in d = 8)"""

    def __post_init__(self):
        if not (isinstance(self.count, int) and self.count >= 1):
            raise ValueError(f"PrototypeConfig.count must be an integer >= 1, got {self.count!r}")
        if not (isinstance(self.feature_dim, int) and self.feature_dim >= 1):
            raise ValueError(f"PrototypeConfig.feature_dim must be >= 1, got {self.feature_dim!r}")
        if not 0.0 < self.init_scale < 5.0:
            raise ValueError(
                f"PrototypeConfig.init_scale must lie in (0, 5), got {self.init_scale}"
            )


class PrototypePool(nn.Module):
    """M prototypes in the d-ball with a force bank and a correction bank (module docstring)."""

    def __init__(self, dim: int, config: PrototypeConfig | None = None, max_norm: float = 0.999):
        super().__init__()
        cfg = config or PrototypeConfig()
        self.positions = ball_points_parameter(cfg.count, dim, cfg.init_scale, max_norm)  # [M, d]
        scale = cfg.feature_dim**-0.5
        self.force_keys = nn.Parameter(torch.randn(cfg.count, cfg.feature_dim))  # [M, F]
        self.force_values = nn.Parameter(scale * torch.randn(cfg.count, cfg.feature_dim))  # [M, F]
        self.correction_keys = nn.Parameter(torch.randn(cfg.count, cfg.feature_dim))
        self.correction_values = nn.Parameter(scale * torch.randn(cfg.count, cfg.feature_dim))

    def _bank(self, keys: Tensor, values: Tensor) -> ContextBank:
        m = self.positions.shape[0]
        levels = torch.full((1, m), MACRO_LEVEL, dtype=torch.long, device=keys.device)
        return ContextBank(
            positions=self.positions.unsqueeze(0),  # [1, M, d]: shared by every query
            key_features=keys.unsqueeze(0),
            value_features=values.unsqueeze(0),
            levels=levels,
        )

    def force_bank(self) -> ContextBank:
        """Macro entries for the kick heads: [1, M] (shared by the whole batch)."""
        return self._bank(self.force_keys, self.force_values)

    def correction_bank(self) -> ContextBank:
        """Macro entries for the drift heads: [1, M]."""
        return self._bank(self.correction_keys, self.correction_values)
