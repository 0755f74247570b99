"""`python -m agent.compare`: world models side by side, and model-free SAC, on one task.

    python -m agent.compare --env Pendulum-v1 --seeds 3          # geodesic vs GRU vs SAC
    python -m agent.compare --seeds 1 --steps 2000 --at 500 1000 --no-sac
    python -m agent.compare --world-models gru --config tuned.toml --out runs/tuned
    tensorboard --logdir runs/compare__Pendulum-v1__1760000000

For every seed 1..N and every method, train with `agent.train`'s default config (plus the
`--config` overrides) and stop at each evaluation point for `--episodes` deterministic episodes
on the fixed evaluation seeds train.eval_seed + k, the same for every method. An agent's run is
one uninterrupted `Trainer` run evaluated from a callback; evaluation uses its own env, planner
and generator, so the run trains exactly as `python -m agent.train` trains it. SAC
("MlpPolicy", SB3's default settings) trains on the same seeds in the same process with the same
torch threads setting, so wall times are measured side by side. Training time excludes
evaluation, checkpoints and diagnostics.

A second table pairs every method with a reference (`--reference`, default gru) seed by seed:
both trained on the same seed and evaluated on the same episodes, so the per-seed difference of
mean returns removes what the seeds share. It reports on how many seeds the method did better,
the mean and median difference, and a bootstrap 95% interval of the mean difference (an
interval holding 0: these seeds do not tell the two apart). A few seeds' means are dominated by
one bad seed; the wins and the median say whether that is one seed or all of them.

OUT (default runs/compare__{env}__{time}) receives results.json (every number of the table, per
seed and per episode, rewritten after every evaluation), learning_curves.png (mean +- std over
seeds against env steps) and runs/{env}__{method}__{seed}__{time}/, one TensorBoard run per
method and seed (the geodesic runs with diagnostics nodes 67-70): `tensorboard --logdir OUT`.

A `--config` file applies by section, as `agent.train` applies it; [dynamics] keys go to every
world model, a sub-table [dynamics.NAME] to world model NAME only (their keys differ). Bad input:
one line on stderr, exit 2. Ctrl-C: the run in progress stops at its next step, results.json
keeps everything finished, exit 130.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
from tqdm import tqdm

from agent.agent import Agent
from agent.config import ConfigError, RunConfig, TrainConfig, load_config_file
from agent.loop import Trainer
from agent.train import run_metadata
from envs import EnvError, make_env
from envs.scaling import scale_spaces
from world_model.registry import dynamics_names, get_dynamics

__all__ = [
    "SAC",
    "DEFAULT_POINTS",
    "CompareConfig",
    "PointResult",
    "MethodRun",
    "SummaryRow",
    "PairedRow",
    "paired_differences",
    "Comparison",
    "default_points",
    "run_comparison",
    "train_agent",
    "train_sac",
    "format_table",
    "plot_learning_curves",
    "build_parser",
    "config_from_args",
    "run_from_args",
    "main",
]

PROG = "python -m agent.compare"
SAC = "sac"
DEFAULT_POINTS = (1000, 2500, 5000)
DEFAULT_WORLD_MODELS = ("geodesic", "gru")
RESULTS_FORMAT = "geodesic-rl/compare/v1"


# ----------------------------------------------------------------------- what to compare


def default_points(steps: int) -> tuple[int, ...]:
    """1k, 2.5k and 5k env steps below `steps`, then `steps` itself."""
    return (*(p for p in DEFAULT_POINTS if p < steps), steps)


def _positive(value: Any, flag: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{flag} must be a positive integer, got {value!r}")


@dataclass
class CompareConfig:
    """One comparison (the command line's flags), validated at construction."""

    env_id: str = "Pendulum-v1"
    """gymnasium environment id with continuous actions"""
    seeds: int = 3
    """every method trains once per seed 1..seeds"""
    steps: int = 5000
    """env steps of every run"""
    points: tuple[int, ...] = ()
    """env steps at which every run is evaluated (sorted; `steps` is always the last); empty:
    default_points(steps)"""
    world_models: tuple[str, ...] = DEFAULT_WORLD_MODELS
    """world models from world_model.registry, each trained as an agent"""
    sac: bool = True
    """also train SB3's SAC (default settings) as the model-free reference"""
    episodes: int = 10
    """deterministic evaluation episodes at each point"""
    overrides: dict[str, Any] = field(default_factory=dict)
    """RunConfig overrides by section (a --config file); [dynamics.NAME] for one world model"""
    reference: str | None = None
    """the method every other one is compared with seed by seed (the paired table); None: gru
    when it is compared, else the first method"""
    train: TrainConfig = field(init=False, repr=False)
    """the [train] section every method shares (env, episode limit, eval seed, threads)"""

    def __post_init__(self):
        _positive(self.seeds, "--seeds")
        _positive(self.steps, "--steps")
        _positive(self.episodes, "--episodes")
        for point in self.points:
            _positive(point, "every --at value")
            if point > self.steps:
                raise ConfigError(f"--at {point} lies beyond --steps {self.steps}")
        self.points = (
            tuple(sorted({*self.points, self.steps})) if self.points else default_points(self.steps)
        )
        self.world_models = tuple(self.world_models)
        if len(set(self.world_models)) != len(self.world_models):
            raise ConfigError(f"--world-models names a world model twice: {self.world_models}")
        if not self.world_models and not self.sac:
            raise ConfigError("nothing to compare: no --world-models and --no-sac")
        for name in self.world_models:
            if name == SAC:
                raise ConfigError("SAC is not a world model; it runs unless --no-sac is given")
            try:
                get_dynamics(name)
            except ValueError as err:
                raise ConfigError(str(err)) from None
        if self.reference is None:
            self.reference = "gru" if "gru" in self.world_models else self.methods[0]
        elif self.reference not in self.methods:
            raise ConfigError(
                f"--reference {self.reference!r} is not compared here; "
                f"choose one of: {', '.join(self.methods)}"
            )
        if not isinstance(self.overrides, dict):
            raise ConfigError("--config must hold a table of sections")
        if not isinstance(self.overrides.get("train", {}), dict):
            raise ConfigError("[train] must be a table of key = value")
        self.train = self._train_config()
        for name in self.world_models:
            self.run_config(name, seed=1)  # every override checked before anything runs

    @property
    def seed_list(self) -> list[int]:
        return list(range(1, self.seeds + 1))

    @property
    def methods(self) -> list[str]:
        return [*self.world_models, *([SAC] if self.sac else [])]

    def _train_overrides(self, world_model: str, seed: int) -> dict[str, Any]:
        return {
            **self.overrides.get("train", {}),
            "env_id": self.env_id,
            "world_model": world_model,
            "seed": seed,
            "steps": self.steps,
            "eval_every": 0,  # evaluation happens at the points, from compare's callback
            "eval_episodes": self.episodes,
        }

    def _train_config(self) -> TrainConfig:
        """The [train] section every method shares (env, episode limit, eval seed, threads)."""
        world_model = self.world_models[0] if self.world_models else TrainConfig.world_model
        return RunConfig.from_dict({"train": self._train_overrides(world_model, 1)}).train

    def run_config(self, world_model: str, seed: int) -> RunConfig:
        """agent.train's defaults < the overrides (with world_model's [dynamics]) < this run."""
        sections = {
            **self.overrides,
            "train": self._train_overrides(world_model, seed),
            "dynamics": _dynamics_overrides(self.overrides.get("dynamics", {}), world_model),
        }
        try:
            return RunConfig.from_dict(sections)
        except ConfigError as err:
            hint = (
                " (keys of one world model go in [dynamics.NAME])" if "dynamics" in str(err) else ""
            )
            raise ConfigError(f"world model {world_model!r}: {err}{hint}") from None

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "seeds": self.seed_list,
            "steps": self.steps,
            "points": list(self.points),
            "methods": self.methods,
            "reference": self.reference,
            "episodes": self.episodes,
            "eval_seeds": [self.train.eval_seed + k for k in range(self.episodes)],
            "overrides": self.overrides,
        }


