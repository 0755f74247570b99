"""The numbers behind `python -m agent.diagnose RUN_DIR --figures DIR` and the end-of-run
TensorBoard figures (agent/inspection/figures.py draws them), read from a trained run: every
quantity a figure checks is read from the agent (its heads' forward passes), its replay buffer
and its TensorBoard events, never recomputed from the formula it is drawn against.

- **Episodes.** The last few complete episodes of the replay buffer
  (figure_episodes.buffer_episodes), each state with the history window the dynamics reads (the
  W observations before it in its episode, masked before the episode's start), encoded by the
  run's world model.
- **The heads' numbers**: one pass of the geodesic model's heads at those states
  (world_model/geodesic/head_pass.py) and what the figures read of it
  (world_model/geodesic/head_figures.py: the disk projection, the measured temperature, the
  attention and node 70's mass per level, the chiral commitment); node 67 against Wilson lines
  on a second pass at SWEEP_STATES buffer states, drawn as agent.diagnose draws its states.
- **Nodes over training**: the diagnostics/node* scalars of the run's events
  (agent.persistence.run_records.read_scalar_series).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from agent.core.protocols import InspectedAgent
from agent.inspection.figure_episodes import EPISODES, buffer_episodes, episode_inputs
from agent.persistence.run_records import read_scalar_series, sample_batch
from world_model.diagnostics import reports_nodes
from world_model.geodesic.head_figures import (
    AttentionData,
    ChiralityData,
    TemperatureData,
    TrajectoryData,
    WilsonData,
    head_figures,
    wilson_sweep,
)
from world_model.geodesic.head_pass import head_pass
from world_model.geodesic.reports import NODE_NAMES

__all__ = ["NODE_TAGS", "SWEEP_STATES", "FigureData", "collect"]

SWEEP_STATES = 16  # buffer states of the Wilson-line sweep (node 67 per mode and segments)
NODE_TAGS = NODE_NAMES  # node -> its diagnostics/ scalar (world_model/geodesic/reports.py)


@dataclass
class FigureData:
    """Everything the figures draw; a part is None where the run has nothing to show, with the
    reason in `notes`."""

    title: str
    trajectories: TrajectoryData | None = None
    temperature: TemperatureData | None = None
    wilson: WilsonData | None = None
    attention: AttentionData | None = None
    chirality: ChiralityData | None = None
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def collect(
    agent: InspectedAgent,
    run_dir: str | Path | None,
    states: int = SWEEP_STATES,
    episodes: int = EPISODES,
) -> FigureData | None:
    """The figures' numbers for a trained agent (module docstring); None for a world model
    without a Poincare latent (the GRU). `states`: buffer states of the node-67 sweep (drawn
    as agent.diagnose draws its states); `run_dir`: where the TensorBoard events are (None:
    no training series)."""
    dyn = agent.model.dynamics
    if not reports_nodes(dyn):
        return None
    tc = agent.config.train
    data = FigureData(f"{tc.env_id}, {tc.world_model}, step {agent.num_timesteps}")
    if run_dir is not None:
        series = read_scalar_series(Path(run_dir), "diagnostics/")
        data.series = {
            tag: values for tag, values in series.items() if tag.startswith("diagnostics/node")
        }
    model = agent.model
    was_training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[]):  # nothing here draws, but never the run's RNG
            _collect_geometric(agent, data, states, episodes)
    finally:
        model.train(was_training)
    return data


def _collect_geometric(agent: InspectedAgent, data: FigureData, states: int, episodes: int) -> None:
    dyn = agent.model.dynamics
    slots = buffer_episodes(agent.buffer, episodes)
    if not slots:
        data.notes.append("the replay buffer is empty: no states to draw")
        return
    inputs = [episode_inputs(agent.buffer, s, dyn.history_length) for s in slots]
    obs = torch.cat([i[0] for i in inputs])
    hist = mask = None
    if dyn.history_length:
        hist = torch.cat([i[1] for i in inputs], dim=1)  # type: ignore[misc]
        mask = torch.cat([i[2] for i in inputs], dim=1)  # type: ignore[misc]
    value_fn, device = agent.model.value, agent.device
    heads = head_pass(dyn, obs, hist, mask, value_fn, device)
    read = head_figures(dyn, heads, [s.size for s in slots])
    data.trajectories, data.temperature = read.trajectories, read.temperature
    data.attention, data.chirality = read.attention, read.chirality
    data.notes.extend(read.notes)
    batch = sample_batch(agent, states)
    if batch is not None:
        heads = head_pass(
            dyn, batch.obs[0], batch.history_obs, batch.history_mask, value_fn, device
        )
    data.wilson = wilson_sweep(heads, dyn.integrator)
