"""`python -m agent.train`: train an agent, log to TensorBoard, checkpoint, resume.

    python -m agent.train                                   # GRU world model on Pendulum-v1
    python -m agent.train --env Pendulum-v1 --world-model gru --steps 10000 --seed 1
    python -m agent.train --world-model geodesic --planner.horizon 4 --dynamics.head.wilson exp
    python -m agent.train --config my.toml --steps 5000     # file overrides < flags
    python -m agent.train --resume runs/Pendulum-v1__gru__1__1760000000 [--steps 20000]
    python -m agent.train --world-model geodesic --help     # every field of that world model
    python -m agent.train --world-model geodesic --screening off --wilson none   # ablations

Every config field has a flag `--{section}.{field}` generated from the dataclasses (agent/cli.py);
the short flags (agent/train_args.py) are aliases of the most used ones. Each run writes
runs/{env}__{world_model}__{seed}__{time}/ (agent/persistence/runs.py). Exit codes: 130 Ctrl-C
(checkpoint written), 2 bad input (one line), 3 diverged (a non-finite number: agent/core/guard.py;
last good checkpoint kept).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from agent.cli import config_overrides
from agent.core.config import ConfigError, TrainConfig
from agent.core.distributed import DistContext, close_process_group, init_from_env
from agent.core.guard import NonFiniteError
from agent.core.loop import Trainer
from agent.launch import resume_run, start_run
from agent.persistence.checkpoint import CheckpointError
from agent.persistence.runs import run_metadata
from agent.train_args import (
    ALIASES,
    PROG,
    build_parser,
    config_from_args,
    run_device,
    world_model_of,
)
from envs import EnvError

__all__ = ["ALIASES", "main", "build_parser", "config_from_args"]


def _start(
    args: argparse.Namespace, argv: list[str], dist: DistContext | None
) -> tuple[Trainer, Path]:
    if args.resume is not None:
        fixed = [*(f for f in ALIASES if f not in ("steps", "device")), "config"]
        given = [f"--{f.replace('_', '-')}" for f in fixed if getattr(args, f) is not None]
        given += [f"--{section}.*" for section in config_overrides(args)]
        if given:
            raise ConfigError(
                f"--resume continues a run with its saved config; {', '.join(given)} cannot be "
                "given with it (only --steps, --device)"
            )
        if args.device is not None:  # checked as the config checks it ("" too)
            TrainConfig(device=args.device)
        return resume_run(args.resume, args.steps, args.device, run_metadata(PROG, argv), dist)
    config = config_from_args(args)
    return start_run(config, run_metadata(PROG, argv), dist)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(world_model_of(argv)).parse_args(argv)
    prog, dist, finished = PROG, None, False
    try:
        dist = init_from_env(run_device(args))
        if dist is not None and not dist.is_main:
            prog = f"{PROG} [rank {dist.rank}]"
        trainer, run_dir = _start(args, argv, dist)
        start = time.perf_counter()
        status = trainer.run(trainer.agent.config.train.steps)
        elapsed = time.perf_counter() - start
        trainer.close()
        finished = True
    except (ConfigError, EnvError, CheckpointError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except NonFiniteError as err:
        print(f"{prog}: training diverged: {err}", file=sys.stderr)
        return 3
    except OSError as err:  # a full disk, a read-only folder (checkpoint.RunWriteError)
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted twice: the last checkpoint is intact", file=sys.stderr)
        return 130
    finally:
        close_process_group(together=finished)
    if dist is not None and not dist.is_main:  # rank 0 reports the run
        return 130 if status == "interrupted" else 0
    agent = trainer.agent
    line = f"{status} at step {agent.num_timesteps} after {elapsed:.0f} s"
    if dist is not None:
        line += f" on {dist.world_size} ranks"
    if trainer.last_eval is not None:
        line += f"; eval return {trainer.last_eval[0]:.1f} +- {trainer.last_eval[1]:.1f}"
    print(f"{line}; checkpoint {run_dir / 'checkpoint.pt'}", file=sys.stderr)
    if status == "interrupted":
        print(f"resume with: {PROG} --resume {run_dir}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
