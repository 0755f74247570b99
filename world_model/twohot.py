"""Two-hot categorical regression in symlog space (TD-MPC2, Hansen et al. 2024): the reward and
value heads' output encoding. A leaf module: `world_model/model.py` (the heads) and
`world_model/training.py` (the losses) both import it, and it imports neither.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["symlog", "symexp", "two_hot", "two_hot_inv", "soft_cross_entropy"]


def symlog(x: Tensor) -> Tensor:
    """symlog(x) = sign(x) log(1 + |x|)."""
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x: Tensor) -> Tensor:
    """symexp(x) = sign(x) (exp(|x|) - 1), the inverse of symlog."""
    return torch.sign(x) * torch.expm1(x.abs())


def two_hot(x: Tensor, bins: Tensor) -> Tensor:
    """Two-hot encoding of symlog(x) on the uniform grid `bins` [K]: x [...] -> [..., K].

    The mass splits between the two neighbouring bins so that the expectation over bins is
    symlog(x) exactly (values outside the grid are clamped to its ends).
    """
    k = bins.numel()
    vmin, vmax = bins[0], bins[-1]
    width = (vmax - vmin) / (k - 1)
    y = symlog(x).clamp(vmin, vmax)  # [...]
    pos = (y - vmin) / width  # [...] in [0, K-1]
    # a NaN x must come out as NaN weights, not a bin index of -2^63 (nan_to_num: index only)
    lower = pos.nan_to_num(0.0).floor().clamp(max=k - 2)  # [...]
    upper_weight = (pos - lower).unsqueeze(-1)  # [..., 1]
    lower_idx = lower.long().unsqueeze(-1)  # [..., 1]
    out = torch.zeros(*x.shape, k, dtype=x.dtype, device=x.device)
    out.scatter_(-1, lower_idx, 1.0 - upper_weight)
    out.scatter_add_(-1, lower_idx + 1, upper_weight)
    return out  # [..., K]


def two_hot_inv(logits: Tensor, bins: Tensor) -> Tensor:
    """Expected value of a categorical over symlog bins: symexp(sum_k softmax(logits)_k b_k).
    logits [..., K] -> [..., 1]."""
    return symexp((F.softmax(logits, dim=-1) * bins).sum(-1, keepdim=True))


def soft_cross_entropy(logits: Tensor, target: Tensor, bins: Tensor) -> Tensor:
    """Cross-entropy of logits [..., K] against the two-hot encoding of target [..., 1] -> [...]."""
    return -(two_hot(target.squeeze(-1), bins) * F.log_softmax(logits, dim=-1)).sum(-1)
