"""`make_env`: one call from an environment id to a checked, seeded gymnasium env.

Wrapper stack, inside out:

1. ``gymnasium.make`` (the registration's ``TimeLimit``; ``max_episode_steps`` overrides it).
2. ``SeedFirstReset``: the first ``reset()`` without a seed uses ``make_env``'s seed, so the same
   seed gives the same first observation and, under the same actions, the same trajectory.
3. ``RecordEpisodeStatistics``: ``info["episode"] = {"r", "l", "t"}`` at the end of an episode.

DeepMind Control ids (``dm_control/<domain>-<task>-v0``) come from shimmy through
``envs.dmc.make_dmc`` in step 1 (flattened observations). Between steps 1 and 2, an action
repeat (``envs.dmc.repeat_actions``: 2 by default for DeepMind Control ids, else 1) restates the
episode length in decisions (500 on DMC).

The env keeps the task's own observation and action units, exactly as ``gymnasium.make`` gives
them, so an agent's ``predict`` means the same thing on ``make_env(id)`` and on ``gym.make(id)``
(stable-baselines3's convention). The agent's internal view, actions in [-1, 1] and a fixed
affine observation scaling, is ``envs.scaling.scale_spaces`` over this env.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import load_env_creator
from gymnasium.wrappers import RecordEpisodeStatistics

from envs.dmc import (
    action_repeat_of,
    default_action_repeat,
    is_dmc,
    make_dmc,
    register_dmc,
    repeat_actions,
)

__all__ = [
    "SUPPORTED_ENVS",
    "MUJOCO_ENVS",
    "DMC_ENVS",
    "EnvError",
    "EnvInfo",
    "SeedFirstReset",
    "make_env",
    "env_info",
]

MUJOCO_ENVS: tuple[str, ...] = ("InvertedPendulum-v5", "HalfCheetah-v5")
DMC_ENVS: tuple[str, ...] = (
    "dm_control/pendulum-swingup-v0",
    "dm_control/reacher-easy-v0",
    "dm_control/cartpole-swingup-v0",
)
SUPPORTED_ENVS: tuple[str, ...] = (
    "Pendulum-v1",
    "MountainCarContinuous-v0",
    *MUJOCO_ENVS,
    *DMC_ENVS,
    "PoincareDisk-v0",
    "PoincareDiskRandom-v0",
)


_SUPPORTED_LINE = "supported: " + ", ".join(SUPPORTED_ENVS)


class EnvError(ValueError):
    """Bad environment request (unknown id, discrete actions, missing dependency, bad argument).
    ``str(err)`` is one line that names the supported choices; CLIs print it and exit 2."""


@dataclass(frozen=True)
class EnvInfo:
    """What an agent needs to size its networks and its rollouts."""

    env_id: str
    obs_dim: int
    action_dim: int
    max_episode_steps: int | None  # decisions; None: the env never truncates by itself
    action_repeat: int = 1  # environment steps per decision


class SeedFirstReset(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Uses ``seed`` for the first ``reset()`` called without one (later resets continue the
    env's seeded RNG, as gymnasium intends); an explicit ``reset(seed=...)`` always wins."""

    def __init__(self, env: gym.Env, seed: int):
        gym.utils.RecordConstructorArgs.__init__(self, seed=seed)
        gym.Wrapper.__init__(self, env)
        self._pending_seed: int | None = seed

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        return self.env.reset(seed=seed, options=options)


