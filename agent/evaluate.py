"""`python -m agent.evaluate RUN_DIR [--episodes N] [--video]`: run a saved agent.

Prints the mean and standard deviation of the return over N deterministic episodes (reset with
the fixed evaluation seeds eval_seed + k of the run's config, the ones training evaluated on).
`--video` also records the first episode to RUN_DIR/videos/ (MP4 where imageio's ffmpeg plugin
is installed, else GIF) for envs that render rgb_array frames.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import gymnasium as gym
import numpy as np
import torch

from agent.agent import Agent, make_run_env
from agent.checkpoint import CheckpointError
from agent.config import ConfigError
from agent.planner import Planner
from envs import EnvError

__all__ = ["run_episodes", "main"]

PROG = "python -m agent.evaluate"


def run_episodes(
    agent: Agent,
    env: gym.Env,
    episodes: int,
    seed: int,
    on_frame: Callable[[int, np.ndarray], None] | None = None,
    on_step: Callable[[int, np.ndarray, np.ndarray, float, np.ndarray], None] | None = None,
) -> np.ndarray:
    """Returns [episodes] of deterministic episodes reset with seeds seed + k, planned with a
    fresh planner and a generator seeded by `seed` (the agent's own streams are untouched).
    `on_frame(k, frame)` receives env.render() after every reset and step;
    `on_step(k, obs, action, reward, next_obs)` every transition of episode k."""
    planner = Planner(agent.config.planner, agent.action_dim, agent.discount)
    generator = torch.Generator(device=agent.device).manual_seed(seed)
    returns = np.zeros(episodes)
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        planner.reset()
        if on_frame is not None:
            on_frame(k, env.render())
        done = False
        while not done:
            action = agent.act(obs, explore=False, planner=planner, generator=generator)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            if on_step is not None:
                on_step(k, obs, action, float(reward), next_obs)
            obs = next_obs
            returns[k] += float(reward)
            done = bool(terminated or truncated)
            if on_frame is not None:
                on_frame(k, env.render())
    return returns


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Evaluate a trained agent: mean +- std return over "
        "deterministic episodes on the run's fixed evaluation seeds.",
    )
    parser.add_argument(
        "run",
        metavar="RUN_DIR",
        help="a run folder of agent.train (or a checkpoint / Agent.save file)",
    )
    parser.add_argument(
        "--episodes", type=int, default=10, metavar="N", help="episodes to run (default: 10)"
    )
    parser.add_argument(
        "--video",
        action="store_true",
        help="record the first episode to RUN_DIR/videos/ (MP4 or GIF)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="S",
        help="first episode seed (default: the run's train.eval_seed)",
    )
    parser.add_argument(
        "--device",
        default=None,
        metavar="DEVICE",
        help="auto, cpu, cuda or cuda:N (default: the run's)",
    )
    return parser


def _video_path(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    has_ffmpeg = importlib.util.find_spec("imageio_ffmpeg") is not None
    return folder / ("episode.mp4" if has_ffmpeg else "episode.gif")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.episodes < 1:
        print(f"{PROG}: error: --episodes must be >= 1, got {args.episodes}", file=sys.stderr)
        return 2
    run = Path(args.run)
    checkpoint = run / "checkpoint.pt" if run.is_dir() else run
    try:
        agent = Agent.load(checkpoint, device=args.device)
        env_id = agent.config.train.env_id
        seed = agent.config.train.eval_seed if args.seed is None else args.seed
        frames: list[np.ndarray] = []
        on_frame = None
        if args.video:
            env = make_run_env(agent.config, seed=None, render_mode="rgb_array")

            def on_frame(k: int, frame: np.ndarray) -> None:
                if k == 0 and frame is not None:
                    frames.append(np.asarray(frame))
        else:
            env = make_run_env(agent.config, seed=None)
        returns = run_episodes(agent, env, args.episodes, seed, on_frame)
        env.close()
    except (ConfigError, EnvError, CheckpointError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except gym.error.DependencyNotInstalled as err:  # rendering needs an optional package
        detail = str(err).strip().splitlines()[0]
        print(f"{PROG}: error: --video: {env_id} cannot render here ({detail})", file=sys.stderr)
        return 2
    print(
        f"{env_id}: return {returns.mean():.1f} ± {returns.std():.1f} over {args.episodes} "
        f"episodes (seeds {seed}..{seed + args.episodes - 1})"
    )
    if args.video:
        import imageio.v2 as imageio

        path = _video_path((run if run.is_dir() else run.parent) / "videos")
        fps = int(agent.env.metadata.get("render_fps", 30) or 30)
        if path.suffix == ".gif":
            imageio.mimsave(path, frames, duration=1000 / fps, loop=0)
        else:
            imageio.mimsave(path, frames, fps=fps)
        print(f"video: {path} ({len(frames)} frames)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
