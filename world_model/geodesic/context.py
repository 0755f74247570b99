"""GeodesicContext: the banks a rollout's heads read, prepared once per planning call / training
batch (assembled by GeodesicCrossAttention.build_context). Providers (docs/architecture.md, data
flow): the prototype pool (macro, level 0: the fixed table, or the top-K of a DMG-grown pool
that GSR routes each root to) and, when history is given, the recent trajectory window (texture,
level 1); kick heads query at macro level, drift heads at texture level. Every
entry's Wilson line is computed once and shared by the heads (one gauge connection)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torch import Tensor

from world_model.attention.context import ContextBank
from world_model.attention.covariant import CovariantAttention, PreparedContext

if TYPE_CHECKING:
    from world_model.memory.episodic import MemoryBank

__all__ = ["GeodesicContext", "joined"]


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
    memory: MemoryBank | None = None  # the episodic memory's entries (None: no memory read)
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

    def read_ahead(self, heads: list[CovariantAttention]) -> None:
        """Compute now what the steps would compute on their first read: each head's chiral
        projector (complex arithmetic) and each prepared bank's charged entries (a nonzero,
        whose size depends on the data). A compiled step then reads both as inputs
        (world_model/geodesic/compiled.py); the values are those of a first read."""
        for head in heads:
            self.chiral_for(head)
        for prepared in (self.force, self.correction):
            if prepared is not None and prepared.charged:
                prepared.charged_entries()

    @functools.cached_property
    def force_bank(self) -> ContextBank:
        """The kick head's bank: prototypes, then the window's entries when there is one."""
        return joined(self.force_parts)

    @functools.cached_property
    def correction_bank(self) -> ContextBank:
        """The drift head's bank, in the same entry order as force_bank."""
        return joined(self.correction_parts)


def joined(parts: tuple[ContextBank, ...]) -> ContextBank:
    """One bank of the parts, in order (the part itself when there is one)."""
    return parts[0] if len(parts) == 1 else ContextBank.cat(list(parts))
