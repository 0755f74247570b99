"""Fused inverse-distance attention in Triton, forward and backward (seed 000 §2.1, Def 5.1):
out_i = sum_j W_ij v_j, W_ij = m_j (d(q_i, k_j)^2 + eps)^-1 / sum_l m_l (d(q_i, k_l)^2 + eps)^-1,
without the N x M weight matrix: memory O((Nq + Nk)(d + dv)) instead of O(Nq Nk).

The forward is FlashAttention-2's online softmax over the logits -log(d^2 + eps) + log m; it
keeps each row's log-sum, from which the backward recomputes the weights block by block (the
kernels and their equations: world_model/attention/triton_ida_kernels.py). The gradient flows
to queries, keys, values and the per-key masses, as through the PyTorch reference
:func:`world_model.attention.ida.inverse_distance_attention`, which it matches up to rounding;
one departure: at a mass of exactly 0 the reference's mass gradient is 0 (its log m is
floored), the kernel's is the one-sided derivative.

Where it runs (:func:`fusion_refusal`): CUDA tensors of float32, bfloat16 or float16 (computed
in float32), metric "euclidean" or "poincare" (the sphere's atan2 is not in Triton's core
language), a key mask (a mask that is the same for every query) and key masses, d, dv <= 256.
:func:`fused_or_none` returns None elsewhere and logs why once per reason on a GPU (on CPU
the reference is the expected path and nothing is logged). On CPU tensors the kernels run
only when a caller passes ``force=True`` and TRITON_INTERPRET=1 was set before triton was
imported (Triton's interpreter; tests/world_model/test_triton_ida.py); ``force`` raises
instead of falling back, so a test never passes on the reference by accident.

Distance forms (:class:`KernelConfig`): "difference" (default), "expanded", "corrected"; the
accuracy of each at small distances and the choice of the default are in docs/measurements.md
("Fused Triton inverse-distance attention"); benchmarks/triton_ida_gpu.py times them.
"""

from __future__ import annotations

import logging
import math
import typing
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from geometry import poincare
from world_model.options import check_choices

from .ida import inverse_distance_attention

__all__ = [
    "FUSED_METRICS",
    "FORMS",
    "PRECISIONS",
    "CONTRACTIONS",
    "KernelConfig",
    "DEFAULT_CONFIG",
    "interpreter_active",
    "fusion_refusal",
    "fused_or_none",
    "fused_inverse_distance_attention",
    "fused_pair_sq",
]

FUSED_METRICS = ("euclidean", "poincare")
KernelForm = Literal["difference", "expanded", "corrected"]
Precision = Literal["ieee", "tf32x3", "tf32"]
Contraction = Literal["dot", "difference"]
FORMS: tuple[str, ...] = typing.get_args(KernelForm)
PRECISIONS: tuple[str, ...] = typing.get_args(Precision)
CONTRACTIONS: tuple[str, ...] = typing.get_args(Contraction)
FUSED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_DIM = 256

_logger = logging.getLogger(__name__)
_LOGGED: set[str] = set()


@dataclass(frozen=True)
class KernelConfig:
    """How the kernels compute.

    Attributes:
        form: the squared distance |q - k|^2: "difference" (coordinate differences, CUDA
            cores; full relative accuracy at every distance), "expanded" (|q|^2 + |k|^2 -
            2 q.k by tl.dot, tensor cores), "corrected" (expanded, tiles holding a near pair
            redone by differences). Measured in docs/measurements.md.
        precision: tl.dot's input_precision, for the values' products (and the distances'
            in the expanded forms): "ieee" (float32 FMA), "tf32x3" (three TF32 products,
            ~float32 accuracy) or "tf32" (one; relative error ~5e-4 per product).
        contraction: how the backward forms dq_i = 2 sum_j h_ij (q_i - k_j) (and dk):
            "difference" (coordinate differences, on tiles whose distances came from
            differences; a second CUDA-core pass) or "dot" (2 (h 1) q - 2 h k on tl.dot; it
            cancels: 3e-4 relative error near the ball's boundary against 1e-4 required).
        near: "corrected" redoes a tile when a pair has |q - k|^2 < near (|q|^2 + |k|^2).
        block_q, block_k: queries and keys per tile (powers of two >= 16).
        num_warps: warps per program. The default 32 x 32 tiles on 4 warps are the largest
            whose forward compiles for sm_90 (d = 64, "ieee") without spilling registers
            (the dk, dv kernel spills 184 bytes), read off ptxas; untimed on a GPU
            (benchmarks/triton_ida_gpu.py sweeps them).
    """

    form: KernelForm = "difference"
    precision: Precision = "ieee"
    contraction: Contraction = "difference"
    near: float = 1.0 / 64.0
    block_q: int = 32
    block_k: int = 32
    num_warps: int = 4

    def __post_init__(self):
        check_choices(self, "KernelConfig")
        for name in ("block_q", "block_k"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 16 and value & (value - 1) == 0):
                raise ValueError(f"{name} must be a power of two >= 16, got {value!r}")
        if not 0.0 < self.near < 1.0:
            raise ValueError(f"near must lie in (0, 1), got {self.near!r}")