def _dynamics_overrides(section: Any, world_model: str) -> Any:
    """[dynamics] keys shared by every world model, then [dynamics.<world_model>]'s."""
    if not isinstance(section, dict):
        return section  # RunConfig.from_dict reports it
    names = set(dynamics_names())
    shared = {k: v for k, v in section.items() if not (k in names and isinstance(v, dict))}
    own = section.get(world_model)
    return {**shared, **(own if isinstance(own, dict) else {})}


# ----------------------------------------------------------------------- results


@dataclass
class PointResult:
    """One method's run evaluated at one point."""

    step: int
    """env steps trained"""
    returns: list[float]
    """return of each evaluation episode (seeds eval_seed + k)"""
    train_s: float
    """wall seconds of training to this step (without evaluation, checkpoints, diagnostics)"""
    train_cpu_s: float
    """CPU seconds of the process over the same stretch"""
    eval_s: float
    """wall seconds of this evaluation"""
    plan_ms: float | None = None
    """mean ms per planning call in training so far (None: SAC)"""
    update_ms: float | None = None
    """mean ms per gradient update in training so far (None: SAC)"""
    updates: int | None = None
    """gradient updates so far (None: SAC)"""

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))


@dataclass
class MethodRun:
    """One method trained on one seed."""

    method: str
    seed: int
    run_dir: str
    status: str = "running"
    """running, done or interrupted"""
    points: list[PointResult] = field(default_factory=list)

    def at(self, step: int) -> PointResult | None:
        return next((p for p in self.points if p.step == step), None)


