"""Pendulum-v1 from a fixed grid of starts, so that an evaluation can be placed against the task's
optimum on the same starts (benchmarks/pendulum_optimum.py solves it by dynamic programming).

Pendulum-v1's ``reset(options={"x_init": x, "y_init": y})`` only sets the bounds its start is
drawn from (θ ~ U[−x, x], θ̇ ~ U[−y, y]), so a fixed start needs the unwrapped state set after
the reset. ``FixedStarts`` does that: the episode reset with seed
``first_seed + k`` starts at ``starts[k % len(starts)]``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["FixedStarts", "start_grid"]


def start_grid(angles: int = 8, velocities: tuple[float, ...] = (-1.0, 0.0, 1.0)) -> np.ndarray:
    """[angles * len(velocities), 2] starts (θ, θ̇): θ at the `angles` points k·2π/angles − π
    (k = 0..angles−1, the hanging position θ = ±π first), θ̇ at each of `velocities`."""
    theta = np.arange(angles) * (2 * np.pi / angles) - np.pi  # [angles]
    grid = np.stack(np.meshgrid(theta, np.asarray(velocities), indexing="ij"), axis=-1)
    return grid.reshape(-1, 2)


class FixedStarts(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Pendulum-v1 (any env whose unwrapped ``state`` is (θ, θ̇) and whose ``_get_obs`` reads
    it) started at ``starts[(seed - first_seed) % len(starts)]``; a reset without a seed takes
    the next start in turn."""

    def __init__(self, env: gym.Env, starts: np.ndarray | None = None, first_seed: int = 0):
        starts = start_grid() if starts is None else np.asarray(starts, dtype=np.float64)
        if starts.ndim != 2 or starts.shape[1] != 2 or len(starts) == 0:
            raise ValueError(f"starts must be [n, 2] (theta, theta_dot), got {starts.shape}")
        if not hasattr(env.unwrapped, "_get_obs"):
            raise TypeError(f"{env.unwrapped} has no (theta, theta_dot) state to set")
        gym.utils.RecordConstructorArgs.__init__(self, starts=starts, first_seed=first_seed)
        gym.Wrapper.__init__(self, env)
        self.starts, self.first_seed = starts, first_seed
        self._next = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        _, info = self.env.reset(seed=seed, options=options)
        index = (seed - self.first_seed) if seed is not None else self._next
        self._next = index + 1
        self.env.unwrapped.state = self.starts[index % len(self.starts)].copy()
        return self.env.unwrapped._get_obs(), info
