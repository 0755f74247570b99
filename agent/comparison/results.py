"""What a comparison holds: every run's evaluation points, the summary and paired rows computed
from them, and results.json (rewritten atomically after every evaluation)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.comparison.config import SAC, CompareConfig
from agent.comparison.stats import mean_or_none, paired_differences, standard_error
from agent.core.config import ConfigError
from agent.persistence.checkpoint import replace_atomically

__all__ = [
    "RESULTS_FORMAT",
    "PointResult",
    "MethodRun",
    "SummaryRow",
    "PairedRow",
    "Comparison",
    "read_config",
]

RESULTS_FORMAT = "geodesic-rl/compare/v1"


@dataclass
class PointResult:
    """One method's run evaluated at one point."""

    step: int
    """env steps trained"""
    returns: list[float]
    """return of each evaluation episode (seeds eval_seed + k)"""
    train_s: float
    """wall seconds of training to this step (without evaluation, checkpoints, diagnostics)"""
    train_cpu_s: float
    """CPU seconds of the process over the same stretch"""
    eval_s: float
    """wall seconds of this evaluation"""
    plan_ms: float | None = None
    """mean ms per planning call in training so far (None: SAC)"""
    update_ms: float | None = None
    """mean ms per gradient update in training so far (None: SAC)"""
    updates: int | None = None
    """gradient updates so far (None: SAC)"""
    open_loop_error: list[float] | None = None
    """the world model's normalised open-loop error at 1..50 steps on these evaluation
    episodes (agent/comparison/prediction.py; None: SAC, or episodes of <= 50 steps)"""

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))


@dataclass
class MethodRun:
    """One method trained on one seed."""

    method: str
    seed: int
    run_dir: str
    status: str = "running"
    """running, done or interrupted"""
    points: list[PointResult] = field(default_factory=list)

    def at(self, step: int) -> PointResult | None:
        return next((p for p in self.points if p.step == step), None)


@dataclass(frozen=True)
class SummaryRow:
    """One method at one point, over the seeds that reached it."""

    method: str
    step: int
    mean: float
    """mean over seeds of each seed's mean return"""
    std: float
    """standard deviation over seeds of each seed's mean return (0 with one seed)"""
    sem: float | None
    """standard error of `mean` over seeds, std(ddof=1) / sqrt(seeds) (None with one seed)"""
    episode_sem: float | None
    """standard error of a seed's mean return over its evaluation episodes, mean over seeds
    (None with one episode): how well the episodes pin each seed's number down"""
    per_seed: dict[int, float]
    train_s: float
    """training wall seconds to this step, mean over seeds"""
    ratio_to_sac: float | None
    """train_s over SAC's train_s at the same step (None: no SAC or SAC itself)"""
    plan_ms: float | None
    update_ms: float | None
    open_loop_error: list[float] | None = None
    """PointResult.open_loop_error, mean over the seeds that have it, per horizon"""


@dataclass(frozen=True)
class PairedRow:
    """One method against the reference at one point, seed by seed: both trained on the same
    seed and evaluated on the same episodes, so their difference is paired. Every difference is
    method minus reference (of each seed's mean return): positive means the method did better."""

    method: str
    reference: str
    step: int
    seeds: int
    """seeds that both methods reached this point with"""
    wins: int
    """seeds on which the method's mean return is higher than the reference's"""
    mean_diff: float
    median_diff: float
    ci_low: float | None
    """percentile-bootstrap 95% interval of the mean difference over seeds (None with one
    seed): an interval that holds 0 says these seeds do not tell the two methods apart"""
    ci_high: float | None


def _mean_curve(curves: list[list[float] | None]) -> list[float] | None:
    """The mean [H] of the curves that exist (None if none does)."""
    present = [c for c in curves if c is not None]
    return np.mean(np.asarray(present), axis=0).tolist() if present else None


