"""What sharded GSR sends, against an all-to-all MoE dispatch of the same selection, measured
from the tensors each rank hands to torch.distributed (world_model/memory/gsr_distributed.py).

P gloo ranks on loopback; each rank holds B / P queries and a 1/P shard of the pool. GSR
(seed 000 §10.3): all-gather the queries, route them against every shard (all-gathers of the
local top-K scores, rows and log-normalisers), combine (all-reduce of the outputs). MoE: each
rank routes its own queries with the same selection and dispatches (query, row) pairs to the
rows' owners (all-to-alls there and back). Bytes are per rank, summed over ranks, and per query;
messages are collective calls. Both protocols' outputs are checked equal to the unsharded GSR.

    python -m benchmarks.gsr_communication                      # P = 2, 4; B = 16 .. 4096
    python -m benchmarks.gsr_communication --ranks 2 --batches 64 1024 --pool 1024 --k 16
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from agent.core.distributed import run_local_ranks
from world_model.memory.gsr import GSRConfig, gsr_route
from world_model.memory.gsr_distributed import (
    CommLog,
    gather_queries,
    moe_dispatch,
    shard_bounds,
    sharded_gsr_route,
)


def _unit(n: int, d: int, seed: int) -> torch.Tensor:
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed))
    return x / x.norm(dim=-1, keepdim=True)


def _rank(rank: int, args: argparse.Namespace) -> list[tuple[int, ...]]:
    """Each batch's row: (B, GSR bytes, GSR messages, MoE bytes, MoE messages, ranks whose
    outputs equal the unsharded GSR's), summed over the ranks."""
    world = dist.get_world_size()
    config = GSRConfig(k=args.k, eps=1e-2)
    values = torch.randn(args.pool, args.dv, generator=torch.Generator().manual_seed(3))
    prototypes = _unit(args.pool, args.m, 1)
    bounds = shard_bounds(args.pool, world)
    lo, hi = bounds[rank], bounds[rank + 1]
    rows = []
    for batch in args.batches:
        queries = _unit(batch, args.m, 2)  # every rank draws all, keeps its own B / P
        n = batch // world
        mine = queries[rank * n : (rank + 1) * n]
        gsr_log, moe_log = CommLog(), CommLog()
        everyone = gather_queries(mine, gsr_log)
        out, idx, w = sharded_gsr_route(
            everyone, prototypes[lo:hi], values[lo:hi], None, lo, config, log=gsr_log
        )
        moe = moe_dispatch(
            mine, idx[rank * n : (rank + 1) * n], w[rank * n : (rank + 1) * n], values[lo:hi],
            bounds, log=moe_log,
        )  # fmt: skip
        ref, _, _ = gsr_route(queries[: n * world], prototypes, values, None, config)
        ok = torch.allclose(out, ref, atol=1e-5) and torch.allclose(
            moe, ref[rank * n : (rank + 1) * n], atol=1e-5
        )
        stats = torch.tensor([gsr_log.bytes, gsr_log.messages, moe_log.bytes, moe_log.messages,
                              int(ok)], dtype=torch.int64)  # fmt: skip
        dist.all_reduce(stats)  # sums over ranks
        rows.append((batch, *stats.tolist()))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256, 1024, 4096])
    parser.add_argument("--pool", type=int, default=128, help="prototypes (the agent's default)")
    parser.add_argument("--k", type=int, default=16, help="top-K (the agent's route_k)")
    parser.add_argument("--m", type=int, default=9, help="query size on the sphere (d + 1)")
    parser.add_argument("--dv", type=int, default=64, help="value size (4 x feature_dim 16)")
    args = parser.parse_args()
    print(f"pool {args.pool}, K {args.k}, query {args.m} floats, value {args.dv} floats (float32)")
    print("bytes and messages summed over ranks; per query: total bytes / B\n")
    print("| ranks | B | GSR bytes | GSR / query | GSR msgs | MoE bytes | MoE / query | MoE msgs "
          "| MoE / GSR | outputs equal |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for world in args.ranks:
        rows = run_local_ranks(_rank, world, (args,))[0]  # the same sums on every rank
        for batch, gsr_b, gsr_m, moe_b, moe_m, ok in rows:
            print(f"| {world} | {batch} | {gsr_b:,} | {gsr_b / batch:,.0f} | {gsr_m} | {moe_b:,} "
                  f"| {moe_b / batch:,.0f} | {moe_m} | {moe_b / gsr_b:.2f} | "
                  f"{'yes' if ok == world else 'NO'} |")  # fmt: skip


if __name__ == "__main__":
    main()