@dataclass(frozen=True)
class SummaryRow:
    """One method at one point, over the seeds that reached it."""

    method: str
    step: int
    mean: float
    """mean over seeds of each seed's mean return"""
    std: float
    """standard deviation over seeds of each seed's mean return (0 with one seed)"""
    per_seed: dict[int, float]
    train_s: float
    """training wall seconds to this step, mean over seeds"""
    ratio_to_sac: float | None
    """train_s over SAC's train_s at the same step (None: no SAC or SAC itself)"""
    plan_ms: float | None
    update_ms: float | None


@dataclass(frozen=True)
class PairedRow:
    """One method against the reference at one point, seed by seed: both trained on the same
    seed and evaluated on the same episodes, so their difference is paired. Every difference is
    method minus reference (of each seed's mean return): positive means the method did better."""

    method: str
    reference: str
    step: int
    seeds: int
    """seeds that both methods reached this point with"""
    wins: int
    """seeds on which the method's mean return is higher than the reference's"""
    mean_diff: float
    median_diff: float
    ci_low: float | None
    """percentile-bootstrap 95% interval of the mean difference over seeds (None with one
    seed): an interval that holds 0 says these seeds do not tell the two methods apart"""
    ci_high: float | None


BOOTSTRAP_RESAMPLES = 10_000


def paired_differences(
    differences: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float, float | None, float | None]:
    """Per-seed differences [n] -> (mean, median, 95% CI low, high): the percentile bootstrap of
    the mean (resampling seeds with replacement, a fixed generator so a table is reproducible);
    no interval for n = 1."""
    d = np.asarray(differences, dtype=float)  # [n]
    if d.size == 0:
        raise ValueError("paired_differences needs at least one difference")
    mean, median = float(d.mean()), float(np.median(d))
    if d.size < 2:
        return mean, median, None, None
    draws = np.random.default_rng(seed).integers(0, d.size, size=(resamples, d.size))
    low, high = np.percentile(d[draws].mean(axis=1), [2.5, 97.5])  # [resamples] -> 2
    return mean, median, float(low), float(high)


