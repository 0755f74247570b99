"""agent.core.agent and agent.core.loop: SB3 surface (evaluate_policy runs on the agent), save ->
load -> identical actions, same seed -> identical first episode, stop + resume == uninterrupted run
(bitwise), atomic and validated checkpoints, config validation."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv

from agent.core.agent import Agent, resolve_device
from agent.core.config import (
    ConfigError,
    RunConfig,
    TrainConfig,
    field_docs,
    load_config_file,
)
from agent.core.episodes import run_episodes
from agent.core.loop import Trainer
from agent.persistence.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from agent.persistence.runs import CHECKPOINT_NAME, make_run_env, make_run_vector_env
from envs import make_env
from envs.scaling import scale_spaces
from tests.agent.conftest import assert_same_state, tiny


def make_agent(**sections) -> Agent:
    return Agent(None, RunConfig.from_dict(tiny(**sections)))


# ----------------------------------------------------------------------- SB3 surface


def test_evaluate_policy_runs_on_the_agent():
    agent = make_agent(train={"seed_steps": 40})
    agent.learn(80)
    assert agent.num_timesteps == 80 and agent.num_updates == 41
    env = make_env("Pendulum-v1", seed=3, max_episode_steps=20)
    returns, lengths = evaluate_policy(
        agent, env, n_eval_episodes=2, deterministic=True, return_episode_rewards=True, warn=False
    )
    assert lengths == [20, 20]
    assert all(np.isfinite(returns)) and all(-16.3 * 20 <= r <= 0 for r in returns)


def test_update_schedule_with_pretraining_and_fractional_rates():
    """None pretrain updates = as many as seed steps (TD-MPC2), then updates_per_step per step."""
    agent = make_agent(
        train={"seed_steps": 20}, agent={"pretrain_updates": None, "updates_per_step": 0.5}
    )
    agent.learn(19)
    assert agent.num_updates == 0
    agent.learn(1)  # step 20: 20 catch-up updates + 0.5 owed
    assert agent.num_updates == 20
    agent.learn(3)  # 0.5 + 3 * 0.5 = 2 more
    assert agent.num_updates == 22


def test_learning_rate_scales_reach_their_parameter_groups():
    """agent.dynamics_lr_scale and encoder_lr_scale set the rate of exactly those parameters;
    at the default scale 1 the dynamics share one group with the heads (as older checkpoints)."""
    agent = make_agent(agent={"lr": 1e-3, "dynamics_lr_scale": 3.0, "encoder_lr_scale": 0.5})
    groups = agent.model.model_parameter_groups()
    rate = {id(p): g["lr"] for g in agent.optim.param_groups for p in g["params"]}
    for name, expected in (("dynamics", 3e-3), ("heads", 1e-3), ("encoder", 5e-4)):
        assert groups[name] and all(rate[id(p)] == pytest.approx(expected) for p in groups[name])
    assert len(make_agent().optim.param_groups) == 2
    with pytest.raises(ConfigError, match="agent.dynamics_lr_scale must be > 0"):
        RunConfig.from_dict(tiny(agent={"dynamics_lr_scale": 0.0}))


def test_predict_shapes_and_errors():
    agent = make_agent()
    obs = np.zeros(3, dtype=np.float32)
    action, state = agent.predict(obs)
    assert action.shape == (1,) and state is None and -2 <= action[0] <= 2  # Pendulum's torque
    actions, _ = agent.predict(np.zeros((2, 3)), episode_start=np.array([True, True]))
    assert actions.shape == (2, 1)
    with pytest.raises(ValueError, match=r"shape \[3\] or \[N, 3\]"):
        agent.predict(np.zeros(4))


def test_predict_speaks_the_env_units_so_sb3_evaluation_reproduces_the_agent_own():
    """predict takes observations and returns actions in the env's own units: for the same reset
    seeds (and planner generator seeds) a saved agent's returns on gym.make(id), on
    envs.make_env(id) and under SB3's evaluate_policy are those of its own evaluation
    (run_episodes on the scaled view), episode for episode; the planned actions span the
    task's torque range [-2, 2], not the agent's [-1, 1]."""
    agent = make_agent(train={"seed_steps": 40})
    agent.learn(60)
    steps = 30

    def by_predict(env, seed):
        agent.generator.manual_seed(seed)
        obs, _ = env.reset(seed=seed)
        total, start, actions = 0.0, True, []
        for _ in range(steps):
            action, _ = agent.predict(obs, episode_start=np.array([start]), deterministic=True)
            obs, reward, *_ = env.step(action)
            total, start = total + float(reward), False
            actions.append(action)
        return total, np.concatenate(actions)

    spread = []
    for seed in (0, 1, 2):
        scaled = make_run_env(RunConfig.from_dict({"train": {"max_episode_steps": steps}},
                                                  base=agent.config), seed=None)  # fmt: skip
        (own,) = run_episodes(agent.policy(seed), scaled, 1, seed)
        plain, actions = by_predict(gym.make("Pendulum-v1", max_episode_steps=steps), seed)
        ours, _ = by_predict(make_env("Pendulum-v1", max_episode_steps=steps), seed)
        assert plain == own and ours == own, (seed, plain, ours, own)
        spread.append(np.abs(actions).max())
        vec = DummyVecEnv([lambda: gym.make("Pendulum-v1", max_episode_steps=steps)])
        vec.seed(seed)
        agent.generator.manual_seed(seed)
        (sb3,), _ = evaluate_policy(
            agent, vec, n_eval_episodes=1, deterministic=True, return_episode_rewards=True,
            warn=False,
        )  # fmt: skip
        assert sb3 == pytest.approx(own, rel=1e-5), (seed, sb3, own)  # SB3 sums in float32
    assert max(spread) > 1.0  # torques past the unit box: the actions are in the env's units


def test_an_env_other_than_the_trained_one_is_refused_in_one_line(tmp_path):
    agent = make_agent()
    path = agent.save(tmp_path / "agent.pt")
    other = gym.make("Pendulum-v1", max_episode_steps=50)
    other.unwrapped.max_torque = 1.0  # the same task with a smaller torque bound
    other.unwrapped.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    with pytest.raises(ConfigError, match="trained on action bounds low \\[-2.0\\]"):
        Agent.load(path, env=other)
    with pytest.raises(ConfigError, match="differs from the one this agent was trained on"):
        agent.check_env(scale_spaces(make_env("Pendulum-v1")))
    agent.check_env(gym.make("Pendulum-v1"))  # the task's own env passes


def test_save_load_gives_identical_next_actions(tmp_path):
    agent = make_agent()
    agent.learn(100)
    env = make_env("Pendulum-v1", seed=5, max_episode_steps=50)
    obs, _ = env.reset()
    agent.predict(obs, episode_start=np.array([True]))  # warm start and generator in use
    path = agent.save(tmp_path / "agent.pt")
    loaded = Agent.load(path)
    assert_same_state(agent.model.state_dict(), loaded.model.state_dict())
    observations = [obs]
    for _ in range(4):
        observations.append(env.step(np.array([0.3], dtype=np.float32))[0])
    for o in observations:
        a1, _ = agent.predict(o, deterministic=True)
        a2, _ = loaded.predict(o, deterministic=True)
        assert np.array_equal(a1, a2)
    assert len(loaded.buffer) == 0  # SB3's save leaves the replay buffer out
    agent.save(tmp_path / "with_buffer.pt", include_buffer=True)
    assert len(Agent.load(tmp_path / "with_buffer.pt").buffer) == 100


def test_same_seed_gives_an_identical_first_episode():
    def first_episode(seed):
        agent = make_agent(train={"seed": seed, "seed_steps": 20})
        agent.learn(50)  # one whole episode, planned from step 20
        return agent.buffer.obs[:50].clone(), agent.buffer.action[:50].clone()

    obs1, act1 = first_episode(7)
    obs2, act2 = first_episode(7)
    assert torch.equal(obs1, obs2) and torch.equal(act1, act2)
    obs3, act3 = first_episode(8)
    assert not torch.equal(obs1, obs3) and not torch.equal(act1[20:], act3[20:])


# ----------------------------------------------------------------------- checkpoints


def test_stop_and_resume_equals_an_uninterrupted_run(tmp_path):
    """Stopped at an episode end (step 150), checkpointed, rebuilt from the file and continued
    to 300 steps: every parameter, optimiser moment, buffer entry and generator state equals
    the uninterrupted run's, bit for bit."""
    sections = {"train": {"steps": 300, "checkpoint_every": 1000}}
    full = Trainer(make_agent(**sections), tmp_path / "full")
    assert full.run(300) == "done"

    part = Trainer(make_agent(**sections), tmp_path / "part")
    assert part.run(300, stop_at_episode_end_after=120) == "stopped"
    assert (
        load_checkpoint(tmp_path / "part" / CHECKPOINT_NAME)["agent"]["counters"]["num_timesteps"]
        == 150
    )
    resumed = Agent.resume(tmp_path / "part")
    assert resumed.agent.num_timesteps == 150
    assert resumed.run(300) == "done"

    a = full.agent.state_dict()
    b = resumed.agent.state_dict()
    assert_same_state(a, b)
    assert full.episode == resumed.episode == 6
    assert full.last_eval == resumed.last_eval
    final = load_checkpoint(tmp_path / "part" / CHECKPOINT_NAME)
    assert final["agent"]["counters"]["num_timesteps"] == 300
    full.close()
    resumed.close()


