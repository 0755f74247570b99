"""`python -m agent.evaluate RUN_DIR [--episodes N] [--video] [--explore]`: run a saved agent.

Prints the mean and standard deviation of the return over N deterministic episodes (reset with
the fixed evaluation seeds eval_seed + k of the run's config, the ones training evaluated on).
`--explore` plans with the exploration noise training collects with instead, on the same
episodes: the gap between the two is the evaluation's, not the model's.
`--video` also records the first episode to RUN_DIR/videos/ (MP4 where imageio's ffmpeg plugin
is installed, else GIF) for envs that render rgb_array frames.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

from agent.cli import OneLineParser, out_of_range
from agent.core.agent import Agent
from agent.core.config import ConfigError, check_device
from agent.core.episodes import run_episodes
from agent.persistence.checkpoint import CheckpointError
from agent.persistence.runs import RunError, checkpoint_path, make_run_env, make_run_vector_env
from envs import EnvError

__all__ = ["main"]

PROG = "python -m agent.evaluate"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
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
        "--explore",
        action="store_true",
        help="add the planner's exploration noise, as training collects (default: deterministic)",
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
    problem = out_of_range("--episodes", args.episodes, 1) or out_of_range("--seed", args.seed, 0)
    if problem:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    run = Path(args.run)
    try:
        if args.device is not None:
            check_device(args.device)
        agent = Agent.load(checkpoint_path(run), device=args.device)
        env_id = agent.config.train.env_id
        seed = agent.config.train.eval_seed if args.seed is None else args.seed
        frames: list[np.ndarray] = []
        on_frame = None
        if args.video:
            env = make_run_env(agent.config, seed=None, render_mode="rgb_array")

            def on_frame(k: int, frame: np.ndarray) -> None:
                if k == 0 and frame is not None:
                    frames.append(np.asarray(frame))
        else:  # every episode in one batch (agent/core/episodes.py)
            env = make_run_vector_env(agent.config, args.episodes)
        returns = run_episodes(agent.policy(seed, args.explore), env, args.episodes, seed, on_frame)
        env.close()
    except (ConfigError, EnvError, CheckpointError, RunError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except gym.error.DependencyNotInstalled as err:  # rendering needs an optional package
        detail = str(err).strip().splitlines()[0]
        print(f"{PROG}: error: --video: {env_id} cannot render here ({detail})", file=sys.stderr)
        return 2
    print(
        f"{env_id}: return {returns.mean():.1f} ± {returns.std():.1f} over {args.episodes} "
        f"{'exploring' if args.explore else 'deterministic'} episodes "
        f"(seeds {seed}..{seed + args.episodes - 1})"
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
