"""Training the compared methods: each world model's agent (one uninterrupted, measured
`Trainer` run evaluated from a callback) and SB3's SAC, one method at a time over all seeds
(CompareConfig.run_order), into run folders; then `run_comparison`, which trains them all,
keeps results.json current and draws the figure.

Training time excludes evaluation, checkpoints and diagnostics. A Ctrl-C stops the run in
progress at its next step; results.json keeps everything finished.

Resuming (`run_comparison(..., resume=True)`, `agent.compare --resume OUT`): every run keeps its
record in its folder (RUN_RECORD, rewritten after each evaluation); a finished run is skipped, an
agent's run continues from its last checkpoint (written at episode ends, so the continuation is
the uninterrupted run's: agent/core/loop.py) with its training clock saved in the checkpoint, and
SAC continues from the model and replay buffer saved at its last evaluation point (SB3's
save/load; its continuation is valid, not bit-identical). A kill loses at most one checkpoint
interval of an agent's run, one evaluation interval of SAC's.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from agent.cli import folder_problem
from agent.comparison.config import SAC, CompareConfig
from agent.comparison.prediction import EpisodeRecorder, open_loop_error
from agent.comparison.report import count, plot_learning_curves, plot_prediction_error
from agent.comparison.results import Comparison, MethodRun, PointResult
from agent.comparison.stats import standard_error
from agent.core.agent import Agent
from agent.core.config import ConfigError
from agent.core.loop import Trainer
from agent.persistence.checkpoint import replace_atomically
from agent.persistence.runs import CHECKPOINT_NAME, fresh_dir, run_dir_name
from envs import make_env
from envs.scaling import scale_spaces

__all__ = [
    "RUN_RECORD",
    "output_dir",
    "preflight",
    "run_comparison",
    "sac_returns",
    "train_agent",
    "train_sac",
    "write_progress",
]


class _Clock:
    """Wall and CPU seconds spent inside `with clock:` blocks."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def __enter__(self) -> _Clock:
        self._start = (time.perf_counter(), time.process_time())
        return self

    def __exit__(self, *exc: Any) -> None:
        wall, cpu = self._start
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu


RUN_RECORD = "compare_run.json"
SAC_MODEL, SAC_REPLAY = "sac_model.zip", "sac_replay_buffer.pkl"


