"""The replay buffer's last episodes and one pass of a geodesic agent's heads over them: the
states and attention records agent/inspection/figures_data.py turns into the numbers of the diagnose
figures (its docstring says what each is).

- `buffer_episodes`: the last few complete episodes, per env copy (buffer.streams);
- `episode_inputs`: an episode's observations and each step's history window, masked before
  the episode's start, as ReplayBuffer.sample hands them to the model;
- `head_pass`: the kick head (B step) and the drift head (A step) at the encoded states, with
  the queries and banks world_model/geodesic/reports.py's node reports build.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from agent.core.protocols import InspectedAgent
from world_model.attention.covariant import AttentionRecord, CovariantQueries
from world_model.geodesic import kick

if TYPE_CHECKING:
    from agent.core.buffer import ReplayBuffer
    from world_model.geodesic.context import GeodesicContext

__all__ = [
    "EPISODES",
    "MAX_EPISODE_STEPS",
    "HeadPass",
    "buffer_episodes",
    "episode_inputs",
    "head_pass",
]

EPISODES = 3  # episodes drawn on the disk
MAX_EPISODE_STEPS = 250  # the first steps of each (a DMC episode is 500 decisions)


# --------------------------------------------------------------------------- episodes


def buffer_episodes(
    buffer: ReplayBuffer, count: int = EPISODES, max_steps: int = MAX_EPISODE_STEPS
) -> list[np.ndarray]:
    """The buffer slots [T] of its last `count` complete episodes (ending terminated or
    truncated), oldest first, each cut to its first `max_steps` steps; when no episode is
    complete yet, the open one. Copies of a vector env (buffer.streams K) are separate streams:
    copy k's steps are the slots = k (mod K)."""
    if buffer.size == 0:
        return []
    oldest = buffer.ptr if buffer.size == buffer.capacity else 0
    slots = (oldest + np.arange(buffer.size)) % buffer.capacity  # [size], time order
    done = ((buffer.terminated + buffer.truncated) > 0).squeeze(-1).numpy()  # [allocated]
    complete: list[tuple[int, np.ndarray]] = []  # (time of the episode's end, its slots)
    still_open: list[np.ndarray] = []
    wrapped = buffer.size == buffer.capacity  # the oldest episode may have lost its start
    for stream in range(buffer.streams):
        mine = np.flatnonzero(slots % buffer.streams == stream)  # logical positions, in order
        ends = np.flatnonzero(done[slots[mine]])
        begin = 0
        for n, end in enumerate(ends):
            if not (wrapped and n == 0):
                complete.append((int(mine[end]), slots[mine[begin : end + 1]]))
            begin = end + 1
        if begin < mine.size:
            still_open.append(slots[mine[begin:]])
    chosen = [s for _, s in sorted(complete, key=lambda c: c[0])[-count:]]
    if not chosen:
        chosen = still_open[:count]
    return [s[:max_steps] for s in chosen]


def episode_inputs(
    buffer: ReplayBuffer, slots: np.ndarray, window: int
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """An episode's observations and each step's history window, as ReplayBuffer.sample hands
    them to the model: (obs [T, O], history_obs [W, T, O] zero where masked, history_mask
    [W, T] True where the step exists in the episode); no history for W = 0."""
    obs = buffer.obs[torch.from_numpy(slots)]  # [T, O]
    if window == 0:
        return obs, None, None
    t = np.arange(slots.size)
    back = t[None, :] - np.arange(window, 0, -1)[:, None]  # [W, T] step index, oldest first
    valid = back >= 0
    hist = buffer.obs[torch.from_numpy(slots[np.where(valid, back, 0)])]  # [W, T, O]
    mask = torch.from_numpy(valid)
    return obs, hist * mask.unsqueeze(-1), mask


# --------------------------------------------------------------------------- one pass of the heads


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
    agent: InspectedAgent,
    obs: Tensor,
    history_obs: Tensor | None = None,
    history_mask: Tensor | None = None,
) -> HeadPass:
    """The heads at the encoded states of obs [B, O] with their history windows history_obs
    [W, B, O] / history_mask [W, B]: queries and banks as world_model/geodesic/reports.py's
    node reports and the integrator build them (world_model/geodesic/kick.py: kick queries
    (z, log_0 z), drift queries (z, log_0 z, p / lambda) with the velocity G^-1 p, both gated by
    the chiral projector of the value gradient)."""
    model = agent.model
    dyn = model.dynamics
    device = agent.device
    state = dyn.encode(obs.to(device))
    history = mask = None
    if dyn.window is not None and history_obs is not None:
        w, b = history_obs.shape[:2]
        hist = dyn.encode(history_obs.to(device).flatten(0, 1)).unflatten((w, b))
        history = hist.map(lambda t: t.transpose(0, 1))  # [B, W]
        mask = history_mask.to(device).transpose(0, 1)
    value_fn = model.value if dyn.uses_value_gradient else None
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
