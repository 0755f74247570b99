"""Where the training loop's transitions come from: K copies of the run's env stepped in
lock-step (`train.num_envs`), each with its own planner (warm start), episode so far (history
window and episodic memory, agent/core/episode.py) and random generator, all planned for in one
batch (agent.core.planner.plan_batch).

`Collection` is one interface over the two cases:

- K = 1: the agent's own env (`Agent.env`), its planner, episode and generator; exactly the
  single-env loop the project always had (the same draws, the same checkpoints).
- K > 1: a gymnasium vector env (`train.vector_env`: SyncVectorEnv in this process, or
  AsyncVectorEnv with a process per copy) with autoreset disabled: the loop resets a copy
  itself at the start of the step after its episode ended, so each stored transition's
  next_obs is the episode's real last observation and nothing of a reset step is stored
  (gymnasium's next-step autoreset would hand over a step whose action is ignored). Copy 0 is
  seeded with the run's seed, copy i > 0 (env, its planner's generator) from
  numpy's SeedSequence((seed, i)): distinct for every run seed and copy.

Checkpoints hold each copy's env generator and each extra planner generator; they are taken
when every copy's episode has ended at the same step (fixed-length episodes always do) or, when
copies have drifted apart and a checkpoint is due, at an episode end of any copy, the others'
episodes then closed as truncated (they bootstrap) and all copies starting new ones: a resumed
run continues exactly as the uninterrupted one.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from agent.core.episode import EpisodeSoFar
from agent.core.planner import Planner
from agent.core.protocols import ActingAgent
from agent.persistence.checkpoint import rng_from_state, rng_state, set_env_rng_state
from agent.persistence.runs import make_run_env

__all__ = ["Collection", "copy_seed"]


def copy_seed(seed: int, copy: int) -> int:
    """The seed of environment copy `copy` of a run seeded `seed` (copy 0: the seed itself)."""
    if copy == 0:
        return seed
    return int(np.random.SeedSequence((seed, copy)).generate_state(1)[0])


class Collection:
    """K env copies with their planners, episodes and generators (module docstring)."""

    def __init__(self, agent: ActingAgent):
        tc = agent.config.train
        self.agent = agent
        self.num_envs = k = tc.num_envs
        first = agent.first_copy  # this process's copy 0 (a data-parallel rank's: rank K)
        self.planners = [agent.planner] + [
            Planner(agent.config.planner, agent.action_dim, agent.discount) for _ in range(1, k)
        ]
        self.episodes = [agent.episode] + [EpisodeSoFar() for _ in range(1, k)]
        self.generators = [agent.generator] + [
            torch.Generator(device=agent.device).manual_seed(copy_seed(tc.seed, first + i))
            for i in range(1, k)
        ]
        self.env: gym.Env | gym.vector.VectorEnv = agent.env if k == 1 else self._vector(True)

    def _vector(self, seeded: bool) -> gym.vector.VectorEnv:
        """The K copies: copy i > 0 seeded for its first reset from copy_seed (a resumed run's
        copies unseeded: their generators come from the checkpoint)."""
        agent, tc = self.agent, self.agent.config.train
        offset = agent.first_copy
        seed = (lambda i: copy_seed(tc.seed, offset + i)) if seeded else (lambda i: None)
        makers = [
            functools.partial(make_run_env, agent.config, seed(i)) for i in range(1, self.num_envs)
        ]
        mode = gym.vector.AutoresetMode.DISABLED  # the loop resets a copy itself
        if tc.vector_env == "sync":  # copy 0 is the agent's own env, as with K = 1
            return gym.vector.SyncVectorEnv([lambda: agent.env, *makers], autoreset_mode=mode)
        first = functools.partial(make_run_env, agent.config, seed(0))
        return gym.vector.AsyncVectorEnv([first, *makers], autoreset_mode=mode)

    # ------------------------------------------------------------------ stepping
    def reset(self, mask: np.ndarray, obs: np.ndarray | None) -> np.ndarray:
        """Start new episodes in the copies where mask [K] is True (their planners and
        episodes reset); returns the observations [K, O], the others' taken from `obs`."""
        for i in np.flatnonzero(mask):
            self.planners[i].reset()
            self.episodes[i].reset()
        if self.num_envs == 1:
            first, _ = self.env.reset()
            return np.asarray(first)[None]
        if mask.all():
            fresh, _ = self.env.reset()
        else:
            fresh, _ = self.env.reset(options={"reset_mask": mask})
        out = np.array(obs, copy=True) if obs is not None else np.asarray(fresh).copy()
        out[mask] = np.asarray(fresh)[mask]
        return out

    def actions(self, obs: np.ndarray, random: bool) -> np.ndarray:
        """Actions [K, A] in [-1, 1]: uniform from each copy's generator (the seed phase; copy
        0 draws as the single-env loop always drew), else planned for all copies at once."""
        if random:
            return np.stack([self._uniform(g) for g in self.generators])
        return self.agent.act_batch(
            obs,
            explore=True,
            planners=self.planners,
            generators=self.generators,
            episodes=self.episodes,
        )

    def _uniform(self, generator: torch.Generator) -> np.ndarray:
        if generator is self.agent.generator:
            return self.agent.random_action()
        u = torch.rand(self.agent.action_dim, generator=generator, device=self.agent.device)
        return (2 * u - 1).cpu().numpy()

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        """(next_obs [K, O], rewards [K], terminated [K], truncated [K])."""
        if self.num_envs == 1:
            next_obs, reward, terminated, truncated, _ = self.env.step(actions[0])
            return (
                np.asarray(next_obs)[None],
                np.asarray([float(reward)]),
                np.asarray([bool(terminated)]),
                np.asarray([bool(truncated)]),
            )
        next_obs, rewards, terminated, truncated, _ = self.env.step(actions)
        return (
            np.asarray(next_obs),
            np.asarray(rewards, dtype=np.float64),
            np.asarray(terminated, dtype=bool),
            np.asarray(truncated, dtype=bool),
        )

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Every copy's env generator and the extra copies' planner generators (copy 0's
        planner generator is the agent's, saved with the agent)."""
        return {
            "env": [rng_state(rng) for rng in self._env_rngs()],
            "generators": [g.get_state() for g in self.generators[1:]],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["env"]) != self.num_envs:
            raise ValueError(
                f"the checkpoint holds {len(state['env'])} env copies, the run has "
                f"{self.num_envs} (train.num_envs)"
            )
        if self.num_envs == 1:
            set_env_rng_state(self.env, state["env"][0])
            return
        self.close()  # the copies again, unseeded: no first reset may reseed them
        self.env = self._vector(False)
        if isinstance(self.env, gym.vector.SyncVectorEnv):
            for env, saved in zip(self.env.envs, state["env"], strict=True):
                set_env_rng_state(env, saved)
        else:
            self.env.set_attr("np_random", [rng_from_state(saved) for saved in state["env"]])
        for generator, saved in zip(self.generators[1:], state["generators"], strict=True):
            generator.set_state(saved)

    def _env_rngs(self) -> list[Any]:
        if self.num_envs == 1:
            return [self.env.unwrapped.np_random]
        if isinstance(self.env, gym.vector.SyncVectorEnv):
            return [env.unwrapped.np_random for env in self.env.envs]
        return list(self.env.get_attr("np_random"))

    def close(self) -> None:
        """Close the vector env (copy 0 of a sync one is the agent's env: left open)."""
        if self.num_envs == 1:
            return
        if isinstance(self.env, gym.vector.SyncVectorEnv):
            for env in self.env.envs[1:]:
                env.close()
        else:
            self.env.close()