def _mean_or_none(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


@dataclass
class Comparison:
    """Every run of a comparison, finished or not, and where they are written."""

    config: CompareConfig
    out: Path
    runs: list[MethodRun] = field(default_factory=list)
    status: str = "running"
    """running, done or interrupted"""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def results_path(self) -> Path:
        return self.out / "results.json"

    @property
    def plot_path(self) -> Path:
        return self.out / "learning_curves.png"

    def points_of(self, method: str, step: int) -> list[tuple[int, PointResult]]:
        return [
            (run.seed, point)
            for run in self.runs
            if run.method == method and (point := run.at(step)) is not None
        ]

    def summary(self) -> list[SummaryRow]:
        rows = []
        for method in self.config.methods:
            for step in self.config.points:
                reached = self.points_of(method, step)
                if not reached:
                    continue
                per_seed = {seed: point.mean for seed, point in reached}
                train_s = float(np.mean([point.train_s for _, point in reached]))
                sac = self.points_of(SAC, step) if method != SAC else []
                sac_s = float(np.mean([point.train_s for _, point in sac])) if sac else None
                rows.append(
                    SummaryRow(
                        method=method,
                        step=step,
                        mean=float(np.mean(list(per_seed.values()))),
                        std=float(np.std(list(per_seed.values()))),
                        per_seed=per_seed,
                        train_s=train_s,
                        ratio_to_sac=train_s / sac_s if sac_s else None,
                        plan_ms=_mean_or_none([point.plan_ms for _, point in reached]),
                        update_ms=_mean_or_none([point.update_ms for _, point in reached]),
                    )
                )
        return rows

    def paired(self) -> list[PairedRow]:
        """Every other method against the reference, at every point, over the seeds both
        reached it with."""
        reference = str(self.config.reference)
        theirs = {  # step -> {seed: the reference's mean return}
            step: {seed: point.mean for seed, point in self.points_of(reference, step)}
            for step in self.config.points
        }
        rows = []
        for method in self.config.methods:
            if method == reference:
                continue
            for step in self.config.points:
                diffs = [
                    point.mean - theirs[step][seed]
                    for seed, point in self.points_of(method, step)
                    if seed in theirs[step]
                ]
                if not diffs:
                    continue
                mean, median, low, high = paired_differences(diffs)
                rows.append(
                    PairedRow(
                        method=method,
                        reference=reference,
                        step=step,
                        seeds=len(diffs),
                        wins=sum(d > 0 for d in diffs),
                        mean_diff=mean,
                        median_diff=median,
                        ci_low=low,
                        ci_high=high,
                    )
                )
        return rows

    def to_dict(self) -> dict[str, Any]:
        summary = [
            {**asdict(row), "per_seed": {str(s): m for s, m in row.per_seed.items()}}
            for row in self.summary()
        ]
        runs = [
            {**asdict(run), "points": [{**asdict(p), "mean": p.mean} for p in run.points]}
            for run in self.runs
        ]
        return {
            "format": RESULTS_FORMAT,
            "status": self.status,
            **self.config.to_dict(),
            "summary": summary,
            "paired": [asdict(row) for row in self.paired()],
            "runs": runs,
            "meta": self.meta,
        }

    def save(self) -> Path:
        """Write results.json atomically (a Ctrl-C during the write keeps the previous one)."""
        tmp = self.results_path.with_name(f".results.json.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_dict(), indent=1))
        os.replace(tmp, self.results_path)
        return self.results_path


# ----------------------------------------------------------------------- training runs


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


class _MeasuredTrainer(Trainer):
    """A Trainer that clocks evaluation, checkpoints and diagnostics apart from training
    (`bookkeeping`) and keeps the returns of its latest evaluation."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.bookkeeping = _Clock()
        self.last_returns: np.ndarray | None = None

    def evaluate(self, episodes: int | None = None) -> np.ndarray:
        with self.bookkeeping:
            self.last_returns = super().evaluate(episodes)
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
    world_model: str,
    seed: int,
    run_dir: Path,
    on_point: Callable[[PointResult], None],
) -> str:
    """Train the agent with `world_model` on `seed` to config.steps, logging to `run_dir`, and
    hand each evaluation point to `on_point`. Returns the Trainer's status ('done' or
    'interrupted': a Ctrl-C stops at the next step with a checkpoint written)."""
    run_config = config.run_config(world_model, seed)
    agent = Agent(None, run_config)
    (run_dir / "config.json").write_text(json.dumps(run_config.to_dict(), indent=2))
    trainer = _MeasuredTrainer(agent, run_dir, progress=run_config.train.progress)
    pending = list(config.points)
    start_wall, start_cpu = time.perf_counter(), time.process_time()

    def at_point(trainer: _MeasuredTrainer) -> bool:
        if not pending or agent.num_timesteps != pending[0]:
            return True
        step = pending.pop(0)
        clock, timing = trainer.bookkeeping, dict(agent.timing)
        train_s = time.perf_counter() - start_wall - clock.wall
        train_cpu_s = time.process_time() - start_cpu - clock.cpu
        eval_start = time.perf_counter()
        trainer.evaluate_and_log()  # logged as eval/mean_return at this step
        on_point(
            PointResult(
                step=step,
                returns=[float(r) for r in trainer.last_returns],
                train_s=train_s,
                train_cpu_s=train_cpu_s,
                eval_s=time.perf_counter() - eval_start,
                plan_ms=_per_call_ms(timing["plan_s"], timing["plans"]),
                update_ms=_per_call_ms(timing["update_s"], timing["updates"]),
                updates=timing["updates"],
            )
        )
        return True

    try:
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
    config: CompareConfig, seed: int, run_dir: Path, on_point: Callable[[PointResult], None]
) -> str:
    """SB3's SAC("MlpPolicy") with its default settings on `seed`, on the agents' env (same
    episode limit) and threads setting, evaluated on the same episodes; TensorBoard logs in
    `run_dir`. Returns 'done' or 'interrupted' (Ctrl-C)."""
    from stable_baselines3 import SAC as SoftActorCritic
    from stable_baselines3.common.logger import configure

    tc = config.train
    if tc.single_thread:
        torch.set_num_threads(1)
    # the agents' own view (actions in [-1, 1], fixed observation scaling), so that SAC sees
    # exactly the inputs the world models see
    env = scale_spaces(make_env(tc.env_id, seed=seed, max_episode_steps=tc.max_episode_steps), seed)
    eval_env = scale_spaces(make_env(tc.env_id, max_episode_steps=tc.max_episode_steps))
    model = SoftActorCritic("MlpPolicy", env, seed=seed, verbose=0)
    model.set_logger(configure(str(run_dir), ["tensorboard"]))
    train_s = train_cpu_s = 0.0
    trained = 0
    try:
        for step in config.points:
            with _Clock() as clock:
                model.learn(step - trained, reset_num_timesteps=trained == 0)
            trained = step
            train_s, train_cpu_s = train_s + clock.wall, train_cpu_s + clock.cpu
            with _Clock() as eval_clock:
                returns = sac_returns(model, eval_env, config.episodes, tc.eval_seed)
            model.logger.record("eval/mean_return", float(returns.mean()))
            model.logger.record("eval/std_return", float(returns.std()))
            model.logger.dump(step)
            on_point(
                PointResult(
                    step, [float(r) for r in returns], train_s, train_cpu_s, eval_clock.wall
                )
            )
    except KeyboardInterrupt:
        return "interrupted"
    finally:
        model.logger.close()
        env.close()
        eval_env.close()
    return "done"


def _fresh_dir(path: Path) -> Path:
    """Create `path`, or path-1, path-2, ... if it exists (mkdir is the test: two runs started in
    the same second get distinct folders)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    candidate, k = path, 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            candidate, k = path.with_name(f"{path.name}-{k}"), k + 1


def new_run_dir(base: Path, env_id: str, method: str, seed: int) -> Path:
    """base/{env}__{method}__{seed}__{time}, the layout of agent.train's run folders."""
    return _fresh_dir(base / f"{env_id.replace('/', '-')}__{method}__{seed}__{int(time.time())}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _report(line: str) -> None:
    tqdm.write(line, file=sys.stderr)


def _point_line(done: int, total: int, method: str, seed: int, point: PointResult) -> str:
    returns = np.asarray(point.returns)
    return (
        f"[{done}/{total}] {method} seed {seed} @ {point.step} steps: return "
        f"{returns.mean():.1f} ± {returns.std():.1f} over {_count(returns.size, 'episode')} "
        f"(training {point.train_s:.1f} s, evaluation {point.eval_s:.1f} s)"
    )


def run_comparison(
    config: CompareConfig,
    out: str | Path,
    *,
    meta: dict[str, Any] | None = None,
    report: Callable[[str], None] = _report,
) -> Comparison:
    """Train every method on every seed (seed by seed), evaluating at config.points; results.json
    is rewritten after every evaluation and learning_curves.png drawn at the end. A Ctrl-C ends
    the comparison with status 'interrupted' and keeps everything finished."""
    comparison = Comparison(config, Path(out), meta=dict(meta or {}))
    comparison.meta["load_average_before"] = os.getloadavg()
    runs_dir = comparison.out / "runs"
    total = len(config.seed_list) * len(config.methods) * len(config.points)
    try:
        for seed in config.seed_list:
            for method in config.methods:
                run_dir = new_run_dir(runs_dir, config.env_id, method, seed)
                run = MethodRun(method, seed, str(run_dir))
                comparison.runs.append(run)
                report(f"{method} seed {seed}: training to {config.steps} steps in {run_dir}")

                def on_point(point: PointResult, run: MethodRun = run) -> None:
                    run.points.append(point)
                    comparison.save()
                    done = sum(len(r.points) for r in comparison.runs)
                    report(_point_line(done, total, run.method, run.seed, point))

                if method == SAC:
                    run.status = train_sac(config, seed, run_dir, on_point)
                else:
                    run.status = train_agent(config, method, seed, run_dir, on_point)
                comparison.save()
                if run.status == "interrupted":
                    raise KeyboardInterrupt
        comparison.status = "done"
    except KeyboardInterrupt:
        comparison.status = "interrupted"
        for run in comparison.runs:
            if run.status == "running":
                run.status = "interrupted"
    finally:
        comparison.meta["load_average_after"] = os.getloadavg()
        comparison.meta["torch_threads"] = torch.get_num_threads()
        comparison.save()
        plot_learning_curves(comparison)
    return comparison


# ----------------------------------------------------------------------- table and figure


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:{spec}}{suffix}"


def format_table(comparison: Comparison) -> str:
    """The comparison as one Markdown table, with a header line saying what the numbers are."""
    config = comparison.config
    first, last = config.train.eval_seed, config.train.eval_seed + config.episodes - 1
    header = (
        f"{config.env_id}: {_count(config.seeds, 'seed')} x {config.episodes} deterministic "
        f"evaluation episodes (seeds {first}..{last}); return: mean ± std over seeds of each "
        "seed's mean; "
        "training s: wall time to the point without evaluation (mean over seeds)"
    )
    columns = [
        "method",
        "env steps",
        "return",
        "per seed",
        "training s",
        "x SAC",
        "plan ms",
        "update ms",
    ]
    rows = [
        [
            row.method,
            str(row.step),
            f"{row.mean:.1f} ± {row.std:.1f}",
            ", ".join(f"{v:.0f}" for v in row.per_seed.values()),
            f"{row.train_s:.1f}",
            _fmt(row.ratio_to_sac, ".2f", "x"),
            _fmt(row.plan_ms, ".1f"),
            _fmt(row.update_ms, ".1f"),
        ]
        for row in comparison.summary()
    ]
    if not rows:
        return f"{header}\n(no evaluation finished)"
    return "\n".join([header, "", *_markdown(columns, rows), *_paired_table(comparison)])


def _markdown(columns: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [columns, *rows]) for i in range(len(columns))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    return [line(columns), rule, *map(line, rows)]


def _paired_table(comparison: Comparison) -> list[str]:
    """The paired table's lines (none when nothing can be paired)."""
    paired = comparison.paired()
    if not paired:
        return []
    reference = comparison.config.reference
    header = (
        f"Paired by seed against {reference} (same seeds, same evaluation episodes): "
        f"difference = method - {reference} of each seed's mean return, > 0 is better; "
        "95% CI: bootstrap over seeds of the mean difference"
    )
    columns = ["method", "env steps", "better on", "mean diff", "median diff", "95% CI"]
    rows = [
        [
            row.method,
            str(row.step),
            f"{row.wins}/{row.seeds} seeds",
            f"{row.mean_diff:+.1f}",
            f"{row.median_diff:+.1f}",
            "—" if row.ci_low is None else f"[{row.ci_low:+.1f}, {row.ci_high:+.1f}]",
        ]
        for row in paired
    ]
    return ["", header, "", *_markdown(columns, rows)]


def plot_learning_curves(comparison: Comparison) -> Path | None:
    """learning_curves.png: each method's mean return over seeds against env steps, with a
    +- std band (matplotlib's Agg canvas, no display). None when no point has finished."""
    rows = comparison.summary()
    if not rows:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for method in comparison.config.methods:
        mine = [r for r in rows if r.method == method]
        if not mine:
            continue
        steps = np.array([r.step for r in mine])
        mean, std = np.array([r.mean for r in mine]), np.array([r.std for r in mine])
        seeds = max(len(r.per_seed) for r in mine)
        (curve,) = ax.plot(steps, mean, marker="o", label=f"{method} ({_count(seeds, 'seed')})")
        ax.fill_between(steps, mean - std, mean + std, color=curve.get_color(), alpha=0.2)
    config = comparison.config
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"eval return (mean ± std over seeds, {config.episodes} episodes each)")
    ax.set_title(f"{config.env_id}" + (" (interrupted)" if comparison.status != "done" else ""))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(comparison.plot_path, dpi=120)
    return comparison.plot_path


