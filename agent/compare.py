"""`python -m agent.compare`: world models side by side, and model-free SAC, on one task.

    python -m agent.compare --env Pendulum-v1 --seeds 3          # geodesic vs GRU vs SAC
    python -m agent.compare --seeds 1 --steps 2000 --at 500 1000 --no-sac
    python -m agent.compare --world-models gru --config tuned.toml --out runs/tuned
    python -m agent.compare --resume runs/tuned      # continue an interrupted comparison
    tensorboard --logdir runs/compare__Pendulum-v1__1760000000

What is trained, measured and written (results.json, learning_curves.png, one TensorBoard run
per method and seed under OUT/runs/): agent/comparison/__init__.py. This module is the command
only: flags, then agent.comparison's calls.

A `--config` file applies by section, as `agent.train` applies it; [dynamics] keys go to every
world model, a sub-table [dynamics.NAME] to world model NAME only (their keys differ). Bad input:
one line on stderr, exit 2. Ctrl-C: the run in progress stops at its next step, results.json
keeps everything finished, exit 130. `--resume OUT` continues the comparison in OUT with its
own settings (from OUT/results.json): finished runs are kept, an agent's run continues from its
last checkpoint, SAC's from its last evaluation point.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.cli import OneLineParser, as_config_error
from agent.comparison.config import DEFAULT_WORLD_MODELS, CompareConfig
from agent.comparison.report import format_table
from agent.comparison.results import Comparison, read_config
from agent.comparison.runner import output_dir, preflight, run_comparison, write_progress
from agent.config import ConfigError, TrainConfig, load_config_file
from agent.runs import run_metadata
from envs import EnvError
from world_model.registry import dynamics_names

__all__ = ["PROG", "build_parser", "config_from_args", "run_from_args", "main"]

PROG = "python -m agent.compare"


def build_parser(prog: str = PROG, description: str | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(
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
    parser.add_argument("--seeds", type=int, default=3, metavar="N", help="train every method on "
                        "seeds 1..N (default: 3)")  # fmt: skip
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
        "steps, and at --steps (default: every train.eval_every of the --config file, else "
        "1000 2500 5000 below --steps, and --steps)",
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
    parser.add_argument("--episodes", type=int, default=10, metavar="N", help="deterministic "
                        "evaluation episodes at each point (default: 10)")  # fmt: skip
    parser.add_argument(
        "--reference",
        default=None,
        metavar="METHOD",
        help="the method every other one is compared with seed by seed in the paired table "
        "(default: gru when compared, else the first method)",
    )
    parser.add_argument("--out", metavar="DIR",
                        help="output folder (default: runs/compare__{env}__{time})")  # fmt: skip
    parser.add_argument("--config", metavar="FILE", help="JSON or TOML file of RunConfig "
                        "overrides by section, as agent.train takes it")  # fmt: skip
    parser.add_argument(
        "--resume",
        default=None,
        metavar="OUT",
        help="continue the comparison in OUT with its own settings (every other flag must be "
        "left out): finished runs are kept, the others continue from their last checkpoint",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> CompareConfig:
    """Flags over the --config file over the defaults."""
    overrides = load_config_file(args.config) if args.config is not None else {}
    train = overrides.get("train", {}) if isinstance(overrides.get("train", {}), dict) else {}
    if args.steps is not None:
        steps = args.steps
    elif args.at:
        steps = max(args.at)
    else:
        steps = train.get("steps", TrainConfig.steps)
    points = tuple(args.at or ())
    every = train.get("eval_every", 0)
    if not points and isinstance(every, int) and not isinstance(every, bool) and every > 0:
        points = tuple(range(every, steps + 1, every))  # the config file's evaluation interval
    return CompareConfig(
        env_id=args.env if args.env is not None else train.get("env_id", TrainConfig.env_id),
        seeds=args.seeds,
        steps=steps,
        points=points,
        world_models=tuple(args.world_models),
        sac=args.sac,
        episodes=args.episodes,
        overrides=overrides,
        reference=args.reference,
    )


def resumed_config(args: argparse.Namespace, argv: list[str]) -> tuple[CompareConfig, Path]:
    """The settings of the comparison in --resume OUT, and OUT; ConfigError if another flag
    tries to change them."""
    others = [a for a in argv if a.startswith("--") and a.split("=")[0] != "--resume"]
    if others:
        raise ConfigError(f"--resume takes the comparison's own settings; leave out {others[0]}")
    return read_config(Path(args.resume)), Path(args.resume)


def run_from_args(
    args: argparse.Namespace, argv: list[str], prog: str = PROG
) -> tuple[int, Comparison | None]:
    """Validate, run, print the table; (exit code, the comparison or None on bad input)."""
    try:
        if args.resume is not None:
            config, out = resumed_config(args, argv)
        else:
            config, out = config_from_args(args), None
        with as_config_error():  # a component's own check at construction, --out under a file
            preflight(config)
            out = out or output_dir(args.out, config.env_id)
    except (ConfigError, EnvError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2, None
    except KeyboardInterrupt:
        return 130, None
    meta = run_metadata(prog, argv)
    write_progress(
        f"{prog}: {', '.join(config.methods)} on {config.env_id}, seeds 1..{config.seeds}, "
        f"evaluations at {', '.join(map(str, config.points))} steps; output in {out}"
    )
    try:
        comparison = run_comparison(config, out, meta=meta, resume=args.resume is not None)
    except KeyboardInterrupt:  # a second Ctrl-C while the results were written
        print(f"{prog}: interrupted; results so far in {out / 'results.json'}", file=sys.stderr)
        return 130, None
    except OSError as err:  # a full disk, a read-only folder (agent.checkpoint.RunWriteError)
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1, None
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
