"""The agent's planner as a batched policy: one MPPI planner (warm start) per environment, one
random generator shared by them (library code; see agent/episodes.py for the protocol)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from agent.planner import Planner

if TYPE_CHECKING:
    from agent.agent import Agent

__all__ = ["PlannerPolicy"]


class PlannerPolicy:
    """observations [N, O] -> actions [N, A] by planning with `agent`'s world model, in the
    agent's scaled units (actions in [-1, 1]). Environment i has planner i (created when N
    changes); `generator` draws the planners' samples; `explore` adds the planner's noise."""

    def __init__(self, agent: Agent, generator: torch.Generator, explore: bool = False):
        self.agent = agent
        self.generator = generator
        self.explore = explore
        self.planners: list[Planner] = []

    def _ensure(self, n: int) -> None:
        if len(self.planners) != n:
            agent = self.agent
            self.planners = [
                Planner(agent.config.planner, agent.action_dim, agent.discount) for _ in range(n)
            ]

    def reset(self, mask: np.ndarray) -> None:
        mask = np.asarray(mask, dtype=bool).reshape(-1)
        self._ensure(mask.shape[0])
        for planner, start in zip(self.planners, mask, strict=True):
            if start:
                planner.reset()

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        obs = np.asarray(observations, dtype=np.float32)
        self._ensure(obs.shape[0])
        actions = np.empty((obs.shape[0], self.agent.action_dim), dtype=np.float32)
        for i, planner in enumerate(self.planners):
            actions[i] = self.agent.act(
                obs[i], explore=self.explore, planner=planner, generator=self.generator
            )
        return actions
