"""DeepMind Control suite tasks as gymnasium envs: shimmy's `dm_control/<domain>-<task>-v0`,
with flattened observations and an action repeat, rendered headless.

Stack, inside out (``make_dmc``):

1. shimmy's ``DmControlCompatibilityV0`` (``gymnasium.make("dm_control/...")``): a Dict
   observation space of the task's named arrays; the episode ends by truncation after the task's
   own 1000 physics-control steps (dm_env's ``timestep.last()``).
2. ``FlattenObservation`` (gymnasium): one float64 Box, the Dict's keys in the space's order.
3. ``ActionRepeat(k)``: each agent action is applied k times, rewards summed (TD-MPC2 and
   DreamerV3 use k = 2 on DMC, and count environment steps as k per decision).
4. ``TimeLimit(1000 // k)``: the same end, stated in decisions, so ``env.spec.max_episode_steps``
   tells the agent the episode length (its discount heuristic reads it).

Rendering is offscreen: ``MUJOCO_GL`` defaults to ``egl`` (set before dm_control is imported
unless the caller set it), so ``render_mode="rgb_array"`` works on a machine without a display.
Triton, where installed, is imported before dm_control: its LLVM crashes the process when it
loads after the one Mesa's GL backend brings in (measured: ``import dm_control.suite; import
triton`` segfaults, the other order works and renders).

``ActionRepeat`` is written here because gymnasium ships none for general envs (its
``MaxAndSkipObservation`` is Atari's frame max-pooling).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import FlattenObservation, TimeLimit

__all__ = [
    "DMC_PREFIX",
    "DMC_ACTION_REPEAT",
    "DMC_EPISODE_STEPS",
    "ActionRepeat",
    "action_repeat_of",
    "is_dmc",
    "make_dmc",
    "register_dmc",
]

DMC_PREFIX = "dm_control/"
DMC_ACTION_REPEAT = 2
"""the suite's action repeat (TD-MPC2, DreamerV3)"""
DMC_EPISODE_STEPS = 1000
"""physics-control steps of every DMC suite episode"""


def is_dmc(env_id: str) -> bool:
    return isinstance(env_id, str) and env_id.startswith(DMC_PREFIX)


class ActionRepeat(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Applies every action `repeat` times; the reward is the sum over the repeats, the episode
    stops at the first termination or truncation inside them; ``info`` is the last step's."""

    def __init__(self, env: gym.Env, repeat: int):
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"action repeat must be a positive int, got {repeat!r}")
        gym.utils.RecordConstructorArgs.__init__(self, repeat=repeat)
        gym.Wrapper.__init__(self, env)
        self.repeat = repeat

    def step(self, action):
        total = 0.0
        for _ in range(self.repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


def action_repeat_of(env: gym.Env) -> int:
    """The product of the ActionRepeat wrappers in `env`'s stack (1 without one): environment
    steps per agent decision."""
    repeat = 1
    while isinstance(env, gym.Wrapper):
        if isinstance(env, ActionRepeat):
            repeat *= env.repeat
        env = env.env
    return repeat


def register_dmc() -> None:
    """Register shimmy's dm_control ids with gymnasium (idempotent); ImportError if shimmy or
    dm_control is missing."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    try:  # libtriton segfaults when it loads after the GL backend's LLVM (EGL/OSMesa): first
        importlib.import_module("triton")
    except ImportError:
        pass
    shimmy = importlib.import_module("shimmy")
    importlib.import_module("dm_control.suite")
    if not any(env_id.startswith(DMC_PREFIX) for env_id in gym.registry):
        gym.register_envs(shimmy)


def make_dmc(
    env_id: str,
    *,
    action_repeat: int | None = None,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    **env_kwargs: Any,
) -> gym.Env:
    """The stack of the module docstring. `action_repeat` None: DMC_ACTION_REPEAT;
    `max_episode_steps` counts decisions (None: DMC_EPISODE_STEPS // action_repeat, the
    task's own end). Raises gym.error.NameNotFound for an id shimmy does not register."""
    repeat = DMC_ACTION_REPEAT if action_repeat is None else action_repeat
    register_dmc()
    env = gym.make(env_id, render_mode=render_mode, **env_kwargs)
    env = FlattenObservation(env)
    env = ActionRepeat(env, repeat)
    return TimeLimit(env, max_episode_steps or max(1, DMC_EPISODE_STEPS // repeat))
