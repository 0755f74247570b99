"""The context bank a covariant attention head reads (seed 003 Def 282, Def 286;
docs/architecture.md, "Data flow" and "Levels").

Each entry has a position in the Poincare ball, key features, value features and a level of the
representation hierarchy: level 0 = macro (colour-neutral, exempt from area-law screening:
prototypes and C-HIDA summaries), level L = texture (episodic-memory entries and the recent
trajectory window). Providers build their own banks; :meth:`ContextBank.cat` joins them, and a
bank with batch size 1 is shared by (broadcast to) every query of a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

__all__ = ["MACRO_LEVEL", "ContextBank", "take_entries"]

MACRO_LEVEL = 0  # colour-neutral entries (seed 003 Thm 102: exempt from screening)


def take_entries(t: Tensor, index: Tensor) -> Tensor:
    """Per-sample entries of a bank tensor: t [Bc, N, ...] (Bc = 1: shared, or B), index
    [B, K] -> [B, K, ...] (row b takes entries index[b] of its bank)."""
    if t.shape[0] == 1:
        return t[0][index]
    return t[torch.arange(index.shape[0], device=index.device).unsqueeze(-1), index]


def _one_if_broadcast(t: Tensor) -> Tensor:
    """t [B, ...] itself, or its first row when its B rows are one row broadcast (stride 0, as
    `expand` makes them): a check of the values then reads each value once, not B times."""
    return t[:1] if t.shape[0] > 1 and t.stride(0) == 0 else t


@dataclass
class ContextBank:
    """Context entries for one or more attention heads.

    positions:      [B, N, d] points in the ball (|z| < 1)
    key_features:   [B, N, F_k] features the head projects into key fields
    value_features: [B, N, F_v] features the head projects into value fields
    levels:         [B, N] integer hierarchy level per entry (0 = macro, L = texture)
    mask:           [B, N] bool, True where the entry is valid (None: all valid)

    B = 1 means the bank is shared by every query of the batch (broadcast, never copied).
    """

    positions: Tensor
    key_features: Tensor
    value_features: Tensor
    levels: Tensor
    mask: Tensor | None = None

    def __post_init__(self) -> None:
        p = self.positions
        if p.dim() != 3:
            raise ValueError(f"ContextBank.positions must be [B, N, d], got shape {tuple(p.shape)}")
        b, n = p.shape[:2]
        for name in ("key_features", "value_features"):
            t = getattr(self, name)
            if t.dim() != 3 or t.shape[:2] != (b, n):
                raise ValueError(
                    f"ContextBank.{name} must be [B, N, F] with B, N = {b}, {n}, "
                    f"got shape {tuple(t.shape)}"
                )
            if t.dtype != p.dtype:
                raise ValueError(f"ContextBank.{name} has dtype {t.dtype}, positions {p.dtype}")
        if tuple(self.levels.shape) != (b, n):
            raise ValueError(
                f"ContextBank.levels must be [B, N] = [{b}, {n}], got {tuple(self.levels.shape)}"
            )
        if self.levels.dtype.is_floating_point or self.levels.dtype == torch.bool:
            raise ValueError(
                f"ContextBank.levels must be an integer tensor, got {self.levels.dtype}"
            )
        if n and int(_one_if_broadcast(self.levels).min()) < 0:
            raise ValueError("ContextBank.levels must be >= 0 (0 = macro, L = texture)")
        if self.mask is not None:
            if tuple(self.mask.shape) != (b, n) or self.mask.dtype != torch.bool:
                raise ValueError(
                    f"ContextBank.mask must be a bool [B, N] = [{b}, {n}] tensor, got "
                    f"{self.mask.dtype} {tuple(self.mask.shape)}"
                )
        if n:
            max_norm = float(_one_if_broadcast(p).detach().norm(dim=-1).max())  # NaN fails too
            if not max_norm < 1.0:
                raise ValueError(
                    "ContextBank.positions must be finite points inside the unit ball "
                    f"(max |z| = {max_norm:.6g})"
                )

    # ------------------------------------------------------------------ shape helpers

    @property
    def batch_size(self) -> int:
        return self.positions.shape[0]

    @property
    def size(self) -> int:
        """Number of entries N."""
        return self.positions.shape[1]

    @property
    def dim(self) -> int:
        """Ball dimension d."""
        return self.positions.shape[2]

    @classmethod
    def at_level(
        cls,
        positions: Tensor,
        key_features: Tensor,
        value_features: Tensor,
        level: int,
        mask: Tensor | None = None,
    ) -> ContextBank:
        """A bank whose entries all sit at one level (a provider: prototypes at 0, memory at L)."""
        levels = torch.full(positions.shape[:2], level, dtype=torch.long, device=positions.device)
        return cls(positions, key_features, value_features, levels, mask)

    def valid_mask(self) -> Tensor:
        """[B, N] bool, all True when no mask was given."""
        if self.mask is not None:
            return self.mask
        return torch.ones(self.positions.shape[:2], dtype=torch.bool, device=self.positions.device)

    def expand(self, batch_size: int) -> ContextBank:
        """Broadcast a B = 1 bank to `batch_size` (a view, no copy); a bank already of that batch
        size is returned as is."""
        if self.batch_size == batch_size:
            return self
        if self.batch_size != 1:
            raise ValueError(
                f"cannot broadcast a bank of batch size {self.batch_size} to {batch_size}"
            )

        def ex(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.expand(batch_size, *t.shape[1:])

        return ContextBank(
            ex(self.positions),
            ex(self.key_features),
            ex(self.value_features),
            ex(self.levels),
            ex(self.mask),
        )

    @staticmethod
    def cat(banks: Sequence[ContextBank]) -> ContextBank:
        """Concatenate banks from different providers along the entry axis. Banks of batch size 1
        are broadcast to the common batch size; masks are joined (missing masks = all valid)."""
        if not banks:
            raise ValueError("ContextBank.cat needs at least one bank")
        sizes = {b.batch_size for b in banks}
        batch = max(sizes)
        if sizes - {1, batch}:
            raise ValueError(f"ContextBank.cat: incompatible batch sizes {sorted(sizes)}")
        dims = {(b.dim, b.key_features.shape[-1], b.value_features.shape[-1]) for b in banks}
        if len(dims) != 1:
            raise ValueError(f"ContextBank.cat: banks disagree on (d, F_k, F_v): {sorted(dims)}")
        parts = [b.expand(batch) for b in banks]
        any_mask = any(b.mask is not None for b in parts)
        return ContextBank(
            torch.cat([b.positions for b in parts], dim=1),
            torch.cat([b.key_features for b in parts], dim=1),
            torch.cat([b.value_features for b in parts], dim=1),
            torch.cat([b.levels for b in parts], dim=1),
            torch.cat([b.valid_mask() for b in parts], dim=1) if any_mask else None,
        )

    def within(self, keep: Tensor) -> ContextBank:
        """This bank broadcast to keep's batch B (a view), row b holding only the entries
        keep[b] marks ([B, N] bool): a routed provider's top-K as a mask over its whole pool, in
        the pool's entry order (PreparedContext.within)."""
        bank = self.expand(keep.shape[0])
        return replace(bank, mask=keep if bank.mask is None else keep & bank.mask)

    def take(self, index: Tensor, valid: Tensor) -> ContextBank:
        """The entries index [B, K] of each sample's bank, valid [B, K] where selected (a
        routed provider's top-K, world_model/memory/routed_prototypes.py)."""
        mask = valid if self.mask is None else valid & take_entries(self.mask, index)
        return ContextBank(
            take_entries(self.positions, index),
            take_entries(self.key_features, index),
            take_entries(self.value_features, index),
            take_entries(self.levels, index),
            mask,
        )