class _MeasuredTrainer(Trainer):
    """A Trainer that clocks evaluation, checkpoints and diagnostics apart from training
    (`bookkeeping`), keeps the returns of its latest evaluation, and carries its training
    clock through checkpoints (`train_clock`)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.bookkeeping = _Clock()
        self.last_returns: np.ndarray | None = None
        self.last_prediction: list[float] | None = None
        self._start = (time.perf_counter(), time.process_time())
        self._offset = (0.0, 0.0)  # training (wall, cpu) seconds before this process

    def train_clock(self) -> tuple[float, float]:
        """Training wall and CPU seconds so far, evaluation, checkpoints and diagnostics
        excluded, across resumes."""
        wall = self._offset[0] + time.perf_counter() - self._start[0] - self.bookkeeping.wall
        cpu = self._offset[1] + time.process_time() - self._start[1] - self.bookkeeping.cpu
        return wall, cpu

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "compare_clock": list(self.train_clock())}

    @classmethod
    def restore(cls, agent: Agent, run_dir, state: dict[str, Any], *, progress: bool = False):
        trainer = super().restore(agent, run_dir, state, progress=progress)
        wall, cpu = state.get("compare_clock", (0.0, 0.0))
        trainer._offset = (float(wall), float(cpu))
        return trainer

    def evaluate(self, episodes: int | None = None, on_step=None) -> np.ndarray:
        """super's evaluation, with the world model's open-loop error on its episodes."""
        recorder = EpisodeRecorder()

        def record(*transition: Any) -> None:
            recorder(*transition)
            if on_step is not None:
                on_step(*transition)

        with self.bookkeeping:
            self.last_returns = super().evaluate(episodes, on_step=record)
            self.last_prediction = open_loop_error(self.agent.model, recorder.episodes())
        return self.last_returns

    def save(self) -> Path:
        with self.bookkeeping:
            return super().save()

    def log_diagnostics(self) -> None:
        with self.bookkeeping:
            super().log_diagnostics()


def _per_call_ms(seconds: float, calls: int) -> float | None:
    return 1e3 * seconds / calls if calls else None


def train_agent(
    config: CompareConfig,
    method: str,
    seed: int,
    run_dir: Path,
    on_point: Callable[[PointResult], bool | None],
    *,
    resume: bool = False,
    recorded: Collection[int] = (),
) -> str:
    """Train the agent of `method` (a world model or an ablation's row) on `seed` to
    config.steps, logging to `run_dir`, and hand each evaluation point to `on_point` (which
    returns False to stop the run there, e.g. at a target return). `resume`: continue from
    run_dir's checkpoint; points before its step are not evaluated again, nor one at its step
    that is in `recorded` (the steps already handed on). A point at the checkpoint's own step
    that is not is evaluated first: the checkpoint at an episode end is written before the
    point's evaluation, so a kill during that evaluation leaves it so. Returns the Trainer's
    status ('done', 'stopped' by on_point, or 'interrupted': a Ctrl-C stops at the next step); a
    checkpoint is written in every case."""
    run_config = config.run_config(method, seed)
    if resume and (run_dir / CHECKPOINT_NAME).is_file():
        trainer = Agent.resume(
            run_dir, progress=run_config.train.progress, trainer_cls=_MeasuredTrainer
        )
        agent = trainer.agent
    else:
        agent = Agent(None, run_config)
        (run_dir / "config.json").write_text(json.dumps(run_config.to_dict(), indent=2))
        trainer = _MeasuredTrainer(agent, run_dir, progress=run_config.train.progress)
    at = agent.num_timesteps
    pending = [p for p in config.points if p > at or (p == at and p not in recorded)]

    def at_point(trainer: _MeasuredTrainer) -> bool:
        if not pending or agent.num_timesteps != pending[0]:
            return True
        step = pending.pop(0)
        timing = dict(agent.timing)
        train_s, train_cpu_s = trainer.train_clock()
        eval_start = time.perf_counter()
        trainer.evaluate_and_log()  # logged as eval/mean_return at this step
        go_on = on_point(
            PointResult(
                step=step,
                returns=[float(r) for r in trainer.last_returns],
                train_s=train_s,
                train_cpu_s=train_cpu_s,
                eval_s=time.perf_counter() - eval_start,
                plan_ms=_per_call_ms(timing["plan_s"], timing["plans"]),
                update_ms=_per_call_ms(timing["update_s"], timing["updates"]),
                updates=timing["updates"],
                open_loop_error=trainer.last_prediction,
            )
        )
        return go_on is not False

    try:
        if pending and pending[0] == at and not at_point(trainer):
            return "stopped"
        return trainer.run(config.steps, callback=at_point)
    finally:
        trainer.close()


def sac_returns(model: Any, env: Any, episodes: int, seed: int) -> np.ndarray:
    """Returns [episodes] of SAC's deterministic policy, episode k reset with seed + k."""
    returns = np.zeros(episodes)
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            returns[k] += float(reward)
            done = bool(terminated or truncated)
    return returns


def train_sac(
    config: CompareConfig,
    seed: int,
    run_dir: Path,
    on_point: Callable[[PointResult], bool | None],
    *,
    resume_from: PointResult | None = None,
) -> str:
    """SB3's SAC("MlpPolicy") with its default settings on `seed`, on the agents' env (same
    episode limit, action repeat) and threads setting, evaluated on the same episodes and handed
    to `on_point` (False stops the run there); TensorBoard logs in `run_dir`. The model and its
    replay buffer are saved at every point; `resume_from` (the last point recorded) continues
    from them. Returns 'done', 'stopped' or 'interrupted' (Ctrl-C)."""
    from stable_baselines3 import SAC as SoftActorCritic
    from stable_baselines3.common.logger import configure

    tc = config.train
    if tc.single_thread:
        torch.set_num_threads(1)
    # the agents' own view (actions in [-1, 1], fixed observation scaling), so that SAC sees
    # exactly the inputs the world models see
    kwargs = {"max_episode_steps": tc.max_episode_steps, "action_repeat": tc.action_repeat}
    env = scale_spaces(make_env(tc.env_id, seed=seed, **kwargs), seed)
    eval_env = scale_spaces(make_env(tc.env_id, **kwargs))
    if resume_from is not None and (run_dir / SAC_MODEL).is_file():
        model = SoftActorCritic.load(run_dir / SAC_MODEL, env=env)
        model.load_replay_buffer(run_dir / SAC_REPLAY)
        trained = model.num_timesteps  # resume_from's step unless killed between the two saves
        train_s, train_cpu_s = resume_from.train_s, resume_from.train_cpu_s
    else:
        model = SoftActorCritic("MlpPolicy", env, seed=seed, verbose=0)
        trained, train_s, train_cpu_s = 0, 0.0, 0.0
    model.set_logger(configure(str(run_dir), ["tensorboard"]))
    try:
        for step in (p for p in config.points if p > trained):
            with _Clock() as clock:
                model.learn(step - trained, reset_num_timesteps=trained == 0)
            trained = step
            train_s, train_cpu_s = train_s + clock.wall, train_cpu_s + clock.cpu
            with _Clock() as eval_clock:
                returns = sac_returns(model, eval_env, config.episodes, tc.eval_seed)
            model.logger.record("eval/mean_return", float(returns.mean()))
            model.logger.record("eval/std_return", float(returns.std()))
            model.logger.dump(step)
            go_on = on_point(
                PointResult(
                    step, [float(r) for r in returns], train_s, train_cpu_s, eval_clock.wall
                )
            )
            _save_sac(model, run_dir)
            if go_on is False:  # as train_agent: the callback stops the run here
                return "stopped"
    except KeyboardInterrupt:
        return "interrupted"
    finally:
        model.logger.close()
        env.close()
        eval_env.close()
    return "done"


def _save_sac(model: Any, run_dir: Path) -> None:
    """The model and replay buffer, each written atomically."""
    replace_atomically(run_dir / SAC_MODEL, model.save)
    replace_atomically(run_dir / SAC_REPLAY, model.save_replay_buffer)


def write_progress(line: str) -> None:
    """One progress line on stderr (above tqdm's bars)."""
    tqdm.write(line, file=sys.stderr)


def _point_line(done: int, total: int, method: str, seed: int, point: PointResult) -> str:
    returns = np.asarray(point.returns)
    sem = standard_error(returns) or 0.0
    return (
        f"[{done}/{total}] {method} seed {seed} @ {point.step} steps: return "
        f"{returns.mean():.1f} ± {sem:.1f} (s.e.) over {count(returns.size, 'episode')} "
        f"(training {point.train_s:.1f} s, evaluation {point.eval_s:.1f} s)"
    )


def _save_record(run: MethodRun) -> None:
    """RUN_RECORD in the run's folder, written atomically: what a resume reads."""
    text = json.dumps(asdict(run), indent=1)
    replace_atomically(Path(run.run_dir) / RUN_RECORD, lambda tmp: tmp.write_text(text))


def _load_records(runs_dir: Path) -> dict[tuple[str, int], MethodRun]:
    """(method, seed) -> the run recorded under runs_dir (the latest folder of each)."""
    records = {}
    for path in sorted(runs_dir.glob(f"*/{RUN_RECORD}")):
        data = json.loads(path.read_text())
        run = MethodRun(data["method"], int(data["seed"]), data["run_dir"], data["status"])
        run.points = [PointResult(**point) for point in data["points"]]
        records[(run.method, run.seed)] = run
    return records


def _resumable(run: MethodRun) -> bool:
    saved = SAC_MODEL if run.method == SAC else CHECKPOINT_NAME
    return (Path(run.run_dir) / saved).is_file()


def run_comparison(
    config: CompareConfig,
    out: str | Path,
    *,
    meta: dict[str, Any] | None = None,
    report: Callable[[str], None] = write_progress,
    resume: bool = False,
) -> Comparison:
    """Train every method on every seed (config.run_order), evaluating at config.points;
    results.json is rewritten after every evaluation and learning_curves.png drawn at the end.
    A Ctrl-C ends the comparison with status 'interrupted' and keeps everything finished.
    `resume`: continue the comparison in `out` (module docstring): finished runs are kept, the
    others continue."""
    comparison = Comparison(config, Path(out), meta=dict(meta or {}))
    if resume and comparison.results_path.is_file():  # the first start's metadata stays
        before = json.loads(comparison.results_path.read_text()).get("meta", {})
        resumes = [*before.get("resumed", []), comparison.meta]
        comparison.meta = {**before, "resumed": resumes}
    comparison.meta["load_average_before"] = os.getloadavg()
    runs_dir = comparison.out / "runs"
    records = _load_records(runs_dir) if resume else {}
    total = len(config.seed_list) * len(config.methods) * len(config.points)
    try:
        # runs killed before their first checkpoint start again, elsewhere
        kept = {key: r for key, r in records.items() if r.status == "done" or _resumable(r)}
        comparison.runs = [kept[key] for key in config.run_order if key in kept]
        for method, seed in config.run_order:
            run = kept.get((method, seed))
            if run is None:
                run_dir = fresh_dir(runs_dir / run_dir_name(config.env_id, method, seed))
                run = MethodRun(method, seed, str(run_dir))
                comparison.runs.append(run)
            if run.status == "done":
                continue
            run_dir = Path(run.run_dir)
            verb = "continuing from its last checkpoint" if _resumable(run) else "training"
            report(f"{run.method} seed {run.seed}: {verb} to {config.steps} steps in {run_dir}")

            def on_point(point: PointResult, run: MethodRun = run) -> None:
                run.points = [p for p in run.points if p.step < point.step] + [point]
                _save_record(run)
                comparison.save()
                done = sum(len(r.points) for r in comparison.runs)
                report(_point_line(done, total, run.method, run.seed, point))

            run.status = "running"
            _save_record(run)
            comparison.save()  # so that a run killed before its first point can be resumed
            if run.method == SAC:
                last = run.points[-1] if resume and run.points else None
                run.status = train_sac(config, run.seed, run_dir, on_point, resume_from=last)
            else:
                recorded = [p.step for p in run.points]
                run.status = train_agent(
                    config, run.method, run.seed, run_dir, on_point, resume=resume,
                    recorded=recorded,
                )  # fmt: skip
            _save_record(run)
            comparison.save()
            if run.status == "interrupted":
                raise KeyboardInterrupt
        comparison.status = "done"
    except KeyboardInterrupt:
        comparison.status = "interrupted"
        for run in comparison.runs:
            if run.status == "running":
                run.status = "interrupted"
                _save_record(run)
    finally:
        comparison.meta["load_average_after"] = os.getloadavg()
        comparison.meta["torch_threads"] = torch.get_num_threads()
        comparison.save()
        plot_learning_curves(comparison)
        plot_prediction_error(comparison)
    return comparison


def preflight(config: CompareConfig) -> None:
    """Build every world model's and ablation's agent once (env, action space, device, model
    config) so that bad input fails before anything trains."""
    for name in config.agent_methods:
        agent = Agent(None, config.run_config(name, seed=1))
        agent.env.close()
    if config.sac:
        tc = config.train
        make_env(tc.env_id, max_episode_steps=tc.max_episode_steps).close()


def output_dir(out: str | None, env_id: str) -> Path:
    """--out (which must not hold a comparison already), or runs/compare__{env}__{time}."""
    if out is not None:
        path = Path(out)
        if (path / "results.json").exists():
            raise ConfigError(f"--out {out!r} already holds a comparison; choose another folder")
        problem = folder_problem("--out", out)
        if problem:
            raise ConfigError(problem)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return fresh_dir(Path("runs") / f"compare__{env_id.replace('/', '-')}__{int(time.time())}")
