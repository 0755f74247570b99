"""What the HIDA operators (world_model/attention/hida.py) share: config checks, the reduction
of a mask to a key mask for the operators that summarise the keys (L, C), query chunks."""

from __future__ import annotations

import torch
from torch import Tensor

from .ida import check_attention_inputs, check_points


def check_operator_inputs(
    queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None, metric: str
) -> None:
    """The call shape's checks (docs/architecture.md) and queries, keys on the metric's set."""
    check_attention_inputs(queries, keys, values, mask)
    check_points(queries, metric, "queries")
    check_points(keys, metric, "keys")


def query_chunks(n_q: int, chunk: int) -> list[slice]:
    """Row slices of at most `chunk` queries covering 0..n_q; one empty slice for no queries
    (so an operator returns [..., 0, dv] rather than joining no chunks)."""
    return [slice(start, start + chunk) for start in range(0, n_q, chunk)] or [slice(0, 0)]


def cat_rows(parts: list[Tensor]) -> Tensor:
    """Chunks of query rows joined along the query axis (-2); one chunk as it is (no copy)."""
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)


def _check_positive_int(name: str, value, allow_none: bool = False) -> None:
    if allow_none and value is None:
        return
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _check_max_norm(max_norm: float) -> None:
    if not (isinstance(max_norm, (int, float)) and 0.0 < max_norm < 1.0):
        raise ValueError(f"max_norm must lie in (0, 1), got {max_norm!r}")


def _key_mask(mask: Tensor | None, queries: Tensor, op: str) -> Tensor | None:
    """Reduce a mask broadcastable to [..., Nq, Nk] to a key mask [..., Nk]. L and C summarise
    the keys once for all queries, so a mask that differs between queries is refused."""
    if mask is None:
        return None
    if mask.dim() >= 2 and mask.shape[-2] != 1 and queries.shape[-2] != 1:
        raise ValueError(
            f"{op} summarises the keys once for all queries, so it accepts only a key mask "
            f"(shape [..., 1, Nk] or [..., Nk]); got a per-query mask {tuple(mask.shape)}: use "
            "DenseHIDA or FPHIDA for per-query masks"
        )
    return mask if mask.dim() == 1 else mask[..., 0, :]  # broadcasts against the keys' batch
