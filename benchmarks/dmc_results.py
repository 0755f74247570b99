"""The DeepMind Control results (issue 45, item 2): the GRU agent, the geodesic agent and SAC on
pendulum-swingup, reacher-easy and cartpole-swingup, 3 seeds each, 50,000 decisions (100k
environment steps) under configs/dmc.toml, and the README's table.

Each (task, method, seed) is one `agent.compare` piece in --out/{task}/{method}-seed{K}, run as a
resumable queue (benchmarks/dmc_queue.py: a rerun continues unfinished pieces from their
checkpoints), `--jobs` at a time, one core each. A finished piece's results.json is kept as
docs/results/dmc/{task}/{method}-seed{K}.json; a kept piece counts only if it finished under
the configs/dmc.toml of now (its overrides equal the file's), else it is run again (a folder
started under an older file is moved aside to {method}-seed{K}.old-N, never resumed).

The table, per task at the last point: each method's mean over seeds ± its standard error (each
seed in brackets), the paired geodesic - GRU difference with its bootstrap 95% interval over
seeds, the published agents (agent/comparison/published.py), each run's training and evaluation
time, each world model's open-loop error (mean over 1..50 steps) and the geodesic agent's seed
003 nodes 67-70 at the end of each run. --figures DIR also writes each task's merged comparison
(learning curves with the published points, open-loop error).

A finished geodesic piece's nodes are computed once, when it is kept, by agent.diagnose's own
report (64 states of the run's final replay buffer) and kept as
docs/results/dmc/{task}/nodes/geodesic-seed{K}.json: its checkpoint is not kept.

    python -m benchmarks.dmc_results --jobs 2                               # run what is missing
    python -m benchmarks.dmc_results --tasks reacher-easy --methods gru sac
    python -m benchmarks.dmc_results --report-only --figures runs/dmc-figures  # where each
                                                   # unfinished piece stands, then the table
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from agent.cli import markdown_table
from agent.comparison.config import SAC
from agent.comparison.merge import load_comparison, merge_comparisons
from agent.comparison.report import plot_learning_curves, plot_prediction_error
from agent.comparison.results import Comparison
from agent.core.config import load_config_file
from agent.inspection.inspection import diagnose
from benchmarks.dmc_queue import ROOT, finished, keep_finished, run_queue

CONFIG = ROOT / "configs" / "dmc.toml"
TASKS = ("pendulum-swingup", "reacher-easy", "cartpole-swingup")
METHODS = ("gru", SAC, "geodesic")  # the queue's order: the cheap runs first
KEPT = ROOT / "docs" / "results" / "dmc"


def env_id(task: str) -> str:
    return f"dm_control/{task}-v0"


def arguments(task: str, method: str, seed: int) -> list[str]:
    """The agent.compare arguments of one piece."""
    models = [] if method == SAC else [method, "--no-sac"]
    return ["--env", env_id(task), "--config", str(CONFIG), "--world-models", *models,
            "--first-seed", str(seed), "--seeds", "1"]  # fmt: skip


def _older_config(path: Path) -> bool:
    """Whether `path` (a piece's folder or kept file) holds a comparison started under another
    configs/dmc.toml than the file of now."""
    path = path / "results.json" if path.is_dir() else path
    return path.is_file() and load_comparison(path).config.overrides != load_config_file(CONFIG)


def current(path: Path) -> bool:
    """Whether a kept piece finished under configs/dmc.toml as it is now."""
    return finished(path) and not _older_config(path)


def set_aside(folder: Path) -> Path | None:
    """Move a piece's folder started under an older configs/dmc.toml to `{folder}.old-N` (the
    queue would resume it under its own config), so that the piece starts again; its path."""
    if not _older_config(folder):
        return None
    n = 1
    while folder.with_name(f"{folder.name}.old-{n}").exists():
        n += 1
    return folder.rename(folder.with_name(f"{folder.name}.old-{n}"))


def pieces(task: str, methods: list[str], seeds: list[int], kept: Path) -> list[Path]:
    """The kept, current pieces of a task, the GRU's first (the paired table's reference)."""
    paths = [kept / task / f"{m}-seed{s}.json" for m in methods for s in seeds]
    return [p for p in paths if current(p)]


def progress(folder: Path) -> str:
    """Where an unfinished piece stands: its last evaluation, training and evaluation time."""
    if not (folder / "results.json").is_file():
        return "not started"
    comparison = load_comparison(folder)
    points = [p for run in comparison.runs for p in run.points]
    if not points:
        return f"started, no evaluation yet (of {comparison.config.steps:,} decisions)"
    last, evals = points[-1], [p.eval_s for p in points]
    stands = (
        f"{comparison.status}, evaluated at {last.step:,} of {comparison.config.steps:,} "
        f"decisions ({last.train_s:,.0f} s of training, {sum(evals):,.0f} s of evaluation"
    )
    left = time_left(points, comparison.config.steps, comparison.config.points)
    return stands + (
        f"; ~{left:,.0f} s ({left / 3600:.1f} h) left at its recent pace)" if left else ")"
    )


def time_left(points: list, steps: int, schedule: tuple[int, ...]) -> float:
    """Seconds a piece still needs: its training at the pace between its last two evaluations
    (from its start if it has one), its evaluations still due at their mean time so far."""
    last = points[-1]
    step, train_s = (points[-2].step, points[-2].train_s) if len(points) > 1 else (0, 0.0)
    pace = (last.train_s - train_s) / (last.step - step)
    due = sum(1 for step in schedule if step > last.step)
    return (steps - last.step) * pace + due * float(np.mean([p.eval_s for p in points]))


NODE_STATES = 64


def nodes_path(kept: Path) -> Path:
    """Where a kept piece's nodes 67-70 are kept: {task}/nodes/{method}-seed{K}.json (a folder
    of their own, so that a glob over the task's pieces finds comparisons only)."""
    return kept.parent / "nodes" / kept.name


