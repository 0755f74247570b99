"""A queue of `agent.compare` runs, a few at a time, resumable across sessions: the runner that
benchmarks/dmc_departures.py and benchmarks/dmc_results.py share (DeepMind Control runs take
hours on 2 cores and outlive a session).

Each job is a folder and the `agent.compare` arguments that start it. A job whose folder holds a
finished comparison is skipped; one whose folder holds an unfinished one continues with
`agent.compare --resume` (from its runs' last checkpoints); the others start. Each job's output
goes to `{folder}.log`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "finished", "keep_finished", "run_queue"]


def finished(path: Path) -> bool:
    """Whether `path` (a comparison's folder or a kept results file) holds a finished one."""
    path = path / "results.json" if path.is_dir() else path
    return path.is_file() and json.loads(path.read_text()).get("status") == "done"


def _command(folder: Path, args: list[str]) -> list[str]:
    """agent.compare ARGS --out FOLDER, or --resume FOLDER if a comparison was started there."""
    run = [sys.executable, "-m", "agent.compare"]
    if (folder / "results.json").is_file():
        return [*run, "--resume", str(folder)]
    return [*run, *args, "--out", str(folder)]


def run_queue(jobs: list[tuple[Path, list[str]]], parallel: int) -> None:
    """Run the unfinished jobs (folder, agent.compare arguments) in order, `parallel` at a time
    (one core each), printing each start and exit."""
    todo = [(folder, args) for folder, args in jobs if not finished(folder)]
    running: list[tuple[str, subprocess.Popen]] = []
    while todo or running:
        while todo and len(running) < parallel:
            folder, args = todo.pop(0)
            print(f"start {folder.name}", flush=True)
            folder.parent.mkdir(parents=True, exist_ok=True)
            log = open(folder.with_suffix(".log"), "a")  # noqa: SIM115 (closed with the process)
            proc = subprocess.Popen(_command(folder, args), stdout=log, stderr=log, cwd=ROOT)
            running.append((folder.name, proc))
        time.sleep(5)
        for name, proc in list(running):
            if proc.poll() is not None:
                print(f"{name}: exit {proc.returncode}", flush=True)
                running.remove((name, proc))


def keep_finished(folder: Path, kept: Path) -> bool:
    """Copy a finished comparison's results.json (measured numbers only) to `kept`."""
    if not finished(folder):
        return False
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(folder / "results.json", kept)
    return True
