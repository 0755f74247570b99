"""GeodesicDynamics: the geodesic world model's latent dynamics (plugs into
world_model.model.WorldModel; registered as "geodesic" in world_model/registry.py). Latent state
(z, p) in the Poincare ball; one `next` is one GeodesicCrossAttention step, whose closing-kick
position terms travel with the returned state as an explicit carry (GeodesicState.carry) and
serve the next step's opening kick."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from geometry import poincare
from world_model import sharding
from world_model.layers import mlp
from world_model.memory.episodic import MemoryBank, MemoryInputs, empirical_residual
from world_model.memory.prototypes import PrototypeConfig, PrototypePool
from world_model.memory.routed_prototypes import RoutedPoolConfig, RoutedPrototypePool
from world_model.memory.window import TrajectoryWindow, state_features
from world_model.model import Dynamics, LatentState, carried

from . import reports
from .compiled import MEMORY_CHUNK, CompiledSteps, pad_rows
from .config import TEXTURE, GeodesicConfig
from .context import GeodesicContext
from .integrator import GeodesicCrossAttention, PositionTerms

__all__ = ["StepCarry", "GeodesicState", "GeodesicDynamics"]


class StepCarry(NamedTuple):
    """What a step hands to the next: the position terms at its end point (the closing kick's,
    which are the next opening kick's) and the context they were computed with (they are reused
    only by a step with that same context)."""

    context: GeodesicContext
    terms: PositionTerms


@dataclass
class GeodesicState(LatentState):
    z: Tensor  # [B, d] position in the Poincare ball
    p: Tensor  # [B, d] momentum covector at z
    carry: StepCarry | None = carried()  # position terms at z (world_model.model.carried)

    def expand(self, n: int) -> GeodesicState:
        """A batch of 1 viewed as n, with its carry (the position terms at z) viewed as n too: a
        planner that expands its root to n samples then pays for the root's kick once, not n
        times per iteration."""
        out = super().expand(n)
        if self.carry is not None:
            ctx, terms = self.carry
            out.carry = StepCarry(
                ctx,
                PositionTerms(*(None if t is None else t.expand(n, *t.shape[1:]) for t in terms)),
            )
        return out


# GeodesicConfig.encoder: obs [B, O] -> (u, m) [B, 2d], and (u, m) -> the state (z, p). 'mlp':
# z = exp_0(u), p = lambda(z) m; 'linear' and 'identity': z = u projected into the ball, p = m.
_ENCODERS: dict[str, Callable[[int, GeodesicConfig], nn.Module]] = {
    "mlp": lambda obs_dim, cfg: mlp(
        obs_dim, [cfg.encoder_dim] * cfg.encoder_layers, 2 * cfg.latent_dim, cfg.activation
    ),
    "linear": lambda obs_dim, cfg: nn.Linear(obs_dim, 2 * cfg.latent_dim),
    "identity": lambda obs_dim, cfg: nn.Identity(),
}


def _exp_state(u: Tensor, m: Tensor, max_norm: float) -> GeodesicState:
    z = poincare.project(poincare.expmap0(u), max_norm)
    return GeodesicState(z, poincare.conformal_factor(z) * m)


def _projected_state(u: Tensor, m: Tensor, max_norm: float) -> GeodesicState:
    return GeodesicState(poincare.project(u, max_norm), m)


_ENCODED: dict[str, Callable[[Tensor, Tensor, float], GeodesicState]] = {
    "mlp": _exp_state,
    "linear": _projected_state,
    "identity": _projected_state,
}


def _routed_pool(cfg: GeodesicConfig) -> RoutedPrototypePool:
    banks = cfg.context
    return RoutedPrototypePool(
        cfg.latent_dim,
        RoutedPoolConfig(
            capacity=banks.pool_capacity,
            initial=banks.prototypes,
            k=min(banks.route_k, banks.prototypes),
            feature_dim=banks.feature_dim,
            init_scale=banks.prototype_init_scale,
            spawn_sigmas=banks.spawn_sigmas,
            window=banks.spawn_window,
            prune_idle=banks.prune_idle,
            max_norm=cfg.max_norm,
        ),
    )


# ContextConfig.routing: the macro level's prototypes, a fixed table read whole ('dense') or a
# DMG-grown pool that GSR routes each root to ('gsr')
_POOLS: dict[str, Callable[[GeodesicConfig], PrototypePool | RoutedPrototypePool]] = {
    "dense": lambda cfg: PrototypePool(
        cfg.latent_dim,
        PrototypeConfig(
            cfg.context.prototypes, cfg.context.feature_dim, cfg.context.prototype_init_scale
        ),
    ),
    "gsr": _routed_pool,
}


class GeodesicDynamics(Dynamics):
    """The geodesic world model's latent dynamics (module docstring; world_model/geodesic)."""

    state_type = GeodesicState

    def __init__(self, obs_dim: int, action_dim: int, config: GeodesicConfig | None = None):
        super().__init__()
        cfg = config or GeodesicConfig()
        self.config = cfg
        d = cfg.latent_dim
        self.feature_dim = 4 * d  # see features()
        if cfg.encoder == "identity" and obs_dim != 2 * d:
            raise ValueError(
                f"GeodesicConfig.encoder='identity' needs obs_dim = 2 * latent_dim = {2 * d}, "
                f"got obs_dim = {obs_dim}"
            )
        self.encoder = _ENCODERS[cfg.encoder](obs_dim, cfg)
        self.prototypes: PrototypePool | RoutedPrototypePool = _POOLS[cfg.context.routing](cfg)
        banks = cfg.context
        self.window = TrajectoryWindow(d, banks.feature_dim, TEXTURE) if banks.window > 0 else None
        self.history_length = banks.window  # the agent hands the last `window` observations
        # and the episode's last `memory_capacity` transitions, for the episodic memory
        self.memory_capacity = banks.memory_capacity if banks.memory != "none" else 0
        self.uses_value_gradient = banks.value_gradient  # and its value estimate, for chirality
        # the identity encoder's latent (z, p) is the observation: decoded exactly, no head
        self.exact_observation = cfg.encoder == "identity"
        self.integrator = GeodesicCrossAttention(cfg, action_dim)
        self.compiled: CompiledSteps | None = None  # compile_steps()

    def compile_steps(self) -> bool:
        """Run the integrator's steps compiled from now on (world_model/geodesic/compiled.py:
        one graph per kind of step, inductor's on-disk cache; eager where inductor cannot
        build). The values agree with the eager steps' to rounding
        (tests/world_model/test_compiled_steps.py)."""
        if self.compiled is None:
            self.compiled = CompiledSteps(self.integrator)
        return True

    # ------------------------------------------------------------------ interface

    def encode(self, obs: Tensor) -> GeodesicState:
        if obs.dim() != 2:
            raise ValueError(f"GeodesicDynamics.encode expects obs [B, O], got {tuple(obs.shape)}")
        u, m = self.encoder(obs).chunk(2, dim=-1)  # [B, d] each
        return _ENCODED[self.config.encoder](u, m, self.config.max_norm)

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
        memory: MemoryInputs | None = None,
    ) -> GeodesicContext:
        """Banks for one rollout (GeodesicCrossAttention.build_context): prototypes (macro) plus,
        given `history` [B, W] (oldest first) with `history_mask` [B, W], the recent trajectory
        window (texture), and, given `memory` (a memory per sample, or one for a plan's root), the
        episodic memory's entries (memory_bank). The chiral projector's direction comes from
        `value_grad` [B, d], or from grad_z V at the root state when the agent passes its value
        estimate `value_fn` (seed 003 Def 285: n = P grad V); the direction is an input to the
        heads, computed once per rollout and not trained through. With context.value_gradient
        off (chirality off) neither is read: no projector, no chiral gate. Writes into no
        state: a rollout root's own terms come from `root`."""
        if not self.uses_value_gradient:
            value_grad = value_fn = None
        if value_grad is None and value_fn is not None:
            value_grad = self._value_gradient(state, value_fn)
        context = self.integrator.build_context(
            self.prototypes,
            self.window,
            None if history is None else history.z,
            None if history is None else history.p,
            history_mask,
            value_grad,
            root_z=state.z,
        )
        if memory is not None and self.integrator.memory is not None:
            context.memory = self.memory_bank(memory)
        return context

    def root(self, state: GeodesicState, context: GeodesicContext) -> GeodesicState:
        """`state` carrying its position terms under `context` (the first step's opening kick):
        a planner computes its rows' first kick once per plan instead of once per iteration."""
        return GeodesicState(
            state.z, state.p, carry=StepCarry(context, self._position_terms(state.z, context))
        )

    def _position_terms(self, z: Tensor, context: GeodesicContext) -> PositionTerms:
        """integrator.position_terms(z, context), compiled when the steps are."""
        if self.compiled is None:
            return self.integrator.position_terms(z, context)
        return self.compiled.root_terms(z, context)

    @torch.no_grad()
    def memory_bank(self, memory: MemoryInputs) -> MemoryBank | None:
        """The memory's entries from its raw transitions with the current encoder and kick
        (world_model/memory/episodic.py): keys z_i = enc(o_i).z, values the empirical residuals
        (p'_i - p_i) / h - F_kick(z_i, a_i), F_kick read from the prototypes' bank alone (no
        window, no memory, no chiral gate). Each distinct transition is evaluated once, each
        observation encoded once (next_row); the samples' entries index them. None when no
        sample holds an entry."""
        if memory.obs.shape[0] == 0:
            return None
        state = self.encode(memory.obs)
        chunks = zip(state.z.split(MEMORY_CHUNK), memory.action.split(MEMORY_CHUNK), strict=True)
        kick = torch.cat([self._bare_kick(z, action) for z, action in chunks])  # [U, d]
        p_after = self._next_momenta(memory, state.p)
        residual = empirical_residual(state.p, p_after, kick, self.config.integrator.dt)  # [U, d]
        index = memory.index.transpose(0, 1)  # [B, C]
        return MemoryBank(state.z[index], residual[index], memory.mask.transpose(0, 1))

    def _next_momenta(self, memory: MemoryInputs, p: Tensor) -> Tensor:
        """enc(next_obs).p [U, d]; read from p (enc(obs).p) where memory.next_row says next_obs
        is one of obs, so that an observation held twice is encoded once."""
        if memory.next_row is None:
            return self.encode(memory.next_obs).p
        held = memory.next_row >= 0
        p_after = p[memory.next_row.clamp(min=0)]
        if not bool(held.all()):
            p_after[~held] = self.encode(memory.next_obs[~held]).p
        return p_after

    def _bare_kick(self, z: Tensor, action: Tensor) -> Tensor:
        """F_kick(z, a) [n, d] at n <= MEMORY_CHUNK rows from the prototypes' bank alone (compiled:
        at a few padded row counts, each its own graph; pad_rows)."""
        n = z.shape[0]
        padded = z if self.compiled is None else pad_rows(z)
        bare = self.integrator.build_context(self.prototypes, None, root_z=padded)
        terms = self._position_terms(padded, bare)
        gain = None if terms.gain is None else terms.gain[:n]
        return terms.force[:n] + self.integrator.control_force(z, action, gain)

    @torch.no_grad()
    def genesis(self, state: GeodesicState, errors: Tensor) -> list[tuple[Tensor, Tensor]]:
        """A routed pool's DMG step on one update's roots `state` [B] and their one-step
        prediction errors [B] (routed_prototypes.RoutedPrototypePool.genesis): (parameter, rows
        written) pairs whose optimiser moments the caller clears. Nothing with a fixed table."""
        if not isinstance(self.prototypes, RoutedPrototypePool):
            return []
        return self.prototypes.genesis(state.z, errors)

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
        """One GeodesicCrossAttention step; the state's carry is used when it was computed with
        this context, and the returned state carries the position terms at its end point."""
        ctx = context if context is not None else self.context(state)
        carry = state.carry
        terms = carry.terms if carry is not None and carry.context is ctx else None
        # the O step's noise drawn here, before the step, as the eager step would draw it
        noise = sharding.randn(state.p.shape, state.p) if stochastic else None
        step = self.integrator if self.compiled is None else self.compiled.step
        z, p, terms = step(
            state.z, state.p, action, ctx, stochastic=stochastic, carry=terms, noise=noise
        )
        return GeodesicState(z, p, carry=StepCarry(ctx, terms))

    @torch.no_grad()
    def node_reports(
        self,
        batch: Any = None,
        value_fn: Callable[[GeodesicState], Tensor] | None = None,
        max_states: int = 64,
    ) -> tuple[list[Any], GeodesicState]:
        """Seed 003's nodes 67-70 on the model's heads (reports.node_reports; agent/diagnose.py
        calls this). Returns (reports, the query states)."""
        return reports.node_reports(self, batch, value_fn, max_states)

    def diagnostics(
        self,
        batch: Any,
        value_fn: Callable[[GeodesicState], Tensor] | None = None,
        max_states: int = 64,
    ) -> tuple[dict[str, float], dict[str, Tensor]]:
        """Scalars and histograms for TensorBoard (reports.diagnostics)."""
        return reports.diagnostics(self, batch, value_fn, max_states)

    def report_scalars(
        self, node_reports: list[Any], state: GeodesicState
    ) -> tuple[dict[str, float], dict[str, Tensor]]:
        """`diagnostics` of reports from `node_reports` (nodes computed once)."""
        return reports.report_scalars(self, node_reports, state)

    def features(self, state: GeodesicState) -> Tensor:
        """(z, log_0 z, p / lambda(z), p) [B, 4d]: the position as a ball point and as a tangent
        vector at the origin, the momentum in an orthonormal frame and in coordinates (so a
        linear read-out can recover an observed momentum)."""
        return torch.cat([state_features(state.z, state.p), state.p], dim=-1)

    def consistency_loss(self, predicted: GeodesicState, target: GeodesicState) -> Tensor:
        """d_H(z, z*)^2 + lambda(z*)^2 |P_{z->z*} v - v*|^2 per sample, divided by d: hyperbolic
        distance of the positions and the metric norm of the velocity error at the target, after
        transporting the predicted velocity there (v = G^-1 p; poincare.
        transported_velocity_error). [B]."""
        zp, zt = predicted.z, target.z
        vel2 = poincare.transported_velocity_error(zp, predicted.p, zt, target.p)  # [B]
        return (poincare.dist(zp, zt).square() + vel2) / zp.shape[-1]

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {
            "encoder": list(self.encoder.parameters()),
            "dynamics": [
                *self.prototypes.parameters(),
                *(self.window.parameters() if self.window is not None else []),
                *self.integrator.parameters(),
            ],
        }
