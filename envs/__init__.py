"""Environments: gymnasium continuous-control tasks behind one `make_env`, and the project's own
environments with known ground-truth dynamics (`PoincareDisk-v0`, see `envs.poincare_disk`, and
`PoincareDiskRandom-v0`, its landscape redrawn at every reset, see `envs.poincare_disk_random`)."""

from __future__ import annotations

import gymnasium as gym

from envs.factory import MUJOCO_ENVS, SUPPORTED_ENVS, EnvError, EnvInfo, env_info, make_env

__all__ = ["MUJOCO_ENVS", "SUPPORTED_ENVS", "EnvError", "EnvInfo", "env_info", "make_env"]

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
