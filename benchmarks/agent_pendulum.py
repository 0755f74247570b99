"""Sample efficiency and speed of the GRU agent on Pendulum-v1, side by side with SB3's SAC.

    python benchmarks/agent_pendulum.py                       # 3 seeds, evals at 1k/2.5k/5k/10k
    python benchmarks/agent_pendulum.py --seeds 1 --at 1000 2500 --no-sac
    python benchmarks/agent_pendulum.py --config tuned.json   # RunConfig overrides by section

For every seed: train the agent with `agent.train`'s default config (the `Trainer` loop, no
logging) and stop at each evaluation point to run `--episodes` deterministic episodes on the
fixed evaluation seeds 10000 + k. Training and evaluation wall times are measured separately
(training alone excludes evaluation). Then SAC("MlpPolicy") with SB3's default settings is
trained on the same seeds in the same process, with the same threads setting, and evaluated
on the same episodes, so the wall-time ratio is measured side by side. Prints the tables and
writes a JSON record to benchmarks/results/ (git-ignored).

Targets (issue 3): >= -180 mean eval return at 2.5k env steps, >= -160 at 5k, over 3 seeds x 10
episodes; no seed below -250 at any evaluation after 3k; planning >= 30 Hz; training alone to 5k
steps <= 3x SAC's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.agent import Agent  # noqa: E402
from agent.config import RunConfig, load_config_file  # noqa: E402
from agent.evaluate import run_episodes  # noqa: E402
from agent.loop import Trainer  # noqa: E402
from envs import make_env  # noqa: E402

EVAL_SEED = 10_000


def eval_sac(model, env, episodes: int) -> np.ndarray:
    returns = np.zeros(episodes)
    for k in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + k)
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            returns[k] += float(reward)
            done = bool(terminated or truncated)
    return returns


def run_agent(seed: int, points: list[int], episodes: int, overrides: dict) -> dict:
    data = {
        "train": {
            "seed": seed,
            "steps": max(points),
            "progress": False,
            "eval_every": 0,
            "eval_seed": EVAL_SEED,
        }
    }
    config = RunConfig.from_dict(overrides)
    config = RunConfig.from_dict(data, base=config)
    agent = Agent(None, config)
    trainer = Trainer(agent)
    eval_env = make_env(config.train.env_id)
    out = {"returns": {}, "train_s": {}, "eval_s": {}, "train_cpu_s": {}}
    train_s = cpu_s = 0.0
    for point in points:
        start, cpu = time.perf_counter(), time.process_time()
        trainer.run(point)
        train_s += time.perf_counter() - start
        cpu_s += time.process_time() - cpu
        out["train_cpu_s"][point] = cpu_s
        start = time.perf_counter()
        plans, plan_s = agent.timing["plans"], agent.timing["plan_s"]
        returns = run_episodes(agent, eval_env, episodes, EVAL_SEED)
        agent.timing["plans"], agent.timing["plan_s"] = plans, plan_s  # training's only
        out["eval_s"][point] = time.perf_counter() - start
        out["returns"][point] = returns.tolist()
        out["train_s"][point] = train_s
        print(
            f"  agent seed {seed} @ {point}: {returns.mean():8.1f} +- {returns.std():6.1f}  "
            f"(train {train_s:6.0f} s, eval {out['eval_s'][point]:5.0f} s)",
            flush=True,
        )
    t = agent.timing
    out["plan_ms"] = 1e3 * t["plan_s"] / max(t["plans"], 1)
    out["update_ms"] = 1e3 * t["update_s"] / max(t["updates"], 1)
    out["updates"] = t["updates"]
    return out


def run_sac(seed: int, points: list[int], episodes: int) -> dict:
    from stable_baselines3 import SAC

    env = make_env("Pendulum-v1", seed=seed)
    eval_env = make_env("Pendulum-v1")
    model = SAC("MlpPolicy", env, seed=seed, verbose=0)
    out = {"returns": {}, "train_s": {}, "eval_s": {}, "train_cpu_s": {}}
    train_s, cpu_s, done = 0.0, 0.0, 0
    for point in points:
        start, cpu = time.perf_counter(), time.process_time()
        model.learn(point - done, reset_num_timesteps=done == 0)
        train_s += time.perf_counter() - start
        cpu_s += time.process_time() - cpu
        out["train_cpu_s"][point] = cpu_s
        done = point
        start = time.perf_counter()
        returns = eval_sac(model, eval_env, episodes)
        out["eval_s"][point] = time.perf_counter() - start
        out["returns"][point] = returns.tolist()
        out["train_s"][point] = train_s
        print(
            f"  SAC   seed {seed} @ {point}: {returns.mean():8.1f} +- {returns.std():6.1f}  "
            f"(train {train_s:6.0f} s)",
            flush=True,
        )
    return out


def table(title: str, runs: dict[int, dict], points: list[int]) -> list[str]:
    lines = [
        f"\n{title}",
        "| env steps | mean return | std over episodes | per seed |",
        "| --- | --- | --- | --- |",
    ]
    for p in points:
        per_seed = [float(np.mean(r["returns"][p])) for r in runs.values()]
        allr = np.concatenate([r["returns"][p] for r in runs.values()])
        lines.append(
            f"| {p} | {allr.mean():.1f} | {allr.std():.1f} | "
            + ", ".join(f"{x:.0f}" for x in per_seed)
            + " |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds (1..N)")
    parser.add_argument(
        "--at",
        type=int,
        nargs="+",
        default=[1000, 2500, 5000, 10_000],
        help="evaluation points in env steps",
    )
    parser.add_argument("--episodes", type=int, default=10, help="eval episodes per point")
    parser.add_argument("--config", default=None, help="JSON/TOML RunConfig overrides")
    parser.add_argument("--no-sac", action="store_true", help="skip the SAC reference")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the agent does (TrainConfig.single_thread); SAC shares it
    overrides = load_config_file(args.config) if args.config else {}
    points = sorted(args.at)
    seeds = list(range(1, args.seeds + 1))
    load_before = os.getloadavg()
    print(f"load average before: {load_before}; torch threads {torch.get_num_threads()}")
    agent_runs = {s: run_agent(s, points, args.episodes, overrides) for s in seeds}
    sac_runs = {} if args.no_sac else {s: run_sac(s, points, args.episodes) for s in seeds}
    load_after = os.getloadavg()

    lines = table(
        f"GRU agent, Pendulum-v1, {len(seeds)} seeds x {args.episodes} episodes", agent_runs, points
    )
    if sac_runs:
        lines += table("SAC (SB3 defaults), same seeds and episodes", sac_runs, points)
    lines += ["\n| quantity | GRU agent | SAC | ratio |", "| --- | --- | --- | --- |"]
    for p in points:
        a = np.mean([r["train_s"][p] for r in agent_runs.values()])
        s = np.mean([r["train_s"][p] for r in sac_runs.values()]) if sac_runs else float("nan")
        lines.append(
            f"| training wall time to {p} steps (s, mean over seeds) | {a:.0f} | "
            f"{s:.0f} | {a / s:.2f}x |"
        )
        a = np.mean([r["train_cpu_s"][p] for r in agent_runs.values()])
        s = np.mean([r["train_cpu_s"][p] for r in sac_runs.values()]) if sac_runs else float("nan")
        lines.append(
            f"| training CPU time to {p} steps (s, mean over seeds) | {a:.0f} | "
            f"{s:.0f} | {a / s:.2f}x |"
        )
    last = points[-1]
    ev = np.mean([sum(r["eval_s"].values()) for r in agent_runs.values()])
    ev_sac = np.mean([sum(r["eval_s"].values()) for r in sac_runs.values()]) if sac_runs else 0
    lines.append(
        f"| evaluation wall time, all points (s, mean over seeds) | {ev:.0f} | {ev_sac:.0f} | |"
    )
    sps = np.mean([last / r["train_s"][last] for r in agent_runs.values()])
    sps_sac = (
        np.mean([last / r["train_s"][last] for r in sac_runs.values()])
        if sac_runs
        else float("nan")
    )
    lines.append(f"| env steps/s in training (to {last}) | {sps:.1f} | {sps_sac:.1f} | |")
    plan_ms = np.mean([r["plan_ms"] for r in agent_runs.values()])
    upd_ms = np.mean([r["update_ms"] for r in agent_runs.values()])
    lines.append(f"| planning (ms per plan / Hz) | {plan_ms:.1f} / {1e3 / plan_ms:.1f} Hz | | |")
    lines.append(f"| updates (ms per update / updates/s) | {upd_ms:.1f} / {1e3 / upd_ms:.1f} | | |")
    after3k = [
        float(np.mean(r["returns"][p])) for r in agent_runs.values() for p in points if p > 3000
    ]
    if after3k:
        lines.append(f"| worst seed mean after 3k steps | {min(after3k):.1f} | | |")
    lines.append(f"\nload average before {load_before}, after {load_after} (2 cores)")
    print("\n".join(lines))
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(exist_ok=True)
    record = {
        "agent": agent_runs,
        "sac": sac_runs,
        "points": points,
        "overrides": overrides,
        "load_before": load_before,
        "load_after": load_after,
    }
    path = out_dir / f"agent_pendulum_{int(time.time())}.json"
    path.write_text(json.dumps(record, indent=1))
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
