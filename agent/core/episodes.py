"""Deterministic evaluation episodes for any batched policy (library code).

`run_episodes` takes anything that maps a batch of observations to a batch of actions and can
reset its per-environment state, as stable-baselines3's `evaluate_policy` takes anything with a
`predict`. On a gymnasium vector env the episodes run in waves of `num_envs`, the policy
planning for all of them at once; on a single env, one after the other. Episode k is reset with
seed + k and tells the policy so (`reset(mask, seeds)`), so it plays the same either way. The
agent's own policy is `Agent.policy(seed)` (agent/core/policy.py), in the agent's scaled units,
stepped on the run's scaled env (agent.persistence.runs.make_run_env, make_run_vector_env).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import gymnasium as gym
import numpy as np

__all__ = ["BatchedPolicy", "run_episodes"]


class BatchedPolicy(Protocol):
    """observations [N, O] -> actions [N, A]; `reset(mask, seeds)` forgets environment i's
    state (a planner's warm start) where mask[i] is True, at the start of its episode, whose
    reset seed is seeds[i] (a policy may seed its own randomness with it)."""

    def __call__(self, observations: np.ndarray) -> np.ndarray: ...

    def reset(self, mask: np.ndarray, seeds: Sequence[int] | None = None) -> None: ...


def run_episodes(
    policy: BatchedPolicy,
    env: gym.Env | gym.vector.VectorEnv,
    episodes: int,
    seed: int,
    on_frame: Callable[[int, np.ndarray], None] | None = None,
    on_step: Callable[[int, np.ndarray, np.ndarray, float, np.ndarray], None] | None = None,
) -> np.ndarray:
    """Returns [episodes] of episodes reset with seeds seed + k: on a vector env in waves of
    its num_envs (a last, smaller wave leaves the extra envs' steps uncounted), else one after
    the other (a batch of one for the policy). `on_step(k, obs, action, reward, next_obs)`
    receives every transition of episode k; single env only: `on_frame(k, frame)` receives
    env.render() after every reset and step."""
    if isinstance(env, gym.vector.VectorEnv):
        if on_frame is not None:
            raise ValueError("run_episodes: on_frame needs a single env")
        return _run_waves(policy, env, episodes, seed, on_step)
    returns = np.zeros(episodes)
    start = np.ones(1, dtype=bool)
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        policy.reset(start, [seed + k])
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


def _run_waves(
    policy: BatchedPolicy,
    envs: gym.vector.VectorEnv,
    episodes: int,
    seed: int,
    on_step: Callable[[int, np.ndarray, np.ndarray, float, np.ndarray], None] | None = None,
) -> np.ndarray:
    """The episodes on a vector env, num_envs at a time; an env's steps after its episode ended
    (an autoreset, or the spare envs of the last wave) are not counted."""
    n = envs.num_envs
    returns = np.zeros(episodes)
    for first in range(0, episodes, n):
        ks = np.arange(first, first + n)
        counted = ks < episodes
        seeds = [seed + int(k) for k in ks]
        obs, _ = envs.reset(seed=seeds)
        policy.reset(np.ones(n, dtype=bool), seeds)
        active = counted.copy()
        while active.any():
            actions = policy(np.asarray(obs))
            next_obs, rewards, terminated, truncated, _ = envs.step(actions)
            if on_step is not None:  # next-step autoreset: next_obs is the episode's last one
                for i in np.flatnonzero(active):
                    on_step(int(ks[i]), obs[i], actions[i], float(rewards[i]), next_obs[i])
            obs = next_obs
            returns[ks[active]] += np.asarray(rewards, dtype=np.float64)[active]
            active &= ~(np.asarray(terminated) | np.asarray(truncated))
    return returns
