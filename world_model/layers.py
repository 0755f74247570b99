"""Building blocks of the world models' networks (TD-MPC2's layout): SimNorm, the MLP with
LayerNorm, and the Q ensemble as batched matmuls."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

__all__ = ["ACTIVATIONS", "simnorm", "mlp", "EnsembleLinear", "QEnsemble"]


def simnorm(x: Tensor, group: int) -> Tensor:
    """Simplicial normalisation (TD-MPC2): softmax over consecutive groups of `group` entries.

    Written out (exp / sum) because torch's CPU softmax over a last dimension of 8 was 6x slower
    than these elementwise ops (2.0 ms against 0.34 ms on [768, 128], measured)."""
    g = x.unflatten(-1, (x.shape[-1] // group, group))  # [..., D/group, group]
    e = (g - g.amax(-1, keepdim=True).detach()).exp()  # the shift cancels: no gradient needed
    return (e / e.sum(-1, keepdim=True)).flatten(-2)  # [..., D]


ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"silu": nn.SiLU, "mish": nn.Mish, "elu": nn.ELU}


def mlp(
    in_dim: int, hidden: Sequence[int], out_dim: int, activation: str = "silu", dropout: float = 0.0
) -> nn.Sequential:
    """Linear -> LayerNorm -> activation for every hidden width, then a plain Linear output.
    Dropout (if any) follows the first hidden layer (TD-MPC2's Q heads)."""
    layers: list[nn.Module] = []
    dims = [in_dim, *hidden]
    for i in range(len(hidden)):
        layers += [
            nn.Linear(dims[i], dims[i + 1]),
            nn.LayerNorm(dims[i + 1]),
            ACTIVATIONS[activation](),
        ]
        if i == 0 and dropout > 0:
            layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(dims[-1], out_dim))
    return nn.Sequential(*layers)


class EnsembleLinear(nn.Module):
    """E independent linear maps applied as one batched matmul: [E, N, in] (or a shared
    [N, in]) -> [E, N, out]. Each member is initialised like nn.Linear."""

    def __init__(self, members: int, in_dim: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(members, 1, out_dim))
        bound = 1.0 / math.sqrt(in_dim)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:  # shared input
            return torch.matmul(x.unsqueeze(0), self.weight) + self.bias  # [E, N, out]
        return torch.baddbmm(self.bias, x, self.weight)  # [E, N, out]


class QEnsemble(nn.Module):
    """E Q heads [N, F + A] -> logits [E, N, K], each Linear-LayerNorm-act per hidden layer."""

    def __init__(
        self,
        members: int,
        in_dim: int,
        hidden: Sequence[int],
        out_dim: int,
        activation: str,
        dropout: float,
    ):
        super().__init__()
        dims = [in_dim, *hidden]
        self.linears = nn.ModuleList(
            EnsembleLinear(members, dims[i], dims[i + 1]) for i in range(len(hidden))
        )
        self.norms = nn.ModuleList(nn.LayerNorm(d) for d in hidden)
        self.act = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.out = EnsembleLinear(members, dims[-1], out_dim)

    def forward(self, x: Tensor) -> Tensor:
        for i, (linear, norm) in enumerate(zip(self.linears, self.norms, strict=True)):
            x = self.act(norm(linear(x)))  # [E, N, hidden]
            if i == 0:
                x = self.dropout(x)
        return self.out(x)  # [E, N, K]
