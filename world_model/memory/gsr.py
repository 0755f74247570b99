"""Geodesic Sparse Routing (GSR), seed 000 §10.1-10.3: route each query to its top-K prototypes
by SIDA weight and combine their values.

The routing is written as the seed's distributed protocol (§10.3), one function per step;
world_model/memory/gsr_distributed.py runs them on torch.distributed (a shard of the pool per
rank):

1. :func:`local_step`   score the worker's prototypes, keep its top-K scores (and global
   indices) and its log-normaliser log sum_e exp(s_e); no communication.
2. :func:`merge_step`   merge the gathered top-K lists into the global top-K (an all-gather of
   P K scores and indices per query, and of P log-normalisers; not O(K_pool d_h) as the seed's
   Thm 10.2 counts: only scores travel).
3. :func:`combine_step` each worker adds w_e v_e for the selected e it holds; the sum over
   workers (an all-reduce of [Nq, dv]) is the output.

:func:`gsr_route` runs the three on `shards` slices of one pool in this process. Exact top-K
scores the whole pool, so the routing costs O(K_pool m) per query; the post-routing work
(gathering and combining K values) is O(K dv), independent of K_pool
(benchmarks/memory_modules.py, docs/measurements.md).

Theorem 10.1 (routing quality). Let W_K = sum of the K largest SIDA weights and o* the full
SIDA output. The seed's bound 2 |V|_F (sum_{e>K} w_e / sum_{e<=K} w_e) max_{e<=K}|v_e| is
quadratic in V, so it fails once V is scaled down (tests/world_model/memory/test_gsr.py). What
its proof shows, per query (:func:`routing_error_report`):
- unrenormalised o = sum_{e in top-K} w_e v_e (the seed's §10.1 output):
  |o - o*| <= sum_{e>K} w_e |v_e| <= |V|_F (1 - W_K);
- renormalised o = sum_{top-K} w_e v_e / W_K (the default here):
  |o - o*| <= (1 - W_K)(max_{e<=K}|v_e| + max_{e>K}|v_e|) <= 2 (1 - W_K) max_e |v_e|.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .routing import MemoryPool, ordered_topk, sida_logits, soft_routing

__all__ = [
    "GSRConfig",
    "LocalTopK",
    "local_step",
    "merge_step",
    "combine_step",
    "gsr_route",
    "routing_error_report",
    "GeodesicSparseRouting",
]


@dataclass
class GSRConfig:
    """GSR (seed 000 §10).

    Attributes:
        k: number K of prototypes each query is routed to.
        eps: SIDA kernel regulariser.
        renormalise: divide the top-K weights by their sum W_K (True) or keep the SIDA weights
            of the full pool (False, the seed's §10.1 output).
        shards: number of pool slices the steps run over (1 = one worker).
    """

    k: int = 4
    eps: float = 1e-2
    renormalise: bool = True
    shards: int = 1

    def __post_init__(self):
        for name in ("k", "shards"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"GSRConfig.{name} must be an integer >= 1, got {v!r}")
        if not (isinstance(self.eps, (int, float)) and math.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"GSRConfig.eps must be a finite number > 0, got {self.eps!r}")


class LocalTopK(NamedTuple):
    scores: Tensor  # [..., Nq, k_local]  SIDA logits of the local top-k (-inf: none)
    indices: Tensor  # [..., Nq, k_local]  global prototype indices (-1: none)
    log_normaliser: Tensor  # [..., Nq, 1]  log sum_e exp(s_e) over the local active prototypes


def local_step(
    queries: Tensor,
    prototypes: Tensor,
    active: Tensor | None,
    k: int,
    eps: float,
    offset: int = 0,
) -> LocalTopK:
    """Step 1 on one worker: queries [..., Nq, m] (unit), its prototypes [P_l, m] (unit) with
    mask [P_l] whose global indices start at `offset`."""
    logits = sida_logits(queries, prototypes, eps, active)  # [..., Nq, P_l]
    top, idx = ordered_topk(logits, k)
    idx = (idx + offset).masked_fill(~torch.isfinite(top), -1)
    return LocalTopK(top, idx, torch.logsumexp(logits, dim=-1, keepdim=True))


def merge_step(parts: list[LocalTopK], k: int) -> LocalTopK:
    """Step 2: the global top-K of the gathered local lists, and the global log-normaliser."""
    scores = torch.cat([p.scores for p in parts], dim=-1)  # [..., Nq, sum k_l]
    indices = torch.cat([p.indices for p in parts], dim=-1)
    log_z = torch.logsumexp(torch.cat([p.log_normaliser for p in parts], dim=-1), -1, keepdim=True)
    top, index = ordered_topk(scores, k, indices)  # ties: the lower global index first
    return LocalTopK(top, index, log_z)


def selected_weights(merged: LocalTopK, renormalise: bool) -> Tensor:
    """Weights [..., Nq, K] of the selected prototypes: softmax over the K (renormalised) or
    exp(s_e - log Z), the SIDA weight in the full pool."""
    if renormalise:
        return soft_routing(merged.scores)  # softmax over the K selected logits
    w = torch.exp(merged.scores - merged.log_normaliser)
    return torch.nan_to_num(w, nan=0.0)  # all -inf (empty pool): -inf - -inf


def combine_step(weights: Tensor, indices: Tensor, values: Tensor, offset: int = 0) -> Tensor:
    """Step 3 on one worker: sum of w v_e over the selected e this worker holds
    (offset <= e < offset + P_l). weights, indices [..., Nq, K], values [P_l, dv] ->
    [..., Nq, dv]; the sum over workers is the output."""
    local = indices - offset
    mine = (indices >= 0) & (local >= 0) & (local < values.shape[0])
    rows = values[local.clamp(0, values.shape[0] - 1)]  # [..., Nq, K, dv]
    return ((weights * mine).unsqueeze(-1) * rows).sum(-2)


def gsr_route(
    queries: Tensor,
    prototypes: Tensor,
    values: Tensor,
    active: Tensor | None,
    config: GSRConfig,
) -> tuple[Tensor, Tensor, Tensor]:
    """GSR output: queries [..., Nq, m], prototypes [P, m], values [P, dv], active [P] ->
    out [..., Nq, dv], indices [..., Nq, K'] (-1 = none), weights [..., Nq, K'], K' = min(K, P)
    (`sharded_gsr_route` pads to K)."""
    pool = prototypes.shape[0]
    bounds = [round(i * pool / config.shards) for i in range(config.shards + 1)]
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        if hi > lo:
            mask = None if active is None else active[lo:hi]
            parts.append(local_step(queries, prototypes[lo:hi], mask, config.k, config.eps, lo))
    merged = merge_step(parts, config.k)
    weights = selected_weights(merged, config.renormalise)
    out = sum(
        combine_step(weights, merged.indices, values[lo:hi], lo)
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
        if hi > lo
    )
    return out, merged.indices, weights


def routing_error_report(
    queries: Tensor, prototypes: Tensor, values: Tensor, k: int, eps: float
) -> dict[str, Tensor]:
    """Per-query errors of top-K routing against the full SIDA output and the bounds of
    Thm 10.1 (module docstring), each [..., Nq]: err_renorm, err_unrenorm, bound_tail
    (sum_{e>K} w_e|v_e|), bound_frobenius (|V|_F (1 - W_K)), bound_renorm (2 (1 - W_K)
    max_e|v_e|), seed_bound (2 |V|_F ratio max_{e<=K}|v_e|), top_mass W_K."""
    w = torch.softmax(sida_logits(queries, prototypes, eps), dim=-1)  # [..., Nq, P]
    exact = w @ values  # [..., Nq, dv]
    top_w, idx = torch.topk(w, k, dim=-1)  # [..., Nq, K]
    sel = torch.zeros_like(w).scatter(-1, idx, top_w)  # [..., Nq, P]
    mass = top_w.sum(-1)  # W_K
    unrenorm = sel @ values
    norms = values.norm(dim=-1)  # [P]
    max_top = norms[idx].amax(-1)
    frob = values.norm()
    return {
        "err_renorm": (unrenorm / mass.unsqueeze(-1) - exact).norm(dim=-1),
        "err_unrenorm": (unrenorm - exact).norm(dim=-1),
        "bound_tail": (w - sel) @ norms,
        "bound_frobenius": frob * (1 - mass),
        "bound_renorm": 2 * (1 - mass) * norms.max(),
        "seed_bound": 2 * frob * (1 - mass) / mass * max_top,
        "top_mass": mass,
    }


class GeodesicSparseRouting(nn.Module):
    """GSR over a :class:`MemoryPool`: queries on the sphere [..., Nq, m] and the pool's
    centroids mapped to the sphere by `sphere_map` -> (out [..., Nq, dv], indices, weights)."""

    def __init__(self, config: GSRConfig | None = None):
        super().__init__()
        self.config = config or GSRConfig()

    def forward(
        self, queries: Tensor, pool: MemoryPool, sphere_map: nn.Module
    ) -> tuple[Tensor, Tensor, Tensor]:
        prototypes = sphere_map(pool.centroids)  # [C, m]
        return gsr_route(queries, prototypes, pool.values, pool.active, self.config)
