"""The episodic memory's entries stored per replay-buffer slot and computed again only when they
are older than `refresh` updates (world_model/geodesic/config.py, `context.memory_refresh`).

Every update reads, for each of its samples, the memory's entries (key z_i and empirical
residual f_i; world_model/memory/episodic.py) of the 64 transitions before the sample's start: in a
long run ~6,000-8,000 distinct transitions, whose entries the exact read computes afresh with the
current parameters each time (docs/measurements.md, "The memory at a full buffer"). Stored, an
entry is computed once and reused until it is `refresh` updates old. Entries read in the same
update then come from parameters of up to `refresh` - 1 updates before, as a target network's
do. With refresh 1 nothing is stored and the read is the exact one.

The entries live beside their transitions in the buffer (`ReplayBuffer.derive`): a slot that
takes a new transition forgets its entry, and the entries are saved with the buffer, so a
resumed run reads what the uninterrupted run would have read.
"""

from __future__ import annotations

import dataclasses

import torch

from agent.core.buffer import ReplayBuffer
from world_model.memory.episodic import MemoryInputs

__all__ = ["StoredMemory"]

_KEY, _RESIDUAL, _STAMP = "memory_key", "memory_residual", "memory_stamp"


class StoredMemory:
    """Entries [slots, d] and the update that computed each ([slots, 1], -1: none) in `buffer`."""

    def __init__(self, buffer: ReplayBuffer, dim: int, refresh: int):
        if refresh < 2:
            raise ValueError(f"StoredMemory needs refresh >= 2 (1: the exact read), got {refresh}")
        self.buffer, self.refresh = buffer, refresh
        buffer.derive(_KEY, dim, 0.0)
        buffer.derive(_RESIDUAL, dim, 0.0)
        buffer.derive(_STAMP, 1, -1.0, dtype=torch.float64)

    @torch.no_grad()
    def read(self, memory: MemoryInputs, dynamics, update: int) -> MemoryInputs:
        """`memory` carrying its entries: the stored ones where they are fewer than `refresh`
        updates old at `update`, the others computed now by `dynamics.memory_entries` (and
        stored, stamped `update`)."""
        if memory.slots is None:
            raise ValueError("StoredMemory.read needs the transitions' buffer slots")
        slots, device = memory.slots.cpu(), memory.obs.device  # the buffer is on the CPU
        stamp = self.buffer.column(_STAMP)[slots, 0]  # [U]
        stale = torch.nonzero((stamp < 0) | (update - stamp >= self.refresh)).squeeze(1)
        keys, residuals = self.buffer.column(_KEY), self.buffer.column(_RESIDUAL)
        if stale.numel():
            z, f = dynamics.memory_entries(memory.rows(stale.to(device)))
            at = slots[stale]
            keys[at], residuals[at] = z.to("cpu", keys.dtype), f.to("cpu", residuals.dtype)
            self.buffer.column(_STAMP)[at] = float(update)
        return dataclasses.replace(
            memory, stored_keys=keys[slots].to(device), stored_residuals=residuals[slots].to(device)
        )
