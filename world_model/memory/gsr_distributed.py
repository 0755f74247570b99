"""GSR with the prototype pool sharded across the ranks of a torch.distributed process group:
seed 000 §10.3's protocol on real collectives, and an all-to-all MoE dispatch of the same
selection beside it, both logging every tensor they hand to a collective (:class:`CommLog`), so
what the protocols cost is measured, not presumed (benchmarks/gsr_communication.py).

Rank r of P holds the rows [lo_r, hi_r) of the pool (:func:`shard_bounds`, the slices
gsr.gsr_route cuts for `shards = P`), with their mask and values.

:func:`sharded_gsr_route`, for queries every rank holds (replicated), §10.3's four steps:

1. local scores and the local top-K (gsr.local_step; no communication), padded to K;
2. all-gather of every rank's K scores and global indices and its log-normaliser per query
   (the seed's Thm 10.2 counts K_pool d_h numbers here: only scores and indices travel), then
   the global top-K (gsr.merge_step: ties to the lower global index, so every rank and the
   unsharded GSR select the same prototypes);
3. each rank's share of sum_e w_e v_e over the selected e it holds (gsr.combine_step);
4. all-reduce of the [.., Nq, dv] outputs.

Every rank ends with the output, indices and weights of gsr.gsr_route on the whole pool
(tests/world_model/memory/test_gsr_distributed.py, two gloo processes). Queries that start
sharded (each rank its own batch) are first all-gathered (:func:`gather_queries`).

:func:`moe_dispatch` is the mixture-of-experts way to the same output: each rank keeps its own
queries, sends each (query, selected prototype) pair's query vector to the rank holding the
prototype (all-to-all), that rank returns the prototype's value (all-to-all back), and the
sender combines them with its weights. Its bytes grow with B K (m + dv); §10.3's with
P B K (score and index) + B dv: which is smaller depends on P, K, m and dv, which is why it is
measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

from .gsr import GSRConfig, LocalTopK, combine_step, local_step, merge_step, selected_weights

__all__ = [
    "CommLog",
    "shard_bounds",
    "gather_queries",
    "sharded_gsr_route",
    "moe_dispatch",
]


@dataclass
class CommLog:
    """What this rank handed to collectives: one entry per call, (operation, bytes sent).

    `bytes` counts this rank's payload: an all-gather's or all-reduce's input tensor, an
    all-to-all's rows bound for the other ranks (rows a rank keeps are not sent)."""

    calls: list[tuple[str, int]] = field(default_factory=list)

    def add(self, op: str, nbytes: int) -> None:
        self.calls.append((op, int(nbytes)))

    @property
    def bytes(self) -> int:
        return sum(n for _, n in self.calls)

    @property
    def messages(self) -> int:
        """Collective calls (each a synchronising round among the ranks)."""
        return len(self.calls)


def _nbytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


def shard_bounds(pool_size: int, world_size: int) -> list[int]:
    """Row bounds [P + 1] of the pool's shards: rank r holds rows bounds[r] .. bounds[r+1]-1
    (the slices of gsr.gsr_route with shards = P)."""
    return [round(i * pool_size / world_size) for i in range(world_size + 1)]


def _all_gather(t: Tensor, log: CommLog | None, group=None) -> list[Tensor]:
    t = t.contiguous()
    out = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, t, group=group)
    if log is not None:
        log.add("all_gather", _nbytes(t))
    return out


def gather_queries(queries: Tensor, log: CommLog | None = None, group=None) -> Tensor:
    """Every rank's queries [Nq_r, m] (the same Nq_r on every rank) -> all of them, rank order,
    [P Nq_r, m] on every rank."""
    return torch.cat(_all_gather(queries, log, group), dim=0)


def _padded(part: LocalTopK, k: int) -> LocalTopK:
    """A local top-k of fewer than k entries (a shard smaller than k) padded to k: -inf, -1."""
    short = k - part.scores.shape[-1]
    if short == 0:
        return part
    pad = part.scores.new_full((*part.scores.shape[:-1], short), float("-inf"))
    none = part.indices.new_full((*part.indices.shape[:-1], short), -1)
    return LocalTopK(
        torch.cat([part.scores, pad], -1), torch.cat([part.indices, none], -1), part.log_normaliser
    )


