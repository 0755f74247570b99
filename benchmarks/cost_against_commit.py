"""The agent's cost per update and per plan, this tree against an older commit, alternating.

    python -m benchmarks.cost_against_commit --commit 1468b72 --pairs 5
    python -m benchmarks.cost_against_commit --commit HEAD --plans 70 --variant mix geodesic M.toml

Checks `--commit` out into a temporary git worktree and runs `python -m benchmarks.agent_step_cost`
(the commit's own copy there, this tree's here) alternately, old and new in turn (the order
flips every pair: these machines are noisy), `--pairs` times each. Prints, per world model, the
ms per update and per plan of every run and the median of the per-pair ratios new / old. With
`--within ROW` also the median of the ratios new / old of each row's cost relative to ROW's in
the same run (ROW timed beside it in one process: what slows the whole machine cancels). Other
arguments go to agent_step_cost.py as they are (both trees must accept them).

    python -m benchmarks.cost_against_commit --commit db67ce9 --pairs 2 --clock cpu \
        --variant fixed geodesic F.toml --variant mission geodesic M.toml --within fixed
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| ([\w-]+) \| \d+ \| ([\d.]+) \([\d.]+\) \| ([\d.]+) \([\d.]+\) \|")


def cost(tree: Path, extra: list[str]) -> dict[str, tuple[float, float]]:
    """{world model: (update ms, plan ms)} from one agent_step_cost.py run in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.agent_step_cost", *extra],
        cwd=tree, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {m[1]: (float(m[2]), float(m[3])) for m in map(ROW.match, out.splitlines()) if m}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", required=True)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="rounds inside each run")
    parser.add_argument(
        "--within", default=None, metavar="ROW", help="also compare each row relative to ROW"
    )
    args, passed = parser.parse_known_args()
    extra = ["--rounds", str(args.rounds), *passed]
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old_tree),
                        args.commit], check=True, capture_output=True)  # fmt: skip
        try:
            for pair in range(args.pairs):
                order = ("old", "new") if pair % 2 == 0 else ("new", "old")
                for which in order:
                    runs[which].append(cost(old_tree if which == "old" else ROOT, extra))
                    print(f"pair {pair + 1}/{args.pairs}: {which} {runs[which][-1]}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(old_tree)], check=False)  # fmt: skip
    print(f"\n{args.commit} (old) against this tree (new), {args.pairs} alternating pairs\n")
    within = f" | median new / old relative to {args.within}" if args.within else ""
    head = "| world model | call | old ms (each run) | new ms (each run) | median new / old"
    print(f"{head}{within} |")
    print("|---|---|---|---|---:|" + ("---:|" if within else ""))
    for model in runs["old"][0]:
        for k, call in enumerate(("update", "plan")):
            old = [r[model][k] for r in runs["old"]]
            new = [r[model][k] for r in runs["new"]]
            ratio = statistics.median(n / o for n, o in zip(new, old, strict=True))
            row = (f"| {model} | {call} | {' / '.join(f'{v:.1f}' for v in old)} | "
                   f"{' / '.join(f'{v:.1f}' for v in new)} | {ratio:.3f} |")  # fmt: skip
            if args.within:
                rel = [
                    (rn[model][k] / rn[args.within][k]) / (ro[model][k] / ro[args.within][k])
                    for rn, ro in zip(runs["new"], runs["old"], strict=True)
                ]
                row += f" {statistics.median(rel):.3f} |"
            print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
