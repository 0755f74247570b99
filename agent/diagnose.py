"""`python -m agent.diagnose RUN_DIR [--states N] [--json] [--figures DIR]`: the geometric health
of a trained run.

    python -m agent.diagnose runs/Pendulum-v1__geodesic__1__1760000000
    python -m agent.diagnose runs/Pendulum-v1__geodesic__1__1760000000 --states 128 --json
    python -m agent.diagnose runs/Pendulum-v1__geodesic__1__1760000000 --figures figs/

Loads the run's checkpoint (as `agent.evaluate` does) and draws N states from its saved replay
buffer, with the history window the dynamics reads (none when the buffer is empty: the queries
then sit at the prototypes). For a geodesic run it reports:

- seed 003's diagnostic nodes 67-70 (GeodesicDynamics.node_reports, with the agent's value
  estimate for the chiral projector): value, the seed's threshold, OK / WARN, and for a crossed
  threshold the node's one-line warning with the seed's remedy;
- the scalar diagnostics TensorBoard logs under diagnostics/ (relative gauge deviation, the
  chiral projector's degenerate fraction, friction, confinement, chirality strength, max |z|);
- min / median / max of |z| and of the metric temperature tau(z) over the states;
- from the run's TensorBoard events: every diagnostics/* scalar's first and last logged value
  with their steps (its trend over training), and the evaluation history.

For every world model (the GRU too) it reports the latent fit: the world model's own consistency
loss at each predicted step of the training horizon, open loop from N buffer states against the
target encoder of the true observations, without the dynamics' noise (how far the latent
dynamics drifts from the encoder over a rollout; each model in its own latent units).

`--figures DIR` also writes the figures of agent/inspection/figures.py into DIR as PNG files (latent
trajectories on the Poincare disk, node 68's measured temperature against |z|, node 67 against
the Wilson-line mode and segments, attention per head, texture leakage by level, chiral
commitment along an episode, nodes 67-70 over training) and lists the files written.

A world model without geometric diagnostics (the GRU) gets one line saying so, the latent fit
and the evaluation history (and with `--figures`, one line saying it has no Poincare latent to
draw). `--json` prints the same as one JSON object. A missing or corrupt run folder or
checkpoint, or a --figures path with a file in the way: one line on stderr, exit 2; a figure
folder that cannot be written (permissions, a full disk): one line, exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent.cli import OneLineParser, folder_problem, out_of_range
from agent.core.config import ConfigError, check_device
from agent.core.protocols import InspectedAgent
from agent.inspection.inspection import load_run, report
from agent.inspection.inspection_format import format_figures, format_report
from agent.persistence.checkpoint import CheckpointError
from agent.persistence.runs import RunError
from envs import EnvError

__all__ = ["build_parser", "main"]

PROG = "python -m agent.diagnose"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Report a trained run's geometric diagnostics: seed 003's nodes 67-70 "
        "(gauge invariance, metric temperature, chirality, texture leakage) on states from "
        "its replay buffer, the scalars and distributions behind them, and their trend over "
        "training from the TensorBoard events.",
    )
    parser.add_argument("run", metavar="RUN_DIR", help="a run folder of agent.train")
    parser.add_argument(
        "--states",
        type=int,
        default=64,
        metavar="N",
        help="states drawn from the replay buffer (default: 64)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--figures",
        default=None,
        metavar="DIR",
        help="also write the figures (PNG) into DIR and list them (geodesic runs)",
    )
    parser.add_argument(
        "--device",
        default=None,
        metavar="DEVICE",
        help="auto, cpu, cuda or cuda:N (default: the run's)",
    )
    return parser


def _figures(agent: InspectedAgent, run_dir: Path, folder: str) -> dict[str, Any]:
    """agent/inspection/figures.py's figures written into `folder`: {dir, files, notes}."""
    from agent.inspection.figures import write_figures  # matplotlib only when asked for

    files, notes, _, _ = write_figures(agent, run_dir, folder)
    return {"dir": folder, "files": [str(f) for f in files], "notes": notes}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = out_of_range("--states", args.states, 1)
    if problem is None and args.figures is not None:
        problem = folder_problem("--figures", args.figures)
    if problem:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    try:
        if args.device is not None:
            check_device(args.device)
        agent, run_dir = load_run(args.run, args.device)
        try:
            result = report(agent, run_dir, args.run, args.states)
            if args.figures is not None:
                try:
                    result["figures"] = _figures(agent, run_dir, args.figures)
                except OSError as err:  # not writable, a file in the way, a full disk
                    print(f"{PROG}: error: --figures: {err}", file=sys.stderr)
                    return 1
        finally:
            agent.env.close()
    except (RunError, CheckpointError, ConfigError, EnvError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_report(result))
        if "figures" in result:
            print("\n".join(format_figures(result["figures"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
