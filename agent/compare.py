"""`python -m agent.compare`: world models side by side, and model-free SAC, on one task.

    python -m agent.compare --env Pendulum-v1 --seeds 3          # geodesic vs GRU vs SAC
    python -m agent.compare --seeds 1 --steps 2000 --at 500 1000 --no-sac
    python -m agent.compare --world-models gru --config tuned.toml --out runs/tuned
    python -m agent.compare --ablations --seeds 3    # the full geodesic model and its ablations
    python -m agent.compare --ablations screening-off chirality-off --config tuned.toml
    python -m agent.compare --resume runs/tuned      # continue an interrupted comparison
    python -m agent.compare --merge runs/a runs/b --out runs/ab  # pieces run apart, one table

What is trained, measured and written (results.json, learning_curves.png, one TensorBoard run
per method and seed under OUT/runs/): agent/comparison/__init__.py. This module is the command
only: flags, then agent.comparison's calls. A `--config` file applies by section, as
`agent.train` applies it; [dynamics.NAME] to world model NAME only. Bad input: one line on
stderr, exit 2. Ctrl-C: the run in progress stops at its next step, results.json keeps
everything finished, exit 130. `--resume OUT` continues the comparison in OUT with its own
settings; `--merge` reads comparisons run apart (agent/comparison/merge.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.cli import OneLineParser, as_config_error
from agent.comparison.ablations import ABLATIONS, FULL_MODEL, ablations_help
from agent.comparison.config import DEFAULT_WORLD_MODELS, CompareConfig
from agent.comparison.merge import merge_comparisons
from agent.comparison.report import format_table, plot_learning_curves, plot_prediction_error
from agent.comparison.results import Comparison, read_config
from agent.comparison.runner import output_dir, preflight, run_comparison, write_progress
from agent.core.config import ConfigError, TrainConfig, load_config_file
from agent.persistence.runs import run_metadata
from envs import EnvError
from world_model.registry import dynamics_names

__all__ = ["PROG", "build_parser", "config_from_args", "merged", "run_from_args", "main"]

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
    add = parser.add_argument
    add("--env", default=None, metavar="ENV_ID", help="gymnasium environment id with continuous "
        "actions (default: the config file's train.env_id, else Pendulum-v1)")  # fmt: skip
    add("--seeds", type=int, default=3, metavar="N", help="train every method on N seeds "
        "(default: 3)")  # fmt: skip
    add("--first-seed", type=int, default=1, metavar="K", help="the first of the seeds: "
        "K..K+N-1 (default: 1)")  # fmt: skip
    add("--steps", type=int, default=None, metavar="N", help="env steps of every run (default: "
        "the largest --at, else the config file's train.steps, else 5000)")  # fmt: skip
    add("--at", type=int, nargs="+", default=None, metavar="STEP", help="evaluate at these env "
        "steps, and at --steps (default: every train.eval_every of the --config file, else "
        "1000 2500 5000 below --steps, and --steps)")  # fmt: skip
    add("--world-models", nargs="*", default=None, metavar="NAME",
        help=f"world models to train: {', '.join(dynamics_names())} (default: "
        f"{' '.join(DEFAULT_WORLD_MODELS)}, {FULL_MODEL} alone with --ablations; none named: "
        "SAC alone)")  # fmt: skip
    add("--sac", action=argparse.BooleanOptionalAction, default=None,
        help="also train SB3's SAC with default settings as the model-free reference "
        "(default: yes, no with --ablations)")  # fmt: skip
    add("--ablations", nargs="*", default=None, metavar="NAME", help=ablations_help())
    add("--episodes", type=int, default=10, metavar="N", help="deterministic evaluation "
        "episodes at each point (default: 10)")  # fmt: skip
    add("--reference", default=None, metavar="METHOD", help="the method every other one is "
        "compared with seed by seed in the paired table (default: the full geodesic model with "
        "--ablations, else gru when compared, else the first method)")  # fmt: skip
    add("--out", metavar="DIR", help="output folder (default: runs/compare__{env}__{time})")
    add("--config", metavar="FILE", help="JSON or TOML file of RunConfig overrides by section, "
        "as agent.train takes it")  # fmt: skip
    add("--resume", default=None, metavar="OUT", help="continue the comparison in OUT with its "
        "own settings (every other flag must be left out): finished runs are kept, the others "
        "continue from their last checkpoint")  # fmt: skip
    add("--merge", nargs="+", metavar="FILE", help="write one comparison (in --out) of the runs "
        "of these results.json files or folders, run apart on the same settings; every flag but "
        "--out must be left out")  # fmt: skip
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
    ablations = None if args.ablations is None else tuple(args.ablations or ABLATIONS)
    default_models = DEFAULT_WORLD_MODELS if ablations is None else (FULL_MODEL,)
    return CompareConfig(
        env_id=args.env if args.env is not None else train.get("env_id", TrainConfig.env_id),
        seeds=args.seeds,
        first_seed=args.first_seed,
        steps=steps,
        points=points,
        world_models=tuple(default_models if args.world_models is None else args.world_models),
        sac=args.sac if args.sac is not None else ablations is None,
        episodes=args.episodes,
        overrides=overrides,
        reference=args.reference,
        ablations=ablations or (),
    )


def _alone(flag: str, argv: list[str], allowed: tuple[str, ...] = ()) -> None:
    """ConfigError if a flag other than `flag` (and `allowed`) is given."""
    others = [a for a in argv if a.startswith("--") and a.split("=")[0] not in (flag, *allowed)]
    if others:
        raise ConfigError(f"{flag} takes the comparisons' own settings; leave out {others[0]}")


def merged(args: argparse.Namespace, argv: list[str], prog: str = PROG) -> int:
    """--merge: write, print and plot one comparison of the given pieces; the exit code."""
    try:
        _alone("--merge", argv, ("--out",))
        with as_config_error():  # every piece read before anything is written
            comparison = merge_comparisons(args.merge, out=Path())
            comparison.out = output_dir(args.out, comparison.config.env_id)
        comparison.save()
    except ConfigError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    plot_learning_curves(comparison)
    plot_prediction_error(comparison)
    print(f"{format_table(comparison)}\n\nresults: {comparison.results_path}")
    return 0


def run_from_args(
    args: argparse.Namespace, argv: list[str], prog: str = PROG
) -> tuple[int, Comparison | None]:
    """Validate, run, print the table; (exit code, the comparison or None on bad input)."""
    try:
        if args.resume is not None:
            _alone("--resume", argv)
            config, out = read_config(Path(args.resume)), Path(args.resume)
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
        f"{prog}: {', '.join(config.methods)} on {config.env_id}, seeds "
        f"{config.seed_list[0]}..{config.seed_list[-1]}, "
        f"evaluations at {', '.join(map(str, config.points))} steps; output in {out}"
    )
    try:
        comparison = run_comparison(config, out, meta=meta, resume=args.resume is not None)
    except KeyboardInterrupt:  # a second Ctrl-C while the results were written
        print(f"{prog}: interrupted; results so far in {out / 'results.json'}", file=sys.stderr)
        return 130, None
    except OSError as err:  # a full disk, a read-only folder (checkpoint.RunWriteError)
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
    args = build_parser().parse_args(argv)
    if args.merge is not None:
        return merged(args, argv)
    code, _ = run_from_args(args, argv)
    return code


if __name__ == "__main__":
    sys.exit(main())
