"""Starting a training run for `python -m agent.train`: a new run folder, or a saved run resumed,
on one process or as one rank of a data-parallel run (agent/core/distributed.py), where rank 0 names
the folder and writes its files and every rank builds the same trainer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from agent.cli import as_config_error
from agent.core.agent import Agent
from agent.core.config import RunConfig
from agent.core.distributed import DistContext
from agent.core.loop import Trainer
from agent.persistence.runs import make_run_dir

__all__ = ["resume_run", "start_run"]


def start_run(
    config: RunConfig, meta: dict[str, Any], dist: DistContext | None
) -> tuple[Trainer, Path]:
    """A new run folder (config.json, meta.json, TensorBoard) and its trainer."""
    main_rank = dist is None or dist.is_main
    with as_config_error():  # a component's own check at construction, a --logdir file
        agent = Agent(None, config, dist=dist)
        run_dir = make_run_dir(config) if main_rank else None
    if dist is not None:  # one run folder, named by rank 0
        run_dir = Path(dist.broadcast_object(None if run_dir is None else str(run_dir)))
        meta = {**meta, "world_size": dist.world_size}
    trainer = Trainer(agent, run_dir, progress=main_rank)
    if main_rank:
        (run_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
        (run_dir / "meta.json").write_text(json.dumps(meta, indent=2))
        trainer.writer.add_text("config", config.markdown())
        print(f"run folder: {run_dir}", file=sys.stderr)
        _say_compiling(agent)
    return trainer, run_dir


def _say_compiling(agent: Agent) -> None:
    if agent.compiles:
        print(
            "compiling the world model's steps at the first plan and update: minutes on a "
            "machine's first run, then read from inductor's cache (--train.compile off: eager)",
            file=sys.stderr,
        )


def resume_run(
    run_dir: str | Path,
    steps: int | None,
    device: str | None,
    meta: dict[str, Any],
    dist: DistContext | None,
) -> tuple[Trainer, Path]:
    """The saved run in `run_dir` continued (to `steps` env steps, if given), its meta.json
    extended with this start's metadata."""
    main_rank = dist is None or dist.is_main
    overrides = {"train": {"steps": steps}} if steps is not None else {}
    trainer = Agent.resume(
        run_dir, device=device, progress=main_rank, overrides=overrides, dist=dist
    )
    run_dir = Path(run_dir)
    if main_rank:
        meta_path = run_dir / "meta.json"
        saved = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        if dist is not None:
            meta = {**meta, "world_size": dist.world_size}
        saved.setdefault("resumed", []).append(meta)
        meta_path.write_text(json.dumps(saved, indent=2))
        print(f"resuming {run_dir} at step {trainer.agent.num_timesteps}", file=sys.stderr)
        _say_compiling(trainer.agent)
    return trainer, run_dir
