"""The seed's components knocked out one at a time on a DeepMind Control task, at a reduced and
stated budget: world-model quality, not return (docs/measurements.md, "Ablations on DMC").

A geodesic agent's 100k-step DMC run costs ~7 h of one core here, so the ablation rows of
`agent.compare --ablations` (3 seeds x 9 rows x 7 h) do not fit. This benchmark keeps what
decides between the rows, the world model the agent learns, and drops the return: per seed, one
fixed replay of uniformly random episodes of the task (the seed phase every DMC run starts with,
longer), the same for every row; each row's agent (configs/dmc.toml, agent.compare's
run_config, so exactly the agent of that row) trained from the same initialisation seed for
`--updates` of its own updates (world model, reward, value and policy prior together); then the
world model's open-loop prediction error against horizon on held-out random episodes
(agent/comparison/prediction.py: normalised RMS of decoded observations, 1 = predicting the
mean). The GRU agent's world model is the first row, for scale.

`memory-off` is left out: the open-loop rollouts here (and in agent.compare) carry no episodic
memory, so it would measure only the memory's effect on training. Per row and seed: the error at 1,
10 and 50 steps and its mean over 1..50, and the time per update; the table gives mean ± s.e.
over seeds and the paired difference against the full geodesic model (> 0: the row predicts
worse).

    python -m benchmarks.ablation_dmc                           # reacher-easy, 3 seeds, all rows
    python -m benchmarks.ablation_dmc --figure docs/figures/ablation_dmc.png   # and the figure
    python -m benchmarks.ablation_dmc --rows geodesic wilson-off --seeds 1 --updates 50

Each (seed, row) is saved in --out as it finishes; a rerun skips those already there.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from agent.comparison.ablations import ABLATIONS, FULL_MODEL
from agent.comparison.config import CompareConfig
from agent.comparison.prediction import HORIZON, open_loop_error
from agent.core.agent import Agent
from agent.core.config import load_config_file
from agent.persistence.runs import make_run_env
from benchmarks.ablation_disk import print_rows

os.environ.setdefault("MUJOCO_GL", "egl")
torch.set_num_threads(1)

NOT_HERE = {"memory-off": "open-loop rollouts carry no episodic memory"}
Episode = dict[str, np.ndarray]  # obs [T+1, O], action [T, A], reward [T], terminated [T]


def rows_of(names: list[str] | None) -> dict[str, str]:
    """{row: agent.compare method} of the GRU, the full model and the chosen ablations."""
    chosen = [n for n in (names or ["gru", FULL_MODEL, *ABLATIONS]) if n not in NOT_HERE]
    unknown = [n for n in chosen if n not in ("gru", FULL_MODEL, *ABLATIONS)]
    if unknown:
        known = ", ".join(["gru", FULL_MODEL, *ABLATIONS])
        raise SystemExit(f"unknown row(s) {unknown}; known: {known}")
    return {n: (ABLATIONS[n].row if n in ABLATIONS else n) for n in chosen}


def collect(config, seed: int, episodes: int) -> list[Episode]:
    """`episodes` whole episodes of uniformly random actions in the run's scaled env (the units
    the agent sees), the env and the actions seeded by `seed`."""
    env = make_run_env(config, seed=seed)
    env.action_space.seed(seed)
    out = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        ep = {"obs": [obs], "action": [], "reward": [], "terminated": []}
        done = False
        while not done:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(ep, (obs, action, reward, terminated), strict=True):
                ep[key].append(value)
            done = terminated or truncated
        out.append({k: np.asarray(v, np.float32) for k, v in ep.items()})
    env.close()
    return out


def run_row(compare: CompareConfig, method: str, seed: int, train, held_out, args) -> dict:
    agent = Agent(None, compare.run_config(method, seed))
    for ep in train:  # the same replay for every row, stored as the agent stores its own
        n = len(ep["action"])
        for t in range(n):
            agent.observe(
                ep["obs"][t], ep["action"][t], float(ep["reward"][t]), ep["obs"][t + 1],
                bool(ep["terminated"][t]), t == n - 1 and not ep["terminated"][t],
            )  # fmt: skip
    start = time.perf_counter()
    for _ in range(args.updates):
        agent.update()
    update_ms = 1e3 * (time.perf_counter() - start) / args.updates
    errors = open_loop_error(agent.model, [(ep["obs"], ep["action"]) for ep in held_out])
    return {
        "error": errors,
        "mean": float(np.mean(errors)),
        **{f"at{h}": errors[h - 1] for h in (1, 10, HORIZON)},
        "update_ms": update_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="dm_control/reacher-easy-v0")
    parser.add_argument("--config", default=str(Path(__file__).parent.parent / "configs/dmc.toml"))
    parser.add_argument("--rows", nargs="*", default=None, help="gru, geodesic, ablation names")
    parser.add_argument("--seeds", type=int, default=3, help="how many seeds")
    parser.add_argument("--first-seed", type=int, default=1, help="seeds run from this one on")
    parser.add_argument("--episodes", type=int, default=10, help="random training episodes")
    parser.add_argument("--held-out", type=int, default=4, help="random held-out episodes")
    parser.add_argument("--updates", type=int, default=600, help="agent updates per row")
    parser.add_argument("--out", default="runs/ablation_dmc", help="per-(seed, row) results")
    parser.add_argument("--figure", default=None, help="also draw the error against horizon here")
    args = parser.parse_args()
    rows = rows_of(args.rows)
    compare = CompareConfig(
        env_id=args.env, world_models=("gru", FULL_MODEL), sac=False,
        overrides=load_config_file(args.config),
    )  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    results: dict[str, dict[int, dict]] = {row: {} for row in rows}
    for seed in seeds:
        todo = [r for r in rows if not (out / f"{r}__seed{seed}.json").exists()]
        if todo:
            config = compare.run_config("gru", seed)
            train = collect(config, seed, args.episodes)
            held_out = collect(config, 10_000 + 100 * seed, args.held_out)
        for row, method in rows.items():
            path = out / f"{row}__seed{seed}.json"
            if row in todo:
                result = run_row(compare, method, seed, train, held_out, args)
                path.write_text(json.dumps(result))
                print(f"seed {seed} {row}: open-loop 1-50 {result['mean']:.4f}", flush=True)
            results[row][seed] = json.loads(path.read_text())
    print(
        f"\n{args.env}, configs/dmc.toml agents, seeds {list(seeds)}: {args.updates} updates on "
        f"{args.episodes} random episodes; open-loop error (normalised RMS) on {args.held_out} "
        "held-out random episodes, mean ± s.e. over seeds; paired: row − geodesic (> 0 worse)\n"
    )
    print("| row | at 1 | at 10 | at 50 | mean 1-50 | paired 1-50 | paired at 50 | update ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print_rows(results, seeds, ("at1", "at10", "at50", "mean"), ("mean", "at50"))
    for name, why in NOT_HERE.items():
        print(f"(left out: {name}: {why})")
    if args.figure:
        draw(results, list(seeds), Path(args.figure), f"{args.env}, {args.updates} updates")


def draw(results: dict[str, dict[int, dict]], seeds: list[int], path: Path, title: str) -> list:
    """Open-loop error against horizon, mean over `seeds`, one line per row. Labelled: the GRU,
    the full model and each ablation whose paired difference (mean over 1..50) is more than two
    standard errors from 0; the others in grey, unlabelled (they lie on the full model's line).
    Returns the labelled rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=90)
    horizon = np.arange(1, HORIZON + 1)
    full = results.get(FULL_MODEL)
    labelled = []
    for row, r in results.items():
        curve = np.mean([r[s]["error"] for s in seeds], axis=0)
        diff = [r[s]["mean"] - full[s]["mean"] for s in seeds] if full else [0.0]
        apart = len(diff) > 1 and abs(np.mean(diff)) > 2 * np.std(diff, ddof=1) / len(diff) ** 0.5
        if row in ("gru", FULL_MODEL) or apart:
            ax.plot(horizon, curve, lw=2.2 if row == FULL_MODEL else 1.4, label=row)
            labelled.append(row)
        else:
            ax.plot(horizon, curve, color="0.7", lw=0.8)
    ax.axhline(1.0, color="k", lw=0.5, ls=":")
    ax.set(xlabel="open-loop steps", ylabel="normalised RMS error (1: the mean)", title=title)
    ax.legend(fontsize=8, title="grey: within 2 s.e. of geodesic", title_fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"figure: {path}")
    return labelled


if __name__ == "__main__":
    main()
