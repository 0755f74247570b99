"""`python -m agent.diagnose RUN_DIR [--states N] [--json]`: the geometric health of a trained run.

    python -m agent.diagnose runs/Pendulum-v1__geodesic__1__1760000000
    python -m agent.diagnose runs/Pendulum-v1__geodesic__1__1760000000 --states 128 --json

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

A world model without geometric diagnostics (the GRU) gets one line saying so, the latent fit
and the evaluation history. `--json` prints the same as one JSON object. A missing or corrupt
run folder or checkpoint: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch

from agent.agent import Agent
from agent.checkpoint import CheckpointError
from agent.config import ConfigError
from agent.loop import CHECKPOINT_NAME
from envs import EnvError
from world_model.diagnostics import NodeReport

__all__ = [
    "build_parser",
    "diagnose",
    "format_report",
    "latent_fit",
    "main",
    "sample_batch",
    "read_events",
]

PROG = "python -m agent.diagnose"
NODES = (67, 68, 69, 70)
NODE_NOT_RUN = {
    68: "the attention kernel has no temperature (softmax heads only)",
    69: "no chiral projector (dynamics.value_gradient is off)",
}
SCALAR_LABELS = {
    "node67_relative": "relative gauge deviation (node 67 / largest score)",
    "node69_degenerate_fraction": "degenerate fraction of the chiral projector",
    "friction": "friction gamma",
    "confinement": "confinement kappa",
    "chirality_strength": "chirality strength",
    "z_norm_max": "max |z|",
}
# GeodesicDynamics.diagnostics's names of the node values themselves (shown in the node table)
NODE_SCALARS = {
    "node67_gauge_invariance",
    "node68_metric_temperature",
    "node69_chirality_violation",
    "node70_texture_leakage",
}
DISTRIBUTIONS = {"z_norm": "|z|", "tau": "tau(z)"}
EVAL_TAGS = ("eval/mean_return", "eval/std_return")


class RunError(ValueError):
    """A run folder that cannot be diagnosed (one line)."""


# ----------------------------------------------------------------------- the report


def load_run(path: str | Path, device: str | None = None) -> tuple[Agent, Path]:
    """The agent saved in a run folder (or a checkpoint file) and the folder of its events."""
    path = Path(path)
    if not path.exists():
        raise RunError(f"no run folder at {str(path)!r}")
    checkpoint = path / CHECKPOINT_NAME if path.is_dir() else path
    agent = Agent.load(checkpoint, device=device)
    return agent, path if path.is_dir() else path.parent


def sample_batch(agent: Agent, states: int, horizon: int = 1) -> Any:
    """`states` start states from the replay buffer with the dynamics' history window and the
    next `horizon` steps, drawn with a generator of their own (the run's saved sampling stream
    is left alone); None when the buffer is empty."""
    buffer = agent.buffer
    if buffer.size < 1:
        return None
    saved, buffer.rng = buffer.rng, np.random.default_rng(agent.config.train.seed + 4)
    try:
        return buffer.sample(states, horizon, agent.model.history_length).to(agent.device)
    finally:
        buffer.rng = saved


@torch.no_grad()
def latent_fit(agent: Agent, states: int) -> dict[str, Any] | None:
    """The world model's consistency loss at each predicted step 1..H (H the training horizon),
    averaged over `states` buffer sequences: an open-loop rollout of the recorded actions from
    the encoded first observation, without the dynamics' noise, against the target encoder of
    each true next observation (world_model.training's consistency term). None when the buffer
    cannot fill a sequence."""
    horizon = agent.config.loss.horizon
    if agent.buffer.size <= horizon:
        return None
    batch = sample_batch(agent, states, horizon)
    model = agent.model
    model.eval()
    targets = model.encode(batch.obs[1:].flatten(0, 1), target=True).unflatten(
        (horizon, batch.obs.shape[1])
    )  # [H, B]
    state = model.encode(batch.obs[0])
    context = model.context(state, batch.history_obs, batch.history_mask)
    losses = []
    for t in range(horizon):
        state = model.next(state, batch.action[t], context, stochastic=False)
        target = targets.map(lambda x, t=t: x[t])
        losses.append(float(model.consistency_loss(state, target).mean()))
    return {"horizon": horizon, "states": int(batch.obs.shape[1]), "consistency": losses}


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _node_dict(report: NodeReport) -> dict[str, Any]:
    return {
        "node": report.node,
        "name": report.name,
        "value": _finite_or_none(report.value),
        "threshold": report.threshold,
        "passed": report.passed,
        "warning": report.warning,
        "extra": {k: _finite_or_none(v) for k, v in report.extra.items()},
    }


def _spread(values: torch.Tensor) -> dict[str, float]:
    flat = values.detach().float().flatten().cpu()
    return {
        "min": float(flat.min()),
        "median": float(flat.median()),
        "max": float(flat.max()),
    }


def geometric_diagnostics(agent: Agent, batch: Any, states: int) -> dict[str, Any] | None:
    """Nodes 67-70, the diagnostics/ scalars and the |z|, tau(z) spreads; None for a dynamics
    without node reports."""
    dynamics = agent.model.dynamics
    if not hasattr(dynamics, "node_reports"):
        return None
    value_fn = agent.model.value if dynamics.uses_value_gradient else None
    agent.model.eval()
    reports, _ = dynamics.node_reports(batch, value_fn=value_fn, max_states=states)
    scalars, histograms = dynamics.diagnostics(batch, value_fn=value_fn, max_states=states)
    present = {r.node for r in reports}
    return {
        "nodes": [_node_dict(r) for r in reports],
        "nodes_not_run": {
            str(n): NODE_NOT_RUN.get(n, "not applicable") for n in NODES if n not in present
        },
        "scalars": {k: _finite_or_none(v) for k, v in scalars.items() if k not in NODE_SCALARS},
        "distributions": {key: _spread(values) for key, values in histograms.items()},
    }


def read_events(run_dir: Path) -> dict[str, Any]:
    """From the run's TensorBoard events: each diagnostics/* scalar's first and last (step,
    value), and the evaluation history [(step, mean, std)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not any(run_dir.glob("events.out.tfevents.*")):
        return {"error": f"no TensorBoard events in {str(run_dir)!r}", "trends": {}, "eval": []}
    try:
        events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
        tags = events.Tags()["scalars"]
        series = {tag: events.Scalars(tag) for tag in tags}
    except Exception as err:  # a damaged event file raises whatever its reader hits
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return {
            "error": f"TensorBoard events unreadable ({detail[:160]})",
            "trends": {},
            "eval": [],
        }
    trends = {
        tag.removeprefix("diagnostics/"): {
            "first_step": values[0].step,
            "first": _finite_or_none(values[0].value),
            "last_step": values[-1].step,
            "last": _finite_or_none(values[-1].value),
        }
        for tag, values in sorted(series.items())
        if tag.startswith("diagnostics/") and values
    }
    stds = {e.step: e.value for e in series.get(EVAL_TAGS[1], [])}
    history = [
        {"step": e.step, "mean": _finite_or_none(e.value), "std": stds.get(e.step)}
        for e in series.get(EVAL_TAGS[0], [])
    ]
    return {"error": None, "trends": trends, "eval": history}


def diagnose(path: str | Path, states: int = 64, device: str | None = None) -> dict[str, Any]:
    """The whole report as a JSON-ready dict (see the module docstring)."""
    agent, run_dir = load_run(path, device)
    batch = sample_batch(agent, states)
    tc = agent.config.train
    report = {
        "run": str(path),
        "env_id": tc.env_id,
        "world_model": tc.world_model,
        "step": agent.num_timesteps,
        "states": 0 if batch is None else int(batch.obs.shape[1]),
        "geometric": geometric_diagnostics(agent, batch, states),
        "latent_fit": latent_fit(agent, states),
        **read_events(run_dir),
    }
    agent.env.close()
    return report


# ----------------------------------------------------------------------- text


def _num(value: float | None) -> str:
    if value is None:
        return "nan"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 or value == 0 else f"{value:.3e}"


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [columns, *rows]) for i in range(len(columns))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [line(columns), "| " + " | ".join("-" * w for w in widths) + " |", *map(line, rows)]


def _geometric_lines(geo: dict[str, Any], states: int) -> list[str]:
    where = f"{states} states from the replay buffer" if states else "queries at the prototypes"
    rows = [
        [
            str(n["node"]),
            n["name"],
            _num(n["value"]),
            _num(n["threshold"]),
            "OK" if n["passed"] else "WARN",
        ]
        for n in geo["nodes"]
    ]
    lines = [f"seed 003 diagnostic nodes ({where})", ""]
    lines += _table(["node", "check", "value", "threshold", "status"], rows)
    lines += [f"  node {n}: not run ({why})" for n, why in geo["nodes_not_run"].items()]
    lines += [f"  ! {n['warning']}" for n in geo["nodes"] if n["warning"]]
    lines += ["", "scalar diagnostics", ""]
    lines += _table(
        ["quantity", "value"],
        [[SCALAR_LABELS.get(k, k), _num(v)] for k, v in geo["scalars"].items()],
    )
    lines += ["", f"distributions over the {states or 'prototype'} states", ""]
    lines += _table(
        ["quantity", "min", "median", "max"],
        [
            [DISTRIBUTIONS.get(k, k), _num(d["min"]), _num(d["median"]), _num(d["max"])]
            for k, d in geo["distributions"].items()
        ],
    )
    return lines


def _events_lines(report: dict[str, Any]) -> list[str]:
    lines = ["", "trend over training (TensorBoard diagnostics/*)", ""]
    if report["error"]:
        lines.append(f"  {report['error']}")
    elif not report["trends"]:
        lines.append("  no diagnostics/* scalars logged")
    else:
        lines += _table(
            ["scalar", "first", "at step", "last", "at step"],
            [
                [tag, _num(t["first"]), str(t["first_step"]), _num(t["last"]), str(t["last_step"])]
                for tag, t in report["trends"].items()
            ],
        )
    lines += ["", "evaluation history (eval/mean_return)", ""]
    if report["eval"]:
        lines += _table(
            ["step", "return"],
            [[str(e["step"]), f"{_num(e['mean'])} ± {_num(e['std'])}"] for e in report["eval"]],
        )
    else:
        lines.append("  no evaluation logged")
    return lines


def _latent_fit_lines(fit: dict[str, Any] | None) -> list[str]:
    lines = ["", "latent fit (consistency loss per predicted step, no noise)", ""]
    if fit is None:
        return [*lines, "  the replay buffer holds no full training horizon yet"]
    lines.append(f"  open loop from {fit['states']} buffer sequences, the model's own loss")
    return lines + _table(
        ["step", "consistency"],
        [[str(t + 1), _num(v)] for t, v in enumerate(fit["consistency"])],
    )


def format_report(report: dict[str, Any]) -> str:
    head = (
        f"run {report['run']}: {report['env_id']}, world model {report['world_model']}, "
        f"step {report['step']}"
    )
    lines = [head, ""]
    if report["geometric"] is None:
        lines.append(
            f"world model {report['world_model']!r} has no geometric diagnostics (nodes 67-70 "
            "are the geodesic model's)"
        )
    else:
        lines += _geometric_lines(report["geometric"], report["states"])
    lines += _latent_fit_lines(report["latent_fit"])
    lines += _events_lines(report)
    return "\n".join(lines)


# ----------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints two)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
        "--device",
        default=None,
        metavar="DEVICE",
        help="auto, cpu, cuda or cuda:N (default: the run's)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.states < 1:
        print(f"{PROG}: error: --states must be >= 1, got {args.states}", file=sys.stderr)
        return 2
    try:
        report = diagnose(args.run, args.states, args.device)
    except (RunError, CheckpointError, ConfigError, EnvError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
