"""Sharded GSR on torch.distributed (world_model/memory/gsr_distributed.py), two gloo processes
on loopback: every rank ends with the unsharded GSR's output, indices and weights on the same
pool (ties included: exact duplicates across shards select the lower row on every rank); the
all-to-all MoE dispatch of the same selection gives the same output; the logged bytes are the
sizes of the tensors the protocol must move."""

from __future__ import annotations

import pytest
import torch

from agent.core.distributed import run_local_ranks
from world_model.memory.gsr import GSRConfig, gsr_route
from world_model.memory.gsr_distributed import (
    CommLog,
    gather_queries,
    moe_dispatch,
    shard_bounds,
    sharded_gsr_route,
)

WORLD = 2


def _unit(n: int, d: int, seed: int) -> torch.Tensor:
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def _case(pool: int, k: int) -> dict[str, torch.Tensor | GSRConfig]:
    """Queries, a pool with inactive rows and exact duplicates across the two shards."""
    c = _unit(pool, 5, 1)
    half = shard_bounds(pool, WORLD)[1]
    c[half] = c[0]  # the same prototype on both shards: tied scores for every query
    if pool > half + 2:
        c[half + 2] = c[2]
    active = torch.ones(pool, dtype=torch.bool)
    active[1::5] = False
    q = _unit(8, 5, 2)
    q[0] = c[0]  # a query on the duplicated prototype: the tie decides its first pick
    return {
        "queries": q,
        "prototypes": c,
        "values": torch.randn(pool, 3, generator=torch.Generator().manual_seed(3)).double(),
        "active": active,
        "config": GSRConfig(k=k, eps=1e-2),
    }


def _worker(rank: int, cases: list[dict]) -> list[dict]:
    results = []
    for case in cases:
        pool = case["prototypes"].shape[0]
        bounds = shard_bounds(pool, WORLD)
        lo, hi = bounds[rank], bounds[rank + 1]
        log = CommLog()
        out, idx, w = sharded_gsr_route(
            case["queries"], case["prototypes"][lo:hi], case["values"][lo:hi],
            case["active"][lo:hi], lo, case["config"], log=log,
        )  # fmt: skip
        # MoE: each rank dispatches its own half of the queries with the same selection
        n = case["queries"].shape[0] // WORLD
        mine = slice(rank * n, (rank + 1) * n)
        moe_log = CommLog()
        moe = moe_dispatch(
            case["queries"][mine], idx[mine], w[mine], case["values"][lo:hi], bounds,
            log=moe_log,
        )  # fmt: skip
        gathered = gather_queries(case["queries"][mine])
        results.append(
            {"out": out, "idx": idx, "w": w, "moe": moe, "gathered": gathered,
             "log": log.calls, "moe_log": moe_log.calls}
        )  # fmt: skip
    return results


@pytest.fixture(scope="module")
def two_ranks():
    """Both ranks' results for each case (pool 37 k 5; pool 7 k 5: a shard smaller than K)."""
    cases = [_case(37, 5), _case(7, 5)]
    ranks = run_local_ranks(_worker, WORLD, (cases,))
    return cases, ranks


def test_every_rank_gets_the_unsharded_routing(two_ranks):
    cases, ranks = two_ranks
    for c, case in enumerate(cases):
        out, idx, w = gsr_route(
            case["queries"], case["prototypes"], case["values"], case["active"], case["config"]
        )
        for rank in ranks:
            got = rank[c]
            assert torch.equal(got["idx"], idx)  # the same prototypes, in the same order
            torch.testing.assert_close(got["w"], w, rtol=0, atol=1e-15)
            torch.testing.assert_close(got["out"], out, rtol=1e-13, atol=1e-13)
        # the query on a prototype duplicated across shards picks the lower row first
        half = shard_bounds(case["prototypes"].shape[0], WORLD)[1]
        assert idx[0, 0] == 0 and idx[0, 1] == half


def test_moe_dispatch_of_the_same_selection_gives_the_same_output(two_ranks):
    cases, ranks = two_ranks
    for c, case in enumerate(cases):
        n = case["queries"].shape[0] // WORLD
        for r, rank in enumerate(ranks):
            torch.testing.assert_close(
                rank[c]["moe"], rank[c]["out"][r * n : (r + 1) * n], rtol=1e-13, atol=1e-13
            )
            assert torch.equal(rank[c]["gathered"], case["queries"])


def test_logged_bytes_are_the_protocols_tensors(two_ranks):
    cases, ranks = two_ranks
    for c, case in enumerate(cases):
        nq, k, dv = case["queries"].shape[0], case["config"].k, case["values"].shape[1]
        pool = case["prototypes"].shape[0]
        for r, rank in enumerate(ranks):
            # all-gathers of K float64 scores, K int64 rows, 1 float64 log-normaliser per query;
            # an all-reduce of the float64 output
            assert rank[c]["log"] == [
                ("all_gather", nq * k * 8),
                ("all_gather", nq * k * 8),
                ("all_gather", nq * 8),
                ("all_reduce", nq * dv * 8),
            ]
            lo, hi = shard_bounds(pool, WORLD)[r : r + 2]
            n = nq // WORLD
            picked = rank[c]["idx"][r * n : (r + 1) * n]
            away = int(((picked >= 0) & ((picked < lo) | (picked >= hi))).sum())
            m = case["queries"].shape[1]
            assert rank[c]["moe_log"][0] == ("all_to_all", (pool - (hi - lo)) * 8)
            assert rank[c]["moe_log"][1] == ("all_to_all", away * m * 8)
