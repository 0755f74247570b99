"""DeepMind Control suite tasks as gymnasium envs (shimmy's `dm_control/<domain>-<task>-v0`,
flattened observations, rendered headless), and the action repeat every env can take.

``make_dmc``, inside out:

1. shimmy's ``DmControlCompatibilityV0`` (``gymnasium.make("dm_control/...")``): a Dict
   observation space of the task's named arrays; the episode ends by truncation after the task's
   own 1000 physics-control steps (dm_env's ``timestep.last()``).
2. ``FlattenObservation`` (gymnasium): one float64 Box, the Dict's keys in the space's order.
3. ``TimeLimit(1000)`` (or fewer steps): that end in ``env.spec.max_episode_steps``.

``repeat_actions(env, k)`` (envs.make_env applies it, k = 2 by default on these tasks as TD-MPC2
and DreamerV3 do): ``ActionRepeat(k)`` applies each agent action k times, rewards summed, and a
``TimeLimit`` states the same end in decisions (1000 // k), so ``env.spec.max_episode_steps``
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
    "default_action_repeat",
    "is_dmc",
    "make_dmc",
    "register_dmc",
    "repeat_actions",
]

DMC_PREFIX = "dm_control/"
DMC_ACTION_REPEAT = 2
"""the suite's action repeat (TD-MPC2, DreamerV3)"""
DMC_EPISODE_STEPS = 1000
"""physics-control steps of every DMC suite episode"""


def is_dmc(env_id: str) -> bool:
    return isinstance(env_id, str) and env_id.startswith(DMC_PREFIX)


def default_action_repeat(env_id: str) -> int:
    """make_env's action repeat when none is given: DMC_ACTION_REPEAT for dm_control ids, else 1."""
    return DMC_ACTION_REPEAT if is_dmc(env_id) else 1


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


def repeat_actions(env: gym.Env, repeat: int) -> gym.Env:
    """`env` under ActionRepeat(repeat), its episode limit (if any) restated in decisions,
    rounded up."""
    limit = env.spec.max_episode_steps if env.spec is not None else None
    env = ActionRepeat(env, repeat)
    return TimeLimit(env, -(-limit // repeat)) if limit else env


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
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    **env_kwargs: Any,
) -> gym.Env:
    """The stack of the module docstring, without an action repeat; `max_episode_steps` in
    physics-control steps (None: DMC_EPISODE_STEPS, the task's own end, which also caps it).
    Raises gym.error.NameNotFound for an id shimmy does not register."""
    register_dmc()
    env = gym.make(env_id, render_mode=render_mode, **env_kwargs)
    return TimeLimit(FlattenObservation(env), max_episode_steps or DMC_EPISODE_STEPS)
