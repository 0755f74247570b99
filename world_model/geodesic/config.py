"""GeodesicConfig: the geodesic world model's options (seed 003 Def 287, docs/seed_map.md), in
nested sections that a run's config file writes as tables:

    [dynamics]             latent space and encoder (GeodesicConfig's own fields)
    [dynamics.head]        options shared by every attention head (GeodesicHeadOptions, the
                           covariant head's HeadOptions: one default per option)
    [dynamics.integrator]  the BAOAB step: time step, forces, drift, thermostat (IntegratorConfig)
    [dynamics.context]     the banks the heads read: prototypes, window (ContextConfig)

`head_config` builds each head's CovariantAttentionConfig (its shape, and the shared options).
`migrate_flat_dynamics` maps the flat `[dynamics]` table of older runs onto these sections. The
command line and config files read these field names."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from world_model.attention.covariant import CovariantAttentionConfig, HeadOptions
from world_model.layers import ACTIVATIONS
from world_model.memory.episodic import MemoryOperator
from world_model.model import DynamicsConfig
from world_model.options import check_choices

__all__ = [
    "GeodesicConfig",
    "GeodesicHeadOptions",
    "IntegratorConfig",
    "ContextConfig",
    "migrate_flat_dynamics",
    "MACRO",
    "TEXTURE",
]

MACRO, TEXTURE = 0, 1  # context levels: kick heads query the macro level, drift heads texture
N_LEVELS = 2
Encoder = Literal["mlp", "linear", "identity"]
Drift = Literal["geodesic", "euclidean"]
Force = Literal["potential", "field"]
Control = Literal["linear", "mlp"]
PotentialGradient = Literal["closed_form", "autograd"]
Routing = Literal["dense", "gsr"]


def _at_least(where: str, obj: Any, names: tuple[str, ...], low: int) -> None:
    for name in names:
        value = getattr(obj, name)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
            raise ValueError(f"{where}.{name} must be an integer >= {low}, got {value!r}")


@dataclass
class GeodesicHeadOptions(HeadOptions):
    """Options shared by the geodesic model's attention heads (the covariant head's HeadOptions,
    with its defaults; its errors name GeodesicConfig.head)."""

    _where: ClassVar[str] = "GeodesicConfig.head"


@dataclass
class IntegratorConfig:
    """The BAOAB step: time step, kick forces, drift and thermostat."""

    dt: float = 1.0
    """latent time step h of one environment step"""
    force: Force = "potential"
    """kick force: 'potential' (-grad Phi of the kick head's scalar read-out: conservative) or
    'field' (the head's output is the force itself, Prop 101 read literally: can pump energy)"""
    potential_gradient: PotentialGradient = "closed_form"
    """how force = 'potential' differentiates Phi: 'closed_form' (no backward pass through the
    head; autograd where a head has none) or 'autograd' (the reference) (docs/measurements.md)"""
    drift_correction: bool = True
    """the drift head corrects the geodesic velocity (Prop 102), read once per step; False: the
    exact geodesic flow. Needed on Pendulum-v1, not on PoincareDisk-v0 (docs/measurements.md)"""
    drift: Drift = "geodesic"
    """A step: 'geodesic' (exp map + parallel transport) or 'euclidean' (z += t G^-1 p at fixed p,
    the seed listing's step without the geodesic term: an ablation)"""
    friction: float = 0.1
    """initial OU friction gamma (learned, zero reachable exactly; it reaches 0 on Pendulum-v1:
    docs/measurements.md)"""
    thermostat_temperature: float = 1e-3
    """T_c of the OU step (fixed); noise only in training rollouts"""
    learned_thermostat: bool = False
    """add the optional learned thermostat head (residual from a fresh noise bank, trained
    rollouts only); False: the exact OU step alone (`agent.train --thermostat exact|learned`)"""
    confinement: float = 0.1
    """initial kappa of the known confining force -kappa grad d_H(0, z)^2 / 2 (learned, >= 0)"""
    potential_wells: int = 0
    """K > 0 adds K learned Gaussian wells in hyperbolic distance to the kick's potential
    (geometry.potentials.gaussian_wells; closed-form, conservative); 0: none"""
    well_width: float = 0.5
    """initial hyperbolic width w_j of the potential wells"""
    control: Control = "mlp"
    """control force, zero without action: 'linear' (F = W a) or 'mlp' (F = (W + M(z)) a, the
    gain M an MLP of (z, log_0 z))"""
    curl: bool = False
    """the Boris kick: a learned one-form A(z) whose 2-form F = dA bends the momentum by the
    Lorentz force beta_curl G^-1 F z' (seed 003 Def 278), integrated by Boris' rotation inside
    each half-kick (world_model/geodesic/curl.py; `agent.train --curl on|off`); False: the kick
    depends on position only"""
    curl_rank: int = 8
    """K: the one-form's hidden units (F has rank <= 2K)"""

    def __post_init__(self) -> None:
        where = "GeodesicConfig.integrator"
        _at_least(where, self, ("potential_wells",), 0)
        _at_least(where, self, ("curl_rank",), 1)
        check_choices(self, where)
        for name in ("dt", "well_width"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{where}.{name} must be > 0, got {value}")
        for name in ("friction", "thermostat_temperature", "confinement"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{where}.{name} must be finite and >= 0, got {value}")


@dataclass
class ContextConfig:
    """The banks the heads read: the prototype pool (macro level) and the trajectory window
    (texture level), and the value gradient for the chiral projector."""

    prototypes: int = 64
    """prototypes M in the macro-level pool (under routing 'gsr': those active at the start)"""
    routing: Routing = "gsr"
    """the macro level: 'gsr' (the default) reads a pool of `pool_capacity` rows grown by DMG,
    each rollout the `route_k` prototypes GSR routes its root to
    (world_model/memory/routed_prototypes.py); 'dense' reads the fixed table of `prototypes`
    whole"""
    pool_capacity: int = 128
    """rows of the routed pool (DMG's hard capacity)"""
    route_k: int = 16
    """prototypes each rollout reads under routing 'gsr' (GSR's top-K; at most `prototypes`,
    those active at the start: a smaller pool reads them all)"""
    spawn_sigmas: float = 3.0
    """DMG spawns where a sample's one-step error, relative to its batch's mean, exceeds
    1 + spawn_sigmas * (its window's std) + the surprise rate"""
    spawn_window: int = 4096
    """DMG's window of relative errors, in training samples (16 updates of 256)"""
    prune_idle: int = 200
    """DMG prunes a prototype no training sample was routed to for this many updates"""
    feature_dim: int = 16
    """key/value feature size of every context entry"""
    window: int = 4
    """texture entries: latent states of the last `window` env steps before a rollout's root
    (the agent hands them over: Dynamics.history_length; 0 = none)"""
    prototype_init_scale: float = 0.7
    """spread of the prototypes' initial positions (see PrototypeConfig)"""
    value_gradient: bool = True
    """feed grad_z V (the agent's value estimate at the rollout's root) to the chiral projector
    (seed 003 Def 285); False: no projector, no chiral gate, kappa never trained (the chirality
    switch, `agent.train --chirality on|off`)"""
    memory: MemoryOperator = "dense"
    """HIDA episodic memory (world_model/memory/episodic.py): 'dense' (the default) adds to the
    kick's potential this episode's empirical residual forces as linear patches blended by
    Dense-HIDA's inverse-distance weights (seed 000 M1); 'none': no memory"""
    memory_capacity: int = 64
    """entries per memory: the last transitions of the episode before a rollout's root"""
    memory_eps: float = 0.3
    """the initial bandwidth eps of the memory's kernel W ∝ (d_H^2 + eps)^-1 (learned; seed
    000's 1e-3 makes the memory's potential rough: docs/measurements.md)"""

    def __post_init__(self) -> None:
        where = "GeodesicConfig.context"
        positive = ("prototypes", "feature_dim", "memory_capacity")
        routed = ("pool_capacity", "route_k", "prune_idle", "spawn_window")
        _at_least(where, self, positive + routed, 1)
        check_choices(self, where)
        if self.routing == "gsr" and not self.prototypes <= self.pool_capacity:
            raise ValueError(
                f"{where}: routing 'gsr' needs prototypes <= pool_capacity, got "
                f"{self.prototypes}, {self.pool_capacity}"
            )
        if not (math.isfinite(self.spawn_sigmas) and self.spawn_sigmas > 0):
            raise ValueError(f"{where}.spawn_sigmas must be > 0, got {self.spawn_sigmas!r}")
        _at_least(where, self, ("window",), 0)
        if not (math.isfinite(self.memory_eps) and self.memory_eps > 0):
            raise ValueError(f"{where}.memory_eps must be > 0, got {self.memory_eps!r}")
        if not (math.isfinite(self.prototype_init_scale) and self.prototype_init_scale > 0):
            raise ValueError(f"{where}.prototype_init_scale must be > 0")


@dataclass
class GeodesicConfig(DynamicsConfig):
    """GeodesicCrossAttention dynamics (seed 003 Def 287) and its encoder."""

    latent_dim: int = 16
    """dimension d of the ball (and of the momentum); 16 learned faster than 8 on Pendulum-v1
    (docs/measurements.md)"""
    encoder: Encoder = "mlp"
    """obs -> (z, p): 'mlp' (z = exp_0(u), p = lambda(z) m), 'linear' (affine, projected into the
    ball) or 'identity' (the observation is (z, p) itself, obs_dim = 2 latent_dim)"""
    encoder_dim: int = 128
    """width of the MLP encoder's hidden layers"""
    encoder_layers: int = 1
    """hidden layers of the MLP encoder"""
    activation: str = "silu"
    """activation of the encoder and control MLPs: silu, mish or elu"""
    max_norm: float = 0.999
    """positions are kept at |z| <= max_norm"""
    head: GeodesicHeadOptions = field(default_factory=GeodesicHeadOptions)
    """options shared by the kick, drift and thermostat heads"""
    integrator: IntegratorConfig = field(default_factory=IntegratorConfig)
    """the BAOAB step"""
    context: ContextConfig = field(default_factory=ContextConfig)
    """the banks the heads read"""

    def __post_init__(self):
        _at_least("GeodesicConfig", self, ("latent_dim", "encoder_dim"), 1)
        _at_least("GeodesicConfig", self, ("encoder_layers",), 0)
        check_choices(self, "GeodesicConfig")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"GeodesicConfig.activation must be one of {sorted(ACTIVATIONS)}")
        if not 0.0 < self.max_norm < 1.0:
            raise ValueError(f"GeodesicConfig.max_norm must lie in (0, 1), got {self.max_norm}")
        for name, cls in (
            ("head", GeodesicHeadOptions),
            ("integrator", IntegratorConfig),
            ("context", ContextConfig),
        ):
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"GeodesicConfig.{name} must be a {cls.__name__}")
        if len(self.head.string_tension) != N_LEVELS:
            raise ValueError(
                f"GeodesicConfig.head.string_tension needs one sigma per level (macro, texture), "
                f"got {len(self.head.string_tension)}"
            )

    @staticmethod
    def migrate_removed(table: dict[str, Any]) -> dict[str, Any]:
        """A saved `[dynamics]` table without the options removed since it was written (called
        by agent.core.config.migrate_config for every checkpoint): `context.memory_anchors` is
        dropped (it set the removed 'l' / 'c' memories only), a memory 'fp', 'l' or 'c' is
        refused (one line: ValueError), and a table written before `memory` and `routing`
        existed keeps the model it trained: no memory, the fixed table (today's defaults are
        the memory and the routed pool)."""
        context = table.get("context", {})
        if not isinstance(context, dict):
            return table
        context = {"memory": "none", "routing": "dense", **context}
        if context.get("memory") in ("fp", "l", "c"):
            raise ValueError(
                f"context.memory = {context['memory']!r} was removed: the episodic memory is "
                "Dense-HIDA's potential ('dense'; docs/measurements.md)"
            )
        context = {k: v for k, v in context.items() if k != "memory_anchors"}
        return {**table, "context": context}

    @staticmethod
    def migrate_v1(table: dict[str, Any]) -> dict[str, Any]:
        """A format-1 checkpoint's flat [dynamics] table in these sections (called by
        agent.core.config.migrate_config; see migrate_flat_dynamics)."""
        return migrate_flat_dynamics(table)

    def head_config(
        self, query_features: int, query_level: int, velocity: bool = False, d_out: int = 0
    ) -> CovariantAttentionConfig:
        """One head's config: its shape (queries of `query_features` at `query_level`, with a
        velocity or not, output d_out or latent_dim) and the shared options `head`."""
        return CovariantAttentionConfig(
            d=self.latent_dim,
            d_query=query_features,
            d_key=self.context.feature_dim,
            d_value=self.context.feature_dim,
            d_out=d_out or self.latent_dim,
            n_levels=N_LEVELS,
            query_level=query_level,
            query_velocity=velocity,
            options=self.head,
        )


# ----------------------------------------------------------------------- older run folders

_SECTIONS: dict[str, type] = {
    "head": GeodesicHeadOptions,
    "integrator": IntegratorConfig,
    "context": ContextConfig,
}
_RENAMED = {"attention": ("head", "kernel"), "attention_temperature": ("head", "temperature")}
# options removed earlier: the value whose behaviour was kept is dropped, any other refused
_REMOVED = {"head_features": "full", "radius_penalty": 0, "drift_correction_once": True}


def migrate_flat_dynamics(data: dict[str, Any]) -> dict[str, Any]:
    """An old flat `[dynamics]` table of the geodesic model (the field names of the flat
    GeodesicConfig, as in older run folders' config.json) as the nested layout: each key moved
    to its section (`attention` -> head.kernel, `attention_temperature` -> head.temperature).
    Removed options are dropped when they hold the kept behaviour's value (head_features =
    "full", radius_penalty = 0, drift_correction_once = true) and refused otherwise (ValueError,
    one line), as is attention_temperature = "calibrated". Input already nested (no flat key of
    a section) comes back unchanged; unknown keys are left for the config loader to report."""
    section_of = {
        f.name: (section, f.name)
        for section, cls in _SECTIONS.items()
        for f in dataclasses.fields(cls)
    }
    section_of.update(_RENAMED)
    if not any(key in section_of or key in _REMOVED for key in data):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in _REMOVED:
            kept = _REMOVED[key]
            if value == kept and isinstance(value, bool) == isinstance(kept, bool):
                continue  # radius_penalty 0 or 0.0; drift_correction_once true, not 1
            raise ValueError(
                f"[dynamics] {key} = {value!r} was removed (only {kept!r}, the kept behaviour, "
                f"is accepted)"
            )
        if key == "attention_temperature" and value == "calibrated":
            raise ValueError(
                "[dynamics] attention_temperature = 'calibrated' was removed (measured: "
                "docs/measurements.md); use 'metric'"
            )
        if key in section_of:
            section, name = section_of[key]
            table = out.setdefault(section, {})
            if not isinstance(table, dict):
                raise ValueError(f"[dynamics] has both a flat {key!r} and a non-table {section!r}")
            table[name] = value
        elif key in _SECTIONS and isinstance(value, dict):  # a half-nested table
            out.setdefault(key, {}).update(value)
        else:
            out[key] = value
    return out
