"""The agent's planner as a batched policy: one MPPI planner (warm start), one episode so far
(agent/core/episode.py) and one random generator per environment, all environments planned in one
batch (agent.core.planner.plan_batch; library code; see agent/core/episodes.py for the protocol)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from agent.core.episode import EpisodeSoFar
from agent.core.planner import Planner
from agent.core.protocols import PlanningAgent

__all__ = ["PlannerPolicy"]


class PlannerPolicy:
    """observations [N, O] -> actions [N, A] by planning with `agent`'s world model for the N
    environments at once, in the agent's scaled units (actions in [-1, 1]). Environment i has
    planner i, episode i and generator i (created when N changes, drawing from `generator`);
    `reset(mask, seeds)` starts environment i's episode where mask[i], with a generator of its
    own seeded by seeds[i] when seeds are given (evaluation: an episode then plans the same
    alone or in a batch). `explore` adds the planner's noise."""

    def __init__(self, agent: PlanningAgent, generator: torch.Generator, explore: bool = False):
        self.agent = agent
        self.generator = generator
        self.explore = explore
        self.planners: list[Planner] = []
        self.episodes: list[EpisodeSoFar] = []
        self.generators: list[torch.Generator] = []

    def _ensure(self, n: int) -> None:
        if len(self.planners) != n:
            agent = self.agent
            self.planners = [
                Planner(agent.config.planner, agent.action_dim, agent.discount) for _ in range(n)
            ]
            self.episodes = [EpisodeSoFar() for _ in range(n)]
            self.generators = [self.generator] * n

    def reset(self, mask: np.ndarray, seeds: Sequence[int] | None = None) -> None:
        mask = np.asarray(mask, dtype=bool).reshape(-1)
        self._ensure(mask.shape[0])
        for i, start in enumerate(mask):
            if start:
                self.planners[i].reset()
                self.episodes[i].reset()
                if seeds is not None:
                    device = self.generator.device
                    self.generators[i] = torch.Generator(device=device).manual_seed(int(seeds[i]))

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        obs = np.asarray(observations, dtype=np.float32)
        self._ensure(obs.shape[0])
        return self.agent.act_batch(
            obs,
            explore=self.explore,
            planners=self.planners,
            generators=self.generators,
            episodes=self.episodes,
        )
