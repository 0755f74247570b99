"""Deterministic evaluation episodes for any batched policy (library code).

`run_episodes` takes anything that maps a batch of observations to a batch of actions and can
reset its per-environment state, as stable-baselines3's `evaluate_policy` takes anything with a
`predict`. The agent's own policy is `Agent.policy(seed)` (agent/policy.py), in the agent's
scaled units, stepped on the run's scaled env (agent.runs.make_run_env).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import gymnasium as gym
import numpy as np

__all__ = ["BatchedPolicy", "run_episodes"]


class BatchedPolicy(Protocol):
    """observations [N, O] -> actions [N, A]; `reset(mask)` forgets environment i's state
    (a planner's warm start) where mask[i] is True, at the start of its episode."""

    def __call__(self, observations: np.ndarray) -> np.ndarray: ...

    def reset(self, mask: np.ndarray) -> None: ...


def run_episodes(
    policy: BatchedPolicy,
    env: gym.Env,
    episodes: int,
    seed: int,
    on_frame: Callable[[int, np.ndarray], None] | None = None,
    on_step: Callable[[int, np.ndarray, np.ndarray, float, np.ndarray], None] | None = None,
) -> np.ndarray:
    """Returns [episodes] of episodes reset with seeds seed + k, one after the other on `env`
    (a batch of one for the policy, reset before each episode).
    `on_frame(k, frame)` receives env.render() after every reset and step;
    `on_step(k, obs, action, reward, next_obs)` every transition of episode k."""
    returns = np.zeros(episodes)
    start = np.ones(1, dtype=bool)
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        policy.reset(start)
        if on_frame is not None:
            on_frame(k, env.render())
        done = False
        while not done:
            action = policy(np.asarray(obs)[None])[0]
            next_obs, reward, terminated, truncated, _ = env.step(action)
            if on_step is not None:
                on_step(k, obs, action, float(reward), next_obs)
            obs = next_obs
            returns[k] += float(reward)
            done = bool(terminated or truncated)
            if on_frame is not None:
                on_frame(k, env.render())
    return returns
