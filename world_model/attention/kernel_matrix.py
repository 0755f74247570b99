"""The four kernels of seed 001 §1 as Gram matrices, K_ij = k(x_i, y_j): exp (cosine similarity
over a temperature, exponent clamped), rbf, linear and cosine. Shared by XAKER's kernel ridge
regression (world_model/attention/krr.py) and the covariant head's "krr" attention kernel
(world_model/attention/covariant_kernels.py), without either importing the other's solvers.
"""

from __future__ import annotations

import math
import typing
from typing import Literal

import torch
from torch import Tensor

from geometry.sphere import normalize

__all__ = ["KrrKernel", "KERNELS", "EXP_CLAMP", "exp_clamp_max", "kernel_matrix"]

KrrKernel = Literal["exp", "rbf", "linear", "cosine"]
KERNELS: tuple[str, ...] = typing.get_args(KrrKernel)
EXP_CLAMP = 100.0  # seed 001 §1: the exponent is clamped to [-100, 100]


def exp_clamp_max(dtype: torch.dtype) -> float:
    """Upper clamp of the exp kernel's exponent: min(100, floor(log(max float))).

    The seed's 100 keeps float64 finite but not float32 (exp(100) = inf there; the largest
    finite float32 is e^88.7) nor float16 (e^11.1): 88 for float32 / bfloat16, 11 for float16."""
    return min(EXP_CLAMP, math.floor(math.log(torch.finfo(dtype).max)))


def kernel_matrix(
    x: Tensor,
    y: Tensor,
    kind: str,
    *,
    temp: float = 1.0,
    sigma: float = 1.0,
    normalize_inputs: bool = True,
) -> Tensor:
    """K_ij = k(x_i, y_j) for x [..., N, d], y [..., M, d] -> [..., N, M] (seed 001 §1).

    exp:    exp(clamp(<x_i, y_j> / temp, -100, exp_clamp_max)), x and y L2-normalised when
            normalize_inputs (then <.,.> = cos(x_i, y_j)).
    rbf:    exp(-|x_i - y_j|^2 / (2 sigma^2)); |x - y|^2 as |x|^2 + |y|^2 - 2 x.y, floored at
            0 (O(N M) memory; exact to rounding where the kernel is far from 1).
    linear: <x_i, y_j>.
    cosine: <x_i, y_j> / (|x_i| |y_j|); a zero vector has cosine 0 with everything.
    K(x, x) is positive definite for exp and rbf and positive semi-definite (rank <= d) for
    linear and cosine (the seed calls the latter two "not positive definite"; they are PSD,
    which with lam > 0 is all the ridge system needs)."""
    if kind == "exp":
        if normalize_inputs:
            x, y = normalize(x), normalize(y)
        logits = (x @ y.mT) / temp  # [..., N, M]
        return torch.exp(logits.clamp(-EXP_CLAMP, exp_clamp_max(logits.dtype)))
    if kind == "rbf":
        sq = (
            (x * x).sum(-1).unsqueeze(-1) + (y * y).sum(-1).unsqueeze(-2) - 2.0 * (x @ y.mT)
        ).clamp_min(0.0)  # [..., N, M]
        return torch.exp(-sq / (2.0 * sigma * sigma))
    if kind == "linear":
        return x @ y.mT
    if kind == "cosine":
        return normalize(x) @ normalize(y).mT
    raise ValueError(f"kernel must be one of {KERNELS}, got {kind!r}")
