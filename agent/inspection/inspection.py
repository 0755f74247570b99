"""A trained run's inspection report as a JSON-ready dict (library code behind
`python -m agent.diagnose`; agent/inspection/inspection_format.py renders it as text).

For a geodesic run: seed 003's diagnostic nodes 67-70 (with the agent's value estimate for the
chiral projector), the scalar diagnostics TensorBoard logs under diagnostics/, min / median /
max of |z| and tau(z); for every world model the latent fit (the consistency loss at each
predicted step of the training horizon, open loop from buffer states, without the dynamics'
noise); from the TensorBoard events each diagnostics/* scalar's trend and the evaluation
history. States are drawn from the run's saved replay buffer with a generator of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from agent.core.agent import Agent
from agent.persistence.run_records import finite_or_none, read_events, sample_batch
from agent.persistence.runs import checkpoint_path
from world_model.diagnostics import NodeReport, reports_nodes

__all__ = [
    "NODES",
    "diagnose",
    "geometric_diagnostics",
    "latent_fit",
    "load_run",
    "report",
]

NODES = (67, 68, 69, 70)
NODE_NOT_RUN = {
    68: "the attention kernel has no temperature (softmax heads only)",
    69: "no chiral projector (dynamics.context.value_gradient is off)",
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


def load_run(path: str | Path, device: str | None = None) -> tuple[Agent, Path]:
    """The agent saved in a run folder (or a checkpoint file) and the folder of its events."""
    path = Path(path)
    agent = Agent.load(checkpoint_path(path), device=device)
    return agent, path if path.is_dir() else path.parent


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
    context = model.context(state, batch.episode)
    losses = []
    for t in range(horizon):
        state = model.next(state, batch.action[t], context, stochastic=False)
        target = targets.map(lambda x, t=t: x[t])
        losses.append(float(model.consistency_loss(state, target).mean()))
    return {"horizon": horizon, "states": int(batch.obs.shape[1]), "consistency": losses}


def _node_dict(report: NodeReport) -> dict[str, Any]:
    return {
        "node": report.node,
        "name": report.name,
        "value": finite_or_none(report.value),
        "threshold": report.threshold,
        "passed": report.passed,
        "warning": report.warning,
        "extra": {k: finite_or_none(v) for k, v in report.extra.items()},
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
    if not reports_nodes(dynamics):
        return None
    value_fn = agent.model.value if dynamics.uses_value_gradient else None
    agent.model.eval()
    reports, queried = dynamics.node_reports(batch, value_fn=value_fn, max_states=states)
    scalars, histograms = dynamics.report_scalars(reports, queried)  # the nodes, computed once
    present = {r.node for r in reports}
    return {
        "nodes": [_node_dict(r) for r in reports],
        "nodes_not_run": {
            str(n): NODE_NOT_RUN.get(n, "not applicable") for n in NODES if n not in present
        },
        "scalars": {k: finite_or_none(v) for k, v in scalars.items() if k not in NODE_SCALARS},
        "distributions": {key: _spread(values) for key, values in histograms.items()},
    }


def report(agent: Agent, run_dir: Path, path: str | Path, states: int = 64) -> dict[str, Any]:
    """The whole report of a loaded agent as a JSON-ready dict (see the module docstring)."""
    batch = sample_batch(agent, states)
    tc = agent.config.train
    return {
        "run": str(path),
        "env_id": tc.env_id,
        "world_model": tc.world_model,
        "step": agent.num_timesteps,
        "states": 0 if batch is None else int(batch.obs.shape[1]),
        "geometric": geometric_diagnostics(agent, batch, states),
        "latent_fit": latent_fit(agent, states),
        **read_events(run_dir),
    }


def diagnose(path: str | Path, states: int = 64, device: str | None = None) -> dict[str, Any]:
    """The whole report of the run at `path` as a JSON-ready dict (see the module docstring)."""
    agent, run_dir = load_run(path, device)
    try:
        return report(agent, run_dir, path, states)
    finally:
        agent.env.close()