def _did_you_mean(env_id: str, choices) -> str:
    close = difflib.get_close_matches(env_id, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _unknown_id_message(env_id: str) -> str:
    return (
        f"unknown environment id {env_id!r}{_did_you_mean(env_id, SUPPORTED_ENVS)}; "
        f"{_SUPPORTED_LINE} "
        "(other registered gymnasium ids with continuous Box actions also work, untested)"
    )


def _require_mujoco(env_id: str) -> None:
    try:
        importlib.import_module("mujoco")
    except ImportError as err:
        raise EnvError(
            f"{env_id} needs MuJoCo, which is not installed ({err}); install with "
            f"pip install -e '.[mujoco]', or pick one of: "
            + ", ".join(e for e in SUPPORTED_ENVS if e not in MUJOCO_ENVS)
        ) from None


def _make_dmc(env_id: str, render_mode: str | None, max_episode_steps: int | None,
              env_kwargs: dict[str, Any]) -> gym.Env:  # fmt: skip
    try:
        register_dmc()
    except ImportError as err:
        raise EnvError(
            f"{env_id} needs shimmy and dm-control, which are not installed ({err}); install "
            "with pip install -e '.[dmc]'"
        ) from None
    if env_id not in gym.registry:
        hint = _did_you_mean(env_id, (e for e in gym.registry if is_dmc(e)))
        raise EnvError(
            f"unknown DeepMind Control id {env_id!r}{hint}; tested: {', '.join(DMC_ENVS)}"
        )
    try:
        return make_dmc(env_id, max_episode_steps=max_episode_steps, render_mode=render_mode,
                        **env_kwargs)  # fmt: skip
    except (TypeError, AssertionError) as err:  # shimmy asserts on the render mode
        raise EnvError(f"bad argument for {env_id}: {str(err).splitlines()[0] or err!r}") from None


def _validate_arguments(
    env_id: str,
    seed: int | None,
    render_mode: str | None,
    max_episode_steps: int | None,
    action_repeat: int | None,
) -> None:
    if not isinstance(env_id, str):
        raise EnvError(f"env_id must be a string, got {type(env_id).__name__}; {_SUPPORTED_LINE}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise EnvError(f"seed must be a non-negative int or None, got {seed!r}")
    if max_episode_steps is not None and (
        isinstance(max_episode_steps, bool)
        or not isinstance(max_episode_steps, int)
        or max_episode_steps < 1
    ):
        raise EnvError(
            f"max_episode_steps must be a positive int or None, got {max_episode_steps!r}"
        )
    if render_mode is not None and not isinstance(render_mode, str):
        raise EnvError(f"render_mode must be a string or None, got {render_mode!r}")
    if action_repeat is not None and (
        isinstance(action_repeat, bool) or not isinstance(action_repeat, int) or action_repeat < 1
    ):
        raise EnvError(f"action_repeat must be a positive int or None, got {action_repeat!r}")


def make_env(
    env_id: str = "Pendulum-v1",
    seed: int | None = None,
    *,
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
    action_repeat: int | None = None,
    **env_kwargs: Any,
) -> gym.Env:
    """Build ``env_id`` in the task's own units, with a seeded first reset and episode statistics
    (see the module docstring for the stack).

    ``seed`` seeds the first reset and the action and observation spaces, so the same seed gives
    the same first observation and the same trajectory under the same actions. ``env_kwargs``
    go to the environment's constructor (e.g. ``make_env("PoincareDisk-v0", preset=
    "conservative", dt=0.05)``). ``action_repeat`` (None: 2 for DeepMind Control ids, else 1)
    applies each action that many times; ``max_episode_steps`` then counts decisions. Raises
    ``EnvError`` (a ``ValueError``, one line naming the supported choices) for an unknown id, a
    non-Box action space, a missing optional dependency or a bad argument.
    """
    _validate_arguments(env_id, seed, render_mode, max_episode_steps, action_repeat)
    repeat = default_action_repeat(env_id) if action_repeat is None else action_repeat
    steps = None if max_episode_steps is None else max_episode_steps * repeat  # env steps
    make = _make_dmc if is_dmc(env_id) else _make_gymnasium
    env = make(env_id, render_mode, steps, env_kwargs)
    if repeat > 1:
        env = repeat_actions(env, repeat)
    _check_spaces(env, env_id)
    if seed is not None:
        env = SeedFirstReset(env, seed)
    env = RecordEpisodeStatistics(env)
    if seed is not None:
        env.action_space.seed(seed)
        env.observation_space.seed(seed)
    return env


def _make_gymnasium(env_id: str, render_mode: str | None, max_episode_steps: int | None,
                    env_kwargs: dict[str, Any]) -> gym.Env:  # fmt: skip
    if env_id not in gym.registry:
        raise EnvError(_unknown_id_message(env_id))
    spec = gym.spec(env_id)
    if env_id in MUJOCO_ENVS or "mujoco" in str(spec.entry_point):
        _require_mujoco(env_id)

    if render_mode is not None and isinstance(spec.entry_point, str):
        modes = getattr(load_env_creator(spec.entry_point), "metadata", {}).get("render_modes", [])
        if render_mode not in modes:
            raise EnvError(
                f"{env_id} does not render in mode {render_mode!r}; its modes: "
                + (", ".join(modes) if modes else "none")
            )

    try:
        env = gym.make(
            env_id, max_episode_steps=max_episode_steps, render_mode=render_mode, **env_kwargs
        )
    except gym.error.DependencyNotInstalled as err:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise EnvError(
            f"{env_id} needs a missing dependency ({first_line}); for the MuJoCo tasks install "
            f"with pip install -e '.[mujoco]'; {_SUPPORTED_LINE}"
        ) from None
    except TypeError as err:
        raise EnvError(f"bad keyword argument for {env_id}: {str(err).splitlines()[0]}") from None
    except ValueError as err:  # configuration validation (e.g. PoincareDiskConfig)
        raise EnvError(f"bad configuration for {env_id}: {str(err).splitlines()[0]}") from None
    return env


def _check_spaces(env: gym.Env, env_id: str) -> None:
    if not isinstance(env.action_space, spaces.Box):
        env.close()
        raise EnvError(
            f"{env_id} has a discrete (non-Box) action space {env.action_space}; this agent "
            f"needs continuous actions; {_SUPPORTED_LINE}"
        )
    if not isinstance(env.observation_space, spaces.Box):
        env.close()
        raise EnvError(
            f"{env_id} has a non-Box observation space {env.observation_space}; {_SUPPORTED_LINE}"
        )

    if not np.all(np.isfinite(env.action_space.low) & np.isfinite(env.action_space.high)):
        env.close()
        raise EnvError(
            f"{env_id} has unbounded actions {env.action_space}; the agent plans in a bounded box"
        )


def env_info(env: gym.Env) -> EnvInfo:
    """Observation and action sizes and the episode limit of an env built by ``make_env`` (or
    of any Box-space env)."""
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, spaces.Box) or not isinstance(act_space, spaces.Box):
        raise EnvError(f"env_info needs Box spaces, got {obs_space} and {act_space}")
    spec = env.spec
    return EnvInfo(
        env_id=spec.id if spec is not None else type(env.unwrapped).__name__,
        obs_dim=int(np.prod(obs_space.shape)),
        action_dim=int(np.prod(act_space.shape)),
        max_episode_steps=spec.max_episode_steps if spec is not None else None,
        action_repeat=action_repeat_of(env),
    )
