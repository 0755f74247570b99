"""The kick of one BAOAB step in one place (seed 003 Prop 101; docs/seed_map.md, "Def 287 step
1/5"): the potential Phi(z) = Phi_head(z) + kappa Phi_conf(z) + Phi_wells(z) + Phi_mem(z)
(`potential`) and its force -grad Phi beside it (`force`: through the kick head's closed-form
gradient, world_model.attention.covariant_gradient.scalar_output_gradient, chained through log_0, or
by autograd), the episodic memory's potential among them; and the query builders of the model's
heads (`kick_queries`, `drift_queries`, `thermostat_queries`), the one definition that the
integrator, the node reports (reports.py) and the figures read the heads through.

The kick head's scalar read-out Phi_head is the same function in both: `potential` runs the
head's forward, `force` its closed-form gradient (or autograd of that forward).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from geometry import poincare, potentials
from world_model.attention.covariant import CovariantAttention, CovariantQueries
from world_model.memory.episodic import EpisodicMemory
from world_model.memory.window import position_features, state_features

from .config import TEXTURE, GeodesicConfig
from .context import GeodesicContext

__all__ = [
    "KickParts",
    "kick_queries",
    "drift_queries",
    "thermostat_queries",
    "potential",
    "force",
]


class KickParts(Protocol):
    """What the kick reads of the model (world_model.geodesic.integrator.GeodesicCrossAttention
    implements it): the kick head, the confinement strength, the wells and the memory."""

    config: GeodesicConfig
    kick_head: CovariantAttention
    confinement: Tensor
    memory: EpisodicMemory | None

    def lines(self, z: Tensor) -> Tensor: ...

    def wells(self, z: Tensor) -> tuple[Tensor, Tensor]: ...


# ----------------------------------------------------------------------- queries


def kick_queries(
    head: CovariantAttention, z: Tensor, context: GeodesicContext, features: Tensor | None = None
) -> CovariantQueries:
    """The kick head's queries at z [B, d]: features (z, log_0 z) [B, 2d] (`features` when
    already computed), gated by the context's chiral projector."""
    if features is None:
        features = position_features(z)
    return CovariantQueries.unchecked(  # the model's own states: inside the ball
        positions=z, features=features, chiral=context.chiral_for(head)
    )


def drift_queries(
    head: CovariantAttention,
    z: Tensor,
    p: Tensor,
    context: GeodesicContext,
    point_features: Tensor | None = None,
) -> CovariantQueries:
    """The drift head's queries at (z, p) [B, d]: features (z, log_0 z, p / lambda(z)) [B, 3d]
    with the velocity G^-1 p, gated by the context's chiral projector. `point_features`:
    (z, log_0 z) when already computed."""
    # the velocity before the features: the order the operations are recorded in is the order
    # autograd sums their gradients in, and training's gradients stay bit for bit as before
    velocity = p * poincare.inverse_metric_factor(z)  # [B, d] coordinate velocity
    return CovariantQueries.unchecked(
        positions=z,
        features=state_features(z, p, point_features),
        velocity=velocity,
        chiral=context.chiral_for(head),
    )


def thermostat_queries(
    head: CovariantAttention, z: Tensor, p: Tensor, context: GeodesicContext
) -> CovariantQueries:
    """The learned thermostat head's queries at (z, p): features (z, p / lambda(z)) [B, 2d]."""
    return CovariantQueries.unchecked(
        positions=z,
        features=torch.cat([z, p / poincare.conformal_factor(z)], dim=-1),
        chiral=context.chiral_for(head),
    )


# ----------------------------------------------------------------------- potential and force


def _head_potential(parts: KickParts, z: Tensor, context: GeodesicContext, lines: Tensor) -> Tensor:
    """Phi_head(z) [B, 1]: the kick head's scalar read-out (its forward)."""
    out, _ = parts.kick_head(kick_queries(parts.kick_head, z, context), context.force, lines)
    return out


def potential(parts: KickParts, z: Tensor, context: GeodesicContext) -> Tensor:
    """Phi(z) [B] whose negative gradient is `force`: the kick head's scalar read-out, the
    confinement, the wells and the episodic memory's patches (force 'potential' only)."""
    if parts.config.integrator.force != "potential":
        raise ValueError("the kick is a potential's gradient only with force 'potential'")
    phi = _head_potential(parts, z, context, parts.lines(z)).squeeze(-1)  # [B]
    phi = phi + parts.confinement * potentials.confining_potential(z)
    if parts.config.integrator.potential_wells > 0:
        phi = phi + parts.wells(z)[0]
    if parts.memory is not None and context.memory is not None:
        phi = phi + parts.memory(z, context.memory, memory_tension(parts))[0]
    return phi


def memory_tension(parts: KickParts) -> Tensor | float:
    """The area law's sigma for the memory's entries: the kick head's texture-level string
    tension (the entries are this episode's states, as the window's), 0 without screening."""
    head = parts.kick_head
    return head.string_tension()[TEXTURE] if head.screening_coupling is not None else 0.0


def force(
    parts: KickParts,
    z: Tensor,
    context: GeodesicContext,
    features: Tensor | None = None,
    jacobian: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """The position-only part of the kick at z, F_attn + F_conf (+ F_wells, + F_mem), and the
    Wilson lines at z (both reused by the next step's opening kick and drift).
    z [B, d] -> ([B, d], [B, r, r]).

    force = 'potential': F_attn = -grad_z Phi_head(z), Phi_head the kick head's scalar read-out
    of the query features (z, log_0 z); in closed form (potential_gradient = 'closed_form') or by
    autograd, both with create_graph while training, so parameters learn through the gradient
    (under no_grad, e.g. planning, nothing is kept). force = 'field': F_attn = lambda(z) * head
    output (an orthonormal-frame force vector). `features`: the query features (z, log_0 z) when
    already computed, `jacobian`: poincare.logmap0_jacobian(z) when already computed. The
    episodic memory's force is its potential's gradient, in closed form
    (world_model/memory/episodic.py)."""
    cfg = parts.config
    head = parts.kick_head
    if cfg.integrator.force == "field":
        lines = parts.lines(z)
        out = _head_potential(parts, z, context, lines)  # [B, d] orthonormal frame
        f = poincare.conformal_factor(z) * out
    elif cfg.integrator.potential_gradient == "closed_form" and head.has_closed_form_gradient():
        _, grad_z, grad_x, lines = head.scalar_output_gradient(
            kick_queries(head, z, context, features), context.force
        )
        d = z.shape[-1]  # chain rule through the features (z, log_0 z) of kick_queries
        f = -(grad_z + grad_x[:, :d] + poincare.logmap0_vjp(z, grad_x[:, d:], jacobian))
    else:
        training = torch.is_grad_enabled()
        with torch.enable_grad():
            zq = z if (training and z.requires_grad) else z.detach().requires_grad_(True)
            lines = parts.lines(zq)
            phi = _head_potential(parts, zq, context, lines)  # [B, 1]
            (grad,) = torch.autograd.grad(phi.sum(), zq, create_graph=training)
        f = -grad
        if not training:
            f, lines = f.detach(), lines.detach()
    f = f + parts.confinement * potentials.confining_force(z)
    if cfg.integrator.potential_wells > 0:
        f = f + parts.wells(z)[1]
    if parts.memory is not None and context.memory is not None:
        f = f + parts.memory(z, context.memory, memory_tension(parts))[1]
    return f, lines
