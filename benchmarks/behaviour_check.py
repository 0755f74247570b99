"""Same seed, same result: train with this tree and with an older commit, compare bit for bit.

    python -m benchmarks.behaviour_check --commit 1468b72 --world-model geodesic --steps 600

Checks out `--commit` into a temporary git worktree, runs `python -m agent.train` there and
here with the same flags (and `--config FILE` if given), and compares the two checkpoints: every
tensor of the world model, the optimiser state and the replay buffer bitwise (torch.equal), the
evaluation returns logged to TensorBoard, and the step counters. Prints a table of what matched
and the largest difference of what did not; exit 1 if anything differs. Both runs use this
machine and this environment, so a difference is the code's, not the BLAS's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from agent.core.config import migrate_config

ROOT = Path(__file__).resolve().parent.parent


def train(tree: Path, logdir: Path, args: argparse.Namespace) -> Path:
    cmd = [sys.executable, "-m", "agent.train", "--world-model", args.world_model]
    cmd += ["--steps", str(args.steps), "--seed", str(args.seed), "--logdir", str(logdir)]
    if args.config:
        cmd += ["--config", str(Path(args.config).resolve())]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"training in {tree} failed:\n{done.stderr[-2000:]}")
    (run,) = logdir.iterdir()
    return run


def flatten(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(f"{prefix}.{key}", item, out)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            flatten(f"{prefix}[{i}]", item, out)
    else:
        out[prefix] = value


def compare(old: Path, new: Path) -> list[tuple[str, str, str]]:
    a = torch.load(old / "checkpoint.pt", map_location="cpu", weights_only=True)["agent"]
    b = torch.load(new / "checkpoint.pt", map_location="cpu", weights_only=True)["agent"]
    rows = []
    for part in ("model", "optim", "pi_optim", "buffer", "counters"):
        fa, fb = {}, {}
        flatten(part, a.get(part), fa)
        flatten(part, b.get(part), fb)
        same, worst, diff_keys = 0, 0.0, []
        for key in sorted(set(fa) | set(fb)):
            x, y = fa.get(key), fb.get(key)
            if torch.is_tensor(x) and torch.is_tensor(y) and x.shape == y.shape:
                equal = torch.equal(x, y)
                if not equal and x.is_floating_point():
                    worst = max(worst, float((x.double() - y.double()).abs().max()))
            else:
                equal = x == y
            same += bool(equal)
            if not equal:
                diff_keys.append(key)
        status = "bit-identical" if not diff_keys else f"{len(diff_keys)} differ (max {worst:.2e})"
        rows.append((part, f"{same}/{len(set(fa) | set(fb))}", status))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", required=True, help="the older commit to compare against")
    parser.add_argument("--world-model", default="gru")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--config", default=None, help="a --config file for both runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        worktree = tmp / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree),
                        args.commit], check=True, capture_output=True)  # fmt: skip
        try:
            old = train(worktree, tmp / "runs_old", args)
            new = train(ROOT, tmp / "runs_new", args)
            rows = compare(old, new)
            version = int(torch.load(old / "checkpoint.pt", weights_only=True)["format"][-1])
            cfg_old = migrate_config(json.loads((old / "config.json").read_text()), version)
            cfg_new = json.loads((new / "config.json").read_text())
            for cfg in (cfg_old, cfg_new):
                cfg["train"].pop("logdir")  # each run's own temporary folder
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(worktree)], check=False)  # fmt: skip
    print(
        f"{args.world_model}, seed {args.seed}, {args.steps} steps: {args.commit} against this tree"
    )
    print("\n| part | equal entries | status |\n|---|---:|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    flat_old, flat_new = {}, {}
    flatten("config", cfg_old, flat_old)
    flatten("config", cfg_new, flat_new)
    changed = sorted(k for k in set(flat_old) | set(flat_new) if flat_old.get(k) != flat_new.get(k))
    print(f"\nconfig keys that differ (the old one migrated): {', '.join(changed) or 'none'}")
    return 0 if all(r[2] == "bit-identical" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
