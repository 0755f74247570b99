"""C-HIDA, seed 000 M4 (Def 5.4): c summary tokens kept by online hyperbolic k-means, read by
inverse-distance attention; O(c d) per key ingested and per query read, whatever the number of
keys seen. A memory keeps the summaries as state (:meth:`CHIDA.ingest`, :meth:`CHIDA.read`).
Overview of the family: world_model/attention/hida.py.

Departure from the seed (measured in tests/world_model/test_ida_claims.py and listed in the
inverse-distance section of docs/seed_map.md): Def 5.4 updates a summary by
s + eta * mean(k_i - s), a Euclidean step in ball coordinates. Here it is the Riemannian step
s <- exp_s(sum_i log_s(k_i) / (n_s + b)) with b new keys and n_s keys seen before (MacQueen's
running mean along geodesics, the incremental Karcher-mean estimator of a CAT(0) space),
projected to ``max_norm``. The readout weights summaries by their counts as L-HIDA does
(world_model/attention/hida_anchor.py), and values are exact running means, so C's output is
exactly sum_i (pi_{j,a(i)} / n_{a(i)}) v_i over the keys it has seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from geometry import poincare

from .hida_common import _check_max_norm, _check_positive_int, _key_mask, check_operator_inputs
from .ida import (
    _check_eps,
    check_points,
    inverse_distance_attention,
    squared_distance_matrix,
)

__all__ = [
    "CHIDAConfig",
    "CHIDA",
    "CHIDAState",
    "c_hida_empty_state",
    "c_hida_ingest",
    "c_hida_read",
    "c_hida_composite_weights",
]


class CHIDAState(NamedTuple):
    """C-HIDA summaries: centers [..., c, d] in the ball, value_means [..., c, dv] (exact means
    of the values assigned so far), counts [..., c] (0 = slot not yet opened)."""

    centers: Tensor
    value_means: Tensor
    counts: Tensor


def c_hida_empty_state(
    batch_shape: tuple[int, ...], n_summaries: int, key_dim: int, value_dim: int, like: Tensor
) -> CHIDAState:
    """A state with no summary opened yet."""
    kw = dict(dtype=like.dtype, device=like.device)
    return CHIDAState(
        torch.zeros(*batch_shape, n_summaries, key_dim, **kw),
        torch.zeros(*batch_shape, n_summaries, value_dim, **kw),
        torch.zeros(*batch_shape, n_summaries, **kw),
    )


def _scatter_rows(table: Tensor, slot: Tensor, rows: Tensor) -> Tensor:
    """table [..., c, e] with rows [..., N, e] written at slot [..., N]; slot == c drops the
    row (written to a scratch row that is cut off)."""
    c = table.shape[-2]
    padded = torch.cat([table, table.new_zeros(*table.shape[:-2], 1, table.shape[-1])], dim=-2)
    at = slot.unsqueeze(-1).expand(*slot.shape, rows.shape[-1])
    return padded.scatter(-2, at, rows)[..., :c, :]


def c_hida_ingest(
    state: CHIDAState,
    keys: Tensor,
    values: Tensor,
    key_mask: Tensor | None = None,
    max_norm: float = 1.0 - 1e-5,
) -> tuple[CHIDAState, Tensor]:
    """Online hyperbolic k-means over a time-ordered batch of keys (seed 000 Def 5.4, as a
    Riemannian mini-batch step): the first c keys open the c summaries; every later key goes to
    its nearest summary k* = argmin_k d_H(k_i, s_k), and each summary with b new keys moves
    s <- proj(exp_s(sum_i log_s(k_i) / (n_s + b))), n_s <- n_s + b, its value mean by the
    exact running mean. Cost O(Nk c d), independent of how many keys came before.

    keys [..., Nk, d], values [..., Nk, dv], key_mask [..., Nk] (False = skip); the state's batch
    shape must equal the keys'. Returns the new state and the slot of each key [..., Nk]
    (-1 for skipped keys)."""
    centers, means, counts = state
    c = counts.shape[-1]
    valid = (
        torch.ones(keys.shape[:-1], dtype=torch.bool, device=keys.device)
        if key_mask is None
        else key_mask.expand(keys.shape[:-1])
    )
    # 1. open empty slots with the earliest valid keys (slots fill in order 0, 1, ...)
    filled = (counts > 0).sum(dim=-1, keepdim=True)  # [..., 1]
    rank = valid.long().cumsum(dim=-1) - 1  # [..., Nk]
    opens = valid & (rank < c - filled)
    slot = torch.where(opens, filled + rank, c)  # c = a scratch slot, dropped below
    if bool(opens.any()):
        centers = _scatter_rows(centers, slot, keys)
        means = _scatter_rows(means, slot, values)
        counts = torch.cat([counts, counts.new_zeros(*counts.shape[:-1], 1)], dim=-1)
        counts = counts.scatter_add(-1, slot, opens.to(counts.dtype))[..., :c]
    # 2. Riemannian MacQueen step for the remaining keys
    moves = valid & ~opens
    assign = torch.full_like(rank, -1)
    if bool(moves.any()):
        # a row that moves a key has opened every slot (step 1 fills free slots first), so no
        # empty slot can be nearest to a moving key; other rows' picks are weighted by 0
        d2 = squared_distance_matrix(keys, centers, "poincare")  # [..., Nk, c]
        nearest = d2.argmin(dim=-1)  # [..., Nk]
        w = moves.to(keys.dtype)  # [..., Nk]
        base = centers.gather(-2, nearest.unsqueeze(-1).expand(*nearest.shape, keys.shape[-1]))
        moving = moves.unsqueeze(-1)  # where(), not * w: a skipped key may hold padding
        logs = torch.where(moving, poincare.logmap(base, keys), 0.0)  # [..., Nk, d]
        at_k = nearest.unsqueeze(-1)
        sum_logs = torch.zeros_like(centers).scatter_add(
            -2, at_k.expand(*nearest.shape, keys.shape[-1]), logs
        )  # [..., c, d]
        sum_vals = torch.zeros_like(means).scatter_add(
            -2, at_k.expand(*nearest.shape, values.shape[-1]), torch.where(moving, values, 0.0)
        )  # [..., c, dv]
        b = torch.zeros_like(counts).scatter_add(-1, nearest, w)  # [..., c]
        total = (counts + b).clamp_min(1.0).unsqueeze(-1)  # [..., c, 1]
        centers = poincare.project(poincare.expmap(centers, sum_logs / total), max_norm)
        means = means + (sum_vals - b.unsqueeze(-1) * means) / total
        counts = counts + b
        assign = torch.where(moves, nearest, assign)
    assign = torch.where(opens, slot, assign)
    return CHIDAState(centers, means, counts), assign


def c_hida_read(queries: Tensor, state: CHIDAState, eps: float) -> tuple[Tensor, Tensor]:
    """C-HIDA readout: out_j = sum_k pi_jk vbar_k, pi_jk ∝ n_k (d_H(q_j, s_k)^2 + eps)^-1 over
    the opened summaries; O(Nq c d). Returns out [..., Nq, dv], pi [..., Nq, c]."""
    centers, means, counts = state
    return inverse_distance_attention(
        queries, centers, means, eps, "poincare", key_mass=counts, check_inputs=False
    )


def c_hida_composite_weights(pi: Tensor, assign: Tensor, counts: Tensor) -> Tensor:
    """The exact map from the ingested values to C's output: M_ji = pi_{j, a(i)} / n_{a(i)}
    (0 for skipped keys). pi [..., Nq, c], assign [..., Nk], counts [..., c] -> [..., Nq, Nk]."""
    safe = assign.clamp_min(0)  # [..., Nk]
    per_key = counts.gather(-1, safe).clamp_min(1.0)  # [..., Nk]
    picked = pi.gather(-1, safe.unsqueeze(-2).expand(*pi.shape[:-1], safe.shape[-1]))
    return picked / per_key.unsqueeze(-2) * (assign >= 0).unsqueeze(-2)


@dataclass
class CHIDAConfig:
    """Summary-token HIDA (seed 000 M4, Def 5.4).

    Attributes:
        n_summaries: c, the number of summary tokens.
        key_dim, value_dim: sizes of the persistent state used by ingest/read.
        eps: kernel regulariser eps > 0.
        max_norm: summaries are projected to |s| <= max_norm < 1 after each step.
        ingest_chunk: forward() streams its keys in time-ordered chunks of this many keys
            (1 = strictly sequential online k-means).
        check_inputs: validate shapes and domains at every call.
    """

    n_summaries: int = 16
    key_dim: int = 16
    value_dim: int = 16
    eps: float = 1e-3
    max_norm: float = 1.0 - 1e-5
    ingest_chunk: int = 256
    check_inputs: bool = True

    def __post_init__(self):
        _check_positive_int("n_summaries", self.n_summaries)
        _check_positive_int("key_dim", self.key_dim)
        _check_positive_int("value_dim", self.value_dim)
        _check_eps(self.eps)
        _check_max_norm(self.max_norm)
        _check_positive_int("ingest_chunk", self.ingest_chunk)


class CHIDA(nn.Module):
    """M4: c summary tokens kept by online hyperbolic k-means; Theta(c d) per key ingested and
    per query read, whatever the number of keys seen.

    Two uses: ``forward(q, k, v, mask)`` compresses the given keys from scratch (in time order,
    ``ingest_chunk`` at a time) and reads them out, leaving the module's state alone; a memory
    calls :meth:`ingest` as entries arrive and :meth:`read` to query the persistent summaries
    (buffers ``centers``, ``value_means``, ``counts``; updated without autograd)."""

    def __init__(self, config: CHIDAConfig | None = None):
        super().__init__()
        self.config = cfg = config or CHIDAConfig()
        self.register_buffer("centers", torch.zeros(cfg.n_summaries, cfg.key_dim))
        self.register_buffer("value_means", torch.zeros(cfg.n_summaries, cfg.value_dim))
        self.register_buffer("counts", torch.zeros(cfg.n_summaries))

    @property
    def state(self) -> CHIDAState:
        return CHIDAState(self.centers, self.value_means, self.counts)

    def reset(self) -> None:
        self.centers.zero_()
        self.value_means.zero_()
        self.counts.zero_()

    @torch.no_grad()
    def ingest(self, keys: Tensor, values: Tensor, key_mask: Tensor | None = None) -> Tensor:
        """Add time-ordered entries keys [N, key_dim], values [N, value_dim] to the persistent
        summaries; returns each entry's slot [N] (-1 where key_mask is False)."""
        cfg = self.config
        if keys.dim() != 2 or keys.shape[-1] != cfg.key_dim:
            raise ValueError(f"keys must have shape [N, {cfg.key_dim}], got {tuple(keys.shape)}")
        if values.shape != (keys.shape[0], cfg.value_dim):
            raise ValueError(
                f"values must have shape [{keys.shape[0]}, {cfg.value_dim}], got "
                f"{tuple(values.shape)}"
            )
        if cfg.check_inputs:
            check_points(keys, "poincare", "keys")
        new, assign = c_hida_ingest(
            self.state, keys.to(self.centers.dtype), values.to(self.centers.dtype), key_mask,
            cfg.max_norm,
        )  # fmt: skip
        self.centers.copy_(new.centers)
        self.value_means.copy_(new.value_means)
        self.counts.copy_(new.counts)
        return assign

    def read(self, queries: Tensor) -> tuple[Tensor, Tensor]:
        """Query the persistent summaries: queries [..., Nq, key_dim] -> out [..., Nq,
        value_dim], weights over the summaries [..., Nq, c]."""
        if self.config.check_inputs:
            if queries.dim() < 2 or queries.shape[-1] != self.config.key_dim:
                raise ValueError(
                    f"queries must have shape [..., Nq, {self.config.key_dim}], got "
                    f"{tuple(queries.shape)}"
                )
            check_points(queries, "poincare", "queries")
        return c_hida_read(queries.to(self.centers.dtype), self.state, self.config.eps)

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        *,
        need_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        cfg = self.config
        if cfg.check_inputs:
            check_operator_inputs(queries, keys, values, mask, "poincare")
        key_mask = _key_mask(mask, queries, "C-HIDA")
        batch = torch.broadcast_shapes(queries.shape[:-2], keys.shape[:-2], values.shape[:-2])
        keys = keys.expand(*batch, *keys.shape[-2:])
        values = values.expand(*batch, *values.shape[-2:])
        if key_mask is not None:
            key_mask = key_mask.expand(*batch, keys.shape[-2])
        state = c_hida_empty_state(
            batch, cfg.n_summaries, keys.shape[-1], values.shape[-1], like=values
        )
        assigns = []
        for start in range(0, keys.shape[-2], cfg.ingest_chunk):
            rows = slice(start, start + cfg.ingest_chunk)
            km = None if key_mask is None else key_mask[..., rows]
            state, a = c_hida_ingest(
                state, keys[..., rows, :], values[..., rows, :], km, cfg.max_norm
            )
            assigns.append(a)
        out, pi = c_hida_read(queries, state, cfg.eps)
        if not need_weights:
            return out, None
        assign = torch.cat(assigns, dim=-1)
        return out, c_hida_composite_weights(pi, assign, state.counts)
