"""The recent trajectory window: texture-level context entries (docs/architecture.md, screening
levels).

The latent states of the last W environment steps before a rollout's root become context entries
at their own positions in the ball, with learned key/value features of (log_0 z, p / lambda(z)).
They are texture entries (level L): drift heads, which query at texture level, read them freely;
kick heads query at macro level and see them only through area-law screening (Node 70 measures
how much leaks).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from geometry import poincare
from world_model.attention.context import ContextBank

__all__ = ["TrajectoryWindow", "position_features", "state_features"]


def position_features(z: Tensor) -> Tensor:
    """(z, log_0 z): the position twice, as a ball point and as a tangent vector at the origin
    (which MLPs read more easily near the boundary). z [..., d] -> [..., 2d]."""
    return torch.cat([z, poincare.logmap0(z)], dim=-1)


def state_features(z: Tensor, p: Tensor, position: Tensor | None = None) -> Tensor:
    """(z, log_0 z, p / lambda(z)): position_features and the momentum in an orthonormal frame
    (|p / lambda|^2 = 2 K); `position`: position_features(z) when already computed.
    z, p [..., d] -> [..., 3d]."""
    if position is None:
        position = position_features(z)
    return torch.cat([position, p / poincare.conformal_factor(z)], dim=-1)


class TrajectoryWindow(nn.Module):
    """Builds the texture bank from the W most recent latent states (module docstring)."""

    def __init__(self, dim: int, feature_dim: int, level: int):
        super().__init__()
        self.level = level
        # distinct banks per head kind (seed 003 listing note): forces for B, corrections for A
        self.force_features = nn.Linear(3 * dim, 2 * feature_dim)
        self.correction_features = nn.Linear(3 * dim, 2 * feature_dim)

    def banks(
        self, z: Tensor, p: Tensor, mask: Tensor | None = None
    ) -> tuple[ContextBank, ContextBank]:
        """z, p [B, W, d] (oldest first), mask [B, W] True where the step exists (a window that
        reaches before the episode's start is padded) -> (force bank, correction bank) [B, W]."""
        feats = state_features(z, p)  # [B, W, 3d]
        levels = torch.full(z.shape[:2], self.level, dtype=torch.long, device=z.device)

        def bank(net: nn.Linear) -> ContextBank:
            keys, values = net(feats).chunk(2, dim=-1)  # [B, W, F] each
            return ContextBank(z, keys, values, levels, mask)

        return bank(self.force_features), bank(self.correction_features)
