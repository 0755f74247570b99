"""Cost of one training update and one planning call of the agent, per world model, side by
side in one process (issue 5's cost target: the geodesic model <= 3x the GRU's).

    python -m benchmarks.agent_step_cost                       # Pendulum-v1, gru vs geodesic
    python -m benchmarks.agent_step_cost --rounds 7 --updates 10 --plans 20
    python -m benchmarks.agent_step_cost --config-of geodesic f.toml  # one model's config
    python -m benchmarks.agent_step_cost --variant exact-drift geodesic exact.toml  # extra row

Each agent is built with the run's defaults (the config a `python -m agent.train` run would use),
its replay buffer filled with the same random-action episodes; then the agents take turns, round
after round, timing `updates` gradient updates and `plans` planning calls each (these machines are
noisy: interleaving keeps the ratio fair, and the table reports the median and the minimum over
rounds). One torch thread, as in training.

The geodesic agent's episodic memory re-reads, at every update, each distinct transition among
its samples' 64 predecessors: ~1,000 with the default 1,000 transitions stored, ~6,200 with
20,000 (at most batch x 64 = 8,192). `--transitions 20000` measures the update of a long run
(docs/measurements.md, "The memory at a full buffer").
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from agent.core.agent import Agent
from agent.core.config import RunConfig, load_config_file


def build_agent(env_id: str, world_model: str, base: dict, seed: int) -> Agent:
    overrides = {
        **base,
        "train": {
            **base.get("train", {}),
            "env_id": env_id,
            "world_model": world_model,
            "seed": seed,
            "progress": False,
        },
    }
    return Agent(config=RunConfig.from_dict(overrides))


def fill_buffer(agent: Agent, transitions: int, seed: int) -> None:
    """Random-action episodes, the same for every agent (seeded env and actions)."""
    env = agent.env
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(transitions):
        action = rng.uniform(-1, 1, agent.action_dim).astype(np.float32)
        next_obs, reward, terminated, truncated, _ = env.step(action)  # the agent's [-1, 1] view
        agent.observe(obs, action, float(reward), next_obs, terminated, truncated)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
    agent.num_timesteps = transitions


def plan_calls(agent: Agent, observations: list) -> object:
    """A callable that plans from the next observation of the list at every call."""
    it = iter(observations)
    return lambda: agent.act(next(it), explore=True)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_calls(fn, n: int, clock: str = "wall") -> float:
    """ms per call of fn over n calls, by the wall clock or by this process's CPU time (which
    a busy machine inflates less: the process's waits for a core are not counted)."""
    now = CLOCKS[clock]
    sync = torch.cuda.synchronize if torch.cuda.is_available() else lambda: None
    sync()  # on a GPU, count the kernels a call queued, not only their launches
    start = now()
    for _ in range(n):
        fn()
    sync()
    return (now() - start) / n * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.agent_step_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--world-models", nargs="+", default=["gru", "geodesic"])
    parser.add_argument("--config", default=None, help="a run config file for every model")
    parser.add_argument(
        "--config-of",
        nargs=2,
        action="append",
        default=[],
        metavar=("WORLD_MODEL", "FILE"),
        help="a run config file for one model only (e.g. its [dynamics] section); repeatable",
    )
    parser.add_argument(
        "--variant",
        nargs=3,
        action="append",
        default=[],
        metavar=("LABEL", "WORLD_MODEL", "FILE"),
        help="one more row: WORLD_MODEL with the run config FILE, shown as LABEL; repeatable "
        "(e.g. --variant geodesic-exact-drift geodesic exact.toml)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=5, help="updates timed per round")
    parser.add_argument("--plans", type=int, default=10, help="plans timed per round")
    parser.add_argument("--transitions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="wall",
        help="wall seconds, or the process's CPU seconds (steadier on a shared machine)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    base = load_config_file(args.config) if args.config else {}
    own = {name: load_config_file(path) for name, path in args.config_of}
    rows = [(name, name, own.get(name, {})) for name in args.world_models]
    rows += [(label, name, load_config_file(path)) for label, name, path in args.variant]
    agents = {}
    for label, name, extra in rows:
        config = {**base, **{k: {**base.get(k, {}), **v} for k, v in extra.items()}}
        agent = build_agent(args.env, name, config, args.seed)
        fill_buffer(agent, args.transitions, args.seed)
        agent.update()  # warm-up: optimiser state, first-call allocations
        agent.act(agent.env.observation_space.sample(), explore=True)
        agents[label] = agent
    observations = [
        agents[args.world_models[0]].env.observation_space.sample() for _ in range(args.plans)
    ]
    times: dict[str, dict[str, list[float]]] = {n: {"update": [], "plan": []} for n in agents}
    for _ in range(args.rounds):
        for name, agent in agents.items():
            times[name]["update"].append(time_calls(agent.update, args.updates, args.clock))
            agent.planner.reset()
            plans = plan_calls(agent, observations)
            times[name]["plan"].append(time_calls(plans, args.plans, args.clock))
    ref = args.world_models[0]
    params = {n: sum(p.numel() for p in a.model.parameters()) for n, a in agents.items()}
    print(
        f"\n{args.env}: {args.rounds} rounds x ({args.updates} updates, {args.plans} plans), "
        f"1 thread, device {agents[ref].device}, {args.clock} ms per call "
        "(median over rounds; min in brackets)\n"
    )
    print(f"| world model | params | update ms | plan ms | update / {ref} | plan / {ref} |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in agents:
        u, p = (statistics.median(times[name][k]) for k in ("update", "plan"))
        ur, pr = (statistics.median(times[ref][k]) for k in ("update", "plan"))
        print(
            f"| {name} | {params[name]} | {u:.1f} ({min(times[name]['update']):.1f}) | "
            f"{p:.1f} ({min(times[name]['plan']):.1f}) | {u / ur:.2f}x | {p / pr:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
