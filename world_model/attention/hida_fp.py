"""FP-HIDA, seed 000 M2 (Def 5.2, Thm 5.4): inverse-distance attention restricted to a fixed
sparse index set per query position (local window, global anchors, dyadic offsets, self),
O(Nq log Nk d). Positions are the keys' order; for a time-ordered memory ``query_time="now"``
puts every query after the newest key. Overview of the family: world_model/attention/hida.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from world_model.options import check_choices

from .hida_common import _check_positive_int, cat_rows, check_operator_inputs, query_chunks
from .ida import (
    Metric,
    _check_eps,
    inverse_distance_weights,
    squared_distance,
)

__all__ = ["FPHIDAConfig", "FPHIDA", "fp_index_set", "fp_attention"]


def fp_index_set(
    query_positions: Tensor, n_keys: int, window: int, n_global: int, causal: bool = False
) -> tuple[Tensor, Tensor]:
    """The sparse index set of seed 000 Def 5.2, per query position p:

    S(p) = {j : |p - j| <= w} ∪ {0, ⌊n/g⌋, ⌊2n/g⌋, ...} ∪ {p ± 2^k : k = 0..⌈log2 n⌉} ∪ {p},

    restricted to keys 0 <= j < n (and j <= p if causal), duplicates removed. Positions are the
    keys' order (time order for a memory; a query at "now" has p = n, after the newest key).

    query_positions [Nq] (integers) -> idx [Nq, S] (key indices, 0 where padded) and
    valid [Nq, S] (bool); S = the largest set size, valid entries first in increasing order.
    """
    if n_keys < 1:
        raise ValueError(f"FP-HIDA needs at least one key, got n_keys = {n_keys}")
    device = query_positions.device
    p = query_positions.long().reshape(-1, 1)  # [Nq, 1]
    n_dyadic = math.ceil(math.log2(n_keys)) if n_keys > 1 else 0
    powers = 2 ** torch.arange(n_dyadic + 1, device=device)  # [L + 1]
    offsets = torch.cat([torch.arange(-window, window + 1, device=device), powers, -powers])
    anchors = (torch.arange(n_global, device=device) * n_keys) // n_global  # [g]
    cand = torch.cat([p + offsets, anchors.expand(p.shape[0], -1)], dim=1)  # [Nq, C]
    ok = (cand >= 0) & (cand < n_keys)
    if causal:
        ok &= cand <= p
    cand = torch.where(ok, cand, n_keys).sort(dim=1).values  # n_keys = dropped, sorts last
    dup = torch.zeros_like(ok)
    dup[:, 1:] = cand[:, 1:] == cand[:, :-1]
    cand = torch.where(dup, n_keys, cand).sort(dim=1).values
    valid = cand < n_keys
    width = max(int(valid.sum(dim=1).max().item()), 1) if valid.numel() else 1
    cand, valid = cand[:, :width], valid[:, :width]
    return torch.where(valid, cand, 0), valid


def fp_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    eps: float,
    metric: str,
    query_positions: Tensor,
    window: int,
    n_global: int,
    causal: bool = False,
    mask: Tensor | None = None,
    *,
    query_chunk: int = 1024,
    need_weights: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """FP-HIDA (seed 000 M2): inverse-distance attention restricted to the index set
    :func:`fp_index_set`; O(Nq |S| d) with |S| = O(log Nk), computed in query chunks.
    Distances are elementwise, by explicit differences (no matrix product to cancel in)."""
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    # the mask's batch dims are among these (the call shape, docs/architecture.md)
    batch = torch.broadcast_shapes(queries.shape[:-2], keys.shape[:-2], values.shape[:-2])
    outs = []
    weights = None
    if need_weights:
        weights = queries.new_zeros(*batch, n_q, n_k)
    for rows in query_chunks(n_q, query_chunk):
        idx, valid = fp_index_set(query_positions[rows], n_k, window, n_global, causal)
        kg = keys[..., idx, :]  # [..., c, S, d]
        vg = values[..., idx, :]  # [..., c, S, dv]
        d2 = squared_distance(queries[..., rows, :].unsqueeze(-2), kg, metric)  # [..., c, S]
        allowed = valid
        if mask is not None:
            m = mask if mask.dim() < 2 or mask.shape[-2] == 1 else mask[..., rows, :]
            m = m.expand(*m.shape[:-2], idx.shape[0], n_k)
            allowed = valid & torch.gather(m, -1, idx.expand(*m.shape[:-2], *idx.shape))
        w = inverse_distance_weights(d2, eps, allowed)  # [..., c, S]
        outs.append((w.unsqueeze(-1) * vg).sum(-2))  # [..., c, dv]
        if need_weights:
            w = w.expand(*batch, *w.shape[-2:])
            weights[..., rows, :].scatter_add_(-1, idx.expand(*batch, *idx.shape), w)
    return cat_rows(outs), weights


@dataclass
class FPHIDAConfig:
    """Fixed-pattern sparse HIDA (seed 000 M2, Def 5.2).

    Attributes:
        eps: kernel regulariser eps > 0.
        metric: "poincare" (HIDA), "euclidean" or "sphere".
        window: local half-width w; None = ⌈log2 Nk⌉ (the seed's w = Theta(log n)).
        n_global: number of global anchors g; None = ⌈log2 Nk⌉.
        causal: keep only keys at positions <= the query's.
        query_time: "sequence" (query i stands at position i: self-attention over a sequence)
            or "now" (every query stands at position Nk, after the newest key: memory
            retrieval, where positions are the memory's time order).
        query_chunk: queries per chunk (bounds memory at O(chunk log Nk d)).
        check_inputs: validate shapes and domains at every call.
    """

    eps: float = 1e-3
    metric: Metric = "poincare"
    window: int | None = None
    n_global: int | None = None
    causal: bool = False
    query_time: Literal["sequence", "now"] = "sequence"
    query_chunk: int = 1024
    check_inputs: bool = True

    def __post_init__(self):
        _check_eps(self.eps)
        check_choices(self, "FPHIDAConfig")
        if self.window is not None and not (isinstance(self.window, int) and self.window >= 0):
            raise ValueError(f"window must be an integer >= 0 or None, got {self.window!r}")
        _check_positive_int("n_global", self.n_global, allow_none=True)
        _check_positive_int("query_chunk", self.query_chunk)


class FPHIDA(nn.Module):
    """M2: inverse-distance attention over S_i (local window, global anchors, dyadic offsets,
    self) with w, g = Theta(log n); O(n log n d) for n queries."""

    def __init__(self, config: FPHIDAConfig | None = None):
        super().__init__()
        self.config = config or FPHIDAConfig()

    def sizes(self, n_keys: int) -> tuple[int, int]:
        """(w, g) used for n_keys keys."""
        default = max(math.ceil(math.log2(n_keys)), 1) if n_keys > 1 else 1
        w = self.config.window if self.config.window is not None else default
        g = self.config.n_global if self.config.n_global is not None else default
        return w, g

    def positions(self, n_queries: int, n_keys: int, device=None) -> Tensor:
        """Default query positions: 0..Nq-1 ("sequence") or Nk for every query ("now")."""
        if self.config.query_time == "now":
            return torch.full((n_queries,), n_keys, dtype=torch.long, device=device)
        if n_queries > n_keys:
            raise ValueError(
                f"query_time='sequence' places query i at key position i, so it needs "
                f"Nq <= Nk; got Nq = {n_queries}, Nk = {n_keys}"
            )
        return torch.arange(n_queries, device=device)

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        *,
        query_positions: Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        cfg = self.config
        if cfg.check_inputs:
            check_operator_inputs(queries, keys, values, mask, cfg.metric)
        n_q, n_k = queries.shape[-2], keys.shape[-2]
        if query_positions is None:
            query_positions = self.positions(n_q, n_k, queries.device)
        elif query_positions.shape != (n_q,):
            raise ValueError(
                f"query_positions must have shape [Nq] = [{n_q}], got "
                f"{tuple(query_positions.shape)}"
            )
        w, g = self.sizes(n_k)
        return fp_attention(
            queries, keys, values, cfg.eps, cfg.metric, query_positions, w, g, cfg.causal,
            mask, query_chunk=cfg.query_chunk, need_weights=need_weights,
        )  # fmt: skip
