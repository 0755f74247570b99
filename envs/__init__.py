"""Environments: gymnasium continuous-control tasks behind one `make_env`, and the project's own
environments with known ground-truth dynamics (`PoincareDisk-v0`, see `envs.poincare_disk`, and
`PoincareDiskRandom-v0`, its landscape redrawn at every reset, see `envs.poincare_disk_random`),
and the DeepMind Control suite's tasks through shimmy (`envs.dmc`)."""

from __future__ import annotations

import os

import gymnasium as gym

os.environ.setdefault("MUJOCO_GL", "egl")  # dm_control renders offscreen unless told otherwise

from envs.factory import (
    DMC_ENVS,
    MUJOCO_ENVS,
    SUPPORTED_ENVS,
    EnvError,
    EnvInfo,
    env_info,
    make_env,
)

__all__ = [
    "DMC_ENVS",
    "MUJOCO_ENVS",
    "SUPPORTED_ENVS",
    "EnvError",
    "EnvInfo",
    "env_info",
    "make_env",
]

if "PoincareDisk-v0" not in gym.registry:
    gym.register(
        id="PoincareDisk-v0",
        entry_point="envs.poincare_disk:PoincareDiskEnv",
        max_episode_steps=200,
    )

if "PoincareDiskRandom-v0" not in gym.registry:
    gym.register(
        id="PoincareDiskRandom-v0",
        entry_point="envs.poincare_disk_random:PoincareDiskRandomEnv",
        max_episode_steps=200,
    )