@pytest.mark.slow
def test_stop_and_resume_with_an_episodic_memory_equals_an_uninterrupted_run(tmp_path):
    """The geodesic model reading an episodic memory (its entries from the buffer in training,
    from the planner's transitions of the running episode when acting) and a DMG-grown, GSR-routed
    prototype pool: stopped at an episode end, checkpointed and resumed, it continues bit for
    bit, into the next episode's memory, with the pool's spawns, prunes and DMG window."""
    config = tiny(train={"steps": 120, "checkpoint_every": 1000, "world_model": "geodesic"})
    context = {"memory": "dense", "routing": "gsr", "prototypes": 8, "pool_capacity": 12}
    context.update(route_k=4, spawn_window=32, spawn_sigmas=0.5, prune_idle=10)
    config["dynamics"] = {"latent_dim": 4, "encoder_dim": 16, "context": context}

    def make() -> Agent:
        return Agent(None, RunConfig.from_dict(config))

    full = Trainer(make(), tmp_path / "full")
    assert full.run(120) == "done"
    part = Trainer(make(), tmp_path / "part")
    assert part.run(120, stop_at_episode_end_after=60) == "stopped"
    held = load_checkpoint(tmp_path / "part" / CHECKPOINT_NAME)["agent"]
    assert held["counters"]["num_timesteps"] == 100
    resumed = Agent.resume(tmp_path / "part")
    assert resumed.run(120) == "done"
    assert_same_state(full.agent.state_dict(), resumed.agent.state_dict())
    assert len(full.agent.episode.transitions) == 19  # 20 steps into episode 3
    dynamics = full.agent.model.dynamics
    assert float(dynamics.integrator.memory.gate.detach()) != 0.0  # learned
    spawned = int(held["model"]["dynamics.prototypes.dmg.spawns"])  # grew before the stop
    assert 0 < spawned < int(dynamics.prototypes.dmg.spawns)  # and after it
    full.close()
    resumed.close()


