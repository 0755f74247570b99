"""The losses' batch-wide operations under data parallelism (agent/core/distributed.py).

A data-parallel update splits one batch of B sequences into W shards of B / W, one per rank,
and averages the ranks' gradients. The losses are batch means, so that average is the union
batch's gradient, except where an update reads across the batch or draws noise for it:

- **noise** (the policy prior's reparameterisation draws, the geodesic thermostat's xi): inside
  `batch_shard(rank, W)` `randn` draws the union batch's noise, W times the rows, from the
  generator every rank holds in the same state, and keeps rank r's rows. The W ranks together
  draw exactly what one process draws for the union batch, and the generator stays in step
  across ranks.
- **batch statistics** (the running Q scale's percentiles, the DMG genesis inputs): `gather`
  concatenates every rank's rows, in rank order.

Outside a `batch_shard` block both are the plain single-process operations (`randn` is
`torch.randn` of the shape, the same draws as `torch.randn_like`), so single-process runs
compute exactly what they computed before this module existed.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["BatchShard", "batch_shard", "gather", "randn"]


class BatchShard(NamedTuple):
    """This rank's part of a batch split over `world_size` ranks (rows [rank b, (rank+1) b))."""

    rank: int
    world_size: int
    group: object = None  # a torch.distributed process group; None: the default group


_SHARD: contextvars.ContextVar[BatchShard | None] = contextvars.ContextVar("shard", default=None)


@contextlib.contextmanager
def batch_shard(rank: int, world_size: int, group: object = None) -> Iterator[BatchShard]:
    """Run the losses on rank `rank`'s shard of a batch split over `world_size` ranks."""
    if not 0 <= rank < world_size:
        raise ValueError(f"batch_shard: rank {rank} outside a world of {world_size}")
    token = _SHARD.set(BatchShard(rank, world_size, group))
    try:
        yield _SHARD.get()
    finally:
        _SHARD.reset(token)


def randn(shape: tuple[int, ...] | torch.Size, like: Tensor, batch_dim: int = 0) -> Tensor:
    """N(0, I) of `shape` ([..., b, ...], the batch on `batch_dim`), dtype and device of `like`;
    in a batch_shard(r, W) block: rank r's rows of the union batch's draw [..., W b, ...]."""
    shard = _SHARD.get()
    if shard is None or shard.world_size == 1:
        return torch.randn(tuple(shape), dtype=like.dtype, device=like.device)
    b = shape[batch_dim]
    union = list(shape)
    union[batch_dim] = b * shard.world_size
    full = torch.randn(union, dtype=like.dtype, device=like.device)
    return full.narrow(batch_dim, shard.rank * b, b).contiguous()


def gather(x: Tensor, dim: int = 0) -> Tensor:
    """Every rank's `x` concatenated along `dim` in rank order (x itself outside a shard).
    Equal shapes on every rank; no gradient flows through it."""
    shard = _SHARD.get()
    if shard is None or shard.world_size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(shard.world_size)]
    dist.all_gather(parts, x.detach().contiguous(), group=shard.group)
    return torch.cat(parts, dim=dim)