def sharded_gsr_route(
    queries: Tensor,
    prototypes: Tensor,
    values: Tensor,
    active: Tensor | None,
    offset: int,
    config: GSRConfig,
    *,
    log: CommLog | None = None,
    group=None,
) -> tuple[Tensor, Tensor, Tensor]:
    """GSR on a sharded pool (module docstring). queries [..., Nq, m] (unit; the same on every
    rank), this rank's prototypes [P_r, m] (unit), values [P_r, dv] and mask [P_r] whose global
    rows start at `offset` -> out [..., Nq, dv], indices [..., Nq, K] (global rows, -1 = none),
    weights [..., Nq, K]: gsr.gsr_route's on the whole pool, on every rank."""
    k = config.k
    part = _padded(local_step(queries, prototypes, active, k, config.eps, offset), k)
    scores = _all_gather(part.scores, log, group)
    indices = _all_gather(part.indices, log, group)
    log_z = _all_gather(part.log_normaliser, log, group)
    merged = merge_step(
        [LocalTopK(*parts) for parts in zip(scores, indices, log_z, strict=True)], k
    )
    weights = selected_weights(merged, config.renormalise)
    out = combine_step(weights, merged.indices, values, offset).contiguous()
    dist.all_reduce(out, group=group)
    if log is not None:
        log.add("all_reduce", _nbytes(out))
    return out, merged.indices, weights


def moe_dispatch(
    queries: Tensor,
    indices: Tensor,
    weights: Tensor,
    values: Tensor,
    bounds: list[int],
    *,
    log: CommLog | None = None,
    group=None,
) -> Tensor:
    """The all-to-all MoE dispatch of a given selection: this rank's queries [Nq, m], their
    selected global rows [Nq, K] (-1 = none) and weights [Nq, K], this rank's values
    [P_r, dv] (rows bounds[r] .. bounds[r+1]-1) -> out [Nq, dv] = sum_k w_k v_{e_k}.

    As a token travels to its expert: the (query, row) pairs are sorted by row, each owner is
    told how many tokens each of its rows gets (an all-to-all of K_pool counts), the query
    vectors travel to the rows' owners (all-to-all), each owner answers with the row's value
    (GSR's expert output does not depend on the query) and the answers travel back."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    pool, (lo, hi) = bounds[-1], (bounds[rank], bounds[rank + 1])
    nq, k = indices.shape
    flat = indices.reshape(-1)  # [Nq K]
    pairs = torch.nonzero(flat >= 0).squeeze(-1)
    order = pairs[torch.sort(flat[pairs], stable=True).indices]  # grouped by owner, then row
    per_row = torch.bincount(flat[order], minlength=pool)  # [K_pool] tokens for each row
    shard = [bounds[r + 1] - bounds[r] for r in range(world)]
    told = per_row.new_empty(world * (hi - lo))  # [P, P_r]: each rank's tokens for my rows
    dist.all_to_all_single(told, per_row, [hi - lo] * world, shard, group=group)
    send = [int(per_row[bounds[r] : bounds[r + 1]].sum()) for r in range(world)]
    recv = told.view(world, hi - lo).sum(-1).tolist()
    tokens = queries.unsqueeze(1).expand(nq, k, -1).reshape(nq * k, -1)[order].contiguous()
    received = tokens.new_empty(sum(recv), tokens.shape[-1])
    dist.all_to_all_single(received, tokens, recv, send, group=group)
    local_rows = torch.arange(hi - lo).repeat(world)  # the row of each received token
    answers = values[torch.repeat_interleave(local_rows, told)].contiguous()
    returned = answers.new_empty(order.numel(), values.shape[-1])
    dist.all_to_all_single(returned, answers, send, recv, group=group)
    if log is not None:  # what left this rank (rows kept at home are not sent)
        log.add("all_to_all", (pool - (hi - lo)) * per_row.element_size())
        log.add("all_to_all", (sum(send) - send[rank]) * tokens.shape[-1] * tokens.element_size())
        log.add("all_to_all", (sum(recv) - recv[rank]) * values.shape[-1] * values.element_size())
    rows = values.new_zeros(nq * k, values.shape[-1])
    rows[order] = returned
    return (weights.unsqueeze(-1) * rows.view(nq, k, -1)).sum(-2)
