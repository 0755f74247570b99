"""`python -m agent.train`: train an agent, log to TensorBoard, checkpoint, resume.

    python -m agent.train                                   # GRU world model on Pendulum-v1
    python -m agent.train --env Pendulum-v1 --world-model gru --steps 10000 --seed 1
    python -m agent.train --world-model geodesic --planner.horizon 4 --dynamics.head.wilson exp
    python -m agent.train --config my.toml --steps 5000     # file overrides < flags
    python -m agent.train --resume runs/Pendulum-v1__gru__1__1760000000 [--steps 20000]
    python -m agent.train --world-model geodesic --help     # every field of that world model
    python -m agent.train --world-model geodesic --screening off --wilson none   # ablations

Every config field has a flag `--{section}.{field}` generated from the dataclasses
(agent/cli.py); the short flags below are aliases of the most used ones. Each run writes
runs/{env}__{world_model}__{seed}__{time}/ (agent/runs.py). Exit codes: 130 Ctrl-C (checkpoint
written), 2 bad input (one line), 3 diverged (a non-finite number: agent/guard.py; last good
checkpoint kept).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from agent.checkpoint import CheckpointError
from agent.cli import (
    OneLineParser,
    add_config_flags,
    config_overrides,
    dotted_table,
    field_doc,
    merge_tables,
)
from agent.config import SECTIONS, ConfigError, RunConfig, TrainConfig, load_config_file
from agent.distributed import DistContext, close_process_group, init_from_env
from agent.guard import NonFiniteError
from agent.launch import resume_run, start_run
from agent.loop import Trainer
from agent.runs import run_metadata
from envs import SUPPORTED_ENVS, EnvError
from world_model.registry import dynamics_names, get_dynamics

__all__ = ["ALIASES", "main", "build_parser", "config_from_args"]

PROG = "python -m agent.train"
# short flag -> the config field it sets (the generated flag --{section}.{field} also works)
ALIASES = {"env": "train.env_id", "world_model": "train.world_model", "steps": "train.steps",
           "seed": "train.seed", "logdir": "train.logdir", "device": "train.device",
           "attention": "dynamics.head.kernel", "memory": "dynamics.context.memory",
           "memory_capacity": "dynamics.context.memory_capacity",
           "routing": "dynamics.context.routing", "pool_size": "dynamics.context.pool_capacity",
           "route_k": "dynamics.context.route_k", "num_envs": "train.num_envs",
           # the seed's components, switched for ablations (README.md, "Ablations")
           "wilson": "dynamics.head.wilson", "temperature": "dynamics.head.temperature",
           "screening": "dynamics.head.screening", "chirality": "dynamics.context.value_gradient",
           "thermostat": "dynamics.integrator.learned_thermostat"}  # fmt: skip
# the words of the switches whose field is a bool, and the value each sets (any other: exit 2)
SWITCHES = {"screening": {"on": True, "off": False}, "chirality": {"on": True, "off": False},
            "thermostat": {"exact": False, "learned": True}}  # fmt: skip
ALIAS_TYPES = {"steps": int, "seed": int, "memory_capacity": int, "pool_size": int, "route_k": int,
               "num_envs": int}  # fmt: skip
METAVARS = {"env": "ENV_ID", "world_model": "NAME", "steps": "N", "seed": "S", "logdir": "DIR",
            "device": "DEVICE", "attention": "KERNEL", "memory": "OPERATOR", "memory_capacity": "C",
            "routing": "ROUTING", "pool_size": "P", "route_k": "K", "num_envs": "K",
            "wilson": "MODE", "temperature": "metric|constant"}  # fmt: skip


def _world_model_of(argv: list[str]) -> str | None:
    """The world model named by --world-model / --train.world_model in argv, if any."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--world-model", "--train.world_model", dest="world_model", default=None)
    return pre.parse_known_args(argv)[0].world_model