DEFAULT_CONFIG = KernelConfig()


def _kernels():
    """world_model/attention/triton_ida_kernels.py (it imports triton), or None without triton."""
    try:
        from . import triton_ida_kernels
    except ImportError:
        return None
    return triton_ida_kernels


def interpreter_active() -> bool:
    """Whether the kernels run under Triton's interpreter (TRITON_INTERPRET=1 at import)."""
    kernels = _kernels()
    return kernels is not None and kernels.INTERPRETED and kernels.MODES_AGREE


def _key_mask(mask: Tensor) -> Tensor | None:
    """A mask broadcastable to [..., Nq, Nk] as a key mask [..., Nk], or None where it differs
    between queries (one row, or rows expanded from one: stride 0)."""
    if mask.dim() == 1:
        return mask
    if mask.shape[-2] == 1 or mask.stride(-2) == 0:
        return mask[..., 0, :]
    return None


def fusion_refusal(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    metric: str,
    mask: Tensor | None = None,
    key_mass: Tensor | None = None,
    *,
    force: bool = False,
) -> str | None:
    """Why the fused kernels do not apply to this call, or None where they do (see the module
    docstring); force=True admits CPU tensors under the interpreter."""
    device, dtype = queries.device, queries.dtype
    if device.type != "cuda" and not force:
        return f"tensors on {device.type}"
    if metric not in FUSED_METRICS:
        return f"metric {metric!r} (the sphere's atan2 is not in Triton's core language)"
    others = [keys, values] + ([] if key_mass is None else [key_mass])
    if any(t.dtype != dtype or t.device != device for t in others):
        return "inputs of different dtypes or devices"
    if keys.shape[-2] == 0:
        return "no keys"
    if max(queries.shape[-1], values.shape[-1]) > MAX_DIM:
        return f"feature dims above {MAX_DIM}"
    if mask is not None and _key_mask(mask) is None:
        return "a mask that differs between queries (the kernels take key masks [..., 1, Nk])"
    kernels = _kernels()
    if kernels is None:
        return "triton is not installed"
    if not kernels.MODES_AGREE:
        return "TRITON_INTERPRET changed between importing triton and importing the kernels"
    if device.type != "cuda" and not kernels.INTERPRETED:
        return f"tensors on {device.type} need TRITON_INTERPRET=1 before triton is imported"
    if dtype not in FUSED_DTYPES + ((torch.float64,) if kernels.INTERPRETED else ()):
        return f"dtype {dtype} (the kernels compute in float32)"
    return None


def fused_or_none(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    eps: float,
    metric: str,
    mask: Tensor | None = None,
    key_mass: Tensor | None = None,
    *,
    force: bool = False,
    config: KernelConfig = DEFAULT_CONFIG,
) -> Tensor | None:
    """out [..., Nq, dv] through the fused kernels, or None where they do not apply (the reason
    logged once on a GPU; with force=True raised as ValueError). Arguments as
    :func:`world_model.attention.ida.inverse_distance_attention` (inputs not validated)."""
    reason = fusion_refusal(queries, keys, values, metric, mask, key_mass, force=force)
    if reason is not None:
        if force:
            raise ValueError(f"the fused inverse-distance kernels cannot run: {reason}")
        if queries.device.type == "cuda" and reason not in _LOGGED:
            _LOGGED.add(reason)
            _logger.warning("fused inverse-distance attention not used (%s): PyTorch runs", reason)
        return None
    return _fused(queries, keys, values, eps, metric, mask, key_mass, config)


