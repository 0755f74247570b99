"""The command line of `python -m agent.train`: its short flags (aliases of config fields, and
the ablation switches' words), the parser, and the RunConfig the flags and --config FILE build.
agent/train.py runs what they describe."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agent.cli import (
    OneLineParser,
    add_config_flags,
    config_overrides,
    dotted_table,
    field_doc,
)
from agent.core.config import SECTIONS, RunConfig, TrainConfig, load_config_file, merge_tables
from envs import SUPPORTED_ENVS
from world_model.registry import dynamics_names, get_dynamics

__all__ = [
    "ALIASES",
    "PROG",
    "SWITCHES",
    "build_parser",
    "config_from_args",
    "run_device",
    "world_model_of",
]

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
           "thermostat": "dynamics.integrator.learned_thermostat",
           "curl": "dynamics.integrator.curl"}  # fmt: skip
# the words of the switches whose field is a bool, and the value each sets (any other: exit 2)
SWITCHES = {"screening": {"on": True, "off": False}, "chirality": {"on": True, "off": False},
            "thermostat": {"exact": False, "learned": True},
            "curl": {"on": True, "off": False}}  # fmt: skip
ALIAS_TYPES = {"steps": int, "seed": int, "memory_capacity": int, "pool_size": int, "route_k": int,
               "num_envs": int}  # fmt: skip
METAVARS = {"env": "ENV_ID", "world_model": "NAME", "steps": "N", "seed": "S", "logdir": "DIR",
            "device": "DEVICE", "attention": "KERNEL", "memory": "OPERATOR", "memory_capacity": "C",
            "routing": "ROUTING", "pool_size": "P", "route_k": "K", "num_envs": "K",
            "wilson": "MODE", "temperature": "metric|constant"}  # fmt: skip


def world_model_of(argv: list[str]) -> str | None:
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


def run_device(args: argparse.Namespace) -> str:
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
