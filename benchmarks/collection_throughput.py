"""Environment steps per second against the number of environment copies (`train.num_envs`,
agent/core/collection.py) and of data-parallel ranks (agent/core/distributed.py), for collection
alone (planning every copy's action in one batch and stepping the copies, no updates) and with
training (one update per environment step, the single env's update-to-data ratio), every setting
side by side in one run, one torch thread per process.

    python -m benchmarks.collection_throughput                         # GRU, K = 1 2 4 8
    python -m benchmarks.collection_throughput --ranks 1 2 --copies 2 4 8
    python -m benchmarks.collection_throughput --world-model geodesic --copies 1 8 --steps 64
    python -m benchmarks.collection_throughput --env dm_control/pendulum-swingup-v0 --async

--copies counts all copies; with W ranks each gloo rank (processes on this machine, as
`torchrun --nproc-per-node W` starts them) steps copies / W of them and all-gathers the
transitions (agent.core.distributed.ShardedCollection); with training every rank makes the run's
updates, each on its B / W share of the batch. Each row is the median of --rounds rounds of
--steps environment steps (all copies together); the first round of each setting is a warm-up
and not counted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

from agent.core.agent import Agent
from agent.core.collection import Collection
from agent.core.config import RunConfig
from agent.core.distributed import DistContext, ShardedCollection, run_local_ranks


def _agent(args: argparse.Namespace, copies: int, ctx: DistContext | None) -> Agent:
    train = {"env_id": args.env, "world_model": args.world_model, "num_envs": copies,
             "vector_env": "async" if args.use_async else "sync", "seed_steps": 0,
             "progress": False}  # fmt: skip
    return Agent(None, RunConfig.from_dict({"train": train}), dist=ctx)


def measure(agent: Agent, collection: Collection, steps: int, training: bool) -> float:
    """Seconds for `steps` env steps of planning and stepping, with one update per env step
    (`training`: transitions stored too) or without."""
    k = collection.num_envs
    obs = collection.reset(np.ones(k, dtype=bool), None)
    start = time.perf_counter()
    for _ in range(max(1, steps // k)):
        actions = collection.actions(obs, random=False)
        next_obs, rewards, terminated, truncated = collection.step(actions)
        if training:
            agent.observe_batch(obs, actions, rewards, next_obs, terminated, truncated)
            for _ in range(k):
                agent.update()
        ended = terminated | truncated
        obs = collection.reset(ended, next_obs) if ended.any() else next_obs
    return time.perf_counter() - start


def setting(args: argparse.Namespace, copies: int, ctx: DistContext | None) -> tuple[float, float]:
    """(collection steps/s, with-training steps/s) of `copies` local copies on this rank."""
    torch.set_num_threads(1)
    agent = _agent(args, copies, ctx)
    collection = Collection(agent)
    if ctx is not None:
        collection = ShardedCollection(collection, ctx)
    k = collection.num_envs
    # a little data so that updates can sample: the seed phase of the loop, by hand
    obs = collection.reset(np.ones(k, dtype=bool), None)
    while agent.buffer.size < 2 * agent.config.agent.batch_size:
        actions = collection.actions(obs, random=True)
        nxt, rew, term, trunc = collection.step(actions)
        agent.observe_batch(obs, actions, rew, nxt, term, trunc)
        ended = term | trunc
        obs = collection.reset(ended, nxt) if ended.any() else nxt
    alone = [measure(agent, collection, args.steps, False) for _ in range(args.rounds + 1)]
    trained = [measure(agent, collection, args.steps, True) for _ in range(args.rounds + 1)]
    alone, trained = alone[1:], trained[1:]  # the first round warms up
    collection.close()
    steps = max(1, args.steps // k) * k
    return steps / statistics.median(alone), steps / statistics.median(trained)


def _on_rank(rank: int, args: argparse.Namespace, copies: int) -> tuple[float, float]:
    world = dist.get_world_size()
    return setting(args, copies // world, DistContext(rank, world))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--world-model", default="gru")
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 2, 4, 8],
                        help="env copies in all (split over the ranks)")  # fmt: skip
    parser.add_argument("--ranks", type=int, nargs="+", default=[1],
                        help="data-parallel gloo ranks (processes)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=128, help="env steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--async", dest="use_async", action="store_true",
                        help="AsyncVectorEnv (a process per copy), not SyncVectorEnv")  # fmt: skip
    args = parser.parse_args(argv)
    rows = []
    for ranks in args.ranks:
        for copies in args.copies:
            if copies % ranks:
                continue  # every rank steps the same number of copies
            if ranks == 1:
                rows.append((ranks, copies, *setting(args, copies, None)))
            else:
                # every rank's numbers are the same (each step waits for all): rank 0's
                rows.append((ranks, copies, *run_local_ranks(_on_rank, ranks, (args, copies))[0]))
    base = rows[0]
    print(f"{args.env}, {args.world_model} agent, {'async' if args.use_async else 'sync'} "
          f"vector env, one torch thread per process, {os.cpu_count()} cores; env steps/s "
          f"(median of {args.rounds} rounds of {args.steps} steps), ratios to {base[0]} "
          f"rank(s) x {base[1]} copies\n")  # fmt: skip
    print("| ranks | copies | collection steps/s | ratio | with training steps/s | ratio |")
    print("|---:|---:|---:|---:|---:|---:|")
    for ranks, copies, alone, trained in rows:
        print(f"| {ranks} | {copies} | {alone:.1f} | {alone / base[2]:.2f}x | {trained:.1f} | "
              f"{trained / base[3]:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
