"""Comparisons run apart, read as one: `agent.compare --merge A B ... --out OUT`.

A comparison that takes more than one machine or session (DeepMind Control: a run per method and
seed takes hours on 2 cores) is run in pieces, each its own `agent.compare` over some methods
(`--world-models`, `--no-sac`) and some seeds (`--first-seed K --seeds N`). Merging reads each
piece's results.json (a file, or the folder holding it) and writes one comparison in OUT:
results.json, the tables and the figures, as if one command had trained every run. Pieces must
agree on everything that makes their numbers comparable (task, steps, evaluation points and
episodes, the config overrides); a method and seed found in two pieces is refused rather than
picked. Unfinished runs come along with the points they reached (the summary counts the seeds
that reached each point); a run that reached none (stopped before its first evaluation) is left
out. The merged comparison is 'done' only when every run in it is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.comparison.ablations import split_methods
from agent.comparison.config import SAC, CompareConfig
from agent.comparison.results import RESULTS_FORMAT, Comparison, MethodRun, PointResult
from agent.core.config import ConfigError

__all__ = ["MUST_AGREE", "load_comparison", "merge_comparisons"]

MUST_AGREE = ("env_id", "steps", "points", "episodes", "overrides")
"""CompareConfig fields every merged piece must share (the evaluation seeds follow from them)"""


def _results_path(source: str | Path) -> Path:
    path = Path(source)
    return path / "results.json" if path.is_dir() else path


def load_comparison(source: str | Path) -> Comparison:
    """The comparison in a results.json (or the folder holding one), every run with its points;
    a ConfigError (one line) if it is missing or not a comparison's."""
    path = _results_path(source)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"--merge {str(source)!r}: no results.json there") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"--merge {str(source)!r}: cannot read it ({err})") from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise ConfigError(f"--merge {str(source)!r}: not a comparison's results.json")
    config = CompareConfig.from_dict(data)
    try:
        runs = [_run(entry) for entry in data["runs"]]
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"--merge {str(source)!r}: a run record is not valid ({err})") from None
    status = str(data.get("status", "interrupted"))
    return Comparison(config, path.parent, runs=runs, status=status, meta=data.get("meta", {}))


def _run(entry: dict[str, Any]) -> MethodRun:
    points = [  # results.json adds each point's mean; PointResult computes it
        PointResult(**{k: v for k, v in point.items() if k != "mean"}) for point in entry["points"]
    ]
    return MethodRun(entry["method"], int(entry["seed"]), entry["run_dir"], entry["status"], points)


def _describe(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)[:120]


def merge_comparisons(sources: Sequence[str | Path], out: str | Path) -> Comparison:
    """One comparison in `out` of every run of `sources` (module docstring); not yet saved."""
    if len(sources) < 1:
        raise ConfigError("--merge needs at least one results.json")
    pieces = [(str(source), load_comparison(source)) for source in sources]
    first_name, first = pieces[0]
    runs: dict[tuple[str, int], tuple[str, MethodRun]] = {}
    for name, piece in pieces:
        for field in MUST_AGREE:
            mine, theirs = getattr(piece.config, field), getattr(first.config, field)
            if mine != theirs:
                raise ConfigError(
                    f"--merge: {name} and {first_name} differ in {field} "
                    f"({_describe(mine)} against {_describe(theirs)}); they cannot be merged"
                )
        for run in (r for r in piece.runs if r.points):
            key = (run.method, run.seed)
            if key in runs:
                raise ConfigError(
                    f"--merge: {run.method} seed {run.seed} is in both {runs[key][0]} and "
                    f"{name}; leave one out"
                )
            runs[key] = (name, run)
    if not runs:
        raise ConfigError(f"--merge: no run in {', '.join(n for n, _ in pieces)}")
    methods = list(dict.fromkeys(method for method, _ in runs))
    world_models, ablations = split_methods(methods, SAC)
    seeds = [seed for _, seed in runs]
    base = first.config
    reference = base.reference if base.reference in methods else None
    config = CompareConfig(
        env_id=base.env_id,
        seeds=max(seeds) - min(seeds) + 1,
        first_seed=min(seeds),
        steps=base.steps,
        points=base.points,
        world_models=world_models,
        sac=SAC in methods,
        episodes=base.episodes,
        overrides=base.overrides,
        reference=reference,
        ablations=ablations,
    )
    ordered = [runs[key][1] for key in config.run_order if key in runs]
    done = all(run.status == "done" for run in ordered)
    meta = {"merged_from": [{"results": name, "meta": piece.meta} for name, piece in pieces]}
    return Comparison(config, Path(out), ordered, "done" if done else "interrupted", meta)
