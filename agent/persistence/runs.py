"""Run folders: their layout, metadata and the run's env, shared by the `python -m agent.*`
commands, the training loop and the benchmarks (library code; no command imports another).

A run folder `{logdir}/{env}__{world_model}__{seed}__{time}/` holds `config.json` (the resolved
config), `meta.json` (`run_metadata`: package versions, git commit, command line), the
TensorBoard events and `CHECKPOINT_NAME` (written atomically by agent.persistence.checkpoint).
"""

from __future__ import annotations

import functools
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import gymnasium as gym

from agent.core.config import RunConfig
from envs import make_env
from envs.scaling import scale_spaces

__all__ = [
    "CHECKPOINT_NAME",
    "PACKAGES",
    "RunError",
    "checkpoint_path",
    "fresh_dir",
    "make_run_dir",
    "make_run_env",
    "make_run_vector_env",
    "run_dir_name",
    "run_metadata",
]

CHECKPOINT_NAME = "checkpoint.pt"
PACKAGES = (
    "torch",
    "numpy",
    "gymnasium",
    "stable-baselines3",
    "geoopt",
    "tensorboard",
    "tqdm",
    "geodesic-rl",
)


class RunError(ValueError):
    """A run folder that cannot be used (one line)."""


def make_run_env(
    config: RunConfig, seed: int | None, render_mode: str | None = None, *, scaled: bool = True
) -> gym.Env:
    """The run's env: envs.make_env with the run's id and episode limit, seen through
    envs.scaling.scale_spaces (actions in [-1, 1], fixed observation scaling) unless
    `scaled` is False (the task's own units, as Agent takes an env and predict speaks)."""
    tc = config.train
    env = make_env(
        tc.env_id,
        seed=seed,
        render_mode=render_mode,
        max_episode_steps=tc.max_episode_steps,
        action_repeat=tc.action_repeat,
    )
    return scale_spaces(env, seed) if scaled else env


def make_run_vector_env(config: RunConfig, num_envs: int) -> gym.vector.SyncVectorEnv:
    """`num_envs` copies of the run's scaled env (make_run_env) as one gymnasium vector env
    for evaluation waves (agent.core.episodes.run_episodes); in-process (SyncVectorEnv): the
    policy's batched planning, not the envs' stepping, is what costs."""
    return gym.vector.SyncVectorEnv(
        [functools.partial(make_run_env, config, None) for _ in range(num_envs)]
    )


def checkpoint_path(path: str | Path) -> Path:
    """A run folder's checkpoint, or `path` itself if it is a checkpoint file; RunError if
    nothing is there."""
    path = Path(path)
    if not path.exists():
        raise RunError(f"no run folder at {str(path)!r}")
    return path / CHECKPOINT_NAME if path.is_dir() else path


def fresh_dir(path: Path) -> Path:
    """Create `path`, or path-1, path-2, ... if it exists, and return it (mkdir is the test:
    two runs started in the same second get distinct folders)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    candidate, k = path, 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            candidate, k = path.with_name(f"{path.name}-{k}"), k + 1


def run_dir_name(env_id: str, method: str, seed: int) -> str:
    """{env}__{method}__{seed}__{time}: the name of a run folder."""
    return f"{env_id.replace('/', '-')}__{method}__{seed}__{int(time.time())}"


def make_run_dir(config: RunConfig) -> Path:
    """A new, empty run folder under config.train.logdir (created; distinct even for two runs
    started in the same second)."""
    tc = config.train
    return fresh_dir(Path(tc.logdir) / run_dir_name(tc.env_id, tc.world_model, tc.seed))


def _git_commit() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = (
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            != ""
        )
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}


def run_metadata(prog: str, argv: list[str]) -> dict[str, Any]:
    """meta.json's content: package versions, git commit, platform, the command line."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "versions": versions,
        "git": _git_commit(),
        "platform": platform.platform(),
        "command": [prog, *argv],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
