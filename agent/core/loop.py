"""The training loop: env interaction, updates, evaluation, TensorBoard, checkpoints, resume.

Checkpoints are written at episode ends (every `checkpoint_every` steps, and at the end of a
run), where the env's whole state is its generator, so a resumed run continues bit for bit like
an uninterrupted one. A stop in the middle of an episode (Ctrl-C) closes that episode as
truncated in the replay buffer and the resumed run starts a new episode from the saved env
generator: a valid continuation, not a bitwise-identical one.

TensorBoard tags: charts/ (episodes), losses/ (world model and policy), planner/, eval/, perf/,
diagnostics/ (the dynamics' own), figures/ (agent/inspection/figures.py, at the end of a geodesic
run); global step = env steps. A resumed writer purges events logged after the checkpoint
(purge_step) so the curves continue without a fold.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from agent.core.collection import Collection
from agent.core.distributed import DistContext, ShardedCollection
from agent.core.episodes import BatchedPolicy, run_episodes
from agent.core.guard import NonFiniteError
from agent.core.protocols import ActingAgent, InspectedAgent
from agent.persistence.checkpoint import (
    RunWriteError,
    global_rng_state,
    save_checkpoint,
    set_global_rng_state,
)
from agent.persistence.runs import CHECKPOINT_NAME, make_run_vector_env
from world_model.diagnostics import reports_nodes

__all__ = ["TrainedAgent", "Trainer"]


class TrainedAgent(ActingAgent, InspectedAgent, Protocol):
    """What the training loop reads of the agent it runs: an ActingAgent (its env copies'
    Collection) and an InspectedAgent (diagnostics, end-of-run figures) that also stores
    transitions, owes and takes updates, evaluates with policies of its own and saves its state.
    Implemented by agent.core.agent.Agent, which imports this module for Agent.learn / Agent.resume
    (so the loop names the agent by this Protocol, agent/core/protocols.py); read by Trainer, its
    _Window and subclasses (agent.comparison.runner's measured trainer). Here rather than in
    agent/core/protocols.py because it names DistContext: agent/core/distributed.py imports
    agent/core/collection.py, which imports agent/core/protocols.py."""

    dist: DistContext | None
    num_updates: int
    timing: dict[str, float]  # plan_s, plans, update_s, updates: seconds and counts so far

    def observe_batch(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None: ...

    def updates_due(self, steps: int = 1) -> int: ...

    def update(self) -> dict[str, torch.Tensor]: ...

    def policy(self, seed: int, explore: bool = False) -> BatchedPolicy: ...

    def state_dict(self, include_buffer: bool = True) -> dict[str, Any]: ...


class Trainer:
    """Runs an Agent in its env. `run(until_step)` returns 'done', 'stopped' (callback) or
    'interrupted' (SIGINT); in every case a run folder holds a fresh checkpoint afterwards."""

    def __init__(
        self,
        agent: TrainedAgent,
        run_dir: str | Path | None = None,
        *,
        progress: bool = False,
        purge_step: int | None = None,
    ):
        self.agent = agent
        self.cfg = agent.config.train
        self.dist = agent.dist  # data-parallel (agent/core/distributed.py): rank 0 writes
        self.writes = self.dist is None or self.dist.is_main
        self.collection = Collection(agent)
        if self.dist is not None:  # every rank's copies, gathered
            self.collection = ShardedCollection(self.collection, self.dist)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.writer = (
            SummaryWriter(str(self.run_dir), purge_step=purge_step)
            if self.run_dir is not None and self.writes
            else None
        )
        self.progress = progress
        self.eval_env = None
        # loop state (saved in checkpoints)
        k = self.collection.num_envs
        self.needs_reset = True  # every copy starts a new episode at the next step
        self.ended = np.zeros(k, dtype=bool)  # copies whose episode ended at the last step
        self.obs: np.ndarray | None = None  # [K, O]
        self.episode = 0
        self.episode_return = np.zeros(k)
        self.episode_length = np.zeros(k, dtype=np.int64)
        self.last_return = math.nan
        self.last_eval: tuple[float, float] | None = None
        self.last_eval_step: int | None = None
        self.next_eval = self.cfg.eval_every if self.cfg.eval_every > 0 else None
        self.last_checkpoint = agent.num_timesteps
        self.next_diagnostics = agent.num_updates + self.cfg.diagnostics_every
        self._interrupted = False
        self.last_crossed: tuple[int, list[str]] | None = None  # (update, nodes out of range)
        self.last_diagnostics_update: int | None = None
        self._window = _Window(agent)
        self._metric_sums: dict[str, torch.Tensor] = {}
        self._metric_count = 0

    @property
    def env(self) -> gym.Env | gym.vector.VectorEnv:
        """The env the run collects from: the agent's, or the vector env of its copies."""
        return self.collection.env

    # ------------------------------------------------------------------ main loop
    def run(
        self,
        until_step: int,
        *,
        callback: Callable[[Trainer], bool] | None = None,
        stop_at_episode_end_after: int | None = None,
    ) -> str:
        """Train until `until_step` env steps. `stop_at_episode_end_after` (tests, benchmarks)
        stops at the first episode end at or after that step, as an interruption would but
        exactly at a checkpointable boundary."""
        agent, cfg = self.agent, self.cfg
        status = "done"
        previous_handler = signal.getsignal(signal.SIGINT)
        installed = _install_sigint(self._on_sigint)
        bar = tqdm(
            total=until_step,
            initial=agent.num_timesteps,
            unit="step",
            dynamic_ncols=True,
            disable=(not self.progress) or None,
            smoothing=0.05,
        )
        try:
            collection, k = self.collection, self.collection.num_envs
            while agent.num_timesteps < until_step:
                starting = np.ones(k, dtype=bool) if self.needs_reset else self.ended
                if starting.any():
                    self.obs = collection.reset(starting, self.obs)
                    self.needs_reset, self.ended = False, np.zeros(k, dtype=bool)
                    self.episode_return[starting], self.episode_length[starting] = 0.0, 0
                actions = collection.actions(self.obs, agent.num_timesteps < cfg.seed_steps)
                next_obs, rewards, terminated, truncated = collection.step(actions)
                agent.observe_batch(self.obs, actions, rewards, next_obs, terminated, truncated)
                self.obs = next_obs
                self.episode_return += rewards
                self.episode_length += 1
                for _ in range(agent.updates_due(k)):
                    self._accumulate(agent.update())
                    if agent.num_updates >= self.next_diagnostics:
                        self.log_diagnostics()
                        self.next_diagnostics += cfg.diagnostics_every
                step = agent.num_timesteps
                bar.update(k)
                self.ended = terminated | truncated
                for i in np.flatnonzero(self.ended):
                    self._end_episode(i, bar)
                due = (
                    self.run_dir is not None and step - self.last_checkpoint >= cfg.checkpoint_every
                )
                if due and self.ended.any() and not self.ended.all():  # copies out of step
                    agent.buffer.mark_truncated(~self.ended)  # close the others' episodes
                    self.ended[:] = True
                episode_end = bool(self.ended.all())  # a checkpointable boundary
                if episode_end:
                    self.needs_reset = True
                if step // cfg.log_every > (step - k) // cfg.log_every:
                    self._log_window(step)
                if self.next_eval is not None and step >= self.next_eval:
                    self.evaluate_and_log()
                    self.next_eval += cfg.eval_every
                if (
                    episode_end
                    and self.run_dir is not None
                    and step - self.last_checkpoint >= cfg.checkpoint_every
                ):
                    self.save()
                if callback is not None and callback(self) is False:
                    status = "stopped"
                    break
                if (
                    episode_end
                    and stop_at_episode_end_after is not None
                    and step >= stop_at_episode_end_after
                ):
                    status = "stopped"
                    break
                if self._stop_requested():
                    status = "interrupted"
                    break
            if (
                status == "done"
                and self.run_dir is not None
                and self.last_eval_step != agent.num_timesteps
            ):
                self.evaluate_and_log()  # a run folder always ends with an evaluation
        except NonFiniteError as err:  # no checkpoint of a diverged model: the last good one stays
            if self.writer is not None:
                self.writer.flush()
            raise NonFiniteError(f"{err}; {self._last_out_of_range()}; {self._kept()}") from err
        finally:
            bar.close()
            if installed:
                signal.signal(signal.SIGINT, previous_handler)
        if self.run_dir is not None:
            if not self.needs_reset:  # mid-episode: close the episodes as truncations
                agent.buffer.mark_truncated()
                self.needs_reset = True
            self.save()
        self.log_diagnostics()  # once at the end of every run, however short
        if status != "interrupted":  # Ctrl-C: out at once
            self.log_figures()
        if self.writer is not None:
            self.writer.flush()
        return status

    def _stop_requested(self) -> bool:
        """Ctrl-C here, or on any rank of a data-parallel run (all stop at the same step)."""
        if self.dist is None:
            return self._interrupted
        return self.dist.any(self._interrupted)

    def _on_sigint(self, signum, frame) -> None:
        if self._interrupted:  # a second Ctrl-C: stop now, the last checkpoint stays valid
            raise KeyboardInterrupt
        self._interrupted = True

    def _end_episode(self, copy: int, bar) -> None:
        self.episode += 1
        self.last_return = float(self.episode_return[copy])
        step = self.agent.num_timesteps
        if self.writer is not None:
            self.writer.add_scalar("charts/episodic_return", self.last_return, step)
            self.writer.add_scalar("charts/episodic_length", self.episode_length[copy], step)
            self.writer.add_scalar("charts/episodes", self.episode, step)
        postfix = {"return": f"{self.last_return:.1f}"}
        if self.last_eval is not None:
            postfix["eval"] = f"{self.last_eval[0]:.1f}"
        bar.set_postfix(postfix, refresh=False)

    # ------------------------------------------------------------------ logging
    def _accumulate(self, metrics: dict[str, torch.Tensor]) -> None:
        for key, value in metrics.items():
            value = value.detach().float()
            self._metric_sums[key] = self._metric_sums.get(key, 0.0) + value
        self._metric_count += 1

    def _log_window(self, step: int) -> None:
        if self.writer is None:
            self._metric_sums, self._metric_count = {}, 0
            return
        w = self.writer
        if self._metric_count:
            for key, total in self._metric_sums.items():
                w.add_scalar(f"losses/{key}", float(total) / self._metric_count, step)
        self._metric_sums, self._metric_count = {}, 0
        for key, value in self.agent.planner.last_info.items():
            w.add_scalar(f"planner/{key}", value, step)
        for key, value in self._window.read().items():
            w.add_scalar(f"perf/{key}", value, step)

    def log_diagnostics(self) -> None:
        """The dynamics' diagnostics on a batch drawn with a generator of its own."""
        agent = self.agent
        horizon = agent.config.loss.horizon
        batch = None
        if agent.buffer.size >= horizon:
            saved = agent.buffer.rng
            agent.buffer.rng = np.random.default_rng(self.cfg.seed + 4)
            try:
                batch = agent.sample_batch(agent.config.agent.batch_size, horizon)
            except ValueError:
                batch = None
            finally:
                agent.buffer.rng = saved
        scalars, histograms = agent.model.diagnostics(batch)
        crossed = [
            f"{key} = {value:.2e} >= {scalars[key + '_threshold']:.2e}"
            for key, value in scalars.items()
            if key + "_threshold" in scalars and value >= scalars[key + "_threshold"]
        ]
        if crossed:
            self.last_crossed = (agent.num_updates, crossed)
        self.last_diagnostics_update = agent.num_updates
        if self.writer is not None:
            step = agent.num_timesteps
            for key, value in scalars.items():
                self.writer.add_scalar(f"diagnostics/{key}", float(value), step)
            for key, value in histograms.items():
                self.writer.add_histogram(f"diagnostics/{key}", value, step)

    def log_figures(self) -> None:
        """agent/inspection/figures.py's figures under figures/ in TensorBoard, at the end of a run:
        for a dynamics with geometric diagnostics (the geodesic model), on the rank that writes. The
        run is saved before; a figure that fails costs one warning line on stderr, never the run,
        and nothing here draws from the run's random streams."""
        wanted = self.agent.config.train.figures and reports_nodes(self.agent.model.dynamics)
        if not self.writes or self.writer is None or not wanted:  # rank > 0: no writer
            return
        try:
            from agent.inspection.figures import add_to_tensorboard  # matplotlib only here

            self.writer.flush()  # the events the figure of nodes 67-70 over training reads
            add_to_tensorboard(self.agent, self.writer, self.agent.num_timesteps, self.run_dir)
        except Exception as err:  # plotting must never lose a trained run
            detail = " ".join(str(err).split())[:200] or "no message"
            print(
                f"warning: end-of-run figures not added to TensorBoard "
                f"({type(err).__name__}: {detail})",
                file=sys.stderr,
            )

    def _last_out_of_range(self) -> str:
        """The last diagnostics' nodes out of range, for a divergence's message."""
        if self.last_crossed is not None:
            update, crossed = self.last_crossed
            return f"last diagnostic out of range (update {update}): {'; '.join(crossed)}"
        if self.last_diagnostics_update is None:
            return "no diagnostics were computed before it"
        return f"no diagnostic node out of range up to update {self.last_diagnostics_update}"

    def _kept(self) -> str:
        """The checkpoint a divergence leaves in the run folder, for its message."""
        path = None if self.run_dir is None else self.run_dir / CHECKPOINT_NAME
        if path is None or not path.is_file():
            return "no checkpoint had been written"
        return f"the last good checkpoint (env step {self.last_checkpoint}) is kept: {path}"

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, episodes: int | None = None, on_step: Callable | None = None) -> np.ndarray:
        """Returns of `episodes` deterministic episodes reset with the fixed seeds
        eval_seed + k, all planned in one batch on a vector env of their own (each episode with
        a fresh planner and a generator seeded by its seed: agent/core/episodes.py): evaluation
        never touches the training run's random streams. `on_step` as in run_episodes."""
        episodes = episodes or self.cfg.eval_episodes
        if self.eval_env is None or self.eval_env.num_envs != episodes:
            if self.eval_env is not None:
                self.eval_env.close()
            self.eval_env = make_run_vector_env(self.agent.config, episodes)
        seed = self.cfg.eval_seed
        return run_episodes(self.agent.policy(seed), self.eval_env, episodes, seed, on_step=on_step)

    def evaluate_and_log(self) -> tuple[float, float] | None:
        """Evaluate, log to TensorBoard; a data-parallel run evaluates on rank 0 only (the
        others go on to the next step and wait for it there)."""
        if not self.writes:
            self.last_eval_step = self.agent.num_timesteps
            return None
        start = time.perf_counter()
        plans_before = self.agent.timing["plans"]
        plan_s_before = self.agent.timing["plan_s"]
        returns = self.evaluate()
        self.last_eval = (float(returns.mean()), float(returns.std()))
        self.last_eval_step = self.agent.num_timesteps
        if self.writer is not None:
            step = self.agent.num_timesteps
            self.writer.add_scalar("eval/mean_return", self.last_eval[0], step)
            self.writer.add_scalar("eval/std_return", self.last_eval[1], step)
            self.writer.add_scalar("eval/seconds", time.perf_counter() - start, step)
        # evaluation's planning time is not training's
        self.agent.timing["plans"] = plans_before
        self.agent.timing["plan_s"] = plan_s_before
        self._window.skip()
        return self.last_eval

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {
            "config": self.agent.config.to_dict(),
            "agent": self.agent.state_dict(include_buffer=True),
            "loop": {
                "needs_reset": self.needs_reset,
                "episode": self.episode,
                "last_return": self.last_return,
                "last_eval": self.last_eval,
                "last_eval_step": self.last_eval_step,
                "next_eval": self.next_eval,
                "next_diagnostics": self.next_diagnostics,
            },
            "rng": {"global": global_rng_state(), **self._collection_rng()},
        }

    def _collection_rng(self) -> dict[str, Any]:
        """The env copies' generators: as before vectorised collection for one copy (the
        checkpoint format is unchanged there), every copy's and the extra planners' else."""
        state = self.collection.state_dict()
        if self.collection.num_envs == 1:
            return {"env": state["env"][0]}
        return {"env": state["env"], "collection_generators": state["generators"]}

    def save(self) -> Path:
        if self.run_dir is None:
            raise ValueError("this trainer has no run folder to save into")
        if not self.needs_reset:
            raise RuntimeError("checkpoints are taken at episode ends")  # internal invariant
        if self.writer is not None:  # events up to the checkpoint on disk before it: a kill
            self.writer.flush()  # after the checkpoint never leaves a gap in the curves
        path = self.run_dir / CHECKPOINT_NAME
        if not self.writes:  # a data-parallel rank > 0: only its part of the copies' gather
            self.collection.state_dict()
            self.last_checkpoint = self.agent.num_timesteps
            return path
        try:
            path = save_checkpoint(self.state_dict(), path)
        except RunWriteError as err:  # a full disk, a read-only folder: stop, say where
            kept = f"--resume continues from env step {self.last_checkpoint}"
            if not (self.run_dir / CHECKPOINT_NAME).is_file():
                kept = "no checkpoint had been written"
            raise RunWriteError(
                err.errno, f"{err}; training stopped at env step {self.agent.num_timesteps}; {kept}"
            ) from None
        self.last_checkpoint = self.agent.num_timesteps
        return path

    @classmethod
    def restore(
        cls,
        agent: TrainedAgent,
        run_dir: str | Path,
        state: dict[str, Any],
        *,
        progress: bool = False,
    ) -> Trainer:
        """The trainer of a loaded `agent` from a checkpoint's `state` (its "loop" and "rng"
        parts): the TensorBoard writer purges whatever was logged after the checkpoint.
        `Agent.resume(run_dir)` loads both and calls this."""
        step = agent.num_timesteps
        trainer = cls(agent, run_dir, progress=progress, purge_step=step + 1)
        loop = state["loop"]
        trainer.needs_reset = True
        trainer.episode = loop["episode"]
        trainer.last_return = loop["last_return"]
        trainer.last_eval = tuple(loop["last_eval"]) if loop["last_eval"] else None
        trainer.last_eval_step = loop["last_eval_step"]
        trainer.next_eval = loop["next_eval"]
        if trainer.next_eval is None and agent.config.train.eval_every > 0:
            trainer.next_eval = (
                step // agent.config.train.eval_every + 1
            ) * agent.config.train.eval_every
        trainer.next_diagnostics = loop["next_diagnostics"]
        trainer.last_checkpoint = step
        saved = state["rng"]["env"]
        trainer.collection.load_state_dict(
            {"env": saved if isinstance(saved, list) else [saved],
             "generators": state["rng"].get("collection_generators", [])}
        )  # fmt: skip
        set_global_rng_state(state["rng"]["global"])
        return trainer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.collection.close()
        for env in (self.eval_env,):
            if env is not None:
                env.close()