@dataclass
class Comparison:
    """Every run of a comparison, finished or not, and where they are written."""

    config: CompareConfig
    out: Path
    runs: list[MethodRun] = field(default_factory=list)
    status: str = "running"
    """running, done or interrupted"""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def results_path(self) -> Path:
        return self.out / "results.json"

    @property
    def plot_path(self) -> Path:
        return self.out / "learning_curves.png"

    def points_of(self, method: str, step: int) -> list[tuple[int, PointResult]]:
        return [
            (run.seed, point)
            for run in self.runs
            if run.method == method and (point := run.at(step)) is not None
        ]

    def summary(self) -> list[SummaryRow]:
        rows = []
        for method in self.config.methods:
            for step in self.config.points:
                reached = self.points_of(method, step)
                if not reached:
                    continue
                per_seed = {seed: point.mean for seed, point in reached}
                means = np.array(list(per_seed.values()))  # [seeds]
                train_s = float(np.mean([point.train_s for _, point in reached]))
                sac = self.points_of(SAC, step) if method != SAC else []
                sac_s = float(np.mean([point.train_s for _, point in sac])) if sac else None
                rows.append(
                    SummaryRow(
                        method=method,
                        step=step,
                        mean=float(means.mean()),
                        std=float(np.std(means)),
                        sem=standard_error(means),
                        episode_sem=mean_or_none([standard_error(p.returns) for _, p in reached]),
                        per_seed=per_seed,
                        train_s=train_s,
                        ratio_to_sac=train_s / sac_s if sac_s else None,
                        plan_ms=mean_or_none([point.plan_ms for _, point in reached]),
                        update_ms=mean_or_none([point.update_ms for _, point in reached]),
                        open_loop_error=_mean_curve([p.open_loop_error for _, p in reached]),
                    )
                )
        return rows

    def paired(self) -> list[PairedRow]:
        """Every other method against the reference, at every point, over the seeds both
        reached it with."""
        reference = str(self.config.reference)
        theirs = {  # step -> {seed: the reference's mean return}
            step: {seed: point.mean for seed, point in self.points_of(reference, step)}
            for step in self.config.points
        }
        rows = []
        for method in self.config.methods:
            if method == reference:
                continue
            for step in self.config.points:
                diffs = [
                    point.mean - theirs[step][seed]
                    for seed, point in self.points_of(method, step)
                    if seed in theirs[step]
                ]
                if not diffs:
                    continue
                mean, median, low, high = paired_differences(diffs)
                rows.append(
                    PairedRow(
                        method=method,
                        reference=reference,
                        step=step,
                        seeds=len(diffs),
                        wins=sum(d > 0 for d in diffs),
                        mean_diff=mean,
                        median_diff=median,
                        ci_low=low,
                        ci_high=high,
                    )
                )
        return rows

    def to_dict(self) -> dict[str, Any]:
        summary = [
            {**asdict(row), "per_seed": {str(s): m for s, m in row.per_seed.items()}}
            for row in self.summary()
        ]
        runs = [
            {**asdict(run), "points": [{**asdict(p), "mean": p.mean} for p in run.points]}
            for run in self.runs
        ]
        return {
            "format": RESULTS_FORMAT,
            "status": self.status,
            **self.config.to_dict(),
            "summary": summary,
            "paired": [asdict(row) for row in self.paired()],
            "runs": runs,
            "meta": self.meta,
        }

    def save(self) -> Path:
        """Write results.json atomically (a Ctrl-C during the write keeps the previous one)."""
        text = json.dumps(self.to_dict(), indent=1)
        return replace_atomically(self.results_path, lambda tmp: tmp.write_text(text))


def read_config(out: Path) -> CompareConfig:
    """The settings of the comparison whose results.json is in `out` (to resume it); a
    ConfigError (one line) if there is none or the file is not a comparison's."""
    path = out / "results.json"
    if not path.is_file():
        raise ConfigError(f"--resume {str(out)!r}: no comparison there (no results.json)")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"--resume {str(out)!r}: results.json is not valid ({err})") from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise ConfigError(f"--resume {str(out)!r}: results.json is not a comparison's")
    return CompareConfig.from_dict(data)
