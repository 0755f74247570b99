"""PoincareDiskRandom-v0: the landscape distribution, seeding, the forces of the drawn landscape
(PoincareDisk-v0's integrator on the equivalent fixed config), fixing a landscape through
options, argument validation and the gymnasium contract."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from envs import SUPPORTED_ENVS, EnvError, make_env
from envs.poincare_disk import (
    PoincareDiskConfig,
    PoincareDiskEnv,
    _landscape,
    integrate_step,
    potential,
)
from envs.poincare_disk_random import LANDSCAPE_FIELDS, PoincareDiskRandomEnv, draw_landscape
from tests.envs.test_poincare_disk import check_env_strictly

F64 = torch.float64
ENV_ID = "PoincareDiskRandom-v0"


def _config_from_info(landscape: dict, **fields) -> PoincareDiskConfig:
    """The fixed PoincareDisk-v0 config with the landscape info["landscape"] describes."""
    return PoincareDiskConfig(**{name: landscape[name] for name in LANDSCAPE_FIELDS}, **fields)


def _rollout(env: gym.Env, seed: int, actions: np.ndarray) -> tuple[np.ndarray, dict]:
    obs, info = env.reset(seed=seed)
    observations = [obs]
    for a in actions:
        obs, *_ = env.step(a)
        observations.append(obs)
    return np.stack(observations), info["landscape"]


# -- the distribution ---------------------------------------------------------------------


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_draw_is_uniform_in_the_ball_with_uniform_depths(dim):
    """4000 centres (1000 draws of 4 wells): all in |c| <= 0.6; the fraction in |c| <= 0.3 is
    (0.3 / 0.6)^dim (uniform in volume; uniform in radius would give 1/2) within 4 binomial
    sigma; no preferred direction; depths in [0.3, 0.8] with mean 0.55 within 4 sigma."""
    rng = np.random.default_rng(123)
    draws = [draw_landscape(rng, dim) for _ in range(1000)]
    centers = np.array([d["well_centers"] for d in draws]).reshape(-1, dim)  # [4000, dim]
    depths = np.array([d["well_depths"] for d in draws]).reshape(-1)  # [4000]
    widths = np.array([d["well_widths"] for d in draws]).reshape(-1)  # [4000]
    n = centers.shape[0]
    assert n == 4000
    norms = np.linalg.norm(centers, axis=1)
    assert norms.max() <= 0.6
    p_inner = 0.5**dim
    sigma = math.sqrt(p_inner * (1 - p_inner) / n)
    assert abs(np.mean(norms <= 0.3) - p_inner) < 4 * sigma
    assert abs(np.mean(centers[:, 0] > 0) - 0.5) < 4 * math.sqrt(0.25 / n)  # isotropic
    assert depths.min() >= 0.3 and depths.max() <= 0.8
    assert abs(depths.mean() - 0.55) < 4 * (0.5 / math.sqrt(12 * n))
    np.testing.assert_array_equal(widths, 0.5)


def test_draw_arguments_set_the_distribution():
    rng = np.random.default_rng(0)
    out = draw_landscape(rng, 3, wells=6, radius=0.2, depths=(-0.1, -0.1), width=0.3)
    assert set(out) == set(LANDSCAPE_FIELDS)
    assert np.shape(out["well_centers"]) == (6, 3)
    assert np.linalg.norm(out["well_centers"], axis=1).max() <= 0.2
    assert out["well_depths"] == (-0.1,) * 6 and out["well_widths"] == (0.3,) * 6
    a = draw_landscape(np.random.default_rng(5), 2)
    assert a == draw_landscape(np.random.default_rng(5), 2)  # pure function of the rng
    assert a != draw_landscape(np.random.default_rng(6), 2)


# -- seeding ------------------------------------------------------------------------------


def test_same_seed_same_landscape_and_trajectory_and_new_resets_draw_new_landscapes():
    actions = np.random.default_rng(0).uniform(-1, 1, size=(15, 2)).astype(np.float32)
    obs_a, land_a = _rollout(PoincareDiskRandomEnv(), 4, actions)
    obs_b, land_b = _rollout(gym.make(ENV_ID), 4, actions)
    assert land_a == land_b
    np.testing.assert_array_equal(obs_a, obs_b)
    _, land_c = _rollout(PoincareDiskRandomEnv(), 5, actions[:1])
    assert land_c != land_a

    env = PoincareDiskRandomEnv()
    env.reset(seed=4)
    configs = [env.landscape_config]
    for _ in range(5):
        _, info = env.reset()
        configs.append(env.landscape_config)
        assert info["landscape"] == _config_info(env.landscape_config)
    assert len(set(configs)) == len(configs)  # every reset a new landscape
    # ... and each config's potential is its own (the cache of _landscape is keyed on it)
    z = torch.tensor([[0.2, -0.1]], dtype=F64)
    values = {float(potential(z, c)[0]) for c in configs}
    assert len(values) == len(configs)


def _config_info(config: PoincareDiskConfig) -> dict:
    return {name: np.asarray(getattr(config, name)).tolist() for name in LANDSCAPE_FIELDS}


def test_landscape_cache_stays_bounded_and_correct_over_many_resets():
    env = PoincareDiskRandomEnv()
    env.reset(seed=0)
    configs = []
    for _ in range(80):
        env.reset()  # its info's energy looks the new config up in the cache
        configs.append(env.landscape_config)
    assert _landscape.cache_info().currsize <= 64
    for config in configs[::10]:  # evicted or not, each lookup returns that config's wells
        centers, depths, widths, _ = _landscape(config)
        np.testing.assert_array_equal(centers.numpy(), np.array(config.well_centers))
        np.testing.assert_array_equal(depths.numpy(), np.array(config.well_depths))


# -- the forces ---------------------------------------------------------------------------


@pytest.mark.parametrize("noise", [False, True])
def test_step_is_poincare_disk_integrate_step_on_the_equivalent_fixed_config(noise):
    """The env's step equals PoincareDisk-v0's integrator (force -dPhi/dz of its potential) on
    the fixed config built from info["landscape"], bit for bit, and differs from the default
    landscape's step (so the drawn wells are the ones in use)."""
    env = PoincareDiskRandomEnv(noise=noise)
    _, info = env.reset(seed=11)
    fixed = _config_from_info(info["landscape"])
    assert fixed == env.landscape_config
    action = np.array([0.3, -0.7], dtype=np.float32)
    for _ in range(3):
        z, p = (torch.from_numpy(x).reshape(1, -1) for x in env.state)
        generator = torch.Generator()
        generator.set_state(env.generator.get_state())
        a = torch.from_numpy(action.astype(np.float64)).reshape(1, -1)
        z_ref, p_ref = integrate_step(z, p, a, fixed, noise=noise, generator=generator)
        generator.set_state(env.generator.get_state())
        z_def, _ = integrate_step(z, p, a, PoincareDiskConfig(), noise=noise, generator=generator)
        env.step(action)
        z_new, p_new = env.state
        np.testing.assert_array_equal(z_new, z_ref[0].numpy())
        np.testing.assert_array_equal(p_new, p_ref[0].numpy())
        assert not np.allclose(z_new, z_def[0].numpy(), rtol=0, atol=1e-9)