def test_stop_mid_episode_closes_it_as_truncated(tmp_path):
    trainer = Trainer(make_agent(), tmp_path / "run")
    trainer.run(500, callback=lambda t: t.agent.num_timesteps < 75)  # 25 steps into episode 2
    state = load_checkpoint(tmp_path / "run" / CHECKPOINT_NAME)
    buffer = state["agent"]["buffer"]
    assert buffer["size"] == 75
    assert buffer["truncated"][74] == 1 and buffer["truncated"][49] == 1
    assert buffer["truncated"][73] == 0
    resumed = Agent.resume(tmp_path / "run")
    assert resumed.run(100) == "done" and resumed.agent.num_timesteps == 100
    resumed.close()


def test_checkpoint_write_is_atomic(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"x": torch.ones(3)}, path)
    with pytest.raises(Exception):  # noqa: B017 (torch.save's own error for a lambda)
        save_checkpoint({"x": lambda: None}, path)
    assert torch.equal(load_checkpoint(path)["x"], torch.ones(3))  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temporary left behind


def test_corrupt_or_foreign_checkpoints_are_one_line_errors(tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00not a checkpoint" * 10)
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        load_checkpoint(garbage)
    good = tmp_path / "good.pt"
    make_agent().save(good)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="corrupt or unreadable") as err:
        Agent.load(truncated)
    assert "\n" not in str(err.value)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match="not a geodesic-rl agent checkpoint"):
        Agent.load(foreign)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(CheckpointError, match="incomplete"):
        load_checkpoint(good, required=("loop",))


