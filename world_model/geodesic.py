"""GeodesicCrossAttention: the world model as one Boris-BAOAB step of latent Langevin dynamics on
the Poincare ball, written as covariant attention heads (seed 003 Def 287).

Latent state (z, p): a position z in the ball B^d (|z| <= max_norm) and a momentum covector p at
z; mass G(z) = lambda(z)^2 I. One environment step of length h:

    B  p <- p + h/2 (F_attn(z) + F_conf(z) + F_ctrl(z, a))   kick head over the force bank
    A  (z, p) <- drift(z, p, h/2)                            drift head over the correction bank
    O  p <- c1 p + c2 lambda(z) xi                           exact OU, c1 = e^(-gamma h),
                                                             c2 = sqrt((1 - c1^2) T_c)
    A, B as above.

- Kick (Prop 101, keys as a gradient bank): F_attn = lambda(z) W(attention output), the head's
  output read as a force in an orthonormal frame and mapped to a coordinate covector (so forces
  can grow like lambda near the boundary: a softmax-weighted force is bounded, and a learned
  model would otherwise confine weakly there, DESIGN.md); F_conf = -kappa grad(d_H(0, z)^2 / 2),
  a known confining term with learned kappa >= 0; F_ctrl(z, a) the action's control force (a
  covector: linear in a, plus an optional MLP of (log_0 z, a)). Optionally (potential_wells)
  F_attn also carries the force of learned Gaussian wells in hyperbolic distance.
- Drift (Prop 102, values as displacement corrections): the geodesic flow with an attention
  correction delta to the velocity: z' = exp_z(t (v + delta)), v = G^-1 p, with v parallel-
  transported to z' and p' = G(z') v'. With delta = 0 this is exactly
  geometry.poincare.geodesic_flow.
- **The geodesic term is carried exactly once, by the drift.** The seed's steps kick with grad Phi
  and drift z += h/2 G^-1 p; with a position-dependent mass that misses -dK/dz and does not target
  the Gibbs density (DESIGN.md; tests/geometry/test_langevin.py measures it). Here the drift is
  the exact kinetic flow (exp map + parallel transport), and the kick never adds -dK/dz: the model
  is geometry.langevin.baoab_step with attention forces (tests/world_model/test_geodesic.py checks
  both, and that the term is not doubled).
- O: closed-form OU at a learned friction gamma = relu(raw) (zero is reachable: a softplus stuck at
  0.009 lost 26% of the energy over 1000 conservative steps in the feasibility study) and a fixed
  temperature T_c. **Stochastic in training** (`next(..., stochastic=True)` draws xi ~ N(0, I));
  **deterministic when planning** (`stochastic=False` takes the OU mean c1 p). An optional learned
  thermostat head adds a residual read from a bank of fresh noise vectors (zero in the mean).

The two kicks use one head and the two drifts another (B1 = B2, A1 = A2), and the closing
kick's attention force (and control gain M(z)) at z_{t+1} is the next step's opening one, so a
rollout evaluates them once per step (position_terms, cached on the state object; recomputed
whenever the state was copied or the context changed). The drift correction is read once per
step, at the first half-drift's start, and reused by the second (`drift_correction_once`, the
default: one drift-head evaluation per step; without a correction, or with
`drift_correction_once = False`, the splitting is symmetric and its deterministic part
time-reversible).

Context (DESIGN.md, "How data flows", 3): providers build banks once per planning call / training
batch: the prototype pool (macro, level 0) and, when history is given, the recent trajectory
window (texture, level 1). Kick heads query at macro level, drift heads at texture level.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from geometry import langevin, poincare
from world_model.attention.context import ContextBank
from world_model.attention.covariant import (
    CovariantAttention,
    CovariantAttentionConfig,
    CovariantQueries,
    PreparedContext,
)
from world_model.memory.prototypes import PrototypeConfig, PrototypePool, ball_points_parameter
from world_model.memory.window import TrajectoryWindow, position_features, state_features
from world_model.model import ACTIVATIONS, Dynamics, DynamicsConfig, LatentState, mlp
from world_model.registry import register_dynamics

__all__ = [
    "GeodesicState",
    "PositionTerms",
    "GeodesicConfig",
    "GeodesicContext",
    "GeodesicCrossAttention",
    "GeodesicDynamics",
    "confining_force",
]

MACRO, TEXTURE = 0, 1
_ENCODERS = ("mlp", "linear", "identity")
_DRIFTS = ("geodesic", "euclidean")
_FORCES = ("potential", "field")
_ATTENTIONS = ("softmax", "inverse_distance", "krr")
_CONTROLS = ("linear", "mlp")
_HEAD_FEATURES = ("full", "orthonormal")
_POTENTIAL_GRADIENTS = ("closed_form", "autograd")


def confining_force(z: Tensor) -> Tensor:
    """-grad_z (d_H(0, z)^2 / 2) = -d_H(0, z) lambda(z) z / |z|  (d_H(0, z) = 2 artanh|z| has
    coordinate gradient lambda(z) z / |z|). z [..., d] -> [..., d]; 0 at the origin."""
    n = z.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    radius = 2.0 * torch.atanh(n.clamp_max(1 - torch.finfo(z.dtype).eps))
    return -radius * poincare.conformal_factor(z) * z / n


class PositionTerms(NamedTuple):
    """What a kick at z computes that does not depend on the action, shared by a step's closing
    kick and the next step's opening kick and first drift (GeodesicCrossAttention.
    position_terms)."""

    force: Tensor  # [B, d] F_attn + F_conf
    lines: Tensor  # [B, r, r] Wilson lines U_{z->0}
    gain: Tensor | None  # [B, d * A] control gain M(z) (None: linear control)
    features: Tensor  # [B, 2d] (z, log_0 z)


@dataclass
class GeodesicState(LatentState):
    z: Tensor  # [B, d] position in the Poincare ball
    p: Tensor  # [B, d] momentum covector at z

    def expand(self, n: int) -> GeodesicState:
        """A batch of 1 viewed as n, with its first-same-as-last kick cache (PositionTerms at z)
        viewed as n too: a planner that expands its root to n samples then pays for the root's
        kick once, not n times per iteration."""
        out = super().expand(n)
        cached = getattr(self, "_step_cache", None)
        if cached is not None:
            ctx, terms = cached
            out._step_cache = (
                ctx,
                PositionTerms(*(None if t is None else t.expand(n, *t.shape[1:]) for t in terms)),
            )
        return out


@dataclass
class GeodesicConfig(DynamicsConfig):
    """GeodesicCrossAttention dynamics (seed 003 Def 287) and its encoder."""

    latent_dim: int = 16
    """dimension d of the ball (and of the momentum). 16 learned faster than 8 on Pendulum-v1 on
    every seed tried: mean eval return at 2.5k steps -190 / -638 / -160 / -417 (seeds 1-4)
    against -377 / -725 / -260 / -649, at about the same cost per step (per-op overhead
    dominates at these sizes)"""
    encoder: str = "mlp"
    """obs -> (z, p): 'mlp' (z = exp_0(u), p = lambda(z) m from an MLP), 'linear' (z = an affine
    map projected into the ball, p affine), or 'identity' (observations are (z, p) themselves,
    obs_dim = 2 latent_dim: the latent state is the observed one, as on PoincareDisk-v0)"""
    encoder_dim: int = 128
    """width of the MLP encoder's hidden layers"""
    encoder_layers: int = 1
    """hidden layers of the MLP encoder"""
    activation: str = "silu"
    """activation of the encoder and control MLPs: silu, mish or elu"""
    max_norm: float = 0.999
    """positions are kept at |z| <= max_norm"""
    dt: float = 1.0
    """latent time step h of one environment step"""
    prototypes: int = 64
    """prototypes M in the macro-level pool"""
    feature_dim: int = 16
    """key/value feature size of every context entry"""
    window: int = 4
    """texture entries: latent states of the last `window` env steps before a rollout's root
    (the agent hands them over: Dynamics.history_length; 0 = none)"""
    d_k: int = 16
    """size of each head's gauge fields (multiple of 4 n_colors)"""
    n_colors: int = 2
    """N_f of the SU(N_f) binding factor"""
    g_s: float = 1.0
    """SU(N_f)_C coupling"""
    g_2: float = 0.5
    """SU(2)_L coupling"""
    g_1: float = 0.3
    """U(1)_Y coupling"""
    wilson: str = "exp"
    """Wilson lines: first_order, exp or path_ordered (Node 67 reports the gauge error)"""
    segments: int = 8
    """pieces of a path-ordered Wilson line"""
    attention: str = "softmax"
    """the heads' attention kernel: softmax (covariant softmax, seed 003), inverse_distance
    (HIDA on the positions, seed 000) or krr (kernel ridge regression, seed 001)"""
    attention_temperature: str = "metric"
    """tau(z): metric (sqrt(d_k)/lambda(z), Thm 99), calibrated or constant"""
    christoffel: str = "poincare"
    """quadratic query: full, factorized or poincare (Def 283, 291, Prop 99)"""
    string_tension: tuple[float, float] = (1.0, 0.01)
    """initial sigma(macro), sigma(texture) of area-law screening (Prop 100)"""
    chirality: float = 0.0
    """initial chiral mixing strength kappa (0: identity; learned)"""
    value_gradient: bool = True
    """feed grad_z V (the agent's value estimate at the rollout's root) to the chiral projector
    (seed 003 Def 285); False: no projector, no chiral gate"""
    force: str = "potential"
    """kick force: 'potential' (the kick head reads a scalar potential Phi(z) from the force
    bank and the force is -grad Phi (see potential_gradient): conservative, so the learned
    dynamics keep energy; the default) or 'field' (the head's output is the force vector
    itself, the seed listing's reading of Prop 101: not a gradient field, so it can pump
    energy)"""
    potential_gradient: str = "closed_form"
    """how force = 'potential' differentiates Phi: 'closed_form' (CovariantAttention.
    scalar_output_gradient: no backward pass through the kick head, 1.5-2x cheaper per kick and no
    double backward in training; heads without a closed form fall back to autograd) or
    'autograd' (the reference the tests compare it with)"""
    drift_correction: bool = True
    """the drift head adds an attention correction to the geodesic velocity (Prop 102's values
    as displacement corrections); False: the A step is the exact geodesic flow, half the head
    evaluations per step. On Pendulum-v1 the correction is what lets the latent dynamics fit:
    without it the consistency loss stayed 20-100x higher (0.015-0.05 against 0.0004-0.0008 by
    5k steps; on one seed the learned friction rose to 0.2 instead of falling to 0) and mean
    eval return at 5k fell to -442 / -206 / -113 (seeds 1-3) against -128 / -124 / -111 with it.
    On PoincareDisk-v0, whose observed state is already the latent (z, p), the exact flow is
    enough (the disk benchmark turns the correction off)."""
    drift_correction_once: bool = True
    """evaluate the drift correction once per step, at the first half-drift's start, and reuse it
    (in the orthonormal frame) for the second half-drift: one drift-head evaluation and one
    Wilson line per step instead of two each (a planning step 6.2 -> 4.7 ms; the agent's plan
    4.6x -> 3.6x the GRU's). On Pendulum-v1 it fits as well (consistency loss 6e-4 against 9e-4
    at 4.6k steps) and learned faster at 2.5k steps on 3 of 4 seeds (-159 / -411 / -262 / -152
    against -190 / -698 / -160 / -417). False: each half-drift reads the head at its own start
    point (the symmetric splitting A1 = A2)"""
    drift: str = "geodesic"
    """A step: 'geodesic' (exp map + parallel transport: carries -dK/dz exactly) or 'euclidean'
    (z += t G^-1 p at fixed p: the seed listing's step, which drops the geodesic term; an
    ablation, shown wrong by the tests)"""
    friction: float = 0.1
    """initial OU friction gamma (learned; zero is reachable exactly). On Pendulum-v1, a
    frictionless system, it reaches 0 within the pretraining updates (seeds 1-3) and stays there,
    so the O step becomes the identity and the learned dynamics is Hamiltonian plus control"""
    thermostat_temperature: float = 1e-3
    """T_c of the OU step (fixed); noise only in training rollouts, and none once the learned
    friction is 0 (c2 = sqrt((1 - c1^2) T_c))"""
    learned_thermostat: bool = False
    """add the optional learned thermostat head (residual from a fresh noise bank)"""
    confinement: float = 0.1
    """initial kappa of the known confining force -kappa grad d_H(0, z)^2 / 2 (learned, >= 0)"""
    potential_wells: int = 0
    """K > 0 adds K learned Gaussian wells in hyperbolic distance to the kick's potential:
    Phi_w(z) = -sum_j a_j exp(-d_H(z, c_j)^2 / (2 w_j^2)) (geometry.poincare.gaussian_wells),
    centres c_j in the ball (Riemannian Adam), depths a_j (signed, start at 0) and widths w_j
    learned; its force is closed-form and conservative, like the head's. A structured potential
    (an RBF network on the ball) that fits a landscape of wells faster than the attention read-out
    alone; 0: none"""
    well_width: float = 0.5
    """initial hyperbolic width w_j of the potential wells"""
    radius_penalty: float = 0.0
    """weight c of a regulariser c * mean d_H(0, z)^2 over the encoded states of a training batch
    (the rollouts' roots, logged as losses/radius): pulls the encoder's states toward the
    origin, where the metric amplifies prediction errors less; 0: none"""
    control: str = "mlp"
    """control force, control-affine and zero without action: 'linear' (F = W a) or 'mlp'
    (F = (W + M(z)) a with the d x A gain M an MLP of (z, log_0 z))"""
    prototype_init_scale: float = 0.7
    """spread of the prototypes' initial positions (see PrototypeConfig)"""
    head_features: str = "full"
    """what the reward, value, policy and decoder heads read (GeodesicDynamics.features):
    'full' (z, log_0 z, p / lambda, p) [4d], or 'orthonormal' (z, log_0 z, p / lambda) [3d],
    without the coordinate momentum p, whose scale grows like lambda(z) near the boundary.
    Measured on Pendulum-v1 (2.5k steps, seeds 2 and 3, where the default learns slowest):
    -582 / -251 against -411 / -262 with 'full', so the scale is not what slows them"""

    def __post_init__(self):
        for name in ("latent_dim", "encoder_dim", "prototypes", "feature_dim", "d_k", "n_colors"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"GeodesicConfig.{name} must be an integer >= 1, got {value!r}")
        for name in ("encoder_layers", "window", "potential_wells"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 0):
                raise ValueError(f"GeodesicConfig.{name} must be an integer >= 0, got {value!r}")
        if self.encoder not in _ENCODERS:
            raise ValueError(f"GeodesicConfig.encoder must be one of {_ENCODERS}")
        if self.attention not in _ATTENTIONS:
            raise ValueError(f"GeodesicConfig.attention must be one of {_ATTENTIONS}")
        if self.force not in _FORCES:
            raise ValueError(f"GeodesicConfig.force must be one of {_FORCES}")
        if self.drift not in _DRIFTS:
            raise ValueError(f"GeodesicConfig.drift must be one of {_DRIFTS}")
        if self.potential_gradient not in _POTENTIAL_GRADIENTS:
            raise ValueError(
                f"GeodesicConfig.potential_gradient must be one of {_POTENTIAL_GRADIENTS}"
            )
        if self.control not in _CONTROLS:
            raise ValueError(f"GeodesicConfig.control must be one of {_CONTROLS}")
        if self.head_features not in _HEAD_FEATURES:
            raise ValueError(f"GeodesicConfig.head_features must be one of {_HEAD_FEATURES}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"GeodesicConfig.activation must be one of {sorted(ACTIVATIONS)}")
        if not 0.0 < self.max_norm < 1.0:
            raise ValueError(f"GeodesicConfig.max_norm must lie in (0, 1), got {self.max_norm}")
        if not (math.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"GeodesicConfig.dt must be > 0, got {self.dt}")
        if not (math.isfinite(self.well_width) and self.well_width > 0):
            raise ValueError(f"GeodesicConfig.well_width must be > 0, got {self.well_width}")
        for name in ("friction", "thermostat_temperature", "confinement", "radius_penalty"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"GeodesicConfig.{name} must be finite and >= 0, got {value}")
        self.string_tension = tuple(float(s) for s in self.string_tension)
        # the heads validate the rest (wilson, temperature, christoffel, d_k % 4 n_colors, ...)
        self.head_config(query_features=1, query_level=MACRO)

    def head_config(
        self, query_features: int, query_level: int, velocity: bool = False, d_out: int = 0
    ) -> CovariantAttentionConfig:
        return CovariantAttentionConfig(
            d=self.latent_dim,
            d_query=query_features,
            d_key=self.feature_dim,
            d_value=self.feature_dim,
            d_out=d_out or self.latent_dim,
            d_k=self.d_k,
            n_colors=self.n_colors,
            g_s=self.g_s,
            g_2=self.g_2,
            g_1=self.g_1,
            wilson=self.wilson,  # type: ignore[arg-type]
            segments=self.segments,
            temperature=self.attention_temperature,  # type: ignore[arg-type]
            christoffel=self.christoffel,  # type: ignore[arg-type]
            n_levels=2,
            string_tension=self.string_tension,
            query_level=query_level,
            chirality=self.chirality,
            query_velocity=velocity,
            kernel=self.attention,  # type: ignore[arg-type]
        )


@dataclass
class GeodesicContext:
    """Banks prepared once (Wilson lines of every entry computed once) and reused by every step
    of a rollout: the force bank for the kick head, the correction bank for the drift head, and
    the noise-bank keys of the optional thermostat head. `value_grad` [B, d] drives the chiral
    projector (None: no gate). The banks themselves (`force_bank`, `correction_bank`: the
    prototypes joined with the window) are read only by the learned thermostat and the
    diagnostics, so they are joined from their parts on first read."""

    force: PreparedContext
    correction: PreparedContext | None  # None when the drift has no correction head
    force_parts: tuple[ContextBank, ...]
    correction_parts: tuple[ContextBank, ...]
    value_grad: Tensor | None = None
    ou: tuple[Tensor, Tensor] | None = None  # (c1, c2) of the O step, once per rollout
    _chiral: dict[int, tuple[Tensor, Tensor, Tensor]] = field(default_factory=dict, repr=False)

    def chiral_for(self, head: CovariantAttention) -> tuple[Tensor, Tensor, Tensor] | None:
        """`head`'s chiral projector for value_grad and its flat operator (CovariantAttention.
        chiral_inputs), computed once per context (the value gradient is fixed over a rollout)
        at value_grad's batch: [1] for a plan's root, shared by every sampled trajectory by
        broadcasting. None without value_grad."""
        if self.value_grad is None:
            return None
        key = id(head)
        if key not in self._chiral:
            self._chiral[key] = head.chiral_inputs(self.value_grad)
        return self._chiral[key]

    @functools.cached_property
    def force_bank(self) -> ContextBank:
        """The kick head's bank: prototypes, then the window's entries when there is one."""
        return _joined(self.force_parts)

    @functools.cached_property
    def correction_bank(self) -> ContextBank:
        """The drift head's bank, in the same entry order as force_bank."""
        return _joined(self.correction_parts)


def _joined(parts: tuple[ContextBank, ...]) -> ContextBank:
    return parts[0] if len(parts) == 1 else ContextBank.cat(list(parts))


class GeodesicCrossAttention(nn.Module):
    """One Boris-BAOAB step as attention heads (module docstring). Holds the kick head, the drift
    head, the control map, the confinement and thermostat parameters."""

    def __init__(self, config: GeodesicConfig, action_dim: int):
        super().__init__()
        cfg = self.config = config
        d = cfg.latent_dim
        self.kick_head = CovariantAttention(
            cfg.head_config(
                query_features=2 * d, query_level=MACRO, d_out=1 if cfg.force == "potential" else d
            )
        )
        nn.init.zeros_(self.kick_head.w_o.weight)  # start from the confining + control forces
        self.drift_head = CovariantAttention(
            cfg.head_config(query_features=3 * d, query_level=TEXTURE, velocity=True)
        )
        nn.init.zeros_(self.drift_head.w_o.weight)  # start from the exact geodesic flow
        self.action_dim = action_dim
        self.control_linear = nn.Linear(action_dim, d, bias=False)
        self.control_mlp = (  # state-dependent gain M(z): [B, d * A]
            mlp(2 * d, [64], d * action_dim, cfg.activation) if cfg.control == "mlp" else None
        )
        if self.control_mlp is not None:
            nn.init.zeros_(self.control_mlp[-1].weight)
            nn.init.zeros_(self.control_mlp[-1].bias)
        self.confinement_raw = nn.Parameter(torch.tensor(math.sqrt(cfg.confinement)))
        if cfg.potential_wells > 0:  # Phi_w: flat at the start (depths 0)
            k = cfg.potential_wells
            self.well_centres = ball_points_parameter(
                k, d, cfg.prototype_init_scale, cfg.max_norm
            )  # [K, d], spread like the prototypes
            self.well_depths = nn.Parameter(torch.zeros(k))
            self.well_widths_raw = nn.Parameter(torch.full((k,), math.log(cfg.well_width)))
        self.friction_raw = nn.Parameter(torch.tensor(float(cfg.friction)))
        self.thermostat_head = (
            CovariantAttention(cfg.head_config(query_features=2 * d, query_level=MACRO))
            if cfg.learned_thermostat
            else None
        )
        # One gauge connection for the latent space, shared by every head: the Wilson line of a
        # point is then one line, computed once and used by each head evaluated there.
        for head in self.heads()[1:]:
            head.connection_c0 = self.kick_head.connection_c0
            head.connection_c1 = self.kick_head.connection_c1

    def heads(self) -> list[CovariantAttention]:
        return [h for h in (self.kick_head, self.drift_head, self.thermostat_head) if h is not None]

    def lines(self, z: Tensor) -> Tensor:
        """U_{z->0} of the shared connection: z [..., d] -> [..., r, r]."""
        return self.kick_head.lines_to_origin(z)

    # ------------------------------------------------------------------ physical parameters

    @property
    def confinement(self) -> Tensor:
        return self.confinement_raw.square()

    @property
    def friction(self) -> Tensor:
        """gamma = relu(raw): zero is reached exactly, and then stays (a conservative system is
        learned as exactly conservative; raw^2 only approaches 0, and the leftover 3e-3 cost 47% of
        the energy over 1000 steps on the disk)."""
        return torch.relu(self.friction_raw)

    def ou_coefficients(self) -> tuple[Tensor, Tensor]:
        return langevin.ou_coefficients(
            self.friction, self.config.dt, self.config.thermostat_temperature
        )

    # ------------------------------------------------------------------ forces

    def position_terms(self, z: Tensor, context: GeodesicContext) -> PositionTerms:
        """Everything a kick at z [B, d] needs that does not depend on the action (PositionTerms).
        A step's closing kick and the next step's opening kick (and first drift) sit at the
        same z, so a rollout computes these once per step (GeodesicDynamics.next caches them on
        the state). The kick head, the control MLP and the drift head's queries read the same
        features (z, log_0 z), and the kick's gradient through log_0 reuses its Jacobian."""
        jacobian = poincare.logmap0_jacobian(z)  # log_0 z = f z
        features = torch.cat([z, jacobian[0] * z], dim=-1)  # position_features(z) [B, 2d]
        force, lines = self.kick_force(z, context, features, jacobian)
        gain = self.control_mlp(features) if self.control_mlp is not None else None
        return PositionTerms(force, lines, gain, features)

    def kick_force(
        self,
        z: Tensor,
        context: GeodesicContext,
        features: Tensor | None = None,
        jacobian: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The position-only part of the kick at z, F_attn + F_conf, and the Wilson lines at z
        (both reused by the next step's opening kick and drift). z [B, d] -> ([B, d], [B, r, r]).

        force = 'potential': F_attn = -grad_z Phi(z), Phi the kick head's scalar read-out of the
        query features (z, log_0 z); in closed form (potential_gradient = 'closed_form', chained
        through log_0 by geometry.poincare.logmap0_vjp) or by autograd, both with create_graph
        while training, so parameters learn through the gradient (under no_grad, e.g. planning,
        nothing is kept). force = 'field': F_attn = lambda(z) * head output (an orthonormal-
        frame force vector). `features`: the query features (z, log_0 z) when already computed,
        `jacobian`: poincare.logmap0_jacobian(z) when already computed.
        """
        cfg = self.config
        if cfg.force == "field":
            lines = self.lines(z)
            out = self._kick_head_output(z, context, lines)  # [B, d] orthonormal frame
            force = poincare.conformal_factor(z) * out
        elif cfg.potential_gradient == "closed_form" and self.kick_head.has_closed_form_gradient():
            _, grad_z, grad_x, lines = self.kick_head.scalar_output_gradient(
                self._kick_queries(z, context, features), context.force
            )
            d = z.shape[-1]  # chain rule through the features (z, log_0 z) of _kick_queries
            force = -(grad_z + grad_x[:, :d] + poincare.logmap0_vjp(z, grad_x[:, d:], jacobian))
        else:
            training = torch.is_grad_enabled()
            with torch.enable_grad():
                zq = z if (training and z.requires_grad) else z.detach().requires_grad_(True)
                lines = self.lines(zq)
                phi = self._kick_head_output(zq, context, lines)  # [B, 1]
                (grad,) = torch.autograd.grad(phi.sum(), zq, create_graph=training)
            force = -grad
            if not training:
                force, lines = force.detach(), lines.detach()
        force = force + self.confinement * confining_force(z)
        if self.config.potential_wells > 0:
            force = force + self.wells(z)[1]
        return force, lines

    def wells(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """The potential wells Phi_w at z [B, d] and their force: ([B], [B, d])."""
        centres = self.well_centres.as_subclass(Tensor)  # plain tensor: no geoopt dispatch
        return poincare.gaussian_wells(z, centres, self.well_depths, self.well_widths_raw.exp())

    def _kick_queries(
        self, z: Tensor, context: GeodesicContext, features: Tensor | None = None
    ) -> CovariantQueries:
        """The kick head's queries at z [B, d]: features (z, log_0 z) [B, 2d]."""
        if features is None:
            features = position_features(z)
        return CovariantQueries.unchecked(  # the model's own states: inside the ball
            positions=z,
            features=features,
            chiral=context.chiral_for(self.kick_head),
        )

    def _kick_head_output(self, z: Tensor, context: GeodesicContext, lines: Tensor) -> Tensor:
        out, _ = self.kick_head(self._kick_queries(z, context), context.force, lines)
        return out

    def control_force(self, z: Tensor, action: Tensor, gain: Tensor | None = None) -> Tensor:
        """F_ctrl(z, a) = (W + M(z)) a: a covector [B, d], control-affine, so it is exactly zero
        without action (an action-free rollout feels the learned force field only). `gain`:
        M(z) [B, d * A] when already computed (position_terms)."""
        force = self.control_linear(action)
        if self.control_mlp is not None:
            if gain is None:
                gain = self.control_mlp(position_features(z))
            force = force + (
                gain.unflatten(-1, (-1, self.action_dim)) @ action.unsqueeze(-1)
            ).squeeze(-1)
        return force

    # ------------------------------------------------------------------ drift and thermostat

    def drift(
        self,
        z: Tensor,
        p: Tensor,
        t: float,
        context: GeodesicContext,
        lines: Tensor | None = None,
        correction: Tensor | None = None,
        point_features: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """A step for time t: z' = exp_z(t (v + delta)), v' = P_{z->z'} v, p' = G(z') v'.
        delta = 0 (no correction) is the exact geodesic flow of K = 1/2 p^T G^-1 p.
        delta = out / lambda(z), `out` [B, d] the drift head's output in the orthonormal frame
        at z; a given `correction` is used as `out` instead of reading the head.
        `point_features`: (z, log_0 z) [B, 2d] when already computed (PositionTerms).
        Returns (z', p', out) (out None without drift correction)."""
        cfg = self.config
        if cfg.drift_correction and correction is None:
            v = p * poincare.inverse_metric_factor(z)  # [B, d] coordinate velocity
            queries = CovariantQueries.unchecked(
                positions=z,
                features=state_features(z, p, point_features),
                velocity=v,
                chiral=context.chiral_for(self.drift_head),
            )
            lines = self.lines(z) if lines is None else lines
            correction, _ = self.drift_head(queries, context.correction, lines)  # [B, d]
        if cfg.drift == "euclidean":  # the seed listing's step: no geodesic term (ablation)
            step = p * poincare.inverse_metric_factor(z)
            if correction is not None:
                step = step + correction / poincare.conformal_factor(z)
            return poincare.project(z + t * step, cfg.max_norm), p, correction
        z_new, p_new = poincare.geodesic_drift(z, p, t, correction, cfg.max_norm)
        return z_new, p_new, correction

    def thermostat(
        self, z: Tensor, p: Tensor, context: GeodesicContext, stochastic: bool
    ) -> Tensor:
        """O step: exact OU p <- c1 p + c2 lambda(z) xi (its mean c1 p when not stochastic), plus
        the optional learned residual read from a bank of fresh noise vectors (zero mean)."""
        c1, c2 = context.ou if context.ou is not None else self.ou_coefficients()
        xi = torch.randn_like(p) if stochastic else None
        p = langevin.ou_step(z, p, c1, c2, xi)
        if self.thermostat_head is not None and stochastic:
            bank = context.force_bank
            noise = torch.randn_like(bank.value_features)  # fresh noise values, keys learned
            noise_bank = ContextBank(
                bank.positions, bank.key_features, noise, bank.levels, bank.mask
            )
            queries = CovariantQueries.unchecked(
                positions=z,
                features=torch.cat([z, p / poincare.conformal_factor(z)], dim=-1),
                chiral=context.chiral_for(self.thermostat_head),
            )
            prepared = self.thermostat_head.prepare(noise_bank, lines=context.force.lines)
            out, _ = self.thermostat_head(queries, prepared)
            p = p + c2 * poincare.conformal_factor(z) * out
        return p

    # ------------------------------------------------------------------ one step

    def forward(
        self,
        z: Tensor,
        p: Tensor,
        action: Tensor,
        context: GeodesicContext,
        *,
        stochastic: bool = False,
        cache: PositionTerms | None = None,
    ) -> tuple[Tensor, Tensor, PositionTerms]:
        """One B-A-O-A-B step. z, p [B, d], action [B, A]; `cache` = position_terms(z) from the
        previous step (None: computed). Returns (z', p', position_terms at z').
        Lines are computed at z' (z's come from the cache), and at the half-step too when each
        half-drift reads its own correction (drift_correction_once = False)."""
        h = self.config.dt
        if cache is None:
            cache = self.position_terms(z, context)
        p = p + 0.5 * h * (cache.force + self.control_force(z, action, cache.gain))  # B
        z, p, correction = self.drift(
            z, p, 0.5 * h, context, cache.lines, point_features=cache.features
        )  # A
        p = self.thermostat(z, p, context, stochastic)  # O
        if not self.config.drift_correction_once:
            correction = None  # the second half-drift reads the head at its own start
        z, p, _ = self.drift(z, p, 0.5 * h, context, None, correction)  # A
        cache = self.position_terms(z, context)
        p = p + 0.5 * h * (cache.force + self.control_force(z, action, cache.gain))  # B
        return z, p, cache


@register_dynamics(
    "geodesic", GeodesicConfig, "GeodesicCrossAttention: Boris-BAOAB on the Poincare ball"
)
class GeodesicDynamics(Dynamics):
    """The geodesic world model's latent dynamics (plugs into world_model.model.WorldModel)."""

    state_type = GeodesicState

    def __init__(self, obs_dim: int, action_dim: int, config: GeodesicConfig | None = None):
        super().__init__()
        cfg = config or GeodesicConfig()
        self.config = cfg
        d = cfg.latent_dim
        self.feature_dim = (4 if cfg.head_features == "full" else 3) * d  # see features()
        if cfg.encoder == "identity" and obs_dim != 2 * d:
            raise ValueError(
                f"GeodesicConfig.encoder='identity' needs obs_dim = 2 * latent_dim = {2 * d}, "
                f"got obs_dim = {obs_dim}"
            )
        if cfg.encoder == "identity":
            self.encoder = nn.Identity()
        elif cfg.encoder == "mlp":
            self.encoder = mlp(
                obs_dim, [cfg.encoder_dim] * cfg.encoder_layers, 2 * d, cfg.activation
            )
        else:
            self.encoder = nn.Linear(obs_dim, 2 * d)
        self.prototypes = PrototypePool(
            d, PrototypeConfig(cfg.prototypes, cfg.feature_dim, cfg.prototype_init_scale)
        )
        self.window = TrajectoryWindow(d, cfg.feature_dim, TEXTURE) if cfg.window > 0 else None
        self.history_length = cfg.window  # the agent hands the last `window` observations
        self.uses_value_gradient = cfg.value_gradient  # and its value estimate, for chirality
        # the identity encoder's latent (z, p) is the observation: decoded exactly, no head
        self.exact_observation = cfg.encoder == "identity"
        self.integrator = GeodesicCrossAttention(cfg, action_dim)

    # ------------------------------------------------------------------ interface

    def encode(self, obs: Tensor) -> GeodesicState:
        if obs.dim() != 2:
            raise ValueError(f"GeodesicDynamics.encode expects obs [B, O], got {tuple(obs.shape)}")
        u, m = self.encoder(obs).chunk(2, dim=-1)  # [B, d] each
        if self.config.encoder == "identity":
            return GeodesicState(poincare.project(u, self.config.max_norm), m)
        if self.config.encoder == "mlp":
            z = poincare.expmap0(u)
            z = poincare.project(z, self.config.max_norm)
            return GeodesicState(z, poincare.conformal_factor(z) * m)
        return GeodesicState(poincare.project(u, self.config.max_norm), m)

    def observation(self, state: GeodesicState) -> Tensor:
        """(z, p) [B, 2d]: the observation itself under the identity encoder (exact_observation;
        the encoder only projects z into the ball)."""
        return torch.cat([state.z, state.p], dim=-1)

    def context(
        self,
        state: GeodesicState,
        history: GeodesicState | None = None,
        history_mask: Tensor | None = None,
        value_grad: Tensor | None = None,
        value_fn: Callable[[GeodesicState], Tensor] | None = None,
    ) -> GeodesicContext:
        """Banks for one rollout: prototypes (macro) plus, given `history` [B, W] (oldest first)
        with `history_mask` [B, W], the recent trajectory window (texture). The chiral
        projector's direction comes from `value_grad` [B, d], or from grad_z V at the root state
        when the agent passes its value estimate `value_fn` (seed 003 Def 285: n = P grad V);
        the direction is an input to the heads, computed once per rollout and not trained
        through."""
        if value_grad is None and value_fn is not None:
            value_grad = self._value_gradient(state, value_fn)
        integ = self.integrator
        force_bank = self.prototypes.force_bank()  # [1, M]: shared by every rollout
        correction_bank = self.prototypes.correction_bank()
        window = None
        if self.window is not None and history is not None:
            window = self.window.banks(history.z, history.p, history_mask)  # [B, W] each
        if window is not None and self.config.attention == "krr":  # one ridge system for all
            force_bank = ContextBank.cat([force_bank, window[0]])
            correction_bank = ContextBank.cat([correction_bank, window[1]])
            window = None
        corrects = self.config.drift_correction  # else the drift head is never read
        lines = integ.lines(force_bank.positions)  # one line per entry, shared by both banks
        force = integ.kick_head.prepare(force_bank, lines=lines)
        correction = integ.drift_head.prepare(correction_bank, lines=lines) if corrects else None
        if window is not None:  # prototypes prepared once, the window per sample
            w_lines = integ.lines(history.z)  # [B, W, r, r]
            force = PreparedContext.cat([force, integ.kick_head.prepare(window[0], lines=w_lines)])
            if correction is not None:
                correction = PreparedContext.cat(
                    [correction, integ.drift_head.prepare(window[1], lines=w_lines)]
                )
        force_parts = (force_bank,) if window is None else (force_bank, window[0])
        correction_parts = (correction_bank,) if window is None else (correction_bank, window[1])
        context = GeodesicContext(
            force=force,
            correction=correction,
            force_parts=force_parts,
            correction_parts=correction_parts,
            value_grad=value_grad,
            ou=integ.ou_coefficients(),
        )
        if state.z.shape[0] == 1:  # a planning root: its kick once, shared by every sample
            state._step_cache = (context, integ.position_terms(state.z, context))
        return context

    def _value_gradient(
        self, state: GeodesicState, value_fn: Callable[[GeodesicState], Tensor]
    ) -> Tensor:
        """grad_z V(z, p) at the rollout's root, detached: [B, d]."""
        with torch.enable_grad():
            z = state.z.detach().requires_grad_(True)
            value = value_fn(GeodesicState(z, state.p.detach()))
            (grad,) = torch.autograd.grad(value.sum(), z)
        return grad.detach()

    def next(
        self,
        state: GeodesicState,
        action: Tensor,
        context: Any = None,
        *,
        stochastic: bool = False,
    ) -> GeodesicState:
        ctx = context if context is not None else self.context(state)
        cached = getattr(state, "_step_cache", None)
        cache = cached[1] if cached is not None and cached[0] is ctx else None
        z, p, new_cache = self.integrator(
            state.z, state.p, action, ctx, stochastic=stochastic, cache=cache
        )
        out = GeodesicState(z, p)
        out._step_cache = (ctx, new_cache)  # position_terms at z', for the next step
        return out

    @torch.no_grad()
    def node_reports(
        self,
        batch: Any = None,
        value_fn: Callable[[GeodesicState], Tensor] | None = None,
        max_states: int = 64,
    ) -> tuple[list[Any], GeodesicState]:
        """Seed 003's nodes 67-70 (world_model.diagnostics.NodeReport, with thresholds and the
        seed's remedy) on one forward pass of the kick head: macro-level queries over the force
        bank (prototypes plus, with history, the texture window); node 67 also checks the drift
        head when the drift reads it (drift_correction) and reports the worse of the two.
        States come from the batch's first observations (at most `max_states`); without a batch
        (a run too short to fill one) the queries sit at the prototypes. Node 68 needs the
        softmax kernel, node 69 a value gradient (value_fn).
        Returns (reports, the query states)."""
        from world_model import diagnostics as nodes

        if batch is not None:
            state = self.encode(batch.obs[0][:max_states])
            history = mask = None
            if self.window is not None and batch.history_obs is not None:
                hist_obs = batch.history_obs[:, :max_states]  # [W, B, O]
                w, b = hist_obs.shape[:2]
                hist = self.encode(hist_obs.flatten(0, 1)).unflatten((w, b))
                history = hist.map(lambda t: t.transpose(0, 1))
                mask = batch.history_mask[:, :max_states].transpose(0, 1)
        else:
            z = self.prototypes.positions.detach().as_subclass(torch.Tensor)[:max_states]
            state, history, mask = GeodesicState(z, torch.zeros_like(z)), None, None
        ctx = self.context(state, history, mask, value_fn=value_fn)
        integ = self.integrator
        z = state.z
        queries = CovariantQueries(
            positions=z,
            features=position_features(z),
            value_grad=ctx.value_grad,
        )
        _, record = integ.kick_head(queries, ctx.force)
        gauge = nodes.gauge_invariance_check(
            integ.kick_head, queries, ctx.force_bank, generator=torch.Generator().manual_seed(0)
        )
        reports = [gauge]
        if self.config.drift_correction:  # the drift head only counts when the drift reads it
            drift_queries = CovariantQueries(
                positions=z,
                features=state_features(z, state.p),
                velocity=state.p * poincare.inverse_metric_factor(z),
            )
            gauge_drift = nodes.gauge_invariance_check(
                integ.drift_head,
                drift_queries,
                ctx.correction_bank,
                generator=torch.Generator().manual_seed(1),
            )
            reports = [max(gauge, gauge_drift, key=lambda r: r.value)]
        if record.tau is not None:
            reports.append(nodes.metric_temperature_consistency_check(record))
        if record.projectors is not None:
            reports.append(nodes.chirality_violation_check(record))
        reports.append(nodes.texture_leakage_check(record))
        return reports, state

    def diagnostics(
        self,
        batch: Any,
        value_fn: Callable[[GeodesicState], Tensor] | None = None,
        max_states: int = 64,
    ) -> tuple[dict[str, float], dict[str, Tensor]]:
        """Scalars for TensorBoard (`diagnostics/...`): node67_gauge_invariance (and its value
        relative to the largest score), node68_metric_temperature, node69_chirality_violation
        and node69_degenerate_fraction, node70_texture_leakage (see node_reports), friction,
        confinement, chirality strength, the largest |z|; histograms of |z| and tau(z)."""
        reports, state = self.node_reports(batch, value_fn, max_states)
        names = {
            67: "node67_gauge_invariance",
            68: "node68_metric_temperature",
            69: "node69_chirality_violation",
            70: "node70_texture_leakage",
        }
        scalars: dict[str, float] = {names[r.node]: r.value for r in reports}
        for r in reports:
            if r.node == 67:
                scalars["node67_relative"] = r.extra["relative"]
            if r.node == 69:
                scalars["node69_degenerate_fraction"] = r.extra["degenerate_fraction"]
        integ = self.integrator
        scalars["friction"] = float(integ.friction.detach())
        scalars["confinement"] = float(integ.confinement.detach())
        scalars["chirality_strength"] = float(integ.kick_head.chirality_strength.detach())
        norms = state.z.norm(dim=-1)
        scalars["z_norm_max"] = float(norms.max())
        tau = poincare.metric_temperature(state.z, self.config.d_k).squeeze(-1)
        return scalars, {"z_norm": norms, "tau": tau}

    def features(self, state: GeodesicState) -> Tensor:
        """(z, log_0 z, p / lambda(z), p) [B, 4d]: the position as a ball point and as a tangent
        vector at the origin, the momentum in an orthonormal frame and in coordinates (so a
        linear read-out can recover an observed momentum); head_features = 'orthonormal' drops
        the coordinate momentum: [B, 3d]."""
        features = state_features(state.z, state.p)
        if self.config.head_features == "orthonormal":
            return features
        return torch.cat([features, state.p], dim=-1)

    def consistency_loss(self, predicted: GeodesicState, target: GeodesicState) -> Tensor:
        """d_H(z, z*)^2 + lambda(z*)^2 |P_{z->z*} v - v*|^2 per sample, divided by d: hyperbolic
        distance of the positions and the metric norm of the velocity error at the target, after
        transporting the predicted velocity there (v = G^-1 p). [B]."""
        zp, zt = predicted.z, target.z
        ap, at = poincare.one_minus_sqnorm(zp), poincare.one_minus_sqnorm(zt)  # 2 / lambda
        vp = predicted.p * (0.5 * ap).square()  # G^-1 p
        vt = target.p * (0.5 * at).square()
        # parallel_transport: (lambda(zp) / lambda(zt)) gyr[zt, -zp] vp, the ratio at / ap
        dv = (at / ap) * poincare.gyration(zt, -zp, vp) - vt  # [B, d]
        vel2 = (dv / (0.5 * at)).square().sum(-1)  # lambda(zt)^2 |dv|^2 [B]
        return (poincare.dist(zp, zt).square() + vel2) / zp.shape[-1]

    def regularisers(self, states: GeodesicState, batch: Any) -> dict[str, Tensor]:
        """radius_penalty * mean d_H(0, z_0)^2 over the encoded roots z_0 = states.z[0] of the
        training rollouts (states [H + 1, B])."""
        c = self.config.radius_penalty
        if c <= 0:
            return {}
        radius = poincare.dist(states.z[0], torch.zeros_like(states.z[0]))  # [B]
        return {"radius": c * radius.square().mean()}

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {
            "encoder": list(self.encoder.parameters()),
            "dynamics": [
                *self.prototypes.parameters(),
                *(self.window.parameters() if self.window is not None else []),
                *self.integrator.parameters(),
            ],
        }
