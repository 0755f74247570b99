"""The agent's view of an env: actions in [-1, 1] and a fixed affine observation scaling.

An env built by ``envs.make_env`` (or ``gymnasium.make``) speaks the task's own units. A
model-based agent plans in the unit box and fits its world model to observations on a common
scale, so it looks at the env through two fixed maps, both derived from the declared spaces:

- actions: gymnasium's ``RescaleAction`` onto [-1, 1] (the same ``rescale_box`` arithmetic);
- observations: every coordinate whose declared bounds are finite goes affinely onto [-1, 1]
  (Pendulum's angular velocity / 8, MountainCar's position and velocity); unbounded coordinates
  pass through unchanged; float32 out.

``scale_spaces(env)`` is that view as wrappers (the agent's own training and evaluation loops
step it); ``SpaceScaling`` is the same two maps as functions, for ``Agent.predict``, which takes
observations and returns actions in the env's own units as stable-baselines3 models do.

Why no running-statistics normaliser (``NormalizeObservation``): its mean and variance drift as
the agent explores, so an observation stored in the replay buffer early means something else to
the model later, and a learned dynamics model is fitted to a moving target. A fixed affine map
from bounds the task declares keeps one meaning for every stored observation. Where a task
declares no bounds (the MuJoCo tasks), the world model owns its input scaling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import RescaleAction, TransformAction, TransformObservation
from gymnasium.wrappers.utils import rescale_box

__all__ = ["BoundsAffineObservation", "SpaceScaling", "observation_affine", "scale_spaces"]

# Bounds wider than this are treated as "no bound" (some tasks declare +-float32 max).
_MAX_FINITE_BOUND = 1e6


def observation_affine(space: spaces.Box) -> tuple[np.ndarray, np.ndarray]:
    """(shift, scale) with obs' = (obs - shift) * scale: [-1, 1] on the finitely bounded
    coordinates (shift = (high + low) / 2, scale = 2 / (high - low)), identity elsewhere."""
    low = np.asarray(space.low, dtype=np.float64)
    high = np.asarray(space.high, dtype=np.float64)
    bounded = (
        np.isfinite(low)
        & np.isfinite(high)
        & (np.abs(low) < _MAX_FINITE_BOUND)
        & (np.abs(high) < _MAX_FINITE_BOUND)
        & (high > low)
    )
    low_b, high_b = np.where(bounded, low, -1.0), np.where(bounded, high, 1.0)
    return 0.5 * (high_b + low_b), 2.0 / (high_b - low_b)


def _affine_map(shift: np.ndarray, scale: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    def apply(obs: np.ndarray) -> np.ndarray:  # [..., O] -> [..., O] float32
        return ((np.asarray(obs, dtype=np.float64) - shift) * scale).astype(np.float32)

    return apply


class BoundsAffineObservation(TransformObservation):
    """The fixed observation map of ``observation_affine`` as a wrapper; ``shift`` and
    ``scale`` are exposed so that a caller can undo it (obs = obs' / scale + shift)."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)  # recreated from env alone (checker, spec)
        space = env.observation_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"observation space must be a Box, got {space}")
        self.shift, self.scale = observation_affine(space)
        bounded = self.scale != 1.0
        bounded |= self.shift != 0.0
        low = np.where(bounded, -1.0, space.low).astype(np.float32)
        high = np.where(bounded, 1.0, space.high).astype(np.float32)
        super().__init__(
            env, _affine_map(self.shift, self.scale), spaces.Box(low, high, dtype=np.float32)
        )


def scale_spaces(env: gym.Env, seed: int | None = None) -> gym.Env:
    """The agent's view of ``env``: ``RescaleAction`` onto [-1, 1], then
    ``BoundsAffineObservation``; ``seed`` seeds the new action and observation spaces."""
    with np.errstate(over="ignore"):  # gymnasium's Box casts float64 extremes (dm_control's
        env = RescaleAction(env, np.float32(-1.0), np.float32(1.0))  # float64 actions) to float32
    if env.action_space.dtype != np.float32:  # the agent's actions are float32 on every task
        inner = env.action_space.dtype
        unit = spaces.Box(-1.0, 1.0, env.action_space.shape, dtype=np.float32)
        env = TransformAction(env, lambda a: np.asarray(a, dtype=inner), unit)
    env = BoundsAffineObservation(env)
    if seed is not None:
        env.action_space.seed(seed)
        env.observation_space.seed(seed)
    return env


@dataclass(frozen=True)
class SpaceScaling:
    """The two maps of ``scale_spaces`` as functions of arrays, built from an env's own spaces:
    ``observation`` env units -> the agent's scale, ``action`` [-1, 1] -> env units (both
    [..., dim], float32 out). ``bounds()`` are the spaces' declared bounds, for checking that
    an env is the one the agent was trained on."""

    observation_space: spaces.Box
    action_space: spaces.Box

    def __post_init__(self):
        for name, space in (("observation", self.observation_space), ("action", self.action_space)):
            if not isinstance(space, spaces.Box) or len(space.shape) != 1:
                raise ValueError(
                    f"the agent needs a 1-D continuous (Box) {name} space, got {space}"
                )
        with np.errstate(over="ignore"):  # float64 action extremes cast to float32 (scale_spaces)
            _, _, to_env = rescale_box(self.action_space, np.float32(-1.0), np.float32(1.0))
        object.__setattr__(self, "_to_env", to_env)
        object.__setattr__(
            self, "_to_agent", _affine_map(*observation_affine(self.observation_space))
        )

    @classmethod
    def from_env(cls, env: gym.Env) -> SpaceScaling:
        return cls(env.observation_space, env.action_space)

    def observation(self, obs: np.ndarray) -> np.ndarray:
        return self._to_agent(obs)

    def action(self, action: np.ndarray) -> np.ndarray:
        return np.asarray(self._to_env(np.asarray(action, dtype=np.float32)), dtype=np.float32)

    def mismatch(self, trained: dict[str, list[list[float]]]) -> str | None:
        """None if these spaces have the `trained` bounds (as `bounds()` gives them), else one
        line naming the space that differs."""
        given = self.bounds()
        for name in ("observation", "action"):
            if given[name] != trained[name]:
                low, high = trained[name]
                return (
                    f"the env's {name} space {getattr(self, name + '_space')} differs from the "
                    f"one this agent was trained on (trained on {name} bounds low {low}, high "
                    f"{high}); pass the task's own env (envs.make_env or gym.make)"
                )
        return None

    def bounds(self) -> dict[str, list[list[float]]]:
        """{"observation": [low, high], "action": [low, high]} as lists (checkpoint-friendly)."""
        return {
            name: [np.asarray(s.low, np.float64).tolist(), np.asarray(s.high, np.float64).tolist()]
            for name, s in (("observation", self.observation_space), ("action", self.action_space))
        }
