"""Data-parallel training against one process, on the same seeds and evaluation episodes: the
return reached, the update-to-data ratio, and the wall time, W gloo ranks (`torchrun
--nproc-per-node W -m agent.train`, agent/core/distributed.py) beside `python -m agent.train` with
one env and with W env copies (`--num-envs W`: the same collection as the W ranks', one copy
each, in one process).

    python -m benchmarks.data_parallel                          # GRU, Pendulum-v1, seeds 1-3, 5k
    python -m benchmarks.data_parallel --seeds 1 --steps 2500 --ranks 2
    python -m benchmarks.data_parallel --world-model geodesic --out benchmarks/results/dp_geo

Each run is `agent.train` with the defaults plus `--train.eval_every 2500 --train.eval_episodes
10`: every run is evaluated on the same 10 episodes (fixed reset seeds) at 2.5k and at the end.
The runs are resumable: a run whose checkpoint has reached --steps is read back, not rerun; an
unfinished one is resumed (its wall time is the sum of its pieces). The table reads the
evaluations from each run's TensorBoard events and the counters from its checkpoint. Wall time
is a whole process's, start-up included; the ranks share this machine's cores.

`--episodes N` (default 50) then evaluates every run's final checkpoint on N more episodes
(reset seeds 20000 ..., the same for every run, disjoint from training's), cached in the run
folder, and prints each arm's mean ± standard error and the paired differences: 10 episodes
place a near-optimal Pendulum policy only to about one extra swing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agent.core.agent import Agent
from agent.core.episodes import run_episodes
from agent.persistence.runs import make_run_vector_env

ROOT = Path(__file__).resolve().parent.parent
EVAL_SEED = 20_000  # the extra evaluation's episodes: disjoint from training's 10000..10009


def _run_dir(out: Path, name: str) -> Path | None:
    runs = sorted((out / name).glob("*/checkpoint.pt")) if (out / name).is_dir() else []
    return runs[-1].parent if runs else None


def train(
    out: Path, name: str, ranks: int, seed: int, args: argparse.Namespace, num_envs: int = 1
) -> Path:
    """Train (or finish) one run; returns its folder. Wall seconds accumulate in wall.json."""
    run = _run_dir(out, name)
    if run is not None:
        state = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
        if state["agent"]["counters"]["num_timesteps"] >= args.steps:
            return run
        flags = ["--resume", str(run), "--steps", str(args.steps)]
    else:
        flags = ["--env", args.env, "--world-model", args.world_model, "--seed", str(seed)]
        flags += ["--steps", str(args.steps), "--logdir", str(out / name)]
        flags += ["--train.eval_every", "2500", "--train.eval_episodes", "10"]
        flags += ["--num-envs", str(num_envs)] if num_envs > 1 else []
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    print(f"{name}: {' '.join(flags[:2])} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    done = subprocess.run([*launcher, "-m", "agent.train", *flags], env=env, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{name} failed (exit {done.returncode}); rerun to resume it")
    run = _run_dir(out, name)
    wall = run / "wall.json"
    pieces = json.loads(wall.read_text()) if wall.is_file() else []
    wall.write_text(json.dumps([*pieces, elapsed]))
    return run


def read(run: Path) -> dict[str, Any]:
    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    evals = {int(e.step): e.value for e in events.Scalars("eval/mean_return")}
    state = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
    counters = state["agent"]["counters"]
    wall = run / "wall.json"
    return {
        "run": run,
        "eval": evals,
        "updates_per_step": counters["num_updates"] / counters["num_timesteps"],
        "wall_s": sum(json.loads(wall.read_text())) if wall.is_file() else float("nan"),
    }


def final_returns(run: Path, episodes: int) -> np.ndarray:
    """The run's final agent on `episodes` deterministic episodes reset with EVAL_SEED + k
    (cached in the run folder)."""
    cache = run / f"final_returns_{EVAL_SEED}_{episodes}.json"
    if cache.is_file():
        return np.array(json.loads(cache.read_text()))
    torch.set_num_threads(1)
    agent = Agent.load(run / "checkpoint.pt")
    env = make_run_vector_env(agent.config, episodes)
    returns = run_episodes(agent.policy(EVAL_SEED), env, episodes, EVAL_SEED)
    env.close()
    cache.write_text(json.dumps(returns.tolist()))
    return returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--world-model", default="gru")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=50,
                        help="extra evaluation episodes of each final agent (0: none)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/data_parallel")
    args = parser.parse_args()
    out = args.out / f"{args.env.replace('/', '-')}_{args.world_model}"
    w, rows = args.ranks, []
    for seed in args.seeds:
        one = read(train(out, f"single-{seed}", 1, seed, args))
        copies = read(train(out, f"copies{w}-{seed}", 1, seed, args, num_envs=w))
        many = read(train(out, f"ranks{w}-{seed}", w, seed, args))
        rows.append((seed, one, copies, many))
        if args.episodes:
            for arm in (one, copies, many):
                arm["final"] = final_returns(arm["run"], args.episodes)
    n = args.steps
    print(f"\n{args.env}, {args.world_model} agent, {n} env steps: 1 process (1 env; {w} env "
          f"copies) against {w} gloo ranks (torchrun, 1 copy each), the same 10 evaluation "
          f"episodes\n")  # fmt: skip
    print(f"| seed | 2.5k: 1 env / {w} copies / {w} ranks | {n}: 1 env / {w} copies / {w} ranks "
          f"| updates / env step | wall s |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|")
    finals = []
    for seed, *runs in rows:
        early = " / ".join(f"{r['eval'].get(2500, np.nan):.1f}" for r in runs)
        finals.append([r["eval"].get(n, np.nan) for r in runs])
        late = " / ".join(f"{x:.1f}" for x in finals[-1])
        ratio = " / ".join(f"{r['updates_per_step']:.4f}" for r in runs)
        wall = " / ".join(f"{r['wall_s']:.0f}" for r in runs)
        print(f"| {seed} | {early} | {late} | {ratio} | {wall} |")
    f = np.array(finals)  # [seeds, 3]
    print(f"| mean | | {' / '.join(f'{x:.1f}' for x in f.mean(0))} | | |\n")
    for j, name in ((0, "1 process, 1 env"), (1, f"1 process, {w} copies")):
        diff = f[:, 2] - f[:, j]
        sem = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
        print(f"{w} ranks minus {name} at {n}, paired by seed: {diff.mean():+.1f} ± {sem:.1f} "
              f"(s.e.)")  # fmt: skip

    if args.episodes:
        m = args.episodes
        print(f"\nFinal agents on {m} more episodes (seeds {EVAL_SEED}..), mean ± s.e.:\n")
        print(f"| seed | 1 env | {w} copies | {w} ranks | {w} ranks − 1 env | "
              f"{w} ranks − {w} copies |")  # fmt: skip
        print("|---:|---:|---:|---:|---:|---:|")
        pooled = []
        for seed, *runs in rows:
            r = [x["final"] for x in runs]
            pooled.append(r)
            cell = [f"{x.mean():.1f} ± {x.std(ddof=1) / np.sqrt(m):.1f}" for x in r]
            cell += [f"{d.mean():+.1f} ± {d.std(ddof=1) / np.sqrt(m):.1f}"
                     for d in (r[2] - r[0], r[2] - r[1])]  # fmt: skip
            print(f"| {seed} | {' | '.join(cell)} |")
        r = [np.concatenate(x) for x in zip(*pooled, strict=True)]
        cell = [f"{x.mean():.1f} ± {x.std(ddof=1) / np.sqrt(len(x)):.1f}" for x in r]
        cell += [f"{d.mean():+.1f} ± {d.std(ddof=1) / np.sqrt(len(d)):.1f}"
                 for d in (r[2] - r[0], r[2] - r[1])]  # fmt: skip
        print(f"| all | {' | '.join(cell)} |")


if __name__ == "__main__":
    main()
