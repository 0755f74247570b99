"""A fused Triton forward for dense inverse-distance attention (seed 000 §2.1, Def 5.1):
out_i = sum_j W_ij v_j, W_ij ∝ (d(q_i, k_j)^2 + eps)^-1, without materialising W.

One program handles a block of queries and streams the keys in blocks (the online softmax of
FlashAttention on the logits -log(d^2 + eps)): memory O(N d) instead of O(N^2). The squared
distance is accumulated coordinate by coordinate from explicit differences, so it keeps full
float32 relative accuracy at small distances (no |q|^2 + |k|^2 - 2 q.k cancellation).

Scope: metric "euclidean" or "poincare", no mask, no key masses, forward only (inference): the
sphere needs atan2, which Triton's core language lacks. :func:`fused_inverse_distance_attention`
runs the kernel on CUDA tensors, or on CPU tensors when TRITON_INTERPRET=1 is set (Triton's
interpreter, which the tests use), and otherwise falls back to the PyTorch reference
:func:`world_model.attention.ida.inverse_distance_attention` (same result up to rounding).
"""

from __future__ import annotations

import math
import os

import torch
from torch import Tensor

from geometry import poincare

from .ida import inverse_distance_attention

try:  # triton is a dev dependency; without it everything falls back to PyTorch
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None
    tl = None

__all__ = ["FUSED_METRICS", "triton_available", "can_fuse", "fused_inverse_distance_attention"]

FUSED_METRICS = ("euclidean", "poincare")
_BLOCK_Q = 32
_BLOCK_K = 32


# Triton's interpreter has to be chosen before triton is imported (it patches triton.language
# then), so the mode is read once, here.
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_available(device: torch.device) -> bool:
    """True where the kernel can run: CUDA with triton, or any device under TRITON_INTERPRET=1."""
    if triton is None:
        return False
    return device.type == "cuda" or (_INTERPRET and device.type == "cpu")


