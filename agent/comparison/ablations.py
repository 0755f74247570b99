"""The seed's components knocked out or switched one at a time: the table of ablations that
`agent.compare --ablations` trains beside the full geodesic model (README.md, "Ablations").

Each ablation has a name (what `--ablations` takes: `screening-off`), the row it gets in the tables
and results.json (`geodesic-no-screening`) and the [dynamics] overrides that make it from the full
model, applied over the `--config` file's geodesic settings (agent.train's defaults without one).
The full model is `geodesic` as configured; its default is the seed's model: magnus4 Wilson lines,
the metric temperature, area-law screening, the chiral projector driven by the value gradient, the
exact OU thermostat, the HIDA episodic memory and the GSR-routed, DMG-grown prototype pool. So two
rows switch a component on rather than off (the learned thermostat, the curl); the others knock
one out or swap it for a cruder one; `context-fixed` is `memory-off` and `routing-dense`
together, the model before the memory and the routed pool were the default. What each switch
does to the mathematics: the fields' docstrings (world_model/attention/covariant_config.py,
world_model/geodesic/config.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.core.config import ConfigError, merge_tables

__all__ = [
    "FULL_MODEL",
    "Ablation",
    "ABLATIONS",
    "ablation_of_row",
    "ablated_dynamics",
    "ablations_help",
    "check_ablations",
    "split_methods",
]

FULL_MODEL = "geodesic"
"""the world model every ablation changes, and the reference of their paired table"""


@dataclass(frozen=True)
class Ablation:
    """One component knocked out or switched: its row name, its overrides of the geodesic
    model's [dynamics] section and what it changes (one line, for --help)."""

    row: str
    dynamics: dict[str, Any]
    what: str


ABLATIONS: dict[str, Ablation] = {
    "wilson-off": Ablation(
        "geodesic-no-wilson",
        {"head": {"wilson": "none"}},
        "no parallel transport: every Wilson line the identity",
    ),
    "wilson-first-order": Ablation(
        "geodesic-wilson-first-order",
        {"head": {"wilson": "first_order"}},
        "first-order Wilson lines I + H (not orthogonal)",
    ),
    "wilson-exp": Ablation(
        "geodesic-wilson-exp",
        {"head": {"wilson": "exp"}},
        "Wilson lines as the exponential of the integrated connection",
    ),
    "wilson-path-ordered": Ablation(
        "geodesic-wilson-path-ordered",
        {"head": {"wilson": "path_ordered"}},
        "path-ordered midpoint Wilson lines (error O(segments^-2))",
    ),
    "temperature-constant": Ablation(
        "geodesic-constant-temperature",
        {"head": {"temperature": "constant"}},
        "tau = sqrt(d_k) instead of the metric temperature sqrt(d_k) / lambda(z)",
    ),
    "screening-off": Ablation(
        "geodesic-no-screening",
        {"head": {"screening": False}},
        "no area-law screening term and no string tension",
    ),
    "chirality-off": Ablation(
        "geodesic-no-chirality",
        {"context": {"value_gradient": False}},
        "no chiral projector and gate (no value gradient, kappa never trained)",
    ),
    "thermostat-learned": Ablation(
        "geodesic-learned-thermostat",
        {"integrator": {"learned_thermostat": True}},
        "the exact OU step plus the learned residual thermostat head",
    ),
    "curl-on": Ablation(
        "geodesic-curl",
        {"integrator": {"curl": True}},
        "the Boris kick: a learned one-form's 2-form F = dA bends p by the Lorentz force",
    ),
    "memory-off": Ablation(
        "geodesic-no-memory",
        {"context": {"memory": "none"}},
        "no HIDA episodic memory (no memory potential in the kick)",
    ),
    "routing-dense": Ablation(
        "geodesic-fixed-prototypes",
        {"context": {"routing": "dense"}},
        "the fixed table of prototypes read whole instead of the GSR-routed, DMG-grown pool",
    ),
    "context-fixed": Ablation(
        "geodesic-fixed-context",
        {"context": {"memory": "none", "routing": "dense"}},
        "both of the last two: the model before the memory and the routed pool were the default",
    ),
}

_BY_ROW = {ablation.row: name for name, ablation in ABLATIONS.items()}


def ablations_help() -> str:
    """`agent.compare --ablations`'s help: what it trains, and every name with what it does."""
    listed = "; ".join(f"{name} ({ablation.what})" for name, ablation in ABLATIONS.items())
    return (
        f"also train the {FULL_MODEL} model with one component knocked out or switched, each a "
        f"row ({ABLATIONS['wilson-off'].row}, ...) paired with the full model (no names: all): "
        f"{listed}"
    )


def check_ablations(names: Iterable[str]) -> tuple[str, ...]:
    """`names` as a tuple, or a ConfigError (one line) for an unknown or repeated name."""
    names = tuple(names)
    for name in names:
        if name not in ABLATIONS:
            raise ConfigError(f"unknown ablation {name!r}; available: {', '.join(ABLATIONS)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"--ablations names an ablation twice: {' '.join(names)}")
    return names


def ablation_of_row(method: str) -> str | None:
    """The ablation whose row is `method`, or None for a world model or SAC."""
    return _BY_ROW.get(method)


def ablated_dynamics(dynamics: Any, name: str) -> Any:
    """The [dynamics] overrides of ablation `name`: the full model's (`dynamics`), then the
    ablation's own on top."""
    if not isinstance(dynamics, dict):
        return dynamics  # RunConfig.from_dict reports it
    return merge_tables(dynamics, ABLATIONS[name].dynamics)


def split_methods(methods: Sequence[str], sac: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A comparison's methods (results.json's list) as (world models, ablations), SAC (named
    `sac`) left out of both."""
    names = [m for m in methods if m != sac]
    ablations = tuple(n for m in names if (n := ablation_of_row(m)) is not None)
    return tuple(m for m in names if ablation_of_row(m) is None), ablations
