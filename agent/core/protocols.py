"""What the agent's collaborators read of it, as structural types (typing.Protocol), so that they
annotate their `agent` parameter without importing agent/core/agent.py, which imports them (the
acting and training loops) or the modules above them: agent.core.agent -> loop -> figures ->
figures_data -> run_records would otherwise be a circle held together by annotations.

agent.core.agent.Agent implements every one of them; tests/agent/test_protocols.py checks that each
member declared here exists on a constructed Agent as the kind declared (attribute or method).

- `PlanningAgent`: plans for a batch of environments (agent/core/policy.py's PlannerPolicy);
- `ActingAgent`: steps the run's env copies with their planners and generators
  (agent/core/collection.py's Collection);
- `InspectedAgent`: a trained agent read without training it, its model, replay buffer and
  counters (agent/inspection/figures.py, figures_data.py; agent/persistence/run_records.py).

The training loop's view, `agent.core.loop.TrainedAgent`, extends ActingAgent and InspectedAgent in
agent/core/loop.py: it names agent.core.distributed.DistContext, and agent/core/distributed.py
imports agent/core/collection.py, which imports this module.

This module imports nothing from agent/ that imports agent/core/agent.py (its imports are leaves).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from agent.core.buffer import ReplayBuffer
from agent.core.config import RunConfig
from agent.core.episode import EpisodeSoFar
from agent.core.planner import Planner
from world_model.model import WorldModel
from world_model.training import SequenceBatch

__all__ = ["ActingAgent", "InspectedAgent", "PlanningAgent"]


class PlanningAgent(Protocol):
    """Plans actions for E environments at once with the planners, generators and episodes so
    far it is handed.
    Implemented by agent.core.agent.Agent; read by agent.core.policy.PlannerPolicy (which makes one
    planner per environment from `config.planner`, `action_dim` and `discount`)."""

    config: RunConfig
    action_dim: int
    discount: float

    def act_batch(
        self,
        obs: Any,
        *,
        explore: bool,
        planners: Sequence[Planner],
        generators: Sequence[torch.Generator],
        episodes: Sequence[EpisodeSoFar],
    ) -> np.ndarray: ...


class ActingAgent(PlanningAgent, Protocol):
    """A PlanningAgent with its own env, planner, episode and generator (copy 0 of a run's env
    copies) and its seed-phase random actions. Implemented by agent.core.agent.Agent; read by
    agent.core.collection.Collection (and, through it, agent.core.distributed.ShardedCollection)."""

    env: gym.Env
    device: torch.device
    first_copy: int  # this process's first global env copy (a data-parallel rank's r K)
    planner: Planner
    episode: EpisodeSoFar
    generator: torch.Generator

    def random_action(self) -> np.ndarray: ...


class InspectedAgent(Protocol):
    """A (trained) agent read without training it: its world model, replay buffer, config and
    env-step counter. Implemented by agent.core.agent.Agent; read by agent.inspection.figures,
    agent.inspection.figures_data, agent.persistence.run_records.sample_batch and agent.diagnose
    (through agent.inspection.figures.write_figures)."""

    config: RunConfig
    device: torch.device
    model: WorldModel
    buffer: ReplayBuffer
    num_timesteps: int

    def sample_batch(
        self, batch_size: int, horizon: int, part: slice | None = None
    ) -> SequenceBatch: ...
