"""What a run left behind, read without disturbing it: start states from its saved replay buffer
(drawn with a generator of their own, so the run's sampling stream is left alone) and the scalar
series of its TensorBoard events. agent/inspection/inspection.py (the diagnose report) and
agent/inspection/figures_data.py (its figures) read runs through these.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from agent.core.protocols import InspectedAgent

__all__ = ["EVAL_TAGS", "finite_or_none", "read_events", "read_scalar_series", "sample_batch"]

EVAL_TAGS = ("eval/mean_return", "eval/std_return")


def finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def sample_batch(agent: InspectedAgent, states: int, horizon: int = 1) -> Any:
    """`states` start states from the replay buffer with the dynamics' history window and the
    next `horizon` steps, drawn with a generator of their own (the run's saved sampling stream
    is left alone); None when the buffer is empty."""
    buffer = agent.buffer
    if buffer.size < 1:
        return None
    saved, buffer.rng = buffer.rng, np.random.default_rng(agent.config.train.seed + 4)
    try:
        return agent.sample_batch(states, horizon)
    finally:
        buffer.rng = saved


def _scalar_events(run_dir: Path) -> tuple[dict[str, list[Any]], str | None]:
    """Every scalar series of the run's TensorBoard events ({tag: events with .step, .value})
    and None, or ({}, why they could not be read)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not any(run_dir.glob("events.out.tfevents.*")):
        return {}, f"no TensorBoard events in {str(run_dir)!r}"
    guidance = {"scalars": 0, "histograms": 1, "images": 1, "tensors": 1, "audio": 1}
    try:
        events = EventAccumulator(str(run_dir), size_guidance=guidance).Reload()
        return {tag: events.Scalars(tag) for tag in events.Tags()["scalars"]}, None
    except Exception as err:  # a damaged event file raises whatever its reader hits
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return {}, f"TensorBoard events unreadable ({detail[:160]})"


def read_scalar_series(run_dir: Path, prefix: str = "") -> dict[str, list[tuple[int, float]]]:
    """Each scalar tag of the run's TensorBoard events that starts with `prefix`, as its whole
    series [(step, value)] in logged order; {} when there are no readable events."""
    series, _ = _scalar_events(Path(run_dir))
    return {
        tag: [(e.step, float(e.value)) for e in values]
        for tag, values in sorted(series.items())
        if tag.startswith(prefix)
    }


def read_events(run_dir: Path) -> dict[str, Any]:
    """From the run's TensorBoard events: each diagnostics/* scalar's first and last (step,
    value), and the evaluation history [(step, mean, std)]."""
    series, error = _scalar_events(run_dir)
    if error is not None:
        return {"error": error, "trends": {}, "eval": []}
    trends = {
        tag.removeprefix("diagnostics/"): {
            "first_step": values[0].step,
            "first": finite_or_none(values[0].value),
            "last_step": values[-1].step,
            "last": finite_or_none(values[-1].value),
        }
        for tag, values in sorted(series.items())
        if tag.startswith("diagnostics/") and values
    }
    stds = {e.step: e.value for e in series.get(EVAL_TAGS[1], [])}
    history = [
        {"step": e.step, "mean": finite_or_none(e.value), "std": stds.get(e.step)}
        for e in series.get(EVAL_TAGS[0], [])
    ]
    return {"error": None, "trends": trends, "eval": history}