def _run_dir(path: Path) -> str:
    """The one run's folder of a piece (its folder or kept results file)."""
    (run,) = load_comparison(path).runs
    return run.run_dir


def _kept_nodes(kept: Path) -> dict | None:
    """The nodes kept for a kept piece, if they are of its run (not of one set aside)."""
    out = nodes_path(kept)
    if not out.is_file():
        return None
    nodes = json.loads(out.read_text())
    return nodes if nodes.get("run_dir") == _run_dir(kept) else None


def keep_nodes(folder: Path, kept: Path) -> bool:
    """Seed 003's nodes 67-70 and the diagnostics/ scalars of a finished geodesic piece's final
    agent (agent.diagnose's geometric report on NODE_STATES buffer states), written to
    nodes_path(kept) unless they are there for this run already; whether they were written."""
    if not finished(folder) or not current(kept) or _kept_nodes(kept) is not None:
        return False
    run_dir = _run_dir(folder)
    report = diagnose(run_dir, NODE_STATES)
    if report["geometric"] is None:
        return False
    out = nodes_path(kept)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"run_dir": run_dir, "step": report["step"], **report["geometric"]}, indent=1)
    out.write_text(text + "\n")
    return True


def nodes_cell(kept: list[Path]) -> str:
    """Per geodesic seed: 'pass' when every node is within its threshold, else each crossed node
    with its value (the worst query) and, where the node gives one, its mean over the queries."""
    cells = []
    for path in kept:
        if (nodes := _kept_nodes(path)) is None:
            continue
        crossed = []
        for node in nodes["nodes"]:
            if not node["passed"]:
                value, mean = node["value"], node["extra"].get("mean")
                tail = "" if mean is None else f" (mean {mean:.2g})"
                crossed.append(f"{node['node']}: {value:.2g}{tail}")
        cells.append(", ".join(crossed) or "pass")
    return " / ".join(cells) or "—"


def _cell(values: dict[int, float], fmt: str = "{:.1f}") -> str:
    """'mean ± s.e. (seed / seed / ...)' over seeds; the value alone for one seed."""
    v = np.array(list(values.values()))
    inner = " / ".join(fmt.format(x) for x in v)
    if v.size == 1:
        return inner
    return f"{fmt.format(v.mean())} ± {fmt.format(v.std(ddof=1) / np.sqrt(v.size))} ({inner})"