def fused_inverse_distance_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    eps: float,
    metric: str,
    mask: Tensor | None = None,
    key_mass: Tensor | None = None,
    *,
    force: bool = False,
    config: KernelConfig = DEFAULT_CONFIG,
) -> Tensor:
    """out [..., Nq, dv] (no weights): the fused kernels where they apply, else the reference."""
    out = fused_or_none(
        queries, keys, values, eps, metric, mask, key_mass, force=force, config=config
    )
    if out is None:
        out, _ = inverse_distance_attention(
            queries, keys, values, eps, metric, mask, key_mass=key_mass
        )
    return out


def _inverse_factor(x: Tensor, acc: torch.dtype) -> Tensor:
    """1 / (1 - |x|^2) [..., N] from float64, floored as the reference does for x.dtype
    (differentiable: the gradient through the factor is PyTorch's)."""
    a = poincare.one_minus_sqnorm(x.double()).clamp_min(torch.finfo(x.dtype).eps)  # [..., N, 1]
    return (1.0 / a).squeeze(-1).to(acc)


def _fused(queries, keys, values, eps, metric, mask, key_mass, config) -> Tensor:
    n_q, n_k, dim, dim_v = queries.shape[-2], keys.shape[-2], queries.shape[-1], values.shape[-1]
    key_mask = None if mask is None else _key_mask(mask)  # [..., Nk]
    shapes = [queries.shape[:-2], keys.shape[:-2], values.shape[:-2]]
    shapes += [t.shape[:-1] for t in (key_mask, key_mass) if t is not None]
    batch = torch.broadcast_shapes(*shapes)
    b = math.prod(batch)
    acc = torch.float64 if queries.dtype == torch.float64 else torch.float32

    def flat(x: Tensor, *tail: int) -> Tensor:  # [..., *tail] -> contiguous [b, *tail]
        return x.expand(*batch, *tail).reshape(b, *tail).contiguous()

    q, k, v = flat(queries, n_q, dim), flat(keys, n_k, dim), flat(values, n_k, dim_v)
    iq = ik = mass = None
    if metric == "poincare":
        iq, ik = flat(_inverse_factor(queries, acc), n_q), flat(_inverse_factor(keys, acc), n_k)
    if key_mass is not None or key_mask is not None:
        m = key_mass.to(acc) if key_mass is not None else torch.ones((), dtype=acc, device=q.device)
        if key_mask is not None:  # where: masked keys get mass 0 and no gradient
            m = torch.where(key_mask, m, torch.zeros((), dtype=acc, device=q.device))
        mass = flat(m, n_k)
    out = _FusedIDA.apply(q, k, v, iq, ik, mass, float(eps), config)  # [b, Nq, dv]
    return out.reshape(*batch, n_q, dim_v)


class _FusedIDA(torch.autograd.Function):
    """out = IDA(q, k, v; iq, ik, mass) on contiguous [B, N, .] tensors. Saves q, k, v, the
    factors, out and the row log-sums (O(N d)); the backward recomputes the weights."""

    @staticmethod
    def forward(ctx, q, k, v, iq, ik, mass, eps, config):
        out, lse = _kernels().forward(q, k, v, iq, ik, mass, eps, config)
        ctx.save_for_backward(q, k, v, iq, ik, mass, out, lse)
        ctx.eps, ctx.config = eps, config
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        q, k, v, iq, ik, mass, out, lse = ctx.saved_tensors
        delta = (d_out.to(lse.dtype) * out.to(lse.dtype)).sum(-1).contiguous()  # [B, Nq]
        dq, dk, dv, diq, dik, dmass = _kernels().backward(
            q, k, v, iq, ik, mass, d_out, lse, delta, ctx.eps, ctx.config
        )
        return dq, dk, dv, diq, dik, dmass, None, None


def fused_pair_sq(
    q: Tensor, k: Tensor, config: KernelConfig = DEFAULT_CONFIG, *, force: bool = False
) -> Tensor:
    """The kernels' |q_i - k_j|^2 [Nq, Nk] for q [Nq, d], k [Nk, d] in config's form and
    precision (measurement of the distance forms; same device rules as the attention)."""
    reason = fusion_refusal(q, k, k, "euclidean", force=force)
    if reason is not None:
        raise ValueError(f"the fused inverse-distance kernels cannot run: {reason}")
    return _kernels().pair_sq(q.contiguous(), k.contiguous(), config)
