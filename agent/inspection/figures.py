"""Figures of a trained geodesic run, drawn with matplotlib on the Agg canvas (no display):
`python -m agent.diagnose RUN_DIR --figures DIR` writes them as PNG files (each <= 200 KB),
and the Trainer (agent/core/loop.py) adds them to TensorBoard at the end of a run.

- `trajectories.png`: a few episodes of the replay buffer, encoded, on the Poincare disk (for d > 2
  the projection exp_0(V^T log_0 z) onto the first two principal directions of log_0 z,
  world_model/geodesic/head_figures.py), with the prototypes (macro entries) and the window entries
  (texture entries) sized by the attention they receive from the plotted states;
- `temperature.png`: node 68's picture, the temperature each head measurably used
  (sum s^2 / sum s l from its AttentionRecord) against |z| of the query, under the curve
  sqrt(d_k) / lambda(z);
- `gauge_wilson.png`: node 67 against the Wilson-line mode and segment count, re-run on the
  same states with the heads' lines changed (the run's own setting starred);
- `attention.png`: one state's attention weights per BAOAB head (B kick, A drift);
- `texture_leakage.png`: the attention mass per level, node 70 the macro queries' largest
  mass on texture;
- `chirality.png`: the chiral commitment c = Psi^dag Pi Psi / |Psi|^2 and the gate's relative
  change along an episode, per head, with the learned strength kappa;
- `nodes_over_training.png`: nodes 67-70 over training from the run's TensorBoard events.

Every figure function returns a :class:`Plotted`: the figure and the arrays it drew, so tests
check the pictures against the numbers they claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.core.protocols import InspectedAgent
from agent.inspection.figures_data import NODE_TAGS, SWEEP_STATES, FigureData, collect
from world_model.diagnostics import reports_nodes
from world_model.geodesic.head_figures import (
    AttentionData,
    ChiralityData,
    TemperatureData,
    TrajectoryData,
    WilsonData,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DPI",
    "MAX_BYTES",
    "Plotted",
    "draw_all",
    "trajectories_figure",
    "temperature_figure",
    "wilson_figure",
    "attention_figure",
    "leakage_figure",
    "chirality_figure",
    "nodes_figure",
    "save_png",
    "write_figures",
    "add_to_tensorboard",
]

DPI = 80
MAX_BYTES = 200_000
HEAD_LABELS = {"kick": "B kick (macro queries)", "drift": "A drift (texture queries)"}
NODE_TITLES = {
    67: "node 67 gauge invariance",
    68: "node 68 metric temperature",
    69: "node 69 chirality violation",
    70: "node 70 texture leakage",
}


@dataclass
class Plotted:
    """A drawn figure, its file stem and the arrays it plotted (name -> array)."""

    name: str
    figure: Figure
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def _figure(width: float = 6.0, height: float = 4.5, rows: int = 1, cols: int = 1):
    """A figure on matplotlib's Agg canvas and its axes (a list when rows * cols > 1)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    return fig, axes if rows * cols > 1 else axes[0]


def _sizes(values: np.ndarray, largest: float) -> np.ndarray:
    """Marker areas proportional to |values| (|value| = `largest` gets 250 pt^2; kernel ridge
    regression's weights can be negative)."""
    return 250.0 * np.abs(values) / largest if largest > 0 else np.zeros_like(values)


# --------------------------------------------------------------------------- figures