def _retag(path, version: int, **config_changes) -> None:
    """Rewrite a saved checkpoint as another format version (and with other [dynamics] keys)."""
    state = torch.load(path, weights_only=True)
    state["format"] = f"geodesic-rl/agent-checkpoint/v{version}"
    state["config"]["dynamics"].update(config_changes)
    torch.save(state, path)


def test_checkpoints_carry_their_format_version_and_older_ones_are_read_or_refused(tmp_path):
    """Saved files are format v4; a v1 file (the flat config of before the redesign) loads with
    the same parameters when its config holds no removed option, and is refused in one line
    naming its version when it does; an unknown version is refused naming it."""
    agent = make_agent()
    path = agent.save(tmp_path / "agent.pt")
    assert torch.load(path, weights_only=True)["format"].endswith("/v4")
    _retag(path, 1)
    old = Agent.load(path)
    assert_same_state(old.model.state_dict(), agent.model.state_dict())
    _retag(path, 9)
    with pytest.raises(CheckpointError, match="format version 9; this geodesic-rl reads "):
        Agent.load(path)
    _retag(path, 1, no_such_option=True)
    with pytest.raises(CheckpointError, match="format version 1.*unknown key 'no_such_option'"):
        Agent.load(path)


def test_a_format_3_checkpoint_keeps_its_episode_so_far_from_the_planners_state(tmp_path):
    """Format 3 kept the episode so far (history window, transitions, the pending step) in the
    planner's state; format 4 keeps it apart (agent/core/episode.py). A v3 file loads with its
    episode and its warm start where they were."""
    from agent.persistence.checkpoint import content_digest

    agent = make_agent()
    agent.episode.history = [torch.randn(3), torch.randn(3)]
    agent.episode.transitions = [(torch.randn(3), torch.randn(1), torch.randn(3))]
    agent.episode.acted(torch.randn(3), torch.randn(1))
    agent.planner._prev_mean = torch.randn(agent.config.planner.horizon, 1)
    path = agent.save(tmp_path / "agent.pt")
    state = torch.load(path, weights_only=True)
    state["agent"]["planner"].update(state["agent"].pop("episode"))  # the v3 layout
    state["format"] = "geodesic-rl/agent-checkpoint/v3"
    state.pop("digest")
    state["digest"] = content_digest(state)
    torch.save(state, path)
    old = Agent.load(path)
    assert_same_state(old.episode.state_dict(), agent.episode.state_dict())
    assert torch.equal(old.planner._prev_mean, agent.planner._prev_mean)
    assert set(old.planner.state_dict()) == {"prev_mean"}


def test_a_format_1_geodesic_checkpoint_loads_its_flat_config_or_names_the_removed_option(
    tmp_path,
):
    """Format 1 wrote the geodesic [dynamics] table flat: it loads into the nested sections
    (the same parameters), and a removed option it used is refused in one line."""
    config = tiny(train={"world_model": "geodesic"})
    config["dynamics"] = {"latent_dim": 4, "encoder_dim": 16, "head": {"d_k": 8},
                          "context": {"prototypes": 8, "feature_dim": 8}}  # fmt: skip
    agent = Agent(None, RunConfig.from_dict(config))
    path = agent.save(tmp_path / "geo.pt")
    state = torch.load(path, weights_only=True)
    dyn = state["config"]["dynamics"]
    flat = {k: v for k, v in dyn.items() if not isinstance(v, dict)}
    for section in ("head", "integrator", "context"):
        flat.update(dyn[section])
    flat["attention"] = flat.pop("kernel")
    flat["attention_temperature"] = flat.pop("temperature")
    flat.update(head_features="full", radius_penalty=0.0, drift_correction_once=True)
    state["format"], state["config"]["dynamics"] = "geodesic-rl/agent-checkpoint/v1", flat
    torch.save(state, path)
    old = Agent.load(path)
    assert old.config.dynamics == agent.config.dynamics
    assert_same_state(old.model.state_dict(), agent.model.state_dict())
    state["config"]["dynamics"] = {**flat, "head_features": "orthonormal"}
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="format version 1.*head_features") as err:
        Agent.load(path)
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------- configuration


