"""Why the GRU agent trails TD-MPC2 on a DeepMind Control task: the agent's departures from
TD-MPC2 put back one at a time, each paired against the configuration they depart from at a
reduced budget (issue 45, item 1; docs/measurements.md, "DMC departures from TD-MPC2").

Every row is a full `agent.compare` run of the GRU agent under configs/dmc.toml as it was before
these runs put three departures back into it (BEFORE_FIX: 2 Q heads without dropout, encoder
128 wide with 1 layer, GRU latent 128) with one change (below; "current" is that configuration
unchanged), `--steps` decisions (default 15,000 = 30k environment steps at action repeat 2),
evaluated like the results runs: 10 deterministic episodes on seeds
10000..10009 every 5,000 decisions, so every row meets the same episodes. Per row: the final
mean return and its hit rate (episodes above 500: reacher's returns split into hits near 1000
and misses near 0), the mean over the evaluation points, the paired difference from "current"
(per seed, and the percentile-bootstrap 95% interval over the seed x episode pairs: it holds
the evaluation noise, not the spread between seeds, which two seeds cannot estimate), the world
model's open-loop error (mean over 1..50 steps, final point) and the cost per decision.

    python -m benchmarks.dmc_departures                              # all rows, seeds 1-2
    python -m benchmarks.dmc_departures --rows current lr --jobs 2   # two runs at a time
    python -m benchmarks.dmc_departures --rows batch+q-ensemble      # two put back together
    python -m benchmarks.dmc_departures --report-only                # the table of what ran

Each (row, seed) runs in --out/{row}-seed{K}; a rerun resumes unfinished runs from their last
checkpoint and skips finished ones. Finished runs' results.json are copied to --keep (measured
numbers only).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from agent.comparison.merge import load_comparison
from agent.comparison.stats import paired_differences
from agent.core.config import load_config_file, merge_tables
from benchmarks.dmc_queue import ROOT, finished, keep_finished, run_queue

DMC = ROOT / "configs" / "dmc.toml"
# what configs/dmc.toml held before the Q ensemble, the encoder and the GRU's latent were put
# back (2026-12-07): every row departs from it, so that the kept rows stay comparable with
# "current"
BEFORE_FIX = {
    "model": {"num_q": 2, "q_dropout": 0.0},
    "dynamics": {"encoder_dim": 128, "encoder_layers": 1, "gru": {"latent_dim": 128}},
}
HIT = 500.0
# row -> (what it puts back from TD-MPC2, the overrides by section); TD-MPC2's values from its
# config.yaml (docs/measurements.md, "DMC departures from TD-MPC2", lists them)
ROWS: dict[str, tuple[str, dict]] = {
    "current": ("configs/dmc.toml before 2026-12-07, unchanged", {}),
    "lr": ("learning rate 3e-4 (1e-3)", {"agent": {"lr": 3e-4}}),
    "batch": ("batch 256 (128)", {"agent": {"batch_size": 256}}),
    "q-ensemble": ("5 Q heads, dropout 0.01 (2, none)", {"model": {"num_q": 5, "q_dropout": 0.01}}),
    "planner": (
        "MPPI 512 samples x 6 iterations, 64 elites, 24 policy samples (256 x 4, 32, 12)",
        {"planner": {"num_samples": 512, "iterations": 6, "num_elites": 64, "num_pi_trajs": 24}},
    ),
    "heads": ("head width 512 (128)", {"model": {"hidden_dim": 512}}),
    "latent": ("GRU latent 512 (128)", {"dynamics": {"gru": {"latent_dim": 512}}}),
    "latent-256": (
        "GRU latent 256 (128; TD-MPC2 512, at a third of its cost)",
        {"dynamics": {"gru": {"latent_dim": 256}}},
    ),
    "encoder": (
        "encoder 256 wide, 2 layers (128, 1)",
        {"dynamics": {"gru": {"encoder_dim": 256, "encoder_layers": 2}}},
    ),
}


def base() -> dict:
    """The overrides every row departs from: configs/dmc.toml with BEFORE_FIX."""
    return merge_tables(load_config_file(DMC), BEFORE_FIX)


def row(name: str) -> tuple[str, dict]:
    """A row's description and overrides; "a+b" puts back rows a and b together."""
    parts = name.split("+")
    unknown = [p for p in parts if p not in ROWS or p == "current"]
    if len(parts) == 1 and name in ROWS:
        return ROWS[name]
    if unknown or len(set(parts)) < len(parts):
        raise argparse.ArgumentTypeError(
            f"{name!r}: a row is one of {', '.join(ROWS)}, or several of them joined by '+'"
        )
    overrides: dict = {}
    for part in parts:
        overrides = merge_tables(overrides, ROWS[part][1])
    return " and ".join(ROWS[p][0] for p in parts), overrides