def trajectories_figure(data: TrajectoryData, title: str) -> Plotted:
    """Episodes on the unit disk; prototypes and window entries sized by attention received
    (each kind scaled to its own largest value, written in the legend)."""
    fig, ax = _figure(6.0, 6.2)
    out = Plotted("trajectories", fig)
    angle = np.linspace(0, 2 * np.pi, 256)
    ax.plot(np.cos(angle), np.sin(angle), color="k", lw=1)
    texture_top = max(float(np.abs(t).max(initial=0.0)) for t in data.texture_attention)
    for k, (xy, tex) in enumerate(zip(data.xy, data.texture_attention, strict=True)):
        (line,) = ax.plot(xy[:, 0], xy[:, 1], lw=1, marker=".", ms=3, label=f"episode {k + 1}")
        ax.plot(xy[:1, 0], xy[:1, 1], marker="o", ms=6, color=line.get_color(), mfc="none")
        size = _sizes(tex, texture_top)
        ax.scatter(xy[:, 0], xy[:, 1], s=size, facecolors="none", edgecolors=line.get_color(),
                   alpha=0.6, lw=0.8)  # fmt: skip
        out.arrays[f"xy/{k}"], out.arrays[f"texture_size/{k}"] = xy, size
    proto_top = float(np.abs(data.prototype_attention).max(initial=0.0))
    size = _sizes(data.prototype_attention, proto_top)
    ax.scatter(data.prototype_xy[:, 0], data.prototype_xy[:, 1], s=size, marker="D",
               color="k", alpha=0.7,
               label=f"prototypes (macro), largest {proto_top:.3g}")  # fmt: skip
    out.arrays["prototype_xy"], out.arrays["prototype_size"] = data.prototype_xy, size
    ax.scatter([], [], s=250, facecolors="none", edgecolors="0.4",
               label=f"window entries (texture), largest {texture_top:.3g}")  # fmt: skip
    ax.set_xlim(-1.05, 1.05)
    ax.set_ylim(-1.05, 1.05)
    ax.set_aspect("equal")
    heads = " and ".join(data.heads)
    ax.set_title(f"{title}\nlatent trajectories: {data.projection.caption}", fontsize=9)
    ax.set_xlabel(
        f"marker area ~ mean attention received per plotted state ({heads} heads),\n"
        "each kind scaled to its largest; open dot: episode start",
        fontsize=8,
    )
    ax.legend(fontsize=7, loc="upper right")
    return out


