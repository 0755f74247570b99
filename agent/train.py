"""`python -m agent.train`: train an agent, log to TensorBoard, checkpoint, resume.

    python -m agent.train                                   # GRU world model on Pendulum-v1
    python -m agent.train --env Pendulum-v1 --world-model gru --steps 10000 --seed 1
    python -m agent.train --config my.toml --steps 5000     # file overrides < flags
    python -m agent.train --resume runs/Pendulum-v1__gru__1__1760000000 [--steps 20000]
    tensorboard --logdir runs

Each run writes runs/{env}__{world_model}__{seed}__{time}/ holding config.json (the full
resolved config), meta.json (package versions, git commit, command line), the TensorBoard
events and checkpoint.pt (written atomically). Ctrl-C writes a checkpoint and exits (130);
bad input prints one line on stderr and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from agent.checkpoint import CheckpointError
from agent.config import ConfigError, RunConfig, TrainConfig, field_docs, load_config_file
from envs import SUPPORTED_ENVS, EnvError
from world_model.registry import dynamics_names

__all__ = ["main", "build_parser", "config_from_args", "make_run_dir"]

PROG = "python -m agent.train"
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

# flag -> TrainConfig field
FLAGS = {
    "env": "env_id",
    "world_model": "world_model",
    "steps": "steps",
    "seed": "seed",
    "logdir": "logdir",
    "device": "device",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints two)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    docs = field_docs(TrainConfig)
    defaults = TrainConfig()
    parser = _Parser(
        prog=PROG,
        description="Train a model-based agent (world model + MPPI planner) on a gymnasium "
        "task; logs to TensorBoard under --logdir. With no flags: the GRU world model on "
        "Pendulum-v1.",
        epilog="Every other setting (planner, losses, model sizes, evaluation, checkpoints) goes "
        "in a --config file with sections [train], [agent], [loss], [planner], [model], "
        "[dynamics]; a run folder's config.json shows them all.",
    )

    def add(flag: str, field: str, **kw):
        default = getattr(defaults, field)
        parser.add_argument(flag, default=None, help=f"{docs[field]} (default: {default})", **kw)

    parser.add_argument(
        "--env",
        default=None,
        metavar="ENV_ID",
        help=f"{docs['env_id']}: {', '.join(SUPPORTED_ENVS)} (default: {defaults.env_id})",
    )
    parser.add_argument(
        "--world-model",
        default=None,
        metavar="NAME",
        help=f"{docs['world_model']}: {', '.join(dynamics_names())} (default: "
        f"{defaults.world_model})",
    )
    parser.add_argument(
        "--attention",
        default=None,
        metavar="KERNEL",
        help="attention kernel of the geodesic world model's heads: softmax (covariant "
        "softmax, seed 003), inverse_distance (HIDA, seed 000) or krr (kernel ridge "
        "regression, seed 001); sets [dynamics] attention (default: softmax)",
    )
    add("--steps", "steps", type=int, metavar="N")
    add("--seed", "seed", type=int, metavar="S")
    add("--logdir", "logdir", metavar="DIR")
    add("--device", "device", metavar="DEVICE")
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
    return parser


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Defaults < --config FILE < explicit flags. A --world-model flag is known before the
    file is read, so the file's [dynamics] section is checked against that world model."""
    data: dict[str, Any] = load_config_file(args.config) if args.config else {}
    if args.world_model is not None and isinstance(data, dict):
        train = data.get("train", {})
        if isinstance(train, dict):
            data = {**data, "train": {**train, "world_model": args.world_model}}
    config = RunConfig.from_dict(data)
    flags = {
        field: getattr(args, flag)
        for flag, field in FLAGS.items()
        if getattr(args, flag) is not None
    }
    if flags:
        config = RunConfig.from_dict({"train": flags}, base=config)
    if args.attention is not None:
        if "attention" not in {f.name for f in dataclasses.fields(config.dynamics)}:
            raise ConfigError(
                f"--attention applies to the geodesic world model, not {config.train.world_model!r}"
            )
        config = RunConfig.from_dict({"dynamics": {"attention": args.attention}}, base=config)
    return config


def make_run_dir(config: RunConfig) -> Path:
    tc = config.train
    stem = f"{tc.env_id.replace('/', '-')}__{tc.world_model}__{tc.seed}__{int(time.time())}"
    base = Path(tc.logdir)
    base.mkdir(parents=True, exist_ok=True)
    run_dir, k = base / stem, 1
    while True:  # mkdir is the test: two runs started in the same second get distinct folders
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            run_dir, k = base / f"{stem}-{k}", k + 1


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


def run_metadata(argv: list[str]) -> dict[str, Any]:
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
        "command": [PROG, *argv],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _config_markdown(config: RunConfig) -> str:
    rows = ["| key | value | meaning |", "| --- | --- | --- |"]
    rows += [f"| {k} | {v} | {d} |" for k, v, d in config.table()]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    from agent.agent import Agent
    from agent.loop import Trainer

    try:
        if args.resume is not None:
            given = [
                f"--{flag.replace('_', '-')}"
                for flag in ("env", "world_model", "seed", "logdir", "config", "attention")
                if getattr(args, flag) is not None
            ]
            if given:
                raise ConfigError(
                    f"--resume continues a run with its saved config; "
                    f"{', '.join(given)} cannot be given with it (only --steps, "
                    "--device)"
                )
            overrides = {"train": {"steps": args.steps}} if args.steps is not None else None
            trainer = Trainer.resume(
                args.resume, device=args.device, progress=True, overrides=overrides
            )
            run_dir = Path(args.resume)
            meta_path = run_dir / "meta.json"
            meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
            meta.setdefault("resumed", []).append(run_metadata(argv))
            meta_path.write_text(json.dumps(meta, indent=2))
            print(f"resuming {run_dir} at step {trainer.agent.num_timesteps}", file=sys.stderr)
        else:
            config = config_from_args(args)
            agent = Agent(None, config)
            run_dir = make_run_dir(config)
            (run_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
            (run_dir / "meta.json").write_text(json.dumps(run_metadata(argv), indent=2))
            trainer = Trainer(agent, run_dir, progress=True)
            trainer.writer.add_text("config", _config_markdown(config))
            print(f"run folder: {run_dir}", file=sys.stderr)
        steps = trainer.agent.config.train.steps
        start = time.perf_counter()
        status = trainer.run(steps)
        elapsed = time.perf_counter() - start
        trainer.close()
    except (ConfigError, EnvError, CheckpointError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"{PROG}: interrupted twice: stopped without writing a new checkpoint (the last "
            "one is intact)",
            file=sys.stderr,
        )
        return 130

    agent = trainer.agent
    line = f"{status} at step {agent.num_timesteps} after {elapsed:.0f} s"
    if trainer.last_eval is not None:
        line += f"; eval return {trainer.last_eval[0]:.1f} +- {trainer.last_eval[1]:.1f}"
    print(f"{line}; checkpoint {run_dir / 'checkpoint.pt'}", file=sys.stderr)
    if status == "interrupted":
        print(f"resume with: {PROG} --resume {run_dir}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