# ----------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints two)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(prog: str = PROG, description: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog,
        description=description
        or "Train world models (and SB3's SAC) side by side on one task, several seeds each; "
        "print a table of evaluation returns and wall times, write results.json, "
        "learning_curves.png and one TensorBoard run per method and seed.",
        epilog="Every other setting goes in a --config file by section, as for agent.train; "
        "[dynamics] applies to every world model, [dynamics.NAME] to world model NAME only.",
    )
    parser.add_argument(
        "--env",
        default=None,
        metavar="ENV_ID",
        help="gymnasium environment id with continuous "
        "actions (default: the config file's train.env_id, else Pendulum-v1)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=3,
        metavar="N",
        help="train every method on seeds 1..N (default: 3)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help="env steps of every run (default: "
        "the largest --at, else the config file's train.steps, else 5000)",
    )
    parser.add_argument(
        "--at",
        type=int,
        nargs="+",
        default=None,
        metavar="STEP",
        help="evaluate at these env "
        "steps, and at --steps (default: 1000 2500 5000 below --steps, and --steps)",
    )
    parser.add_argument(
        "--world-models",
        nargs="+",
        default=list(DEFAULT_WORLD_MODELS),
        metavar="NAME",
        help=f"world models to train: {', '.join(dynamics_names())} (default: "
        f"{' '.join(DEFAULT_WORLD_MODELS)})",
    )
    parser.add_argument(
        "--sac",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also train SB3's SAC with default settings as the model-free reference",
    )
    parser.add_argument(
        "--episodes",
        type=int,
        default=10,
        metavar="N",
        help="deterministic evaluation episodes at each point (default: 10)",
    )
    parser.add_argument(
        "--reference",
        default=None,
        metavar="METHOD",
        help="the method every other one is compared with seed by seed in the paired table "
        "(default: gru when compared, else the first method)",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output folder (default: runs/compare__{env}__{time})",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="JSON or TOML file of RunConfig overrides by section, as agent.train takes it",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> CompareConfig:
    """Flags over the --config file over the defaults."""
    overrides = load_config_file(args.config) if args.config else {}
    train = overrides.get("train", {}) if isinstance(overrides.get("train", {}), dict) else {}
    if args.steps is not None:
        steps = args.steps
    elif args.at:
        steps = max(args.at)
    else:
        steps = train.get("steps", TrainConfig.steps)
    return CompareConfig(
        env_id=args.env or train.get("env_id", TrainConfig.env_id),
        seeds=args.seeds,
        steps=steps,
        points=tuple(args.at or ()),
        world_models=tuple(args.world_models),
        sac=args.sac,
        episodes=args.episodes,
        overrides=overrides,
        reference=args.reference,
    )


def preflight(config: CompareConfig) -> None:
    """Build every world model's agent once (env, action space, device, model config) so that
    bad input fails before anything trains."""
    for name in config.world_models:
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
        if path.exists() and not path.is_dir():
            raise ConfigError(f"--out {out!r} is a file, not a folder")
        path.mkdir(parents=True, exist_ok=True)
        return path
    return _fresh_dir(Path("runs") / f"compare__{env_id.replace('/', '-')}__{int(time.time())}")


def run_from_args(
    args: argparse.Namespace, argv: list[str], prog: str = PROG
) -> tuple[int, Comparison | None]:
    """Validate, run, print the table; (exit code, the comparison or None on bad input)."""
    try:
        config = config_from_args(args)
        preflight(config)
        out = output_dir(args.out, config.env_id)
    except (ConfigError, EnvError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2, None
    except KeyboardInterrupt:
        return 130, None
    meta = {**run_metadata(argv), "command": [prog, *argv]}
    _report(
        f"{prog}: {', '.join(config.methods)} on {config.env_id}, seeds 1..{config.seeds}, "
        f"evaluations at {', '.join(map(str, config.points))} steps; output in {out}"
    )
    try:
        comparison = run_comparison(config, out, meta=meta)
    except KeyboardInterrupt:  # a second Ctrl-C while the results were written
        print(f"{prog}: interrupted; results so far in {out / 'results.json'}", file=sys.stderr)
        return 130, None
    print(format_table(comparison))
    print(f"\nresults: {comparison.results_path}")
    if comparison.plot_path.exists():
        print(f"learning curves: {comparison.plot_path}")
    print(f"TensorBoard: tensorboard --logdir {comparison.out}")
    if comparison.status == "interrupted":
        print(f"{prog}: interrupted; results.json holds every finished evaluation", file=sys.stderr)
        return 130, comparison
    return 0, comparison


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    code, _ = run_from_args(build_parser().parse_args(argv), argv)
    return code


if __name__ == "__main__":
    sys.exit(main())