def test_noise_free_env_equals_poincare_disk_env_on_the_fixed_config():
    env = PoincareDiskRandomEnv(noise=False)
    _, info = env.reset(seed=2)
    fixed_env = PoincareDiskEnv(config=_config_from_info(info["landscape"]), noise=False)
    fixed_env.reset(seed=0, options={"state": env.state})
    for a in np.random.default_rng(1).uniform(-1, 1, size=(10, 2)).astype(np.float32):
        obs, reward, *_ = env.step(a)
        obs_ref, reward_ref, *_ = fixed_env.step(a)
        np.testing.assert_array_equal(obs, obs_ref)
        assert reward == reward_ref


# -- options ------------------------------------------------------------------------------


def test_options_landscape_fixes_it_and_options_state_still_works():
    env = PoincareDiskRandomEnv()
    obs0, info0 = env.reset(seed=0)
    landscape = info0["landscape"]
    for seed in (1, 2, None):
        _, info = env.reset(seed=seed, options={"landscape": landscape})
        assert info["landscape"] == landscape
        assert env.landscape_config == _config_from_info(landscape)
    obs, _ = env.reset(seed=0, options={"landscape": landscape})
    np.testing.assert_array_equal(obs, obs0)  # the draw is still made: the seed's own start
    partial = {"well_depths": [0.1, 0.2, 0.3, 0.4]}
    _, info = env.reset(seed=0, options={"landscape": partial})
    assert info["landscape"]["well_depths"] == partial["well_depths"]
    assert info["landscape"]["well_centers"] == landscape["well_centers"]

    state = (np.array([-0.2, 0.1]), np.array([0.05, 0.0]))
    obs, info = env.reset(seed=3, options={"state": state, "landscape": landscape})
    np.testing.assert_array_equal(env.state[0], state[0])
    np.testing.assert_array_equal(env.state[1], state[1])
    assert info["landscape"] == landscape


