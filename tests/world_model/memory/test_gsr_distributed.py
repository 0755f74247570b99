"""Sharded GSR on torch.distributed (world_model/memory/gsr_distributed.py), two gloo processes
on loopback: every rank ends with the unsharded GSR's output, indices and weights on the same
pool (ties included: exact duplicates across shards select the lower row on every rank); the
all-to-all MoE dispatch of the same selection gives the same output; the logged bytes are the
sizes of the tensors the protocol must move."""

from __future__ import annotations

import pytest
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


def _unsharded(case: dict, queries: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """gsr_route on the whole pool, its K' = min(K, P) selections padded to K as the sharded
    route pads them (row -1, weight 0)."""
    out, idx, w = gsr_route(
        queries, case["prototypes"], case["values"], case["active"], case["config"]
    )
    short = case["config"].k - idx.shape[-1]
    pad = torch.nn.functional.pad
    return out, pad(idx, (0, short), value=-1), pad(w, (0, short), value=0.0)


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
        gather_log = CommLog()
        gathered = gather_queries(case["queries"][mine], gather_log)
        results.append(
            {"out": out, "idx": idx, "w": w, "moe": moe, "gathered": gathered,
             "log": log.calls, "moe_log": moe_log.calls, "gather_log": gather_log.calls}
        )  # fmt: skip
    # each rank alone in a group of its own: the collectives stay within the group
    groups = [dist.new_group([r]) for r in range(WORLD)]
    case = cases[0]
    lo, hi = shard_bounds(case["prototypes"].shape[0], WORLD)[rank : rank + 2]
    alone = sharded_gsr_route(
        case["queries"], case["prototypes"][lo:hi], case["values"][lo:hi],
        case["active"][lo:hi], lo, case["config"], group=groups[rank],
    )  # fmt: skip
    own = gather_queries(case["queries"][:3], group=groups[rank])
    moe_alone = moe_dispatch(
        case["queries"], alone[1] - lo, alone[2], case["values"][lo:hi], [0, hi - lo],
        group=groups[rank],
    )  # fmt: skip
    small = cases[-1]  # queries [2, 4, m]: batched, over shards padded to K
    lo, hi = shard_bounds(small["prototypes"].shape[0], WORLD)[rank : rank + 2]
    batched = sharded_gsr_route(
        small["queries"].unflatten(0, (2, 4)), small["prototypes"][lo:hi],
        small["values"][lo:hi], small["active"][lo:hi], lo, small["config"],
    )  # fmt: skip
    return results, {"alone": alone, "own": own, "moe_alone": moe_alone, "batched": batched}


@pytest.fixture(scope="module")
def two_ranks():
    """Both ranks' results for each case (pool 37 k 5; pool 7 k 5: a shard smaller than K;
    pool 7 k 6: besides, fewer active prototypes than K; pool 3 k 5: fewer prototypes than K,
    so the merge selects padding), and each rank's run alone."""
    cases = [_case(37, 5), _case(7, 5), _case(7, 6), _case(3, 5)]
    both = run_local_ranks(_worker, WORLD, (cases,))
    return cases, [results for results, _ in both], [alone for _, alone in both]


def test_every_rank_gets_the_unsharded_routing(two_ranks):
    cases, ranks, _ = two_ranks
    for c, case in enumerate(cases):
        out, idx, w = _unsharded(case, case["queries"])
        for rank in ranks:
            got = rank[c]
            assert torch.equal(got["idx"], idx)  # the same prototypes, in the same order
            torch.testing.assert_close(got["w"], w, rtol=1e-14, atol=1e-15)
            torch.testing.assert_close(got["out"], out, rtol=1e-13, atol=1e-13)
        # the query on a prototype duplicated across shards picks the lower row first
        half = shard_bounds(case["prototypes"].shape[0], WORLD)[1]
        assert idx[0, 0] == 0 and idx[0, 1] == half


def test_moe_dispatch_of_the_same_selection_gives_the_same_output(two_ranks):
    cases, ranks, _ = two_ranks
    for c, case in enumerate(cases):
        n = case["queries"].shape[0] // WORLD
        for r, rank in enumerate(ranks):
            torch.testing.assert_close(
                rank[c]["moe"], rank[c]["out"][r * n : (r + 1) * n], rtol=1e-13, atol=1e-13
            )
            assert torch.equal(rank[c]["gathered"], case["queries"])


def test_logged_bytes_are_the_protocols_tensors(two_ranks):
    cases, ranks, _ = two_ranks
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
            # the values sent back: one row per token the other rank sent for my rows
            other = ranks[1 - r][c]["idx"][(1 - r) * n : (2 - r) * n]
            incoming = int(((other >= lo) & (other < hi)).sum())
            assert rank[c]["moe_log"][2:] == [("all_to_all", incoming * dv * 8)]
            assert rank[c]["gather_log"] == [("all_gather", n * m * 8)]  # my queries, float64


def test_shard_bounds_in_numbers():
    """round(i P / W): the slices gsr_route cuts (3.5 rounds to 4, 10/3 to 3, 20/3 to 7)."""
    assert shard_bounds(7, 2) == [0, 4, 7]
    assert shard_bounds(10, 3) == [0, 3, 7, 10]
    assert shard_bounds(2, 4) == [0, 0, 1, 2, 2]


def test_a_rank_in_a_group_of_its_own_routes_over_its_shard_alone(two_ranks):
    """With `group` a one-rank group, no collective reaches the other rank: the output is
    gsr_route over the rank's own shard (global rows), gather_queries returns the rank's own
    queries and the MoE dispatch combines its own rows."""
    cases, _, alone = two_ranks
    case = cases[0]
    bounds = shard_bounds(case["prototypes"].shape[0], WORLD)
    for r, result in enumerate(alone):
        lo, hi = bounds[r], bounds[r + 1]
        out, idx, w = gsr_route(
            case["queries"], case["prototypes"][lo:hi], case["values"][lo:hi],
            case["active"][lo:hi], case["config"],
        )  # fmt: skip
        assert torch.equal(result["alone"][1], idx + lo)
        torch.testing.assert_close(result["alone"][2], w, rtol=0, atol=1e-15)
        torch.testing.assert_close(result["alone"][0], out, rtol=1e-13, atol=1e-13)
        assert torch.equal(result["own"], case["queries"][:3])
        torch.testing.assert_close(result["moe_alone"], out, rtol=1e-13, atol=1e-13)


def test_batched_queries_route_as_unsharded_gsr(two_ranks):
    """Queries [2, 4, m] over the pool of 3 in 2 shards (both padded to K = 5): every rank ends
    with gsr_route's output, rows (-1 where the pool runs out) and weights."""
    cases, _, alone = two_ranks
    case = cases[-1]
    out, idx, w = _unsharded(case, case["queries"].unflatten(0, (2, 4)))
    assert (idx == -1).any()  # the padding the merge selected reads as "none"
    for result in alone:
        got_out, got_idx, got_w = result["batched"]
        assert torch.equal(got_idx, idx)
        torch.testing.assert_close(got_w, w, rtol=1e-14, atol=1e-15)
        torch.testing.assert_close(got_out, out, rtol=1e-13, atol=1e-13)
