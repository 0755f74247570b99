"""The inspection report of agent/inspection/inspection.py as text tables
(`python -m agent.diagnose`)."""

from __future__ import annotations

from typing import Any

from agent.cli import markdown_table
from agent.inspection.inspection import DISTRIBUTIONS, SCALAR_LABELS

__all__ = ["format_figures", "format_report"]


def _num(value: float | None) -> str:
    if value is None:
        return "nan"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 or value == 0 else f"{value:.3e}"


def _geometric_lines(geo: dict[str, Any], states: int) -> list[str]:
    where = f"{states} states from the replay buffer" if states else "queries at the prototypes"
    rows = [
        [
            str(n["node"]),
            n["name"],
            _num(n["value"]),
            _num(n["threshold"]),
            "OK" if n["passed"] else "WARN",
        ]
        for n in geo["nodes"]
    ]
    lines = [f"seed 003 diagnostic nodes ({where})", ""]
    lines += markdown_table(["node", "check", "value", "threshold", "status"], rows)
    lines += [f"  node {n}: not run ({why})" for n, why in geo["nodes_not_run"].items()]
    lines += [f"  ! {n['warning']}" for n in geo["nodes"] if n["warning"]]
    lines += ["", "scalar diagnostics", ""]
    lines += markdown_table(
        ["quantity", "value"],
        [[SCALAR_LABELS.get(k, k), _num(v)] for k, v in geo["scalars"].items()],
    )
    lines += ["", f"distributions over the {states or 'prototype'} states", ""]
    lines += markdown_table(
        ["quantity", "min", "median", "max"],
        [
            [DISTRIBUTIONS.get(k, k), _num(d["min"]), _num(d["median"]), _num(d["max"])]
            for k, d in geo["distributions"].items()
        ],
    )
    return lines


def _events_lines(report: dict[str, Any]) -> list[str]:
    lines = ["", "trend over training (TensorBoard diagnostics/*)", ""]
    if report["error"]:
        lines.append(f"  {report['error']}")
    elif not report["trends"]:
        lines.append("  no diagnostics/* scalars logged")
    else:
        lines += markdown_table(
            ["scalar", "first", "at step", "last", "at step"],
            [
                [tag, _num(t["first"]), str(t["first_step"]), _num(t["last"]), str(t["last_step"])]
                for tag, t in report["trends"].items()
            ],
        )
    lines += ["", "evaluation history (eval/mean_return)", ""]
    if report["eval"]:
        lines += markdown_table(
            ["step", "return"],
            [[str(e["step"]), f"{_num(e['mean'])} ± {_num(e['std'])}"] for e in report["eval"]],
        )
    else:
        lines.append("  no evaluation logged")
    return lines


def _latent_fit_lines(fit: dict[str, Any] | None) -> list[str]:
    lines = ["", "latent fit (consistency loss per predicted step, no noise)", ""]
    if fit is None:
        return [*lines, "  the replay buffer holds no full training horizon yet"]
    lines.append(f"  open loop from {fit['states']} buffer sequences, the model's own loss")
    return lines + markdown_table(
        ["step", "consistency"],
        [[str(t + 1), _num(v)] for t, v in enumerate(fit["consistency"])],
    )


def format_report(report: dict[str, Any]) -> str:
    head = (
        f"run {report['run']}: {report['env_id']}, world model {report['world_model']}, "
        f"step {report['step']}"
    )
    lines = [head, ""]
    if report["geometric"] is None:
        lines.append(
            f"world model {report['world_model']!r} has no geometric diagnostics (nodes 67-70 "
            "are the geodesic model's)"
        )
    else:
        lines += _geometric_lines(report["geometric"], report["states"])
    lines += _latent_fit_lines(report["latent_fit"])
    lines += _events_lines(report)
    return "\n".join(lines)


def format_figures(figures: dict[str, Any]) -> list[str]:
    """The files `--figures` wrote, one per line, and why any figure is missing."""
    lines = [""]
    if figures["files"]:
        lines.append(f"figures written to {figures['dir']}:")
        lines += [f"  {path}" for path in figures["files"]]
    lines += [f"figures: {note}" for note in figures["notes"]]
    return lines
