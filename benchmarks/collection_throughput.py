"""Environment steps per second against the number of environment copies (`train.num_envs`,
agent/collection.py), for collection alone (planning every copy's action in one batch and
stepping the copies, no updates) and with training (one update per environment step, the
single env's update-to-data ratio), every setting side by side in one process on one thread.

    python benchmarks/collection_throughput.py                         # GRU, K = 1 2 4 8
    python benchmarks/collection_throughput.py --world-model geodesic --copies 1 8 --steps 64
    python benchmarks/collection_throughput.py --env dm_control/pendulum-swingup-v0 --async

Each row is the median of --rounds rounds of --steps environment steps (all copies together);
the first round of each setting is a warm-up and not counted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from agent.agent import Agent
from agent.collection import Collection
from agent.config import RunConfig


def _agent(args: argparse.Namespace, copies: int) -> Agent:
    train = {"env_id": args.env, "world_model": args.world_model, "num_envs": copies,
             "vector_env": "async" if args.use_async else "sync", "seed_steps": 0,
             "progress": False}  # fmt: skip
    return Agent(None, RunConfig.from_dict({"train": train}))


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--world-model", default="gru")
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--steps", type=int, default=128, help="env steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--async", dest="use_async", action="store_true",
                        help="AsyncVectorEnv (a process per copy), not SyncVectorEnv")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for copies in args.copies:
        agent = _agent(args, copies)
        collection = Collection(agent)
        # a little data so that updates can sample: the seed phase of the loop, by hand
        obs = collection.reset(np.ones(copies, dtype=bool), None)
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
        steps = max(1, args.steps // copies) * copies
        rows.append((copies, steps / statistics.median(alone), steps / statistics.median(trained)))
    base_alone, base_train = rows[0][1], rows[0][2]
    print(f"{args.env}, {args.world_model} agent, {'async' if args.use_async else 'sync'} "
          f"vector env, one torch thread; env steps/s (median of {args.rounds} rounds of "
          f"{args.steps} steps)\n")  # fmt: skip
    print(f"| copies | collection steps/s | x {args.copies[0]} | with training steps/s | "
          f"x {args.copies[0]} |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|")
    for copies, alone, trained in rows:
        print(f"| {copies} | {alone:.1f} | {alone / base_alone:.2f}x | {trained:.1f} | "
              f"{trained / base_train:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