def build_parser(world_model: str | None = None) -> argparse.ArgumentParser:
    """The parser, with the [dynamics] flags of `world_model` (default: train.world_model's
    default; an unknown name leaves them out, and the config reports it)."""
    defaults = TrainConfig()
    name = world_model or defaults.world_model
    sections = dict(SECTIONS)
    try:
        sections["dynamics"] = get_dynamics(name).config_cls
    except ValueError:
        pass
    parser = OneLineParser(
        prog=PROG,
        usage=f"{PROG} [--env ENV_ID] [--world-model NAME] [--steps N] [--seed S] "
        "[--resume RUN_DIR] [--config FILE] [--SECTION.FIELD VALUE ...] [-h]",
        description="Train a model-based agent (world model + MPPI planner) on a gymnasium "
        "task; logs to TensorBoard under --logdir. With no flags: the GRU world model on "
        "Pendulum-v1.",
        epilog=f"Config flags are listed for world model {name!r}; "
        f"`--world-model NAME --help` lists another's ({', '.join(dynamics_names())}). "
        "Precedence: defaults < --config FILE < flags.",
    )
    for flag, path in ALIASES.items():
        doc = field_doc(sections, path)
        choices = {"env": SUPPORTED_ENVS, "world_model": dynamics_names()}.get(flag)
        more = f": {', '.join(choices)}" if choices else ""
        parser.add_argument(
            f"--{flag.replace('_', '-')}",
            dest=flag,
            default=None,
            type=ALIAS_TYPES.get(flag, str),
            choices=SWITCHES.get(flag),
            metavar=METAVARS.get(flag) or "|".join(SWITCHES[flag]),
            help=f"{doc}{more} (sets --{path})",
        )
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue the run saved in RUN_DIR (its checkpoint.pt and config); "
        "only --steps (to extend it) and --device may be given with it",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="JSON or TOML file of config overrides by section, applied before the flags",
    )
    add_config_flags(parser, sections)
    return parser


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Defaults < --config FILE < generated flags < short flags. The world model is known
    before the file is read, so the file's [dynamics] section is checked against it."""
    data: dict[str, Any] = load_config_file(args.config) if args.config is not None else {}
    flags = config_overrides(args)
    for flag, path in ALIASES.items():
        if (value := getattr(args, flag, None)) is not None:
            value = SWITCHES[flag][value] if flag in SWITCHES else value  # a switch's word
            flags = merge_tables(flags, dotted_table(path, value))
    world_model = flags.get("train", {}).get("world_model")
    if world_model is not None and isinstance(data.get("train", {}), dict):
        data = merge_tables(data, {"train": {"world_model": world_model}})
    config = RunConfig.from_dict(data)
    return RunConfig.from_dict(flags, base=config) if flags else config


def _start(
    args: argparse.Namespace, argv: list[str], dist: DistContext | None
) -> tuple[Trainer, Path]:
    if args.resume is not None:
        fixed = [*(f for f in ALIASES if f not in ("steps", "device", "num_envs")), "config"]
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


def _run_device(args: argparse.Namespace) -> str:
    """The device this start trains on (--device, else the resumed run's saved config, else the
    new run's config), known before torchrun's process group is joined on it."""
    if args.device is not None:
        return args.device
    if args.resume is not None:
        try:
            saved = json.loads((Path(args.resume) / "config.json").read_text())
            return str(saved["train"]["device"])
        except (OSError, ValueError, KeyError, TypeError):
            return TrainConfig().device  # Agent.resume reports an unreadable run
    return config_from_args(args).train.device


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_world_model_of(argv)).parse_args(argv)
    prog, dist = PROG, None
    try:
        dist = init_from_env(_run_device(args))
        if dist is not None and not dist.is_main:
            prog = f"{PROG} [rank {dist.rank}]"
        trainer, run_dir = _start(args, argv, dist)
        start = time.perf_counter()
        status = trainer.run(trainer.agent.config.train.steps)
        elapsed = time.perf_counter() - start
        trainer.close()
    except (ConfigError, EnvError, CheckpointError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except NonFiniteError as err:
        print(f"{prog}: training diverged: {err}", file=sys.stderr)
        return 3
    except OSError as err:  # a full disk, a read-only folder (agent.checkpoint.RunWriteError)
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted twice: the last checkpoint is intact", file=sys.stderr)
        return 130
    finally:
        close_process_group()
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
