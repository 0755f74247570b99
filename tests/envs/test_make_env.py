"""make_env: the task's own spaces, seeding, episode statistics and one-line errors; the agent's
view over it (envs.scaling.scale_spaces): action rescaling and fixed observation scaling; for
every supported id."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

from envs import MUJOCO_ENVS, SUPPORTED_ENVS, EnvError, env_info, make_env
from envs.scaling import SpaceScaling, scale_spaces

# Raw gymnasium action bounds, to check the [-1, 1] rescaling against the unwrapped task.
RAW_ACTION_HIGH = {
    "Pendulum-v1": 2.0,
    "MountainCarContinuous-v0": 1.0,
    "InvertedPendulum-v5": 3.0,
    "HalfCheetah-v5": 1.0,
}


def _rollout(env: gym.Env, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    obs, _ = env.reset()
    observations, rewards = [obs], []
    for a in actions:
        obs, reward, terminated, truncated, _ = env.step(a)
        observations.append(obs)
        rewards.append(reward)
        if terminated or truncated:
            break
    return np.stack(observations), np.asarray(rewards)


@pytest.mark.parametrize("env_id", SUPPORTED_ENVS)
def test_spaces_bounds_and_dtypes(env_id):
    raw, plain = make_env(env_id, seed=0), gym.make(env_id)
    assert raw.action_space == plain.action_space  # the task's own units, as gym.make
    if env_id.startswith("dm_control/"):  # a Dict of named arrays, flattened (envs/dmc.py)
        assert raw.observation_space == gym.spaces.flatten_space(plain.observation_space)
    else:
        assert raw.observation_space == plain.observation_space
    env = scale_spaces(raw)
    try:
        assert isinstance(env.action_space, gym.spaces.Box)
        assert env.action_space.dtype == np.float32
        np.testing.assert_array_equal(env.action_space.low, -1.0)
        np.testing.assert_array_equal(env.action_space.high, 1.0)
        assert env.observation_space.dtype == np.float32
        obs, _ = env.reset()
        assert obs.dtype == np.float32 and env.observation_space.contains(obs)
        for _ in range(5):
            obs, reward, *_ = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs) and np.isfinite(reward)
        info = env_info(env)
        assert info.env_id == env_id
        assert info.obs_dim == obs.size and info.action_dim == env.action_space.shape[0]
        if env_id.startswith("dm_control/"):  # dm_env ends at 1000 steps: 500 decisions of 2
            assert (info.max_episode_steps, info.action_repeat) == (500, 2)
        else:
            assert info.max_episode_steps == gym.spec(env_id).max_episode_steps
    finally:
        env.close()


@pytest.mark.parametrize("env_id", SUPPORTED_ENVS)
def test_same_seed_same_trajectory_and_different_seed_differs(env_id):
    action_dim = make_env(env_id).action_space.shape[0]
    actions = np.random.default_rng(0).uniform(-1, 1, size=(20, action_dim)).astype(np.float32)
    obs_a, rew_a = _rollout(make_env(env_id, seed=7), actions)
    obs_b, rew_b = _rollout(make_env(env_id, seed=7), actions)
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(rew_a, rew_b)
    first_other, _ = make_env(env_id, seed=8).reset()
    assert not np.array_equal(obs_a[0], first_other)
    # The action space is seeded too: the same seed samples the same actions.
    sample_a = make_env(env_id, seed=3).action_space.sample()
    np.testing.assert_array_equal(sample_a, make_env(env_id, seed=3).action_space.sample())


@pytest.mark.parametrize("env_id", SUPPORTED_ENVS)
def test_episode_statistics_at_episode_end(env_id):
    env = make_env(env_id, seed=1, max_episode_steps=6)
    env.reset()
    total, steps, info = 0.0, 0, {}
    for _ in range(6):
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        total += reward
        steps += 1
        if terminated or truncated:
            break
        assert "episode" not in info
    assert terminated or truncated
    assert info["episode"]["l"] == steps
    assert info["episode"]["r"] == pytest.approx(total, rel=1e-6, abs=1e-6)
    if not terminated:
        assert steps == 6  # max_episode_steps overrides the registration's limit


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "InvertedPendulum-v5"])
def test_action_one_is_the_raw_upper_bound(env_id):
    """Stepping the scaled view with a = +1 equals stepping the raw task with its upper action
    bound, and SpaceScaling (what predict uses) computes the same maps as the wrappers."""
    raw = gym.make(env_id)
    wrapped = scale_spaces(make_env(env_id))
    raw_obs, _ = raw.reset(seed=11)
    wrapped.reset(seed=11)
    for _ in range(3):
        raw_obs, raw_reward, *_ = raw.step(np.full(raw.action_space.shape, RAW_ACTION_HIGH[env_id]))
        obs, reward, *_ = wrapped.step(np.ones(wrapped.action_space.shape, dtype=np.float32))
        scaled_raw = wrapped.get_wrapper_attr("shift"), wrapped.get_wrapper_attr("scale")
        expected = ((raw_obs - scaled_raw[0]) * scaled_raw[1]).astype(np.float32)
        np.testing.assert_allclose(obs, expected, rtol=1e-6, atol=1e-6)
        assert reward == pytest.approx(raw_reward)
        maps = SpaceScaling.from_env(raw)
        np.testing.assert_array_equal(maps.observation(raw_obs), obs)
        np.testing.assert_array_equal(maps.action(np.ones(raw.action_space.shape, np.float32)),
                                      raw.action_space.high)  # fmt: skip


def test_fixed_observation_scaling_from_declared_bounds():
    """Pendulum: cos, sin unchanged, angular velocity / 8. MountainCar: position [-1.2, 0.6] and
    velocity [-0.07, 0.07] onto [-1, 1]. MuJoCo tasks declare no bounds: identity."""
    raw = gym.make("Pendulum-v1")
    env = scale_spaces(make_env("Pendulum-v1"))
    raw_obs, _ = raw.reset(seed=2)
    obs, _ = env.reset(seed=2)
    np.testing.assert_allclose(obs, raw_obs * np.array([1.0, 1.0, 1 / 8]), rtol=1e-6)

    raw = gym.make("MountainCarContinuous-v0")
    env = scale_spaces(make_env("MountainCarContinuous-v0"))
    raw.reset(seed=2)
    env.reset(seed=2)
    for _ in range(30):
        raw_obs, *_ = raw.step(np.array([1.0], dtype=np.float32))
        obs, *_ = env.step(np.array([1.0], dtype=np.float32))
    expected = np.array([(raw_obs[0] + 0.3) / 0.9, raw_obs[1] / 0.07])
    np.testing.assert_allclose(obs, expected, rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(obs) <= 1.0)

    raw = gym.make("HalfCheetah-v5")
    env = scale_spaces(make_env("HalfCheetah-v5"))
    raw_obs, _ = raw.reset(seed=4)
    obs, _ = env.reset(seed=4)
    np.testing.assert_allclose(obs, raw_obs.astype(np.float32))


def test_env_kwargs_pass_through_to_the_disk_environment():
    env = make_env("PoincareDisk-v0", preset="conservative", dt=0.05, substeps=12)
    config = env.unwrapped.config
    assert (config.friction, config.temperature, config.dt, config.substeps) == (0.0, 0.0, 0.05, 12)


def _assert_one_line_naming(err: EnvError, *words: str) -> None:
    message = str(err)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_unknown_id_names_the_supported_choices():
    with pytest.raises(EnvError) as info:
        make_env("Pendullum-v1")
    _assert_one_line_naming(info.value, "Pendullum-v1", "did you mean Pendulum-v1", *SUPPORTED_ENVS)
    assert isinstance(info.value, ValueError)


def test_discrete_action_space_is_refused():
    with pytest.raises(EnvError) as info:
        make_env("CartPole-v1")
    _assert_one_line_naming(info.value, "CartPole-v1", "discrete", *SUPPORTED_ENVS)


@pytest.mark.parametrize("env_id", MUJOCO_ENVS)
def test_missing_mujoco_says_how_to_install(env_id, monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)  # `import mujoco` now raises ImportError
    with pytest.raises(EnvError) as info:
        make_env(env_id)
    _assert_one_line_naming(info.value, env_id, "pip install -e '.[mujoco]'", "Pendulum-v1")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(env_id="Pendulum-v1", seed=-1), ["seed"]),
        (dict(env_id="Pendulum-v1", seed=1.5), ["seed"]),
        (dict(env_id="Pendulum-v1", max_episode_steps=0), ["max_episode_steps"]),
        (dict(env_id="Pendulum-v1", render_mode="video"), ["video", "rgb_array"]),
        (dict(env_id="Pendulum-v1", gravity_typo=9.8), ["gravity_typo"]),
        (dict(env_id="PoincareDisk-v0", dt=-0.1), ["dt"]),
        (dict(env_id="PoincareDisk-v0", preset="frozen"), ["frozen", "conservative"]),
        (dict(env_id="PoincareDisk-v0", frictoin=0.1), ["frictoin", "friction"]),
    ],
)
def test_bad_arguments_raise_one_clear_line(kwargs, words):
    with pytest.raises(EnvError) as info:
        make_env(**kwargs)
    _assert_one_line_naming(info.value, *words)