def _row_name(name: str) -> str:
    row(name)  # argparse's check
    return name


def arguments(row_name: str, seed: int, env_id: str, steps: int, out: Path) -> list[str]:
    """The agent.compare arguments of one run (its config file written beside its folder)."""
    config = out.with_suffix(".json")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(merge_tables(base(), row(row_name)[1]), indent=1))
    return ["--env", env_id, "--config", str(config), "--steps", str(steps),
            "--world-models", "gru", "--no-sac", "--first-seed", str(seed),
            "--seeds", "1"]  # fmt: skip


def record(path: Path) -> dict | None:
    """A finished run's numbers (its kept results file): returns per point, open-loop error,
    cost per decision; None if it has not finished."""
    if not finished(path):
        return None
    (run,) = load_comparison(path).runs
    last = run.points[-1]
    return {
        "final": np.asarray(last.returns),  # [episodes]
        "points": np.asarray([p.returns for p in run.points]).mean(axis=1),  # [points]
        "open_loop": float(np.mean(last.open_loop_error)) if last.open_loop_error else None,
        "plan_ms": last.plan_ms,
        "update_ms": last.update_ms,
    }


def report(rows: list[str], seeds: list[int], keep: Path) -> str:
    """The markdown table of the rows (and "current") from their kept results files."""
    recs = {(r, s): record(keep / f"{r}-seed{s}.json") for r in ["current", *rows] for s in seeds}
    lines = [
        "| row | final return (mean ± s.e. over seeds) | hits | mean over points | paired "
        "difference per seed | 95% interval (seed x episode pairs) | open-loop error | "
        "ms per update / plan |",
        "|---|---:|---:|---:|---|---|---:|---:|",
    ]
    for name in dict.fromkeys(["current", *rows]):
        got = [recs[name, s] for s in seeds]
        if any(g is None for g in got):
            lines.append(f"| {name} | (not finished) | | | | | | |")
            continue
        finals = np.array([g["final"].mean() for g in got])  # [seeds]
        se = f"{finals.std(ddof=1) / np.sqrt(len(finals)):.1f}" if len(finals) > 1 else "—"
        hits = np.mean([g["final"] > HIT for g in got])
        area = np.mean([g["points"].mean() for g in got])
        diff, interval = "—", "—"
        base = [recs["current", s] for s in seeds]
        if name != "current" and all(b is not None for b in base):
            per_seed = [
                g["final"].mean() - b["final"].mean() for g, b in zip(got, base, strict=True)
            ]
            pairs = np.concatenate(
                [g["final"] - b["final"] for g, b in zip(got, base, strict=True)]
            )
            _, _, low, high = paired_differences(pairs)
            diff = ", ".join(f"{d:+.0f}" for d in per_seed)
            interval = f"[{low:+.0f}, {high:+.0f}]"
        ol = [g["open_loop"] for g in got if g["open_loop"] is not None]
        update, plan = (np.mean([g[k] for g in got]) for k in ("update_ms", "plan_ms"))
        cost = f"{update:.0f} / {plan:.0f}"
        lines.append(
            f"| {name} | {finals.mean():.1f} ± {se} | {100 * hits:.0f}% | {area:.1f} | {diff} "
            f"| {interval} | {np.mean(ol):.2f} | {cost} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="dm_control/reacher-easy-v0")
    rows_help = f"rows: {', '.join(ROWS)}; 'a+b' puts back a and b together"
    parser.add_argument("--rows", nargs="+", default=list(ROWS), type=_row_name, metavar="ROW",
                        help=rows_help)  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--steps", type=int, default=15_000, help="decisions per run")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one core each)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "dmc-departures")
    parser.add_argument("--keep", type=Path, default=ROOT / "docs/results/dmc/departures")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    task = args.env.split("/")[-1].removesuffix("-v0")
    out, keep = args.out / task, args.keep / task
    rows = list(dict.fromkeys(["current", *args.rows]))
    folders = [out / f"{name}-seed{seed}" for name in rows for seed in args.seeds]
    if not args.report_only:
        jobs = [(out / f"{r}-seed{s}", arguments(r, s, args.env, args.steps, out / f"{r}-seed{s}"))
                for r in rows for s in args.seeds]  # fmt: skip
        run_queue(jobs, args.jobs)
    for folder in folders:
        keep_finished(folder, keep / f"{folder.name}.json")
    print(f"\n{task}, GRU agent, {args.steps} decisions, seeds {args.seeds}")
    for name in rows:
        print(f"  {name}: {row(name)[0]}")
    print(report(rows, args.seeds, keep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
