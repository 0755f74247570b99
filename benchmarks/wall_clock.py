"""Wall-clock to a return: SB3's SAC (defaults) and the agents on Pendulum-v1, seeds 1-3.

    python -m benchmarks.wall_clock                          # SAC, gru, geodesic; seeds 1-3
    python -m benchmarks.wall_clock --methods sac gru --seeds 1 2 --target -200
    python -m benchmarks.wall_clock --out benchmarks/results/wall_clock_1  # resume that folder

Every (method, seed) trains one after the other in this process, with one torch thread for all,
and is evaluated every `--every` env steps on the same `--episodes` episodes (agent.compare's
training and evaluation: `agent.comparison.runner.train_agent` / `train_sac`; training time
excludes evaluation, checkpoints and diagnostics). A run stops at the first evaluation whose
mean return reaches `--target` (or at `--steps`). Each finished run is saved at once in
OUT/results.json, and a rerun with the same --out skips what is there, so an interrupted
benchmark resumes run by run. The table: per method, the training wall time and env steps at
which each seed first reached the target, their median, the ratio of medians to SAC's, and
env steps per second of training.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from agent.comparison.config import CompareConfig
from agent.comparison.results import PointResult
from agent.comparison.runner import train_agent, train_sac
from agent.persistence.runs import fresh_dir

RESULTS = Path(__file__).resolve().parent / "results"


def run_one(config: CompareConfig, method: str, seed: int, run_dir: Path, target: float) -> dict:
    """Train `method` on `seed` until its evaluation reaches `target` (or config.steps)."""
    points: list[dict] = []

    def on_point(point: PointResult) -> bool:
        points.append(
            {
                "step": point.step,
                "mean": point.mean,
                "train_s": point.train_s,
                "eval_s": point.eval_s,
            }
        )
        print(
            f"  {method} seed {seed} @ {point.step}: {point.mean:.1f} "
            f"(training {point.train_s:.0f} s, evaluation {point.eval_s:.0f} s)",
            flush=True,
        )
        return point.mean < target  # False: the run stops here (an agent's with a checkpoint)

    start = time.perf_counter()
    if method == "sac":
        status = train_sac(config, seed, run_dir, on_point)
    else:
        status = train_agent(config, method, seed, run_dir, on_point)
    if status == "interrupted":
        raise KeyboardInterrupt
    reached = next((p for p in points if p["mean"] >= target), None)
    return {
        "method": method,
        "seed": seed,
        "status": status,
        "points": points,
        "reached_step": reached["step"] if reached else None,
        "reached_train_s": reached["train_s"] if reached else None,
        "wall_s": time.perf_counter() - start,
        "run_dir": str(run_dir),
    }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def table(results: list[dict], methods: list[str], target: float) -> list[str]:
    rows = {m: [r for r in results if r["method"] == m] for m in methods}
    med = {
        m: _median([r["reached_train_s"] for r in rs if r["reached_train_s"] is not None])
        for m, rs in rows.items()
    }
    lines = [
        f"\ntraining wall time (s, evaluation excluded) to a mean return >= {target}, "
        "per seed (env steps in brackets); '-' never reached",
        "",
        "| method | per seed | median s | / SAC | env steps/s |",
        "|---|---|---:|---:|---:|",
    ]
    for m, rs in rows.items():
        per = ", ".join(
            f"{r['seed']}: {r['reached_train_s']:.0f} ({r['reached_step']})"
            if r["reached_step"] is not None
            else f"{r['seed']}: -"
            for r in sorted(rs, key=lambda r: r["seed"])
        )
        steps = sum(r["points"][-1]["step"] for r in rs if r["points"])
        seconds = sum(r["points"][-1]["train_s"] for r in rs if r["points"])
        ratio = (
            f"{med[m] / med['sac']:.2f}x"
            if med.get(m) is not None and med.get("sac") not in (None, 0)
            else "-"
        )
        med_s = f"{med[m]:.0f}" if med[m] is not None else "-"
        rate = f"{steps / seconds:.1f}" if seconds else "-"
        lines.append(f"| {m} | {per} | {med_s} | {ratio} | {rate} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.wall_clock", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--methods", nargs="+", default=["sac", "gru", "geodesic"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--target", type=float, default=-200.0)
    parser.add_argument("--every", type=int, default=500, help="evaluate every N env steps")
    parser.add_argument("--steps", type=int, default=5000, help="longest run")
    parser.add_argument("--episodes", type=int, default=10, help="episodes per evaluation")
    parser.add_argument("--out", default=None, help="results folder (resumed if it exists)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out) if args.out else RESULTS / f"wall_clock_{int(time.time())}"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    results = json.loads(path.read_text())["runs"] if path.exists() else []
    done = {(r["method"], r["seed"]) for r in results}
    agents = tuple(m for m in args.methods if m != "sac")
    config = CompareConfig(
        env_id=args.env,
        seeds=max(args.seeds),
        steps=args.steps,
        points=tuple(range(args.every, args.steps + 1, args.every)),
        world_models=agents,
        sac="sac" in args.methods,
        episodes=args.episodes,
        overrides={"train": {"progress": False}},
    )
    print(f"{out}: {len(done)} runs already there", flush=True)
    try:
        for seed in args.seeds:
            for method in args.methods:
                if (method, seed) in done:
                    continue
                print(f"{method} seed {seed}", flush=True)
                run_dir = fresh_dir(out / "runs" / f"{method}__{seed}")
                results.append(run_one(config, method, seed, run_dir, args.target))
                path.write_text(json.dumps({"args": vars(args), "runs": results}, indent=2))
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; rerun with --out to resume", flush=True)
    print("\n".join(table(results, args.methods, args.target)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
