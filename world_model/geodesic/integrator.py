"""GeodesicCrossAttention: one Boris-BAOAB step of the geodesic world model written as covariant
attention heads (seed 003 Def 287, docs/seed_map.md; the composition is
geometry.langevin.baoab, with the substeps below passed in).

- Kick (Prop 101): the kick head's force (-grad Phi of its scalar read-out, or a force field),
  the known confining force and optional Gaussian wells (geometry.potentials), the episodic
  memory's potential when there is one (world_model/memory/episodic.py), and the control
  force; with the curl on, the Lorentz force of a learned 2-form F = dA rotates p inside each
  half-kick (Boris; world_model/geodesic/curl.py). The position-only part is PositionTerms,
  carried from a step's closing kick to the next step's opening kick.
- Drift (Prop 102): the exact geodesic flow with the drift head's velocity correction.
- O: exact OU with a learned friction, plus an optional learned thermostat head.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from geometry import langevin, poincare, potentials
from world_model import sharding
from world_model.attention.context import ContextBank
from world_model.attention.covariant import CovariantAttention, PreparedContext
from world_model.layers import mlp
from world_model.memory.episodic import EpisodicMemory
from world_model.memory.prototypes import PrototypePool, ball_points_parameter
from world_model.memory.routed_prototypes import RoutedPrototypePool
from world_model.memory.window import TrajectoryWindow, position_features

from . import kick
from .config import MACRO, TEXTURE, GeodesicConfig
from .context import GeodesicContext
from .curl import ValueCurl

__all__ = ["PositionTerms", "GeodesicCrossAttention"]


class PositionTerms(NamedTuple):
    """What a kick at z computes that does not depend on the action, shared by a step's closing
    kick and the next step's opening kick and first drift (GeodesicCrossAttention.
    position_terms)."""

    force: Tensor  # [B, d] F_attn + F_conf
    lines: Tensor  # [B, r, r] Wilson lines U_{z->0}
    gain: Tensor | None  # [B, d * A] control gain M(z) (None: linear control)
    features: Tensor  # [B, 2d] (z, log_0 z)
    curl: Tensor | None = None  # [B, d, d] the 2-form F(z) (None: no curl)


class GeodesicCrossAttention(nn.Module):
    """One Boris-BAOAB step as attention heads (module docstring). Holds the kick head, the drift
    head, the control map, the confinement and thermostat parameters."""

    def __init__(self, config: GeodesicConfig, action_dim: int):
        super().__init__()
        cfg = self.config = config
        step = cfg.integrator
        d = cfg.latent_dim
        self.kick_head = CovariantAttention(
            cfg.head_config(
                query_features=2 * d, query_level=MACRO, d_out=1 if step.force == "potential" else d
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
            mlp(2 * d, [64], d * action_dim, cfg.activation) if step.control == "mlp" else None
        )
        if self.control_mlp is not None:
            nn.init.zeros_(self.control_mlp[-1].weight)
            nn.init.zeros_(self.control_mlp[-1].bias)
        self.confinement_raw = nn.Parameter(torch.tensor(math.sqrt(step.confinement)))
        if step.potential_wells > 0:  # Phi_w: flat at the start (depths 0)
            k = step.potential_wells
            self.well_centres = ball_points_parameter(
                k, d, cfg.context.prototype_init_scale, cfg.max_norm
            )  # [K, d], spread like the prototypes
            self.well_depths = nn.Parameter(torch.zeros(k))
            self.well_widths_raw = nn.Parameter(torch.full((k,), math.log(step.well_width)))
        self.friction_raw = nn.Parameter(torch.tensor(float(step.friction)))
        # created only when on: parameters drawn after it (none today) and checkpoints without
        # it stay as they were
        self.curl = ValueCurl(d, step.curl_rank) if step.curl else None
        banks = cfg.context
        self.memory = (  # the episodic memory's potential: one more term of the kick's Phi
            EpisodicMemory(banks.memory_eps) if banks.memory != "none" else None
        )
        self.thermostat_head = (
            CovariantAttention(cfg.head_config(query_features=2 * d, query_level=MACRO))
            if step.learned_thermostat
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

    # ------------------------------------------------------------------ context

    def build_context(
        self,
        prototypes: PrototypePool | RoutedPrototypePool,
        window: TrajectoryWindow | None,
        history_z: Tensor | None = None,
        history_p: Tensor | None = None,
        history_mask: Tensor | None = None,
        value_grad: Tensor | None = None,
        root_z: Tensor | None = None,
    ) -> GeodesicContext:
        """The banks for one rollout: the prototypes' force and correction banks ([1, M], shared by
        every rollout; a routed pool's top-K at each root `root_z` [B, d] instead: the whole pool
        prepared once, each root reading its top-K through a mask [B, pool rows]) and, given a
        `window` provider and the history positions / momenta `history_z`, `history_p` [B, W, d]
        (oldest first) with `history_mask` [B, W], the window's texture entries per sample. Under
        the krr kernel all are joined into one bank (one ridge system for all); otherwise the
        prototypes are prepared once and the window per sample. The drift head's bank is prepared
        only when the drift reads it (drift_correction)."""
        cfg = self.config
        force_bank = prototypes.force_bank()  # [1, M]: shared by every rollout
        correction_bank = prototypes.correction_bank()
        selection = None
        if isinstance(prototypes, RoutedPrototypePool):
            if root_z is None:
                raise ValueError("build_context: a routed prototype pool needs the roots root_z")
            selection = prototypes.route(root_z)  # [B, K]
        krr = cfg.head.kernel == "krr"
        if selection is not None and krr:  # the ridge system is over the selected entries
            force_bank = force_bank.take(selection.index, selection.valid)
            correction_bank = correction_bank.take(selection.index, selection.valid)
            selection = None
        banks = None
        if window is not None and history_z is not None:
            banks = window.banks(history_z, history_p, history_mask)  # [B, W] each
        if banks is not None and krr:  # one ridge system for all
            force_bank = ContextBank.cat([force_bank, banks[0]])
            correction_bank = ContextBank.cat([correction_bank, banks[1]])
            banks = None
        corrects = cfg.integrator.drift_correction  # else the drift head is never read
        lines = self.lines(force_bank.positions)  # one line per entry, shared by both banks
        force = self.kick_head.prepare(force_bank, lines=lines)
        correction = self.drift_head.prepare(correction_bank, lines=lines) if corrects else None
        if selection is not None:  # the whole pool prepared once; each root reads its top-K
            keep = selection.mask(force_bank.size)  # [B, pool rows]: a mask, not a gather
            mass = selection.log_mass(force_bank.size)  # GSR's weights, §10.1 [B, pool rows]
            force, force_bank = force.within(keep, mass), force_bank.within(keep)
            correction_bank = correction_bank.within(keep)
            correction = None if correction is None else correction.within(keep, mass)
        if banks is not None:  # prototypes prepared once, the window per sample
            w_lines = self.lines(history_z)  # [B, W, r, r]
            force = PreparedContext.cat([force, self.kick_head.prepare(banks[0], lines=w_lines)])
            if correction is not None:
                correction = PreparedContext.cat(
                    [correction, self.drift_head.prepare(banks[1], lines=w_lines)]
                )
        force_parts = (force_bank,) if banks is None else (force_bank, banks[0])
        correction_parts = (correction_bank,) if banks is None else (correction_bank, banks[1])
        return GeodesicContext(
            force=force,
            correction=correction,
            force_parts=force_parts,
            correction_parts=correction_parts,
            value_grad=value_grad,
            ou=self.ou_coefficients(),
        )

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
            self.friction, self.config.integrator.dt, self.config.integrator.thermostat_temperature
        )

    # ------------------------------------------------------------------ forces

    def position_terms(self, z: Tensor, context: GeodesicContext) -> PositionTerms:
        """Everything a kick at z [B, d] needs that does not depend on the action (PositionTerms).
        A step's closing kick and the next step's opening kick (and first drift) sit at the
        same z, so a rollout computes these once per step: forward returns them as the carry
        for the next step (GeodesicDynamics.next hands it on in GeodesicState.carry). The kick
        head, the control MLP and the drift head's queries read the same features
        (z, log_0 z), and the kick's gradient through log_0 reuses its Jacobian."""
        jacobian = poincare.logmap0_jacobian(z)  # log_0 z = f z
        features = torch.cat([z, jacobian[0] * z], dim=-1)  # position_features(z) [B, 2d]
        force, lines = self.kick_force(z, context, features, jacobian)
        gain = self.control_mlp(features) if self.control_mlp is not None else None
        if self.curl is None:
            return PositionTerms(force, lines, gain, features)
        return PositionTerms(force, lines, gain, features, self.curl.two_form(z))

    def kick_force(
        self,
        z: Tensor,
        context: GeodesicContext,
        features: Tensor | None = None,
        jacobian: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The position-only part of the kick at z and the Wilson lines there (kick.force):
        z [B, d] -> ([B, d], [B, r, r])."""
        return kick.force(self, z, context, features, jacobian)

    def hamiltonian(self, z: Tensor, p: Tensor, context: GeodesicContext) -> Tensor:
        """H(z, p) = |p|^2 / (2 lambda(z)^2) + Phi(z): [B], Phi the potential whose negative
        gradient is kick_force (kick.potential: the head, confinement, wells and the episodic
        memory's patches; force 'potential' only). Without friction, action and noise the B-A-B
        steps conserve H up to O(dt^2) (the drift is the exact geodesic flow, the kicks
        gradients; benchmarks/memory_disk.py measures the drift)."""
        if self.config.integrator.force != "potential":
            raise ValueError(
                "hamiltonian: the kick is a potential's gradient only with force 'potential'"
            )
        kinetic = 0.5 * (p / poincare.conformal_factor(z)).square().sum(-1)
        return kinetic + kick.potential(self, z, context)

    def wells(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """The potential wells Phi_w at z [B, d] and their force: ([B], [B, d])."""
        centres = self.well_centres.as_subclass(Tensor)  # plain tensor: no geoopt dispatch
        return potentials.gaussian_wells(z, centres, self.well_depths, self.well_widths_raw.exp())

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
        if cfg.integrator.drift_correction and correction is None:
            queries = kick.drift_queries(self.drift_head, z, p, context, point_features)
            lines = self.lines(z) if lines is None else lines
            correction, _ = self.drift_head(queries, context.correction, lines)  # [B, d]
        if (
            cfg.integrator.drift == "euclidean"
        ):  # the seed listing's step: no geodesic term (ablation)
            step = p * poincare.inverse_metric_factor(z)
            if correction is not None:
                step = step + correction / poincare.conformal_factor(z)
            return poincare.project(z + t * step, cfg.max_norm), p, correction
        z_new, p_new = poincare.geodesic_drift(z, p, t, correction, cfg.max_norm)
        return z_new, p_new, correction

    def thermostat(
        self,
        z: Tensor,
        p: Tensor,
        context: GeodesicContext,
        stochastic: bool,
        noise: Tensor | None = None,
    ) -> Tensor:
        """O step: exact OU p <- c1 p + c2 lambda(z) xi (its mean c1 p when not stochastic), plus
        the optional learned residual read from a bank of fresh noise vectors (zero mean).
        `noise`: xi [B, d] when drawn by the caller (stochastic only), else drawn here."""
        c1, c2 = context.ou if context.ou is not None else self.ou_coefficients()
        xi = None
        if stochastic:  # [B, d], batch-sharded
            xi = sharding.randn(p.shape, p) if noise is None else noise
        p = langevin.ou_step(z, p, c1, c2, xi)
        if self.thermostat_head is not None and stochastic:
            bank = context.force_bank
            values = bank.value_features  # [B, N, F]
            noise = sharding.randn(values.shape, values)  # fresh noise values, keys learned
            noise_bank = ContextBank(
                bank.positions, bank.key_features, noise, bank.levels, bank.mask
            )
            queries = kick.thermostat_queries(self.thermostat_head, z, p, context)
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
        carry: PositionTerms | None = None,
        noise: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, PositionTerms]:
        """One B-A-O-A-B step: geometry.langevin.baoab with this module's substeps. z, p [B, d],
        action [B, A]; `carry` = position_terms(z) returned by the previous step (None:
        computed); `noise`: the O step's xi [B, d] when stochastic, drawn by the caller (a
        compiled step draws none itself: world_model/geodesic/compiled.py), None: drawn in the
        O step. Returns (z', p', position_terms at z'), the last the next step's carry.
        B: the position terms' force plus the control force (with the curl: Boris' kick, the
        position terms' 2-form rotating p between its halves). A: `drift`; the first half-drift
        reads the position terms' lines and features, and its drift correction is reused by
        the second (one drift-head evaluation per step). O: `thermostat`."""

        def kick(x: Tensor, _p: Tensor, terms: PositionTerms) -> Tensor:
            return terms.force + self.control_force(x, action, terms.gain)

        def rotate(x: Tensor, q: Tensor, t: float, terms: PositionTerms) -> Tensor:
            return langevin.boris_rotation(x, q, terms.curl, t)

        def half_drift(
            x: Tensor, q: Tensor, t: float, terms: PositionTerms | None, correction: Tensor | None
        ) -> tuple[Tensor, Tensor, Tensor | None]:
            if terms is not None:  # the first half-drift, at the kick's point
                return self.drift(x, q, t, context, terms.lines, point_features=terms.features)
            return self.drift(x, q, t, context, None, correction)  # the first's correction

        return langevin.baoab(
            z,
            p,
            self.config.integrator.dt,
            lambda x: self.position_terms(x, context),
            kick,
            half_drift,
            lambda x, q: self.thermostat(x, q, context, stochastic, noise),
            carry,
            rotate=None if self.curl is None else rotate,
        )
