"""The comparison's tables (Markdown: one row per method and point, then the paired table) and
its figure (learning_curves.png)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from agent.cli import markdown_table
from agent.comparison.published import PUBLISHED_ENV_STEPS, published_for
from agent.comparison.results import Comparison, SummaryRow
from envs.dmc import default_action_repeat

__all__ = [
    "count",
    "format_table",
    "learning_curves_figure",
    "plot_learning_curves",
    "plot_prediction_error",
]


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:{spec}}{suffix}"


def format_table(comparison: Comparison) -> str:
    """The comparison as one Markdown table, with a header line saying what the numbers are."""
    config = comparison.config
    first, last = config.train.eval_seed, config.train.eval_seed + config.episodes - 1
    header = (
        f"{config.env_id}: {count(config.seeds, 'seed')} x {config.episodes} deterministic "
        f"evaluation episodes (seeds {first}..{last}); return: mean ± standard error over seeds "
        "of each seed's mean; episode s.e.: the standard error of one seed's mean over its "
        "episodes (mean over seeds); "
        "training s: wall time to the point without evaluation (mean over seeds); open-loop "
        "err: the world model's normalised RMS error at 1, 10 and 50 steps on the evaluation "
        "episodes (1 = predicting each coordinate's mean)"
    )
    columns = [
        "method",
        "env steps",
        "return",
        "per seed",
        "episode s.e.",
        "training s",
        "x SAC",
        "plan ms",
        "update ms",
        "open-loop err 1/10/50",
    ]
    rows = [
        [
            row.method,
            str(row.step),
            f"{row.mean:.1f}" + ("" if row.sem is None else f" ± {row.sem:.1f}"),
            ", ".join(f"{v:.0f}" for v in row.per_seed.values()),
            _fmt(row.episode_sem, ".1f"),
            f"{row.train_s:.1f}",
            _fmt(row.ratio_to_sac, ".2f", "x"),
            _fmt(row.plan_ms, ".1f"),
            _fmt(row.update_ms, ".1f"),
            _curve_cells(row.open_loop_error),
        ]
        for row in comparison.summary()
    ]
    if not rows:
        return f"{header}\n(no evaluation finished)"
    return "\n".join([header, "", *markdown_table(columns, rows), *_paired_table(comparison)])


def _curve_cells(curve: list[float] | None) -> str:
    """The open-loop error at 1, 10 and 50 steps (as far as the curve reaches)."""
    if not curve:
        return "—"
    return " / ".join(f"{curve[h - 1]:.2f}" for h in (1, 10, 50) if h <= len(curve))


def _paired_table(comparison: Comparison) -> list[str]:
    """The paired table's lines (none when nothing can be paired)."""
    paired = comparison.paired()
    if not paired:
        return []
    reference = comparison.config.reference
    header = (
        f"Paired by seed against {reference} (same seeds, same evaluation episodes): "
        f"difference = method - {reference} of each seed's mean return, > 0 is better; "
        "95% CI: bootstrap over seeds of the mean difference"
    )
    columns = ["method", "env steps", "better on", "mean diff", "median diff", "95% CI"]
    rows = [
        [
            row.method,
            str(row.step),
            f"{row.wins}/{row.seeds} seeds",
            f"{row.mean_diff:+.1f}",
            f"{row.median_diff:+.1f}",
            "—" if row.ci_low is None else f"[{row.ci_low:+.1f}, {row.ci_high:+.1f}]",
        ]
        for row in paired
    ]
    return ["", header, "", *markdown_table(columns, rows)]


def _figure():
    """A figure with one axes on matplotlib's Agg canvas (no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _by_method(comparison: Comparison, rows: list[SummaryRow]):
    """(method, its rows) for every compared method that has rows, in the config's order."""
    for method in comparison.config.methods:
        mine = [r for r in rows if r.method == method]
        if mine:
            yield method, mine


def plot_learning_curves(comparison: Comparison) -> Path | None:
    """learning_curves.png (learning_curves_figure); None when no point has finished."""
    fig = learning_curves_figure(comparison)
    if fig is None:
        return None
    fig.savefig(comparison.plot_path, dpi=120)
    return comparison.plot_path


def learning_curves_figure(comparison: Comparison):
    """Each method's mean return over seeds against steps, with a +- standard-error band over
    seeds, and the published results at 100k environment steps for the DMC tasks
    (agent/comparison/published.py); None when no point has finished."""
    rows = comparison.summary()
    if not rows:
        return None
    fig, ax = _figure()
    for method, mine in _by_method(comparison, rows):
        steps = np.array([r.step for r in mine])
        mean = np.array([r.mean for r in mine])
        band = np.array([r.sem or 0.0 for r in mine])
        seeds = max(len(r.per_seed) for r in mine)
        (curve,) = ax.plot(steps, mean, marker="o", label=f"{method} ({count(seeds, 'seed')})")
        ax.fill_between(steps, mean - band, mean + band, color=curve.get_color(), alpha=0.2)
    config = comparison.config
    repeat = config.train.action_repeat or default_action_repeat(config.env_id)
    for k, pub in enumerate(published_for(config.env_id)):  # at 100k environment steps
        x = PUBLISHED_ENV_STEPS / repeat
        marker = ("*", "D", "s", "^", "v", "P")[k % 6]
        ax.scatter([x], [pub.mean], marker=marker, s=80, color="k", zorder=3,
                   label=f"{pub.method} (published, mean of {pub.n_seeds} seeds)")  # fmt: skip
        if pub.seeds:
            ax.scatter([x] * len(pub.seeds), pub.seeds, marker="_", s=120, color="k", zorder=3)
    ax.set_xlabel("env steps" if repeat == 1 else f"decisions (x {repeat} = environment steps)")
    ax.set_ylabel(f"eval return (mean ± s.e. over seeds, {config.episodes} episodes each)")
    ax.set_title(f"{config.env_id}" + (" (interrupted)" if comparison.status != "done" else ""))
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def plot_prediction_error(comparison: Comparison) -> Path | None:
    """prediction_error.png: each world model's open-loop error against horizon at the last
    point it reached (mean over seeds). None when no world model has a curve."""
    rows = [r for r in comparison.summary() if r.open_loop_error]
    if not rows:
        return None
    fig, ax = _figure()
    for method, mine in _by_method(comparison, rows):
        last = max(mine, key=lambda r: r.step)
        curve = np.asarray(last.open_loop_error)
        seeds = count(len(last.per_seed), "seed")
        ax.plot(np.arange(1, curve.size + 1), curve, label=f"{method} @ {last.step} ({seeds})")
    ax.set_xlabel("open-loop steps")
    ax.set_ylabel("normalised RMS error (1 = each coordinate's mean)")
    ax.set_title(f"{comparison.config.env_id}: world models on the evaluation episodes")
    ax.grid(alpha=0.3)
    ax.legend()
    path = comparison.out / "prediction_error.png"
    fig.savefig(path, dpi=120)
    return path
