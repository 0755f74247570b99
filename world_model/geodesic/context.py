"""GeodesicContext: the banks a rollout's heads read, prepared once per planning call / training
batch, and their assembly (`build_context`). Providers (docs/architecture.md, data flow): the
prototype pool (macro, level 0: the fixed table, or the top-K of a DMG-grown pool that GSR routes
each root to) and, when history is given, the recent trajectory window
(texture, level 1); kick heads query at macro level, drift heads at texture level. Every
entry's Wilson line is computed once and shared by the heads (one gauge connection)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torch import Tensor

from world_model.attention.context import ContextBank
from world_model.attention.covariant import CovariantAttention, PreparedContext
from world_model.memory.routed_prototypes import RoutedPrototypePool

if TYPE_CHECKING:
    from world_model.memory.episodic import MemoryBank
    from world_model.memory.prototypes import PrototypePool
    from world_model.memory.window import TrajectoryWindow

    from .integrator import GeodesicCrossAttention

__all__ = ["GeodesicContext", "build_context"]


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


def build_context(
    integ: GeodesicCrossAttention,
    prototypes: PrototypePool | RoutedPrototypePool,
    window: TrajectoryWindow | None,
    history_z: Tensor | None = None,
    history_p: Tensor | None = None,
    history_mask: Tensor | None = None,
    value_grad: Tensor | None = None,
    root_z: Tensor | None = None,
) -> GeodesicContext:
    """The banks for one rollout: the prototypes' force and correction banks ([1, M], shared by
    every rollout; a routed pool's top-K at each root `root_z` [B, d] instead, [B, K], from the
    whole pool prepared once) and, given a `window` provider and the history positions /
    momenta `history_z`, `history_p` [B, W, d] (oldest first) with `history_mask` [B, W], the
    window's texture entries per sample. Under the krr kernel all are joined into one bank (one
    ridge system for all); otherwise the prototypes are prepared once and the window per
    sample. The drift head's bank is prepared only when the drift reads it (drift_correction)."""
    cfg = integ.config
    force_bank = prototypes.force_bank()  # [1, M]: shared by every rollout
    correction_bank = prototypes.correction_bank()
    selection = None
    if isinstance(prototypes, RoutedPrototypePool):
        if root_z is None:
            raise ValueError("build_context: a routed prototype pool needs the roots root_z")
        selection = prototypes.route(root_z)  # [B, K]
    krr = cfg.head.kernel == "krr"
    if selection is not None and krr:  # the ridge system is over the selected entries
        force_bank = force_bank.take(*selection)
        correction_bank = correction_bank.take(*selection)
        selection = None
    banks = None
    if window is not None and history_z is not None:
        banks = window.banks(history_z, history_p, history_mask)  # [B, W] each
    if banks is not None and krr:  # one ridge system for all
        force_bank = ContextBank.cat([force_bank, banks[0]])
        correction_bank = ContextBank.cat([correction_bank, banks[1]])
        banks = None
    corrects = cfg.integrator.drift_correction  # else the drift head is never read
    lines = integ.lines(force_bank.positions)  # one line per entry, shared by both banks
    force = integ.kick_head.prepare(force_bank, lines=lines)
    correction = integ.drift_head.prepare(correction_bank, lines=lines) if corrects else None
    if selection is not None:  # the whole pool prepared once; each root reads its top-K
        force, force_bank = force.take(*selection), force_bank.take(*selection)
        correction_bank = correction_bank.take(*selection)
        correction = None if correction is None else correction.take(*selection)
    if banks is not None:  # prototypes prepared once, the window per sample
        w_lines = integ.lines(history_z)  # [B, W, r, r]
        force = PreparedContext.cat([force, integ.kick_head.prepare(banks[0], lines=w_lines)])
        if correction is not None:
            correction = PreparedContext.cat(
                [correction, integ.drift_head.prepare(banks[1], lines=w_lines)]
            )
    force_parts = (force_bank,) if banks is None else (force_bank, banks[0])
    correction_parts = (correction_bank,) if banks is None else (correction_bank, banks[1])
    return GeodesicContext(
        force=force,
        correction=correction,
        force_parts=force_parts,
        correction_parts=correction_parts,
        value_grad=value_grad,
        ou=integ.ou_coefficients(),
    )
