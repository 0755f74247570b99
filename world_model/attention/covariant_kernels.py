"""How a covariant head turns its transported fields into attention weights: the three kernels
of ``CovariantAttentionConfig.kernel``, each an :class:`AttentionKernelFn` with one call shape,
picked once when the head is built (as x-transformers' ``Attend`` picks its attention function in
``__init__``), so a forward pass runs no branch on the kernel.

    softmax           alpha_j = softmax_j(<Q~, K~_j> / tau(z) - sigma A_j)   seed 003 Thm 99
    inverse_distance  alpha_j = softmax_j(-log(d_H(z, z'_j)^2 + eps) - sigma A_j)  seed 000
    krr               alpha = K(Q~, K~) (K(K~, K~) + lam I)^-1                seed 001 §3

Screening (sigma A_j on colour-charged entries, Def 286) applies to the two normalised kernels
only (and not at all with HeadOptions.screening off): KRR's weights are not a distribution.
docs/seed_map.md, section "Covariant attention head, screening, diagnostics 67-70", row
"attention kernels of the heads".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from . import ida
from .covariant_types import KernelHead, PreparedContext
from .kernel_matrix import kernel_matrix
from .krr_solver import cholesky_spd_solve

__all__ = ["AttentionKernelFn", "ATTENTION_KERNELS"]

# (head, z [B, Q, d], query levels [B, Q], Q~ [B, Q, d_k], scores [B, Q, N], prepared)
#  -> (logits [B, Q, N], weights [B, Q, N], tau [B, Q] | None)
WeightsFn = Callable[..., tuple[Tensor, Tensor, Tensor | None]]
# (head, keys [Bc, N, d_k], mask [Bc, N] | None) -> PreparedContext.ridge_inverse | None
RidgeFn = Callable[..., Tensor | None]


@dataclass(frozen=True)
class AttentionKernelFn:
    """One attention kernel: `weights` makes the weights of a forward pass; `ridge` what
    :meth:`CovariantAttention.prepare` solves once per bank (None: nothing)."""

    weights: WeightsFn
    ridge: RidgeFn


def _screened_softmax(
    head: KernelHead,
    logits: Tensor,
    z: Tensor,
    levels: Tensor,
    prepared: PreparedContext,
) -> Tensor:
    """softmax(l - sigma(level(z)) A(z, z') [z' colour-charged]) over the valid entries
    (Def 286 as a log-space identity); macro entries are exempt from screening; a head with
    screening off (HeadOptions.screening, an ablation) takes softmax(l). [B, Q, N]."""
    screened = logits
    if prepared.charged and head.config.options.screening:
        cols, pos_c, levels_c = prepared.charged_entries()  # screen only these
        penalty = head.screening_penalty(z, pos_c, levels, levels_c)  # [B, Q, C]
        screened = logits.index_add(-1, cols, -penalty)
    return prepared.softmax(screened)  # [B, Q, N], over prepared.mask, with its entries' masses


def _softmax_weights(
    head: KernelHead,
    z: Tensor,
    levels: Tensor,
    q_t: Tensor,
    scores: Tensor,
    prepared: PreparedContext,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Thm 99: softmax(s / tau(z)), screened."""
    tau = head.temperature(z)  # [B, Q]
    logits = scores / tau.unsqueeze(-1)  # [B, Q, N]
    return logits, _screened_softmax(head, logits, z, levels, prepared), tau


def _inverse_distance_weights(
    head: KernelHead,
    z: Tensor,
    levels: Tensor,
    q_t: Tensor,
    scores: Tensor,
    prepared: PreparedContext,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Seed 000 HIDA: weights (d_H(z, z')^2 + eps)^-1, normalised, screened; no temperature."""
    sqdist = ida.squared_distance_matrix(z, prepared.positions, "poincare")
    logits = -torch.log(sqdist + head.config.options.ida_eps)  # [B, Q, N]
    return logits, _screened_softmax(head, logits, z, levels, prepared), None


def _krr_weights(
    head: KernelHead,
    z: Tensor,
    levels: Tensor,
    q_t: Tensor,
    scores: Tensor,
    prepared: PreparedContext,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Seed 001 §3: weights K_qk (K_kk + lam I)^-1: not a distribution, no screening; the
    logits recorded are the scores. Masked entries: their rows and columns of the inverse are
    0 (_krr_ridge_inverse), so they neither receive weight nor pass any on."""
    k_qk = kernel_matrix(q_t, prepared.keys, head.config.options.krr_kernel)  # [B, Q, N]
    return scores, k_qk @ prepared.ridge_inverse, None  # [B, Q, N]


def _no_ridge(head: KernelHead, keys: Tensor, mask: Tensor | None) -> None:
    return None


def _krr_ridge_inverse(head: KernelHead, keys: Tensor, mask: Tensor | None) -> Tensor:
    """(K_kk + lam I)^-1 over the valid entries (seed 001 §3 with the SPD correction): the
    system depends on the bank only, so it is solved once per prepared context, directly
    (Cholesky: benchmarks/krr_pcg.py measures PCG slower than Cholesky below n ~ 4096);
    masked entries are cut out (zero rows and columns of the inverse). [Bc, N, N]."""
    k_kk = kernel_matrix(keys, keys, head.config.options.krr_kernel)  # [Bc, N, N]
    eye = torch.eye(keys.shape[-2], dtype=keys.dtype, device=keys.device)
    if mask is not None:
        keep = mask.to(keys.dtype)  # [Bc, N]
        k_kk = k_kk * keep.unsqueeze(-1) * keep.unsqueeze(-2)
    inv = cholesky_spd_solve(k_kk, eye.expand_as(k_kk), head.ridge_lambda())
    if mask is not None:
        inv = inv * keep.unsqueeze(-1) * keep.unsqueeze(-2)
    return inv


ATTENTION_KERNELS: dict[str, AttentionKernelFn] = {
    "softmax": AttentionKernelFn(_softmax_weights, _no_ridge),
    "inverse_distance": AttentionKernelFn(_inverse_distance_weights, _no_ridge),
    "krr": AttentionKernelFn(_krr_weights, _krr_ridge_inverse),
}
