"""The agent: a world model, its optimisers, the planner and the replay buffer, behind a
stable-baselines3-style surface (`learn`, `predict`, `save`, `load`), so that
`stable_baselines3.common.evaluation.evaluate_policy(agent, env)` runs on it.

    agent = Agent("Pendulum-v1")                 # or Agent(env, RunConfig(...))
    agent.learn(5_000)                           # the training loop of agent.core.loop.Trainer
    action, _ = agent.predict(obs, deterministic=True)
    agent.save("pendulum.pt"); agent = Agent.load("pendulum.pt")

`state_dict()` holds everything a resumed run needs from the agent (model with its target
copies and buffers, optimisers, running scale, planner warm start, the acting generator, replay
buffer, counters); the trainer adds the env's and the global generators.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import geoopt
import gymnasium as gym
import numpy as np
import torch

from agent.core.buffer import ReplayBuffer
from agent.core.collection import copy_seed
from agent.core.config import ConfigError, RunConfig, migrate_config
from agent.core.distributed import DistContext, rank_device
from agent.core.episode import EpisodeSoFar, episode_inputs
from agent.core.guard import check_losses, check_states, clip_gradients, located
from agent.core.loop import Trainer
from agent.core.planner import Planner, plan_batch
from agent.core.policy import PlannerPolicy
from agent.persistence.checkpoint import (
    CheckpointError,
    format_version,
    load_checkpoint,
    save_checkpoint,
    seed_everything,
)
from agent.persistence.runs import CHECKPOINT_NAME, make_run_env
from envs import env_info
from envs.scaling import SpaceScaling, scale_spaces
from world_model import sharding
from world_model.memory.routing import clear_optimizer_rows
from world_model.model import Dynamics, LatentState, WorldModel
from world_model.registry import build_dynamics
from world_model.training import (
    RunningScale,
    SequenceBatch,
    discount_for_episode_length,
    policy_loss,
    world_model_loss,
)

__all__ = ["Agent", "resolve_device"]


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda if available else cpu; 'cuda' without CUDA is a clear error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            why = (
                "this torch build has no CUDA support"
                if torch.version.cuda is None
                else "no CUDA device is visible"
            )
            raise ConfigError(
                f"--device {name} requested but CUDA is not available ({why}); use --device cpu"
            )
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(f"--device {name}: only {torch.cuda.device_count()} CUDA devices")
    elif name != "cpu":
        raise ConfigError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N")
    return torch.device(name)


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module) -> Iterator[None]:
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


class Agent:
    """TD-MPC2-style model-based agent over any registered latent dynamics.

    `env` is in the task's own units (envs.make_env or gymnasium.make); the agent steps it
    through envs.scaling.scale_spaces (`self.env`) and plans in [-1, 1]. `predict` takes and
    returns the env's own units (`self.spaces`), as stable-baselines3 models do; `act` and
    `observe` work in the agent's scaled units."""

    def __init__(
        self,
        env: gym.Env | str | None = None,
        config: RunConfig | None = None,
        *,
        device: str | None = None,
        dist: DistContext | None = None,
    ):
        config = config or RunConfig()
        # a data-parallel rank (agent/core/distributed.py) runs global env copies r K .. r K + K - 1
        self.dist = dist
        self.first_copy = 0 if dist is None else dist.rank * config.train.num_envs
        if dist is not None and config.agent.batch_size % dist.world_size:
            raise ConfigError(
                f"agent.batch_size {config.agent.batch_size} must be a multiple of the world "
                f"size {dist.world_size}: each rank trains on an equal share of every batch"
            )
        if isinstance(env, str):
            if env != config.train.env_id:
                config = RunConfig.from_dict({"train": {"env_id": env}}, base=config)
            env = None
        elif env is not None and env.spec is not None and env.spec.id != config.train.env_id:
            config = RunConfig.from_dict({"train": {"env_id": env.spec.id}}, base=config)
        if env is None:
            seed = copy_seed(config.train.seed, self.first_copy)
            env = make_run_env(config, seed=seed, scaled=False)
        self.config = config
        try:
            self.spaces = SpaceScaling.from_env(env)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self.env = scale_spaces(env, config.train.seed)
        info = env_info(self.env)
        self.obs_dim, self.action_dim = info.obs_dim, info.action_dim
        self.max_episode_steps = info.max_episode_steps
        tc, ac = config.train, config.agent
        if tc.single_thread:
            torch.set_num_threads(1)
        if dist is not None:  # each CUDA rank its own device
            device = rank_device(device or tc.device)
        self.device = resolve_device(device or tc.device)
        if ac.discount is not None:
            self.discount = ac.discount
        elif self.max_episode_steps:
            self.discount = discount_for_episode_length(self.max_episode_steps)
        else:
            self.discount = 0.99

        seed_everything(tc.seed)
        dynamics = build_dynamics(tc.world_model, self.obs_dim, self.action_dim, config.dynamics)
        self.model = WorldModel(self.obs_dim, self.action_dim, dynamics, config.model)
        self.model.to(self.device)
        # after WorldModel's copy of the target dynamics
        self.compiles = tc.compile == "auto" and self.model.dynamics.compile_steps()
        groups = self.model.model_parameter_groups()
        if ac.dynamics_lr_scale == 1.0:  # one group, as checkpoints before the option have
            param_groups = [{"params": groups["dynamics"] + groups["heads"], "lr": ac.lr}]
        else:
            param_groups = [
                {"params": groups["dynamics"], "lr": ac.lr * ac.dynamics_lr_scale},
                {"params": groups["heads"], "lr": ac.lr},
            ]
        if groups["encoder"]:
            param_groups.append({"params": groups["encoder"], "lr": ac.lr * ac.encoder_lr_scale})
        # RiemannianAdam is Adam on ordinary parameters; ManifoldParameters stay on their manifold
        self.optim = geoopt.optim.RiemannianAdam(param_groups, lr=ac.lr)
        self.pi_optim = torch.optim.Adam(self.model.policy_parameters(), lr=ac.lr, eps=1e-5)
        self.scale = RunningScale(ac.scale_tau).to(self.device)
        self.planner = Planner(config.planner, self.action_dim, self.discount)
        self.episode = EpisodeSoFar()  # what the model's context reads of the current episode
        self.generator = torch.Generator(device=self.device).manual_seed(
            copy_seed(tc.seed, self.first_copy)
        )
        # every rank holds every copy's transitions (shared replay: agent/core/distributed.py)
        world = 1 if dist is None else dist.world_size
        self.buffer = ReplayBuffer(
            self.obs_dim,
            self.action_dim,
            tc.buffer_capacity,
            seed=tc.seed,
            streams=tc.num_envs * world,
        )
        if dist is not None:
            dist.broadcast_module(self.model)
        self.num_timesteps = 0
        self.num_updates = 0
        self._update_debt = 0.0
        self._predict_policy = PlannerPolicy(self, self.generator)
        self._trainer: Trainer | None = None
        self.timing = {"plan_s": 0.0, "plans": 0, "update_s": 0.0, "updates": 0}

    # ------------------------------------------------------------------ acting
    def _obs_tensor(self, obs: Any) -> torch.Tensor:
        return torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device)

    def act(
        self,
        obs: Any,
        *,
        explore: bool,
        planner: Planner | None = None,
        generator: torch.Generator | None = None,
        episode: EpisodeSoFar | None = None,
    ) -> np.ndarray:
        """Plan from one observation [O]; returns the action [A] in [-1, 1] (act_batch of one
        environment, with the agent's own planner, generator and episode unless given)."""
        return self.act_batch(
            np.asarray(obs)[None],
            explore=explore,
            planners=[planner or self.planner],
            generators=[generator or self.generator],
            episodes=[episode or self.episode],
        )[0]

    def act_batch(
        self,
        obs: Any,
        *,
        explore: bool,
        planners: Sequence[Planner],
        generators: Sequence[torch.Generator],
        episodes: Sequence[EpisodeSoFar],
    ) -> np.ndarray:
        """Plan for E environments at once (agent.core.planner.plan_batch): obs [E, O] -> actions
        [E, A] in [-1, 1], environment i with planners[i], generators[i] and the episode so far
        episodes[i] (which the observation and the action then join: agent/core/episode.py)."""
        start = time.perf_counter()
        model = self.model
        with _eval_mode(model), located(f"env step {self.num_timesteps}"):
            obs_t = self._obs_tensor(obs)
            window, capacity = model.history_length, model.memory_capacity
            reads = window > 0 or capacity > 0  # else the episode so far is nothing it reads
            inputs = episode_inputs(episodes, obs_t, window, capacity) if reads else None
            actions = plan_batch(
                planners, model, obs_t, inputs, explore=explore, generators=generators
            )
            if reads:
                for episode, o, a in zip(episodes, obs_t, actions, strict=True):
                    episode.acted(o, a)
        self.timing["plan_s"] += time.perf_counter() - start
        self.timing["plans"] += 1
        return actions.cpu().numpy()

    def random_action(self) -> np.ndarray:
        """Uniform in [-1, 1]^A from the agent's own generator (seed phase)."""
        u = torch.rand(self.action_dim, generator=self.generator, device=self.device)
        return (2 * u - 1).cpu().numpy()

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, None]:
        """SB3's predict: observation [O] or [N, O] -> (action [A] or [N, A], None), both in
        the units of the env the agent was trained on (`self.spaces`: observations as the env
        emits them, actions within its action bounds), as stable-baselines3 models do.

        Each of the N environments keeps its own warm start, reset where episode_start is
        True; deterministic=False adds the planner's exploration noise."""
        raw = np.asarray(observation, dtype=np.float64)
        single = raw.ndim == 1
        raw = raw.reshape(1, -1) if single else raw
        if raw.ndim != 2 or raw.shape[1] != self.obs_dim:
            raise ValueError(
                f"predict: expected observations of shape [{self.obs_dim}] or [N, "
                f"{self.obs_dim}] (the trained env's), got shape {np.shape(observation)}"
            )
        obs = self.spaces.observation(raw)
        policy = self._predict_policy
        policy.explore = not deterministic
        if episode_start is not None:
            policy.reset(np.asarray(episode_start, bool).reshape(-1))
        actions = policy(obs)
        actions = self.spaces.action(actions)
        return (actions[0] if single else actions), None

    def policy(self, seed: int, explore: bool = False) -> PlannerPolicy:
        """A batched policy (agent/core/episodes.py) with its own planners and a generator seeded by
        `seed`, in the agent's scaled units: evaluation leaves the agent's streams untouched."""
        return PlannerPolicy(self, torch.Generator(device=self.device).manual_seed(seed), explore)

    def check_env(self, env: gym.Env) -> None:
        """Raise ConfigError (one line) unless `env`'s spaces are the ones the agent was
        trained on (in the env's own units, as predict expects them)."""
        try:
            problem = SpaceScaling.from_env(env).mismatch(self.spaces.bounds())
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if problem is not None:
            raise ConfigError(problem)

    # ------------------------------------------------------------------ learning
    def observe(
        self, obs, action, reward: float, next_obs, terminated: bool, truncated: bool
    ) -> None:
        """Store a transition (one env copy)."""
        self.observe_batch(
            np.asarray(obs)[None], np.asarray(action)[None], np.asarray([reward]),
            np.asarray(next_obs)[None], np.asarray([terminated]), np.asarray([truncated]),
        )  # fmt: skip

    def observe_batch(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        """One env step of each of the K copies (obs, next_obs [K, O], action [K, A], reward,
        terminated, truncated [K]): stored, counted as K env steps."""
        self.buffer.add_batch(obs, action, reward, next_obs, terminated, truncated)
        self.num_timesteps += len(reward)

    def updates_due(self, steps: int = 1) -> int:
        """Updates owed after the latest `steps` env steps (one step of each copy): none during
        the seed steps, the catch-up when they end, then updates_per_step per env step."""
        seed_steps = self.config.train.seed_steps
        if self.num_timesteps < seed_steps:
            return 0
        if self.num_timesteps - steps < seed_steps:  # TD-MPC2: catch up on the seed data at once
            extra = self.config.agent.pretrain_updates
            self._update_debt += seed_steps if extra is None else extra
            steps = self.num_timesteps - seed_steps + 1  # the steps from the last seed step on
        self._update_debt += self.config.agent.updates_per_step * steps
        n = int(self._update_debt)
        self._update_debt -= n
        return n

    def sample_batch(
        self, batch_size: int, horizon: int, part: slice | None = None
    ) -> SequenceBatch:
        """A replay batch with what the model's context reads (its history window and episodic
        memory), on the agent's device; `part`: only those sequences of it."""
        model = self.model
        return self.buffer.sample(
            batch_size, horizon, model.history_length, model.memory_capacity, part=part
        ).to(self.device)

    def _shard(self) -> contextlib.AbstractContextManager:
        """The update's batch-wide operations for this rank's share (world_model/sharding.py)."""
        if self.dist is None:
            return contextlib.nullcontext()
        return sharding.batch_shard(self.dist.rank, self.dist.world_size)

    def _sync_gradients(self, params: list[torch.nn.Parameter]) -> None:
        if self.dist is not None:
            self.dist.all_reduce_gradients(params)

    def update(self) -> dict[str, torch.Tensor]:
        """One gradient step of the world model, then of the policy prior; EMA targets."""
        start = time.perf_counter()
        ac, lc = self.config.agent, self.config.loss
        part = None
        if self.dist is not None:  # every rank draws the same B sequences, trains on its B / W
            share = ac.batch_size // self.dist.world_size
            part = slice(self.dist.rank * share, (self.dist.rank + 1) * share)
        batch = self.sample_batch(ac.batch_size, lc.horizon, part)
        self.model.train()
        with self._shard():
            return self._update(batch, start)

    def _update(self, batch: SequenceBatch, start: float) -> dict[str, torch.Tensor]:
        """`update` on a sampled batch (inside this rank's shard of it, when data-parallel)."""
        ac, lc = self.config.agent, self.config.loss
        loss, metrics, states = world_model_loss(self.model, batch, self.discount, lc)
        where = f"update {self.num_updates + 1} (env step {self.num_timesteps})"
        check_losses(metrics, where)
        check_states(states.tensors(), where)
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for g in self.optim.param_groups for p in g["params"]]
        self._sync_gradients(params)
        metrics["grad_norm"] = clip_gradients(self.model, params, ac.grad_clip, where)
        self.optim.step()
        self._genesis(batch, states)

        pi_loss, pi_metrics = policy_loss(self.model, states.detach(), self.scale, lc)
        check_losses(pi_metrics, where)
        self.pi_optim.zero_grad(set_to_none=True)
        pi_loss.backward()
        self._sync_gradients(self.model.policy_parameters())
        clip_gradients(self.model, list(self.model.policy_parameters()), ac.grad_clip, where)
        self.pi_optim.step()
        self.model.update_targets(ac.q_tau, ac.encoder_tau)
        self.num_updates += 1
        self.timing["update_s"] += time.perf_counter() - start
        self.timing["updates"] += 1
        return {**metrics, **pi_metrics}

    @torch.no_grad()
    def _genesis(self, batch: SequenceBatch, states: LatentState) -> None:
        """Hand the dynamics the batch's roots and their step-1 consistency errors (the loss's
        prediction, the target encoder's target) for growing; clear the moments of rows it
        rewrote."""
        dynamics = self.model.dynamics
        if type(dynamics).genesis is Dynamics.genesis:  # a dynamics that does not grow
            return
        target = self.model.encode(batch.obs[1], target=True)
        errors = self.model.consistency_loss(states[1].detach(), target)  # [B]
        # every rank grows from the whole batch, so all grow alike (world_model/sharding.py)
        roots = states[0].detach().map(sharding.gather)
        for param, rows in dynamics.genesis(roots, sharding.gather(errors)):
            clear_optimizer_rows(self.optim, param, rows)

    def learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        progress_bar: bool = False,
        log_dir: str | Path | None = None,
    ) -> Agent:
        """Train for `total_timesteps` more env steps (SB3's learn; `callback`, if given, is
        called as callback(trainer) after every env step and stops training when it returns
        False)."""
        if self._trainer is None:
            self._trainer = Trainer(self, run_dir=log_dir, progress=progress_bar)
        self._trainer.run(self.num_timesteps + int(total_timesteps), callback=callback)
        return self

    # ------------------------------------------------------------------ state
    def state_dict(self, include_buffer: bool = True) -> dict[str, Any]:
        state = {
            "model": self.model.state_dict(),
            "optim": self.optim.state_dict(),
            "pi_optim": self.pi_optim.state_dict(),
            "scale": self.scale.state_dict(),
            "planner": self.planner.state_dict(),
            "episode": self.episode.state_dict(),
            "generator": self.generator.get_state(),
            "spaces": self.spaces.bounds(),
            "counters": {
                "num_timesteps": self.num_timesteps,
                "num_updates": self.num_updates,
                "update_debt": self._update_debt,
            },
        }
        if include_buffer:
            state["buffer"] = self.buffer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        problem = self.spaces.mismatch(state["spaces"]) if "spaces" in state else None
        if problem is not None:  # an env other than the trained one (checkpoints since v2)
            raise ConfigError(problem)
        self.model.load_state_dict(state["model"])
        self.optim.load_state_dict(state["optim"])
        # torch's Optimizer.load_state_dict turns every "step" into a float32 tensor; geoopt keeps
        # a Python int and computes beta ** step with it, so a tensor step changes the bias
        # correction in the last bits (measured: resumed runs drifted from uninterrupted ones)
        for param_state in self.optim.state.values():
            if torch.is_tensor(param_state.get("step")):
                param_state["step"] = int(param_state["step"].item())
        self.pi_optim.load_state_dict(state["pi_optim"])
        self.scale.load_state_dict(state["scale"])
        self.planner.load_state_dict(state["planner"])
        # format <= 3 kept the episode so far in the planner's state
        self.episode.load_state_dict(state.get("episode", state["planner"]))
        self.generator.set_state(state["generator"])
        counters = state["counters"]
        self.num_timesteps = counters["num_timesteps"]
        self.num_updates = counters["num_updates"]
        self._update_debt = counters["update_debt"]
        if "buffer" in state:
            self.buffer.load_state_dict(state["buffer"])

    def save(self, path: str | Path, include_buffer: bool = False) -> Path:
        """Write config and agent state (atomically); `Agent.load(path)` restores it."""
        return save_checkpoint(
            {"config": self.config.to_dict(), "agent": self.state_dict(include_buffer)}, path
        )

    @classmethod
    def load(
        cls,
        path: str | Path,
        env: gym.Env | None = None,
        device: str | None = None,
        **overrides: Any,
    ) -> Agent:
        """Rebuild an agent from `save` (or from a run's checkpoint.pt). `overrides` are config
        sections to change, e.g. train={"steps": 20_000}. A data-parallel run's replay buffer
        holds all W K copies' streams: loaded in one process, the agent has W K copies."""
        state = load_checkpoint(path, required=("config", "agent"))
        overrides = _with_copies(state, overrides, saved_copies(state))
        return cls._from_state(state, path, env, device, overrides)

    @classmethod
    def _from_state(
        cls,
        state: dict[str, Any],
        path: str | Path,
        env: gym.Env | None,
        device: str | None,
        overrides: dict[str, Any],
        dist: DistContext | None = None,
    ) -> Agent:
        """`load` of a checkpoint already read from `path` (named in errors)."""
        version = format_version(state)
        try:
            config = RunConfig.from_dict(migrate_config(state["config"], version))
            if overrides:
                config = RunConfig.from_dict(overrides, base=config)
        except ConfigError as err:
            raise CheckpointError(
                f"checkpoint {str(path)!r} (format version {version}): invalid config: {err}"
            ) from None
        if env is None:
            env = make_run_env(config, seed=None, scaled=False)
        agent = cls(env, config, device=device, dist=dist)
        try:
            agent.load_state_dict(state["agent"])
        except ConfigError:  # the env given is not the trained one: that line says so
            raise
        except (KeyError, RuntimeError, ValueError, TypeError) as err:
            detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise CheckpointError(
                f"checkpoint {str(path)!r} does not match this agent ({detail[:160]})"
            ) from None
        return agent

    @classmethod
    def resume(
        cls,
        run_dir: str | Path,
        *,
        device: str | None = None,
        progress: bool = False,
        overrides: dict[str, Any] | None = None,
        trainer_cls: type[Trainer] = Trainer,
        dist: DistContext | None = None,
    ) -> Trainer:
        """Continue the run saved in `run_dir`: the agent from its checkpoint, and its Trainer
        (`trainer_cls`, a Trainer subclass such as agent.compare's measured one) with the loop
        and random-generator state (Trainer.restore), whose TensorBoard writer purges whatever
        was logged after the checkpoint. `overrides` as in `load`.

        The run's W K env copies continue on any world size W' (one process: None) that divides
        them, K' = W K / W' per rank (agent/core/distributed.py)."""
        path = Path(run_dir) / CHECKPOINT_NAME
        state = load_checkpoint(path, required=("config", "agent", "loop", "rng"))
        copies = saved_copies(state)
        world = 1 if dist is None else dist.world_size
        if copies % world:
            raise ConfigError(
                f"{run_dir}: the run has {copies} env copies; it resumes on a number of ranks "
                f"that divides them, not {world}"
            )
        overrides = _with_copies(state, dict(overrides or {}), copies // world)
        agent = cls._from_state(state, path, None, device, overrides, dist)
        agent._trainer = trainer_cls.restore(agent, run_dir, state, progress=progress)
        return agent._trainer


def saved_copies(state: dict[str, Any]) -> int:
    """The env copies a checkpoint's run collected from, over all its ranks (W K): its replay
    buffer's streams (every rank held all of them), else its saved env generators, else 1."""
    agent = state.get("agent")
    buffer = agent.get("buffer") if isinstance(agent, dict) else None
    if isinstance(buffer, dict) and "streams" in buffer:
        return int(buffer["streams"])
    envs = state.get("rng", {}).get("env") if isinstance(state.get("rng"), dict) else None
    return len(envs) if isinstance(envs, list) else 1


def _with_copies(state: dict[str, Any], overrides: dict[str, Any], per_process: int) -> dict:
    """`overrides` with train.num_envs = per_process where the saved config says otherwise
    (a data-parallel run loaded in fewer processes), unless the overrides set it already."""
    train = overrides.get("train", {})
    configured = state["config"].get("train", {}).get("num_envs", 1)
    if "num_envs" in train or per_process == configured:
        return overrides
    return {**overrides, "train": {**train, "num_envs": per_process}}
