"""One pass of the geodesic model's heads at some states: the kick head (B step, macro-level
queries over the force bank) and the drift head (A step, texture-level queries over the
correction bank; only when the drift reads it, `integrator.drift_correction`), with the context
the model builds (prototypes, window, value gradient for the chiral projector) and the queries
world_model/geodesic/kick.py builds for the integrator and reports.py's node reports: their
`AttentionRecord`s. head_figures.py turns a pass into the numbers of the diagnose figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from world_model.attention.covariant import AttentionRecord, CovariantQueries
from world_model.model import Dynamics, LatentState

from . import kick
from .context import GeodesicContext

__all__ = ["HeadPass", "head_pass"]


@dataclass
class HeadPass:
    """The kick and drift heads at some states (module docstring). z, p [B, d]; records
    [B, 1, N] (N: the bank's entries, prototypes first, then the window, oldest first);
    `*_pre_gate` the heads' mixtures before the chiral gate, sum alpha V~ [B, 1, d_k]."""

    z: Tensor
    p: Tensor
    context: GeodesicContext
    kick_queries: CovariantQueries
    kick: AttentionRecord
    kick_pre_gate: Tensor
    drift_queries: CovariantQueries | None  # None when the drift has no correction head
    drift: AttentionRecord | None
    drift_pre_gate: Tensor | None

    def records(self) -> dict[str, AttentionRecord]:
        """{'kick': ..., 'drift': ...} of the heads that ran."""
        out = {"kick": self.kick}
        if self.drift is not None:
            out["drift"] = self.drift
        return out


@torch.no_grad()
def head_pass(
    dyn: Dynamics,
    obs: Tensor,
    history_obs: Tensor | None = None,
    history_mask: Tensor | None = None,
    value_fn: Callable[[LatentState], Tensor] | None = None,
    device: torch.device | str | None = None,
) -> HeadPass:
    """The heads of `dyn` (a GeodesicDynamics) at the encoded states of obs [B, O] with their
    history windows history_obs [W, B, O] / history_mask [W, B], the tensors moved to `device`
    (None: left where they are): queries and banks as reports.py's node reports and the
    integrator build them (kick.py: kick queries (z, log_0 z), drift queries (z, log_0 z,
    p / lambda) with the velocity G^-1 p, both gated by the chiral projector of the value
    gradient of `value_fn`, read when the dynamics uses it, as dyn.context does)."""
    state = dyn.encode(obs.to(device))
    history = mask = None
    if dyn.window is not None and history_obs is not None:
        w, b = history_obs.shape[:2]
        hist = dyn.encode(history_obs.to(device).flatten(0, 1)).unflatten((w, b))
        history = hist.map(lambda t: t.transpose(0, 1))  # [B, W]
        mask = history_mask.to(device).transpose(0, 1)
    ctx = dyn.context(state, history, mask, value_fn=value_fn)
    integ = dyn.integrator
    z, p = state.z, state.p
    kick_queries = kick.kick_queries(integ.kick_head, z, ctx)
    _, kick_record = integ.kick_head(kick_queries, ctx.force)
    drift_queries = drift = drift_pre = None
    if ctx.correction is not None:
        drift_queries = kick.drift_queries(integ.drift_head, z, p, ctx)
        _, drift = integ.drift_head(drift_queries, ctx.correction)
        drift_pre = ctx.correction.mixture(drift.weights)
    return HeadPass(
        z=z,
        p=p,
        context=ctx,
        kick_queries=kick_queries,
        kick=kick_record,
        kick_pre_gate=ctx.force.mixture(kick_record.weights),
        drift_queries=drift_queries,
        drift=drift,
        drift_pre_gate=drift_pre,
    )