@pytest.mark.parametrize(
    "landscape, words",
    [
        ({"centers": [[0.0, 0.0]]}, ["centers", "well_centers"]),
        ({"well_centers": [[0.99, 0.5]] * 4}, ["inside the ball"]),
        ({"well_depths": [0.5]}, ["one entry per well"]),
        ({"well_widths": [0.5, 0.5, 0.5, -1.0]}, ["well_widths"]),
        ([0.1, 0.2], ["mapping"]),
    ],
)
def test_bad_options_landscape_raises_a_clear_value_error(landscape, words):
    with pytest.raises(ValueError) as info:
        PoincareDiskRandomEnv().reset(seed=0, options={"landscape": landscape})
    for word in words:
        assert word in str(info.value)


# -- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(wells=0), "wells"),
        (dict(wells=2.0), "wells"),
        (dict(wells=True), "wells"),
        (dict(radius=-0.1), "radius"),
        (dict(radius=1.0), "radius"),
        (dict(radius=0.5, max_norm=0.4, start_radius=0.1), "max_norm"),
        (dict(depths=(0.8, 0.3)), "low <= high"),
        (dict(depths=(0.3, float("nan"))), "depths"),
        (dict(depths=0.5), "depths"),
        (dict(width=0.0), "width"),
        (dict(width=float("inf")), "width"),
        (dict(well_centers=((0.1, 0.1),)), "well_centers"),
        (dict(well_depths=(0.5,)), "well_depths"),
        (dict(dt=-1.0), "dt"),
    ],
)
def test_bad_arguments_raise_a_clear_value_error(kwargs, word):
    with pytest.raises(ValueError) as info:
        PoincareDiskRandomEnv(**kwargs)
    assert word in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(EnvError) as info:  # make_env's one-line error
        make_env(ENV_ID, **kwargs)
    assert word in str(info.value)


def test_constructor_arguments_set_the_draw_and_config_overrides_pass_through():
    env = make_env(ENV_ID, seed=0, wells=2, radius=0.3, depths=(0.1, 0.2), width=0.8, dim=3)
    _, info = env.reset()
    config = env.unwrapped.landscape_config
    assert config.dim == 3 and len(config.well_centers) == 2
    assert np.linalg.norm(info["landscape"]["well_centers"], axis=1).max() <= 0.3
    assert all(0.1 <= a <= 0.2 for a in config.well_depths) and config.well_widths == (0.8, 0.8)
    env = PoincareDiskRandomEnv(preset="conservative")
    env.reset(seed=0)
    assert env.landscape_config.conservative and len(env.landscape_config.well_centers) == 4


# -- gymnasium contract and rendering -----------------------------------------------------


def test_check_env_passes_unwrapped_and_through_gym_make():
    check_env_strictly(PoincareDiskRandomEnv(), skip_render_check=True)
    check_env_strictly(PoincareDiskRandomEnv(dim=3, noise=False), skip_render_check=True)
    check_env_strictly(gym.make(ENV_ID).unwrapped, skip_render_check=True)
    check_env_strictly(make_env(ENV_ID, seed=0), skip_render_check=True)


def test_registration_and_time_limit():
    assert ENV_ID in SUPPORTED_ENVS and ENV_ID in gym.registry
    assert gym.spec(ENV_ID).max_episode_steps == 200
    assert isinstance(gym.make(ENV_ID), gym.wrappers.TimeLimit)
    env = make_env(ENV_ID, seed=0)
    assert type(env.unwrapped) is PoincareDiskRandomEnv
    assert env.unwrapped.config.dt == PoincareDiskConfig().dt  # the rest is PoincareDisk-v0's


def test_render_follows_the_landscape():
    env = PoincareDiskRandomEnv(render_mode="rgb_array")
    env.reset(seed=0, options={"state": (np.array([0.9, 0.0]), np.zeros(2))})
    first = env.render()
    env.reset(seed=1, options={"state": (np.array([0.9, 0.0]), np.zeros(2))})
    second = env.render()
    assert first.shape == (200, 200, 3) and not np.array_equal(first, second)