def temperature_figure(data: TemperatureData, title: str) -> Plotted:
    """Measured tau against |z| per head, with sqrt(d_k) / lambda(z)."""
    fig, ax = _figure()
    out = Plotted("temperature", fig)
    ax.plot(data.curve_r, data.curve_tau, color="k", lw=1.5,
            label=r"$\sqrt{d_k}/\lambda(z) = \sqrt{d_k}(1-|z|^2)/2$")  # fmt: skip
    out.arrays["curve_r"], out.arrays["curve_tau"] = data.curve_r, data.curve_tau
    for name, marker in (("kick", "o"), ("drift", "x")):
        if name in data.tau:
            ax.scatter(data.z_norm[name], data.tau[name], s=12, marker=marker, alpha=0.7,
                       label=f"{HEAD_LABELS[name]}: measured")  # fmt: skip
            out.arrays[f"z_norm/{name}"], out.arrays[f"tau/{name}"] = (
                data.z_norm[name],
                data.tau[name],
            )
    ax.set_xlabel("|z| of the query")
    ax.set_ylabel(r"$\tau$ = scores / logits (per query)")
    top = max([float(data.curve_tau.max())] + [float(t.max(initial=0)) for t in data.tau.values()])
    ax.set_ylim(0, 1.25 * top)  # room for the legend above the points
    ax.set_title(
        f"{title}\nnode 68: measured temperature (head option '{data.mode}', d_k = {data.d_k})",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return out


def wilson_figure(data: WilsonData, title: str) -> Plotted:
    """Node 67 against segments for path_ordered / magnus4, first_order / exp as levels."""
    fig, ax = _figure()
    out = Plotted("gauge_wilson", fig)
    floor = 1e-12  # log axis: exact zeros drawn at the floor (the arrays keep them)
    segments = np.array(data.segments, dtype=float)
    out.arrays["segments"] = segments
    for mode, values in data.node67.items():
        out.arrays[f"node67/{mode}"] = values
        shown = np.maximum(values, floor)
        if len(values) == len(segments) and len(values) > 1:
            ax.plot(segments, shown, marker="o", label=mode)
        else:
            ax.axhline(shown[0], ls="--", lw=1, color=f"C{2 + len(ax.lines) % 6}",
                       label=f"{mode} (no segments)")  # fmt: skip
    mode, count = data.trained
    if mode in data.node67:
        values = data.node67[mode]
        at = values[data.segments.index(count)] if len(values) > 1 else values[0]
        ax.scatter([count], [max(at, floor)], marker="*", s=200, color="k", zorder=3,
                   label=f"trained: {mode}, {count} segments")  # fmt: skip
    ax.axhline(data.threshold, color="r", ls=":", lw=1, label=f"threshold {data.threshold:g}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("segments of each Wilson line")
    ax.set_ylabel(r"node 67: max $|s - s_\Omega|$")
    ax.set_title(
        f"{title}\nnode 67 against the Wilson-line mode ({data.states} buffer states)", fontsize=9
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return out


def attention_figure(data: AttentionData, title: str) -> Plotted:
    """One state's weights per head over its entries (grey: masked)."""
    import matplotlib as mpl

    heads = list(data.weights)
    matrix = np.stack([data.weights[h] for h in heads])  # [H, N]
    n = matrix.shape[1]
    fig, ax = _figure(min(10.0, max(5.0, 0.35 * n + 2.5)), 1.4 + 0.8 * len(heads))
    cmap = mpl.colormaps["viridis"].with_extremes(bad="0.85")
    image = ax.imshow(np.ma.masked_invalid(matrix), aspect="auto", cmap=cmap, vmin=0.0)
    fig.colorbar(image, ax=ax, label="attention weight")
    ax.set_yticks(range(len(heads)), [HEAD_LABELS[h] for h in heads], fontsize=8)
    every = math.ceil(n / 40)  # at most ~40 labels; the window's are always shown
    ticks = [j for j in range(n) if data.levels[j] != 0 or j % every == 0]
    ax.set_xticks(ticks, [data.labels[j] for j in ticks], fontsize=7, rotation=90)
    macro = int((data.levels == 0).sum())
    if 0 < macro < len(data.labels):
        ax.axvline(macro - 0.5, color="w", lw=2)
    ax.set_xlabel("entries: prototypes P (macro), window t-k (texture, k steps back)")
    ax.set_title(
        f"{title}\nattention per BAOAB head at one state: episode {data.episode + 1}, "
        f"step {data.episode_step}",
        fontsize=9,
    )
    return Plotted("attention", fig, {"weights": matrix})


def leakage_figure(data: AttentionData, title: str) -> Plotted:
    """Mean (bars) and largest (markers) attention mass per level, per head."""
    fig, ax = _figure()
    out = Plotted("texture_leakage", fig)
    heads = list(data.mass)
    levels = np.arange(next(iter(data.mass.values())).shape[-1])
    width = 0.8 / len(heads)
    for k, head in enumerate(heads):
        mass = data.mass[head]  # [n, L]
        x = levels + (k - (len(heads) - 1) / 2) * width
        mean, top = mass.mean(0), mass.max(0)
        ax.bar(x, mean, width, label=f"{HEAD_LABELS[head]}: mean")
        ax.scatter(x, top, marker="_", s=300, color="k", zorder=3)
        out.arrays[f"mean/{head}"], out.arrays[f"max/{head}"] = mean, top
    ax.axhline(data.threshold, color="r", ls=":", lw=1, label="node 70 threshold e^-1")
    ax.set_xticks(levels, ["0 macro"] + [f"{lv} texture" for lv in levels[1:]])
    ax.set_xlabel("entry level")
    ax.set_ylabel("attention mass per query (bar: mean, -: max)")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{title}\nnode 70 texture leakage = {data.node70:.3g}", fontsize=9)
    ax.legend(fontsize=7)
    return out


def chirality_figure(data: ChiralityData, title: str) -> Plotted:
    """Commitment c and the gate's relative change along the last plotted episode."""
    fig, ax = _figure()
    out = Plotted("chirality", fig)
    for head, c in data.commitment.items():
        steps = np.arange(len(c))
        label = f"{HEAD_LABELS[head]}: c (kappa = {data.kappa[head]:.3g})"
        (line,) = ax.plot(steps, c, label=label)
        ax.plot(steps, data.change[head], ls="--", color=line.get_color(),
                label=f"{head}: |gate(Psi) - Psi| / |Psi|")  # fmt: skip
        degenerate = np.flatnonzero(data.degenerate[head])
        ax.scatter(degenerate, np.zeros(degenerate.size), marker="x", color=line.get_color())
        out.arrays[f"commitment/{head}"], out.arrays[f"change/{head}"] = c, data.change[head]
        out.arrays[f"degenerate/{head}"] = data.degenerate[head]
    ax.set_xlabel("step of the episode (x: degenerate projector, Pi = 0)")
    ax.set_ylabel(r"$c = \Psi^\dagger \Pi \Psi / |\Psi|^2$")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"{title}\nchiral commitment along the last plotted episode", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return out


def nodes_figure(series: dict[str, list[tuple[int, float]]], title: str) -> Plotted:
    """Nodes 67-70 over training (diagnostics/* scalars), each with its threshold."""
    fig, axes = _figure(8.0, 5.5, 2, 2)
    out = Plotted("nodes_over_training", fig)
    for ax, (node, tag) in zip(axes, NODE_TAGS.items(), strict=True):
        values = series.get(f"diagnostics/{tag}", [])
        ax.set_title(NODE_TITLES[node], fontsize=9)
        if not values:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
            continue
        steps = np.array([s for s, _ in values], dtype=float)
        y = np.array([v for _, v in values])
        ax.plot(steps, y, marker=".", ms=4)
        out.arrays[f"steps/{node}"], out.arrays[f"values/{node}"] = steps, y
        threshold = series.get(f"diagnostics/{tag}_threshold", [])
        if threshold:
            ax.axhline(threshold[-1][1], color="r", ls=":", lw=1, label="threshold")
            ax.legend(fontsize=7)
        if node != 70 and np.all(y[np.isfinite(y)] > 0):
            ax.set_yscale("log")
        ax.set_xlabel("env step", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: nodes 67-70 over training", fontsize=10)
    return out


# --------------------------------------------------------------------------- all of them


def draw_all(data: FigureData) -> list[Plotted]:
    """Every figure `data` has the numbers for."""
    out = []
    if data.trajectories is not None:
        out.append(trajectories_figure(data.trajectories, data.title))
    if data.temperature is not None:
        out.append(temperature_figure(data.temperature, data.title))
    if data.wilson is not None:
        out.append(wilson_figure(data.wilson, data.title))
    if data.attention is not None:
        out.append(attention_figure(data.attention, data.title))
        out.append(leakage_figure(data.attention, data.title))
    if data.chirality is not None:
        out.append(chirality_figure(data.chirality, data.title))
    if data.series:
        out.append(nodes_figure(data.series, data.title))
    return out


def save_png(fig: Figure, path: Path, max_bytes: int = MAX_BYTES) -> Path:
    """The figure as a PNG at DPI, redrawn at a lower resolution until it fits max_bytes."""
    dpi = DPI
    while True:
        fig.savefig(path, dpi=dpi)
        if path.stat().st_size <= max_bytes or dpi <= 20:
            return path
        dpi = int(dpi * math.sqrt(max_bytes / path.stat().st_size) * 0.95)


def _no_latent_note(agent: InspectedAgent) -> str:
    return (
        f"world model {agent.config.train.world_model!r} has no Poincare latent: "
        "no geometric figures"
    )


def write_figures(
    agent: InspectedAgent,
    run_dir: str | Path | None,
    out_dir: str | Path,
    states: int = SWEEP_STATES,
) -> tuple[list[Path], list[str], FigureData | None, list[Plotted]]:
    """The figures as PNG files in out_dir (created): (files written, notes on what was not
    drawn, the data, the plotted figures). A world model without a Poincare latent (the GRU)
    writes nothing and says so in one note."""
    if not reports_nodes(agent.model.dynamics):  # as collect decides, before the folder is made
        return [], [_no_latent_note(agent)], None, []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)  # before the work: a folder that cannot be, fails
    data = collect(agent, run_dir, states)
    assert data is not None
    plotted = draw_all(data)
    files = [save_png(p.figure, out / f"{p.name}.png") for p in plotted]
    return files, data.notes, data, plotted


def add_to_tensorboard(
    agent: InspectedAgent,
    writer: Any,
    step: int,
    run_dir: str | Path | None,
    states: int = SWEEP_STATES,
) -> list[str]:
    """The figures under `figures/NAME` of `writer` (a SummaryWriter) at `step`; the tags
    written ([] for a world model without a Poincare latent)."""
    data = collect(agent, run_dir, states)
    if data is None:
        return []
    tags = []
    for plotted in draw_all(data):
        tag = f"figures/{plotted.name}"
        writer.add_figure(tag, plotted.figure, global_step=step, close=True)
        tags.append(tag)
    return tags