def can_fuse(queries: Tensor, keys: Tensor, values: Tensor, metric: str, mask, key_mass) -> bool:
    """Whether the fused forward applies: supported metric, no mask or masses, float32, no
    gradient needed, and a device the kernel runs on."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (queries, keys, values))
    return (
        metric in FUSED_METRICS
        and keys.shape[-2] > 0
        and mask is None
        and key_mass is None
        and not needs_grad
        and queries.dtype == torch.float32
        and triton_available(queries.device)
    )


def _ida_forward(
    q_ptr, k_ptr, v_ptr, inv_aq_ptr, inv_ak_ptr, out_ptr,
    n_q, n_k, dim, dim_v, eps,
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_ob, stride_on,
    stride_aqb, stride_akb,
    POINCARE: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """Program (query block, batch): online-softmax over key blocks of logits -log(d^2 + eps)."""
    pid_q = tl.program_id(0)
    pid_b = tl.program_id(1)
    rows = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)  # [BQ]
    row_ok = rows < n_q
    dv = tl.arange(0, BLOCK_DV)  # [BDV]
    dv_ok = dv < dim_v
    q_base = q_ptr + pid_b * stride_qb + rows * stride_qn  # [BQ] pointers
    if POINCARE:
        inv_aq = tl.load(inv_aq_ptr + pid_b * stride_aqb + rows, mask=row_ok, other=1.0)
    m_i = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, BLOCK_DV], tl.float32)
    for start in range(0, n_k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)  # [BK]
        col_ok = cols < n_k
        k_base = k_ptr + pid_b * stride_kb + cols * stride_kn
        sq = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)  # |q - k|^2 from explicit differences
        for j in range(0, dim):
            qj = tl.load(q_base + j, mask=row_ok, other=0.0).to(tl.float32)
            kj = tl.load(k_base + j, mask=col_ok, other=0.0).to(tl.float32)
            diff = qj[:, None] - kj[None, :]
            sq += diff * diff
        if POINCARE:  # d_H^2 = log1p(2t + 2 sqrt(t (1 + t)))^2, t = |q - k|^2 / (a_q a_k)
            inv_ak = tl.load(inv_ak_ptr + pid_b * stride_akb + cols, mask=col_ok, other=1.0)
            t = sq * inv_aq[:, None] * inv_ak[None, :]
            big = tl.log(1.0 + 2.0 * t + 2.0 * tl.sqrt(t * (1.0 + t)))
            d2 = tl.where(t < 1e-6, 4.0 * t * (1.0 - t / 3.0), big * big)  # series: no 1 + x loss
        else:
            d2 = sq
        logits = tl.where(col_ok[None, :], -tl.log(d2 + eps), float("-inf"))  # [BQ, BK]
        m_new = tl.maximum(m_i, tl.max(logits, axis=1))
        p = tl.exp(logits - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v_tile = tl.load(
            v_ptr + pid_b * stride_vb + cols[:, None] * stride_vn + dv[None, :],
            mask=col_ok[:, None] & dv_ok[None, :],
            other=0.0,
        ).to(tl.float32)  # [BK, BDV]
        acc = acc * alpha[:, None] + tl.dot(p, v_tile, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    o_ptrs = out_ptr + pid_b * stride_ob + rows[:, None] * stride_on + dv[None, :]
    tl.store(o_ptrs, out, mask=row_ok[:, None] & dv_ok[None, :])


_KERNEL = []


def _kernel():
    """The jitted kernel, created on first use."""
    if not _KERNEL:
        _KERNEL.append(triton.jit(_ida_forward))
    return _KERNEL[0]


def _inverse_one_minus_sqnorm(x: Tensor) -> Tensor:
    """1 / (1 - |x|^2) [B, N], from float64 and floored as geometry.poincare does for x.dtype."""
    a = poincare.one_minus_sqnorm(x.double()).clamp_min(torch.finfo(x.dtype).eps)
    return (1.0 / a).squeeze(-1).to(torch.float32).contiguous()


def fused_inverse_distance_attention(
    queries: Tensor, keys: Tensor, values: Tensor, eps: float, metric: str
) -> Tensor:
    """out [..., Nq, dv] of dense inverse-distance attention (no weights), through the Triton
    kernel where :func:`can_fuse` allows, else through the PyTorch reference."""
    if not can_fuse(queries, keys, values, metric, None, None):
        return inverse_distance_attention(queries, keys, values, eps, metric)[0]
    batch = torch.broadcast_shapes(queries.shape[:-2], keys.shape[:-2], values.shape[:-2])
    n_q, n_k, dim, dim_v = queries.shape[-2], keys.shape[-2], queries.shape[-1], values.shape[-1]
    b = math.prod(batch)
    q = queries.expand(*batch, n_q, dim).reshape(b, n_q, dim).contiguous()
    k = keys.expand(*batch, n_k, dim).reshape(b, n_k, dim).contiguous()
    v = values.expand(*batch, n_k, dim_v).reshape(b, n_k, dim_v).contiguous()
    out = torch.empty(b, n_q, dim_v, dtype=torch.float32, device=q.device)
    poincare_metric = metric == "poincare"
    if poincare_metric:
        inv_aq, inv_ak = _inverse_one_minus_sqnorm(q), _inverse_one_minus_sqnorm(k)
    else:
        inv_aq = inv_ak = torch.ones(b, 1, dtype=torch.float32, device=q.device)
    block_dv = max(16, triton.next_power_of_2(dim_v))
    grid = (triton.cdiv(n_q, _BLOCK_Q), b)
    _kernel()[grid](
        q, k, v, inv_aq, inv_ak, out,
        n_q, n_k, dim, dim_v, float(eps),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), inv_aq.stride(0), inv_ak.stride(0),
        POINCARE=poincare_metric, BLOCK_Q=_BLOCK_Q, BLOCK_K=_BLOCK_K, BLOCK_DV=block_dv,
    )  # fmt: skip
    return out.to(queries.dtype).reshape(*batch, n_q, dim_v)
