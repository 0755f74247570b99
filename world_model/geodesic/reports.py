"""The geodesic model's diagnostics: seed 003's nodes 67-70 on its heads (computed by
world_model.diagnostics.run_diagnostics, once) and the scalars and histograms logged under
`diagnostics/` (docs/seed_map.md, nodes 67-70)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from geometry import poincare
from world_model import diagnostics as nodes
from world_model.memory.episodic import MemoryBank
from world_model.memory.routed_prototypes import RoutedPrototypePool
from world_model.model import Dynamics, LatentState

from . import kick

__all__ = ["node_reports", "diagnostics", "report_scalars", "NODE_NAMES"]

NODE_NAMES = {
    67: "node67_gauge_invariance",
    68: "node68_metric_temperature",
    69: "node69_chirality_violation",
    70: "node70_texture_leakage",
}


@torch.no_grad()
def node_reports(
    dyn: Dynamics,
    batch: Any = None,
    value_fn: Callable[[LatentState], Tensor] | None = None,
    max_states: int = 64,
) -> tuple[list[nodes.NodeReport], LatentState]:
    """Seed 003's nodes 67-70 (world_model.diagnostics.NodeReport, with thresholds and the
    seed's remedy) on one forward pass of the kick head: macro-level queries over the force
    bank (prototypes plus, with history, the texture window); node 67 also checks the drift
    head when the drift reads it (drift_correction) and reports the worse of the two.
    States come from the batch's first observations (at most `max_states`); without a batch
    (a run too short to fill one) the queries sit at the prototypes. Node 68 needs the
    softmax kernel, node 69 a value gradient (value_fn).
    `dyn`: a GeodesicDynamics (its encoder, banks and integrator).
    Returns (reports, the query states, a GeodesicState)."""
    if batch is not None:
        state = dyn.encode(batch.obs[0][:max_states])
        history = mask = None
        if dyn.window is not None and batch.history_obs is not None:
            hist_obs = batch.history_obs[:, :max_states]  # [W, B, O]
            w, b = hist_obs.shape[:2]
            hist = dyn.encode(hist_obs.flatten(0, 1)).unflatten((w, b))
            history = hist.map(lambda t: t.transpose(0, 1))
            mask = batch.history_mask[:, :max_states].transpose(0, 1)
    else:
        z = dyn.prototypes.positions.detach().as_subclass(torch.Tensor)[:max_states]
        state, history, mask = dyn.state_type(z, torch.zeros_like(z)), None, None
    ctx = dyn.context(state, history, mask, value_fn=value_fn)
    integ = dyn.integrator
    z = state.z
    queries = kick.kick_queries(integ.kick_head, z, ctx)
    _, record = integ.kick_head(queries, ctx.force)
    reports = nodes.run_diagnostics(
        integ.kick_head,
        queries,
        ctx.force_bank,
        record,
        generator=torch.Generator().manual_seed(0),
        emit=False,
    )
    if dyn.config.integrator.drift_correction:  # the drift head only counts when the drift reads it
        drift_queries = kick.drift_queries(integ.drift_head, z, state.p, ctx)
        gauge_drift = nodes.gauge_invariance_check(
            integ.drift_head,
            drift_queries,
            ctx.correction_bank,
            generator=torch.Generator().manual_seed(1),
        )
        reports[0] = max(reports[0], gauge_drift, key=lambda r: r.value)  # node 67
    return reports, state


def diagnostics(
    dyn: Dynamics,
    batch: Any,
    value_fn: Callable[[LatentState], Tensor] | None = None,
    max_states: int = 64,
) -> tuple[dict[str, float], dict[str, Tensor]]:
    """Scalars for TensorBoard (`diagnostics/...`): node67_gauge_invariance (and its value
    relative to the largest score; each node also with its `_threshold`),
    node68_metric_temperature, node69_chirality_violation
    and node69_degenerate_fraction, node70_texture_leakage (see node_reports), friction,
    confinement, chirality strength, the largest |z|; histograms of |z| and tau(z); with an
    episodic memory its gate and, from the batch's memories, memory_entries (per sample),
    memory_transitions (distinct), memory_bytes (their raw float32 storage) and
    memory_residual_norm (the mean |f_hat| of the entries), node70_memory_screened_mass (node 70
    for the memory's texture-level entries: EpisodicMemory.screened_mass at the query states);
    with a routed prototype pool,
    prototypes_active, prototype_spawns, prototype_prunes, routing_entropy, routing_topk_mass
    and gsr_bound at the query states (RoutedPrototypePool.routing_report)."""
    reports, state = node_reports(dyn, batch, value_fn, max_states)
    scalars, histograms = report_scalars(dyn, reports, state)
    if isinstance(dyn.prototypes, RoutedPrototypePool):
        scalars.update(dyn.prototypes.routing_report(state.z))
    memory = getattr(batch, "memory", None)
    if dyn.integrator.memory is not None and memory is not None:
        scalars["memory_entries"] = float(memory.mask.sum(0).float().mean())
        scalars["memory_transitions"] = float(memory.obs.shape[0])
        widths = memory.obs.shape[-1] + memory.next_obs.shape[-1] + memory.action.shape[-1]
        scalars["memory_bytes"] = float(4 * memory.obs.shape[0] * widths)
        bank = dyn.memory_bank(memory)
        if bank is not None and bank.mask.any():
            norms = bank.values.detach().norm(dim=-1)
            scalars["memory_residual_norm"] = float(norms[bank.mask].mean())
            n = state.z.shape[0]  # the query states are the batch's first samples
            rows = MemoryBank(bank.keys[:n], bank.values[:n], bank.mask[:n])
            held = rows.mask.any(-1)
            tension = kick.memory_tension(dyn.integrator)
            mass = dyn.integrator.memory.screened_mass(state.z, rows, tension)
            if bool(held.any()):
                scalars["node70_memory_screened_mass"] = float(mass[held].mean().detach())
    return scalars, histograms


def report_scalars(
    dyn: Dynamics, reports: list[nodes.NodeReport], state: LatentState
) -> tuple[dict[str, float], dict[str, Tensor]]:
    """`diagnostics` from reports already computed by `node_reports` (and their query states),
    so that a caller that wants both computes the nodes once."""
    scalars: dict[str, float] = {NODE_NAMES[r.node]: r.value for r in reports}
    # beside each node its threshold: the trainer names a crossed one when a run diverges
    scalars.update({f"{NODE_NAMES[r.node]}_threshold": r.threshold for r in reports})
    for r in reports:
        if r.node == 67:
            scalars["node67_relative"] = r.extra["relative"]
        if r.node == 69:
            scalars["node69_degenerate_fraction"] = r.extra["degenerate_fraction"]
    integ = dyn.integrator
    scalars["friction"] = float(integ.friction.detach())
    scalars["confinement"] = float(integ.confinement.detach())
    scalars["chirality_strength"] = float(integ.kick_head.chirality_strength.detach())
    if integ.memory is not None:
        scalars["memory_gate"] = float(integ.memory.gate.detach())
    norms = state.z.norm(dim=-1)
    scalars["z_norm_max"] = float(norms.max())
    tau = poincare.metric_temperature(state.z, dyn.config.head.d_k).squeeze(-1)
    return scalars, {"z_norm": norms, "tau": tau}
