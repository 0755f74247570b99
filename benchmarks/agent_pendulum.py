"""Sample efficiency and speed of the agent on Pendulum-v1, side by side with SB3's SAC.

    python -m benchmarks.agent_pendulum                       # GRU agent, 3 seeds, 1k..10k steps
    python -m benchmarks.agent_pendulum --seeds 1 --at 1000 2500 --no-sac
    python -m benchmarks.agent_pendulum --world-models gru geodesic --config tuned.json

This is `python -m agent.compare` (agent/compare.py does the training, evaluation, SAC and the
table) with the benchmark's defaults: the GRU agent, evaluation points 1k, 2.5k, 5k and 10k, and
the output in benchmarks/results/agent_pendulum_{time}/ (git-ignored). After compare's table it
prints what issue 3 set targets for, per world model: CPU times, evaluation time, throughput,
the worst seed, and each target met or missed.

Targets (issue 3): >= -180 mean eval return at 2.5k env steps, >= -160 at 5k, over 3 seeds x 10
episodes; no seed below -250 at any evaluation after 3k; planning >= 30 Hz; training alone to 5k
steps <= 3x SAC's wall time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from agent.compare import build_parser, run_from_args
from agent.comparison.config import SAC
from agent.comparison.results import Comparison

PROG = "python -m benchmarks.agent_pendulum"
RESULTS = Path(__file__).resolve().parent / "results"


def _mean(comparison: Comparison, method: str, step: int, key: str) -> float:
    values = [getattr(point, key) for _, point in comparison.points_of(method, step)]
    return float(np.mean(values)) if values else float("nan")


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if np.isfinite(a) and np.isfinite(b) and b > 0 else "—"


def speed_lines(comparison: Comparison, method: str) -> list[str]:
    """CPU and evaluation time, throughput and planning rate of `method` against SAC."""
    points = comparison.config.points
    lines = [f"\n| quantity | {method} | SAC | ratio |", "| --- | --- | --- | --- |"]
    for step in points:
        a, s = (
            _mean(comparison, method, step, "train_cpu_s"),
            _mean(comparison, SAC, step, "train_cpu_s"),
        )
        lines.append(
            f"| training CPU time to {step} steps (s, mean over seeds) | {a:.0f} | {s:.0f} | "
            f"{_ratio(a, s)} |"
        )
    evals = {
        m: np.mean([sum(p.eval_s for p in r.points) for r in comparison.runs if r.method == m])
        if any(r.method == m for r in comparison.runs)
        else float("nan")
        for m in (method, SAC)
    }
    lines.append(
        f"| evaluation wall time, all points (s, mean over seeds) | {evals[method]:.0f} | "
        f"{evals[SAC]:.0f} | |"
    )
    last = points[-1]
    rate = {m: last / _mean(comparison, m, last, "train_s") for m in (method, SAC)}
    lines.append(
        f"| env steps/s in training (to {last}) | {rate[method]:.1f} | {rate[SAC]:.1f} | |"
    )
    plan_ms = _mean(comparison, method, last, "plan_ms")
    lines.append(f"| planning (ms per plan / Hz) | {plan_ms:.1f} / {1e3 / plan_ms:.1f} Hz | | |")
    return lines


def target_lines(comparison: Comparison, method: str) -> list[str]:
    """Issue 3's targets for `method`, each met or missed (points that were not run: n/a)."""
    rows = {row.step: row for row in comparison.summary() if row.method == method}
    after3k = [v for step, row in rows.items() if step > 3000 for v in row.per_seed.values()]
    plan_ms = _mean(comparison, method, comparison.config.points[-1], "plan_ms")
    checks = [
        ("mean eval return at 2500 >= -180", rows[2500].mean >= -180 if 2500 in rows else None),
        ("mean eval return at 5000 >= -160", rows[5000].mean >= -160 if 5000 in rows else None),
        ("no seed below -250 after 3000", min(after3k) >= -250 if after3k else None),
        ("planning >= 30 Hz", 1e3 / plan_ms >= 30 if np.isfinite(plan_ms) else None),
        (
            "training to 5000 <= 3x SAC's wall time",
            rows[5000].ratio_to_sac <= 3
            if 5000 in rows and rows[5000].ratio_to_sac is not None
            else None,
        ),
    ]
    verdict = {True: "met", False: "MISSED", None: "n/a"}
    return [f"\n{method}: issue 3 targets"] + [f"  {verdict[ok]:6} {name}" for name, ok in checks]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.set_defaults(at=[1000, 2500, 5000, 10_000], world_models=["gru"])
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = str(RESULTS / f"agent_pendulum_{int(time.time())}")
    code, comparison = run_from_args(args, argv, prog=PROG)
    if comparison is None:
        return code
    lines = []
    for method in comparison.config.world_models:
        lines += speed_lines(comparison, method) + target_lines(comparison, method)
    meta = comparison.meta
    lines.append(
        f"\nload average before {meta['load_average_before']}, after "
        f"{meta['load_average_after']}; torch threads {meta['torch_threads']}"
    )
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    sys.exit(main())