def test_run_config_from_dict_validates_keys_types_and_values():
    config = RunConfig.from_dict(
        {"train": {"steps": 123}, "planner": {"num_samples": 64, "num_elites": 8}}
    )
    assert config.train.steps == 123 and config.planner.num_samples == 64
    assert config.dynamics.latent_dim == 128  # the GRU's defaults
    round_trip = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert round_trip.to_dict() == config.to_dict()
    cases = [
        ({"train": {"stepz": 1}}, "unknown key 'stepz' in \\[train\\]"),
        ({"trainer": {}}, "unknown config section \\[trainer\\]"),
        ({"train": {"steps": "many"}}, "train.steps must be int"),
        ({"train": {"steps": -5}}, "train.steps must be a positive integer"),
        ({"planner": {"num_elites": 9999}}, "num_elites"),
        ({"agent": {"discount": 1.5}}, "discount"),
        ({"train": {"world_model": "nope"}}, "unknown world model 'nope'"),
        ({"dynamics": {"latent_dim": 0}}, "latent_dim"),
        ({"train": {"device": "tpu"}}, "train.device"),
    ]
    for data, match in cases:
        with pytest.raises(ConfigError, match=match):
            RunConfig.from_dict(data)


def test_config_files(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[train]\nsteps = 77\n[planner]\nmethod = "cem"\n')
    assert RunConfig.from_dict(load_config_file(toml)).planner.method == "cem"
    js = tmp_path / "c.json"
    js.write_text('{"loss": {"horizon": 5}}')
    assert RunConfig.from_dict(load_config_file(js)).loss.horizon == 5
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid"):
        load_config_file(bad)
    with pytest.raises(ConfigError, match="must end in .json or .toml"):
        load_config_file(_touch(tmp_path / "c.yaml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config_file(tmp_path / "missing.toml")


def _touch(path):
    path.write_text("")
    return path


def test_every_train_field_is_documented():
    docs = field_docs(TrainConfig)
    assert set(docs) == set(TrainConfig.__dataclass_fields__)
    assert all(len(d) > 10 for d in docs.values())


def test_cuda_request_without_cuda_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        resolve_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")


def test_discrete_action_space_is_refused():
    import gymnasium as gym

    with pytest.raises(ConfigError, match="continuous"):
        Agent(gym.make("CartPole-v1"), RunConfig.from_dict(tiny()))


def test_batched_evaluation_waves_play_the_sequential_episodes():
    """run_episodes on a vector env of 2 plays 3 episodes in two waves (the last with a spare
    env whose steps are not counted), all planned in one batch per step, and returns what the
    one-after-the-other loop returns for the same seeds (per-episode generators), up to the
    rounding of batched arithmetic."""
    agent = make_agent(train={"seed_steps": 40, "max_episode_steps": 25})
    agent.learn(60)
    sequential = run_episodes(agent.policy(5), make_run_env(agent.config, seed=None), 3, 5)
    batched = run_episodes(agent.policy(5), make_run_vector_env(agent.config, 2), 3, 5)
    np.testing.assert_allclose(batched, sequential, rtol=1e-5)
    assert len(set(np.round(sequential, 3))) == 3  # three different episodes
    with pytest.raises(ValueError, match="single env"):
        run_episodes(
            agent.policy(5), make_run_vector_env(agent.config, 2), 2, 5, on_frame=lambda *a: None
        )
