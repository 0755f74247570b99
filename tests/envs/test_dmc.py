"""DeepMind Control through shimmy in `envs.make_env`: flattened observations, the action
repeat against two raw steps, the episode length in decisions, seeding, offscreen rendering,
checkpointable generator state, clear errors, and a short agent.train run read back."""

from __future__ import annotations

import importlib.util
import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from agent import train as train_cli
from agent.persistence.checkpoint import env_rng_state, load_checkpoint, set_env_rng_state
from agent.persistence.runs import CHECKPOINT_NAME
from envs import DMC_ENVS, EnvError, env_info, make_env
from envs.dmc import ActionRepeat, register_dmc
from envs.scaling import SpaceScaling, scale_spaces
from tests.agent.conftest import call_main, tiny

# find_spec, not importorskip: importing shimmy loads dm_control's GL backend, which must come
# after MUJOCO_GL is set and after triton (envs/dmc.py says why)
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("shimmy") is None or importlib.util.find_spec("dm_control") is None,
    reason="the dmc extra (shimmy, dm-control) is not installed",
)

OBS_DIMS = {  # the suite's named arrays, flattened
    "dm_control/pendulum-swingup-v0": 3,  # orientation (2), velocity (1)
    "dm_control/reacher-easy-v0": 6,  # position (2), to_target (2), velocity (2)
    "dm_control/cartpole-swingup-v0": 5,  # position (3), velocity (2)
}


@pytest.mark.parametrize("env_id", DMC_ENVS)
def test_dmc_envs_pass_gymnasiums_checker_with_flat_observations(env_id):
    env = make_env(env_id, seed=0)
    check_env(env, skip_render_check=True)
    info = env_info(env)
    assert (info.obs_dim, info.max_episode_steps, info.action_repeat) == (
        OBS_DIMS[env_id], 500, 2
    )  # fmt: skip
    assert isinstance(env.observation_space, gym.spaces.Box)
    assert env.observation_space.shape == (OBS_DIMS[env_id],)
    env.close()


def test_the_agents_view_of_a_dmc_task_builds_without_numpy_warnings():
    """dm_control's float64 action bounds cast to the agent's float32 [-1, 1] without the
    'overflow encountered in cast' RuntimeWarning every agent build used to print."""
    env = make_env("dm_control/pendulum-swingup-v0", seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        scaling = SpaceScaling.from_env(env)
        scale_spaces(env, 0)
    assert np.allclose(scaling.action(np.ones((1, 1), dtype=np.float32)), env.action_space.high)
    env.close()


def test_an_episode_is_500_decisions_of_two_physics_steps_each():
    env = make_env("dm_control/pendulum-swingup-v0", seed=3)
    raw = gym.make("dm_control/pendulum-swingup-v0")  # registered by make_env
    obs, _ = env.reset()
    raw_obs, _ = raw.reset(seed=3)
    flat = lambda o: np.concatenate([np.ravel(o[k]) for k in raw.observation_space])  # noqa: E731
    np.testing.assert_array_equal(obs, flat(raw_obs))
    rng = np.random.default_rng(0)
    decisions, done = 0, False
    while not done:
        action = rng.uniform(-1, 1, size=1)
        obs, reward, terminated, truncated, info = env.step(action)
        total = 0.0
        for _ in range(2):
            raw_obs, raw_reward, *_ = raw.step(action)
            total += raw_reward
        np.testing.assert_array_equal(obs, flat(raw_obs))
        assert reward == pytest.approx(total, abs=1e-12) and 0.0 <= reward <= 2.0
        decisions += 1
        done = terminated or truncated
    assert decisions == 500 and truncated and not terminated
    assert info["episode"]["l"] == 500


def test_same_seed_same_trajectory_and_the_generator_state_restores():
    def rollout(env, n=20):
        obs = [env.reset()[0]]
        for k in range(n):
            obs.append(env.step(np.array([np.sin(k)]))[0])
        return np.stack(obs)

    a, b = (
        make_env("dm_control/reacher-easy-v0", seed=7),
        make_env("dm_control/reacher-easy-v0", seed=7),
    )
    np.testing.assert_array_equal(rollout(a), rollout(b))
    assert not np.array_equal(
        rollout(a)[0], rollout(make_env("dm_control/reacher-easy-v0", seed=8))[0]
    )
    state = env_rng_state(a)  # a legacy RandomState in dm_control: JSON-like, reloadable
    first = a.reset()[0]
    set_env_rng_state(a, json.loads(json.dumps(state)))
    np.testing.assert_array_equal(a.reset()[0], first)


def _decisions_to_episode_end(env) -> tuple[int, dict]:
    env.reset()
    steps = 0
    while True:
        *_, terminated, truncated, info = env.step(np.zeros(1, dtype=np.float32))
        steps += 1
        if terminated or truncated:
            return steps, info


def test_action_repeat_applies_to_other_ids_and_counts_decisions():
    env = make_env("Pendulum-v1", seed=0, action_repeat=4)
    assert env_info(env).max_episode_steps == 50 and env_info(env).action_repeat == 4
    assert _decisions_to_episode_end(env)[0] == 50
    # max_episode_steps counts decisions whatever the repeat: 30 decisions of 4 env steps each
    env = make_env("Pendulum-v1", seed=0, action_repeat=4, max_episode_steps=30)
    assert env_info(env).max_episode_steps == 30
    steps, info = _decisions_to_episode_end(env)
    assert steps == 30 and info["episode"]["l"] == 30
    with pytest.raises(ValueError, match="positive int"):
        ActionRepeat(env, 0)


def test_rendering_is_offscreen():
    env = make_env("dm_control/cartpole-swingup-v0", seed=0, render_mode="rgb_array")
    env.reset()
    frame = env.render()
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8 and frame.std() > 0


def test_bad_dmc_requests_are_one_line():
    with pytest.raises(EnvError, match="did you mean dm_control/pendulum-swingup-v0"):
        make_env("dm_control/pendulum-swingupp-v0")
    with pytest.raises(EnvError, match="action_repeat must be a positive int"):
        make_env("dm_control/pendulum-swingup-v0", action_repeat=0)
    register_dmc()  # idempotent
    register_dmc()


def test_a_short_training_run_on_a_dmc_task(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny(train={"max_episode_steps": None, "seed_steps": 40})))
    argv = ["--env", "dm_control/pendulum-swingup-v0", "--steps", "60", "--config", str(config),
            "--logdir", str(tmp_path / "runs"), "--train.max_episode_steps", "30"]  # fmt: skip
    code, err, out = call_main(train_cli.main, argv, capsys)
    assert code == 0, err
    (run_dir,) = (tmp_path / "runs").iterdir()
    state = load_checkpoint(run_dir / CHECKPOINT_NAME)
    assert state["config"]["train"]["env_id"] == "dm_control/pendulum-swingup-v0"
    buffer = state["agent"]["buffer"]
    n = int(state["agent"]["counters"]["num_timesteps"])
    assert n == 60
    rewards = np.asarray(buffer["reward"])[:n]
    assert np.all((rewards >= 0) & (rewards <= 2))  # two summed physics steps of reward in [0, 1]
    assert np.asarray(buffer["obs"]).shape[-1] == 3