def task_rows(comparison: Comparison) -> dict[str, str]:
    """One task's cells, at the comparison's last point."""
    step = comparison.config.points[-1]
    cells: dict[str, str] = {}
    for method in METHODS:
        reached = comparison.points_of(method, step)
        runs = [r for r in comparison.runs if r.method == method]
        if not reached:
            cells[method] = "—"
            continue
        cells[method] = _cell({seed: point.mean for seed, point in reached})
        cells[f"{method} time"] = " / ".join(
            f"{r.points[-1].train_s:,.0f} + {sum(p.eval_s for p in r.points):,.0f} s"
            for r in runs
            if r.at(step) is not None
        )
        errors = [float(np.mean(p.open_loop_error)) for _, p in reached if p.open_loop_error]
        if errors:
            cells[f"{method} open-loop"] = f"{np.mean(errors):.2f}"
    cells["open-loop"] = " / ".join(cells.get(f"{m} open-loop", "—") for m in ("gru", "geodesic"))
    paired = [
        row
        for row in comparison.paired()
        if row.method == "geodesic" and row.reference == "gru" and row.step == step
    ]
    if paired:
        (row,) = paired
        interval = "" if row.ci_low is None else f" [{row.ci_low:+.1f}, {row.ci_high:+.1f}]"
        cells["geodesic - gru"] = f"{row.mean_diff:+.1f}{interval} ({row.seeds} seeds)"
    return cells


COLUMNS = (
    ("GRU agent", "gru"),
    ("geodesic agent", "geodesic"),
    ("SAC here", SAC),
    ("geodesic − GRU [95%]", "geodesic - gru"),
    ("open-loop error GRU / geodesic", "open-loop"),
    ("time per run GRU (train + eval)", "gru time"),
    ("geodesic", "geodesic time"),
    ("SAC", f"{SAC} time"),
    ("nodes 67-70, geodesic (crossed: worst query, mean)", "nodes"),
)


def report(tasks: list[str], methods: list[str], seeds: list[int], kept: Path,
           figures: Path | None) -> str:  # fmt: skip
    """The markdown table of the kept, current pieces (and each task's figures in `figures`)."""
    rows = []
    for task in tasks:
        found = pieces(task, methods, seeds, kept)
        if not found:
            rows.append([task, *["—"] * len(COLUMNS)])
            continue
        comparison = merge_comparisons(found, out=(figures or Path()) / task)
        cells = task_rows(comparison)
        cells["nodes"] = nodes_cell([p for p in found if p.name.startswith("geodesic-")])
        rows.append([task, *(cells.get(key, "—") for _, key in COLUMNS)])
        if figures is not None:
            comparison.out.mkdir(parents=True, exist_ok=True)
            comparison.save()
            plot_learning_curves(comparison)
            plot_prediction_error(comparison)
    return "\n".join(markdown_table(["task", *(name for name, _ in COLUMNS)], rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one core each)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "dmc-results")
    parser.add_argument("--keep", type=Path, default=KEPT)
    parser.add_argument("--figures", type=Path, default=None, help="write each task's merged "
                        "comparison and figures in FIGURES/{task}")  # fmt: skip
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    methods = [m for m in METHODS if m in args.methods]  # the GRU first: the reference
    jobs = [
        (args.out / task / f"{m}-seed{s}", arguments(task, m, s))
        for m in methods
        for task in args.tasks
        for s in args.seeds
        if not current(args.keep / task / f"{m}-seed{s}.json")
    ]
    if not args.report_only:
        for folder, _ in jobs:
            if (old := set_aside(folder)) is not None:
                print(f"{folder.parent.name}/{folder.name} ran under an older configs/dmc.toml: "
                      f"moved to {old.name}, starting again")  # fmt: skip
        run_queue(jobs, args.jobs)
    for folder, _ in jobs:
        kept = args.keep / folder.parent.name / f"{folder.name}.json"
        if not _older_config(folder) and keep_finished(folder, kept):
            print(f"kept {folder.parent.name}/{folder.name}")
        elif args.report_only:
            print(f"{folder.parent.name}/{folder.name}: {progress(folder)}")
    for task in args.tasks if "geodesic" in methods else ():
        for seed in args.seeds:
            folder = args.out / task / f"geodesic-seed{seed}"
            if keep_nodes(folder, args.keep / task / f"{folder.name}.json"):
                print(f"kept {task}/{folder.name}'s nodes 67-70")
    print(report(args.tasks, methods, args.seeds, args.keep, args.figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