class _Window:
    """Throughput since the last read: env steps/s, updates/s, ms per plan and per update."""

    def __init__(self, agent: TrainedAgent):
        self.agent = agent
        self.skip()

    def skip(self) -> None:
        t = self.agent.timing
        self._time = time.perf_counter()
        self._steps = self.agent.num_timesteps
        self._plans, self._plan_s = t["plans"], t["plan_s"]
        self._updates, self._update_s = t["updates"], t["update_s"]

    def read(self) -> dict[str, float]:
        t = self.agent.timing
        elapsed = max(time.perf_counter() - self._time, 1e-9)
        out = {
            "steps_per_second": (self.agent.num_timesteps - self._steps) / elapsed,
            "updates_per_second": (t["updates"] - self._updates) / elapsed,
        }
        if t["plans"] > self._plans:
            ms = 1e3 * (t["plan_s"] - self._plan_s) / (t["plans"] - self._plans)
            out["plan_ms"] = ms
            out["plan_hz"] = 1e3 / ms
        if t["updates"] > self._updates:
            out["update_ms"] = (
                1e3 * (t["update_s"] - self._update_s) / (t["updates"] - self._updates)
            )
        self.skip()
        return out


def _install_sigint(handler) -> bool:
    try:
        signal.signal(signal.SIGINT, handler)
        return True
    except ValueError:  # not the main thread: no signal handling
        return False
