"""The HIDA operator family of seed 000 §5 (M1-M4): hyperbolic inverse-distance attention
W_ij ∝ (d_H(q_i, k_j)^2 + eps)^-1 at four costs, each with the call shape of
``world_model/attention/base.py`` (``out, weights = op(queries, keys, values, mask)``).

| operator | seed | cost | what it attends to |
| --- | --- | --- | --- |
| :class:`DenseHIDA` | M1, Def 5.1 | Theta(Nq Nk d) | every key |
| :class:`FPHIDA`    | M2, Def 5.2 | O(Nq log Nk d) | the fixed sparse index set S_i (positions) |
| :class:`LHIDA`     | M3, Def 5.3 | O((Nq + Nk) m d) | m learnable anchors summarising the keys |
| :class:`CHIDA`     | M4, Def 5.4 | O(c d) per token | c online hyperbolic k-means summaries |

``weights`` is always the exact linear map from ``values`` to ``out`` as a dense [..., Nq, Nk]
tensor (zeros outside FP's index set; composed through anchors / summaries for L and C). It is
O(Nq Nk) memory, so large-n callers pass ``need_weights=False`` and get ``(out, None)``.

Memory use (the HIDA memory queries a time-ordered store with a query at "now"): FP's positions
are the keys' time order and ``query_time="now"`` puts every query after the newest key; L's
summaries are sums over keys (:func:`l_hida_summaries`), so they can be accumulated as keys
arrive while the anchors are fixed; C keeps its summaries as state (:meth:`CHIDA.ingest`,
:meth:`CHIDA.read`) at a cost per new key and per query that does not depend on how many keys
it has seen.

Departures from the seed (each measured in tests/world_model/test_ida_claims.py and listed in
the inverse-distance section of docs/seed_map.md):

- L (Def 5.3) sums the values over keys, v~_k = sum_i W~_ik v_i, and averages them with
  query-anchor weights that ignore how many keys each anchor holds, so its output grows with
  n/m. Here the anchor's value is the mean mu_k = sum_i A_ik v_i / n_k (n_k = sum_i A_ik, its
  soft count), and the query weights count each anchor n_k times: out_j = sum_k pi_jk mu_k with
  pi_jk ∝ n_k / (d_H(q_j, a_k)^2 + eps). This is Dense-HIDA with K(q, k_i) replaced by its
  interpolation sum_k K(q, a_k) A_ik, so rows sum to 1 and anchors placed on the keys with
  eps -> 0 give Dense back. (Measured: the normalisation is what matters, the seed's sums are
  off by ~n/m; counting anchors by n_k or not changed the error against Dense by <= 6%.)
- C (Def 5.4) updates a summary by s + eta * mean(k_i - s), a Euclidean step in ball
  coordinates. Here it is the Riemannian step s <- exp_s(sum_i log_s(k_i) / (n_s + b)) with
  b new keys and n_s keys seen before (MacQueen's running mean along geodesics, the incremental
  Karcher-mean estimator of a CAT(0) space), projected to ``max_norm``. The readout weights
  summaries by their counts as L does, and values are exact running means, so C's output is
  exactly sum_i (pi_{j,a(i)} / n_{a(i)}) v_i over the keys it has seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import geoopt
import torch
from torch import Tensor, nn

from geometry import poincare

from .ida import (
    FORMS,
    METRICS,
    _check_eps,
    check_attention_inputs,
    check_points,
    inverse_distance_attention,
    inverse_distance_weights,
    squared_distance,
    squared_distance_matrix,
)
from .triton_ida import can_fuse, fused_inverse_distance_attention

__all__ = [
    "DenseHIDAConfig",
    "DenseHIDA",
    "FPHIDAConfig",
    "FPHIDA",
    "fp_index_set",
    "fp_index_set_bound",
    "fp_attention",
    "LHIDAConfig",
    "LHIDA",
    "anchor_memberships",
    "l_hida_summaries",
    "l_hida_attention",
    "CHIDAConfig",
    "CHIDA",
    "CHIDAState",
    "c_hida_empty_state",
    "c_hida_ingest",
    "c_hida_read",
    "c_hida_composite_weights",
]


def _check_positive_int(name: str, value, allow_none: bool = False) -> None:
    if allow_none and value is None:
        return
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _check_max_norm(max_norm: float) -> None:
    if not (isinstance(max_norm, (int, float)) and 0.0 < max_norm < 1.0):
        raise ValueError(f"max_norm must lie in (0, 1), got {max_norm!r}")


def _key_mask(mask: Tensor | None, queries: Tensor, keys: Tensor, op: str) -> Tensor | None:
    """Reduce a mask broadcastable to [..., Nq, Nk] to a key mask [..., Nk]. L and C summarise
    the keys once for all queries, so a mask that differs between queries is refused."""
    if mask is None:
        return None
    if mask.dim() >= 2 and mask.shape[-2] != 1 and queries.shape[-2] != 1:
        raise ValueError(
            f"{op} summarises the keys once for all queries, so it accepts only a key mask "
            f"(shape [..., 1, Nk] or [..., Nk]); got a per-query mask {tuple(mask.shape)}: use "
            "DenseHIDA or FPHIDA for per-query masks"
        )
    key_mask = mask if mask.dim() == 1 else mask[..., 0, :]
    batch = torch.broadcast_shapes(keys.shape[:-2], key_mask.shape[:-1])
    return key_mask.expand(*batch, keys.shape[-2])


# =========================================================================== M1: Dense


@dataclass
class DenseHIDAConfig:
    """Dense inverse-distance attention (seed 000 M1, Def 5.1; Resolver and SIDA with another
    metric).

    Attributes:
        eps: kernel regulariser eps > 0.
        metric: "poincare" (HIDA), "euclidean" (Resolver) or "sphere" (SIDA).
        form: all-pairs distance evaluation, see world_model/attention/ida.py.
        query_chunk: process queries in chunks of this many rows (bounds the [chunk, Nk]
            intermediates when no gradient is taken); None = all at once.
        fused: with need_weights=False, no mask and no gradient, use the fused Triton forward
            of world_model/attention/triton_ida.py where it runs (CUDA, or TRITON_INTERPRET=1;
            metric "euclidean" or "poincare"); elsewhere the PyTorch path.
        check_inputs: validate shapes and domains at every call.
    """

    eps: float = 1e-3
    metric: str = "poincare"
    form: str = "expanded"
    query_chunk: int | None = None
    fused: bool = True
    check_inputs: bool = True

    def __post_init__(self):
        _check_eps(self.eps)
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if self.form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {self.form!r}")
        _check_positive_int("query_chunk", self.query_chunk, allow_none=True)


class DenseHIDA(nn.Module):
    """M1: out_i = sum_j W_ij v_j, W_ij ∝ (d(q_i, k_j)^2 + eps)^-1 over all keys; Theta(n^2 d)."""

    def __init__(self, config: DenseHIDAConfig | None = None):
        super().__init__()
        self.config = config or DenseHIDAConfig()

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
            check_attention_inputs(queries, keys, values, mask)
            check_points(queries, cfg.metric, "queries")
            check_points(keys, cfg.metric, "keys")
        if (
            not need_weights
            and cfg.fused
            and can_fuse(queries, keys, values, cfg.metric, mask, None)
        ):
            return fused_inverse_distance_attention(
                queries, keys, values, cfg.eps, cfg.metric
            ), None
        n_q = queries.shape[-2]
        chunk = cfg.query_chunk or max(n_q, 1)
        outs, weights = [], []
        for start in range(0, n_q, chunk):
            rows = slice(start, start + chunk)
            m = None
            if mask is not None:
                m = mask if mask.dim() < 2 or mask.shape[-2] == 1 else mask[..., rows, :]
            out, w = inverse_distance_attention(
                queries[..., rows, :], keys, values, cfg.eps, cfg.metric, m,
                form=cfg.form, check_inputs=False,
            )  # fmt: skip
            outs.append(out)
            if need_weights:
                weights.append(w)
        out = torch.cat(outs, dim=-2) if len(outs) > 1 else outs[0]
        if not need_weights:
            return out, None
        return out, (torch.cat(weights, dim=-2) if len(weights) > 1 else weights[0])


# =========================================================================== M2: FP


def fp_index_set(
    query_positions: Tensor, n_keys: int, window: int, n_global: int, causal: bool = False
) -> tuple[Tensor, Tensor]:
    """The sparse index set of seed 000 Def 5.2, per query position p:

    S(p) = {j : |p - j| <= w} ∪ {0, ⌊n/g⌋, ⌊2n/g⌋, ...} ∪ {p ± 2^k : k = 0..⌈log2 n⌉} ∪ {p},

    restricted to keys 0 <= j < n (and j <= p if causal), duplicates removed. Positions are the
    keys' order (time order for a memory; a query at "now" has p = n, after the newest key).

    query_positions [Nq] (integers) -> idx [Nq, S] (key indices, 0 where padded) and
    valid [Nq, S] (bool); S = the largest set size, valid entries first in increasing order.
    """
    if n_keys < 1:
        raise ValueError(f"FP-HIDA needs at least one key, got n_keys = {n_keys}")
    device = query_positions.device
    p = query_positions.long().reshape(-1, 1)  # [Nq, 1]
    n_dyadic = math.ceil(math.log2(n_keys)) if n_keys > 1 else 0
    powers = 2 ** torch.arange(n_dyadic + 1, device=device)  # [L + 1]
    offsets = torch.cat([torch.arange(-window, window + 1, device=device), powers, -powers])
    anchors = (torch.arange(n_global, device=device) * n_keys) // n_global  # [g]
    cand = torch.cat([p + offsets, anchors.expand(p.shape[0], -1)], dim=1)  # [Nq, C]
    ok = (cand >= 0) & (cand < n_keys)
    if causal:
        ok &= cand <= p
    cand = torch.where(ok, cand, n_keys).sort(dim=1).values  # n_keys = dropped, sorts last
    dup = torch.zeros_like(ok)
    dup[:, 1:] = cand[:, 1:] == cand[:, :-1]
    cand = torch.where(dup, n_keys, cand).sort(dim=1).values
    valid = cand < n_keys
    width = max(int(valid.sum(dim=1).max().item()), 1) if valid.numel() else 1
    cand, valid = cand[:, :width], valid[:, :width]
    return torch.where(valid, cand, 0), valid


def fp_index_set_bound(n_keys: int, window: int, n_global: int) -> int:
    """Seed 000 Thm 5.4: |S_i| <= (2w + 1) + g + 2(⌈log2 n⌉ + 1) + 1."""
    n_dyadic = math.ceil(math.log2(n_keys)) if n_keys > 1 else 0
    return (2 * window + 1) + n_global + 2 * (n_dyadic + 1) + 1


def fp_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    eps: float,
    metric: str,
    query_positions: Tensor,
    window: int,
    n_global: int,
    causal: bool = False,
    mask: Tensor | None = None,
    *,
    query_chunk: int = 1024,
    need_weights: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """FP-HIDA (seed 000 M2): inverse-distance attention restricted to the index set
    :func:`fp_index_set`; O(Nq |S| d) with |S| = O(log Nk), computed in query chunks.
    Distances are elementwise, by explicit differences (no matrix product to cancel in)."""
    n_q, n_k = queries.shape[-2], keys.shape[-2]
    batch = torch.broadcast_shapes(
        queries.shape[:-2],
        keys.shape[:-2],
        values.shape[:-2],
        mask.shape[:-2] if mask is not None and mask.dim() >= 2 else (),
    )
    outs = []
    weights = None
    if need_weights:
        weights = queries.new_zeros(*batch, n_q, n_k)
    for start in range(0, n_q, query_chunk):
        rows = slice(start, start + query_chunk)
        idx, valid = fp_index_set(query_positions[rows], n_k, window, n_global, causal)
        kg = keys[..., idx, :]  # [..., c, S, d]
        vg = values[..., idx, :]  # [..., c, S, dv]
        d2 = squared_distance(queries[..., rows, :].unsqueeze(-2), kg, metric)  # [..., c, S]
        allowed = valid
        if mask is not None:
            m = mask if mask.dim() < 2 or mask.shape[-2] == 1 else mask[..., rows, :]
            m = m.expand(*m.shape[:-2], idx.shape[0], n_k)
            allowed = valid & torch.gather(m, -1, idx.expand(*m.shape[:-2], *idx.shape))
        w = inverse_distance_weights(d2, eps, allowed)  # [..., c, S]
        outs.append((w.unsqueeze(-1) * vg).sum(-2))  # [..., c, dv]
        if need_weights:
            w = w.expand(*batch, *w.shape[-2:])
            weights[..., rows, :].scatter_add_(-1, idx.expand(*batch, *idx.shape), w)
    out = torch.cat(outs, dim=-2) if len(outs) > 1 else outs[0]
    return out, weights


@dataclass
class FPHIDAConfig:
    """Fixed-pattern sparse HIDA (seed 000 M2, Def 5.2).

    Attributes:
        eps: kernel regulariser eps > 0.
        metric: "poincare" (HIDA), "euclidean" or "sphere".
        window: local half-width w; None = ⌈log2 Nk⌉ (the seed's w = Theta(log n)).
        n_global: number of global anchors g; None = ⌈log2 Nk⌉.
        causal: keep only keys at positions <= the query's.
        query_time: "sequence" (query i stands at position i: self-attention over a sequence)
            or "now" (every query stands at position Nk, after the newest key: memory
            retrieval, where positions are the memory's time order).
        query_chunk: queries per chunk (bounds memory at O(chunk log Nk d)).
        check_inputs: validate shapes and domains at every call.
    """

    eps: float = 1e-3
    metric: str = "poincare"
    window: int | None = None
    n_global: int | None = None
    causal: bool = False
    query_time: str = "sequence"
    query_chunk: int = 1024
    check_inputs: bool = True

    def __post_init__(self):
        _check_eps(self.eps)
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if self.window is not None and not (isinstance(self.window, int) and self.window >= 0):
            raise ValueError(f"window must be an integer >= 0 or None, got {self.window!r}")
        _check_positive_int("n_global", self.n_global, allow_none=True)
        if self.query_time not in ("sequence", "now"):
            raise ValueError(f"query_time must be 'sequence' or 'now', got {self.query_time!r}")
        _check_positive_int("query_chunk", self.query_chunk)


class FPHIDA(nn.Module):
    """M2: inverse-distance attention over S_i (local window, global anchors, dyadic offsets,
    self) with w, g = Theta(log n); O(n log n d) for n queries."""

    def __init__(self, config: FPHIDAConfig | None = None):
        super().__init__()
        self.config = config or FPHIDAConfig()

    def sizes(self, n_keys: int) -> tuple[int, int]:
        """(w, g) used for n_keys keys."""
        default = max(math.ceil(math.log2(n_keys)), 1) if n_keys > 1 else 1
        w = self.config.window if self.config.window is not None else default
        g = self.config.n_global if self.config.n_global is not None else default
        return w, g

    def positions(self, n_queries: int, n_keys: int, device=None) -> Tensor:
        """Default query positions: 0..Nq-1 ("sequence") or Nk for every query ("now")."""
        if self.config.query_time == "now":
            return torch.full((n_queries,), n_keys, dtype=torch.long, device=device)
        if n_queries > n_keys:
            raise ValueError(
                f"query_time='sequence' places query i at key position i, so it needs "
                f"Nq <= Nk; got Nq = {n_queries}, Nk = {n_keys}"
            )
        return torch.arange(n_queries, device=device)

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        *,
        query_positions: Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        cfg = self.config
        if cfg.check_inputs:
            check_attention_inputs(queries, keys, values, mask)
            check_points(queries, cfg.metric, "queries")
            check_points(keys, cfg.metric, "keys")
        n_q, n_k = queries.shape[-2], keys.shape[-2]
        if query_positions is None:
            query_positions = self.positions(n_q, n_k, queries.device)
        elif query_positions.shape != (n_q,):
            raise ValueError(
                f"query_positions must have shape [Nq] = [{n_q}], got "
                f"{tuple(query_positions.shape)}"
            )
        w, g = self.sizes(n_k)
        return fp_attention(
            queries, keys, values, cfg.eps, cfg.metric, query_positions, w, g, cfg.causal,
            mask, query_chunk=cfg.query_chunk, need_weights=need_weights,
        )  # fmt: skip


# =========================================================================== M3: L


def anchor_memberships(keys: Tensor, anchors: Tensor, eps: float) -> Tensor:
    """Key-anchor weights of seed 000 Def 5.3: A_ik = (d_H(k_i, a_k)^2 + eps)^-1 /
    sum_l (d_H(k_i, a_l)^2 + eps)^-1.  keys [..., Nk, d], anchors [..., m, d] -> [..., Nk, m]."""
    return inverse_distance_weights(squared_distance_matrix(keys, anchors, "poincare"), eps)


def l_hida_summaries(
    keys: Tensor,
    values: Tensor,
    anchors: Tensor,
    eps: float,
    key_mask: Tensor | None = None,
    *,
    chunk: int = 2048,
) -> tuple[Tensor, Tensor]:
    """Anchor summaries: soft counts n_k = sum_i A_ik and value means mu_k = sum_i A_ik v_i / n_k
    (sums over keys, accumulated over key chunks of ``chunk`` rows so the [chunk, m]
    intermediates stay in cache; a memory can accumulate them the same way as keys arrive while
    the anchors are fixed). Returns value_means [..., m, dv], masses [..., m]."""
    masses, sums = None, None
    for start in range(0, keys.shape[-2], chunk):
        rows = slice(start, start + chunk)
        memberships = anchor_memberships(keys[..., rows, :], anchors, eps)  # [..., c, m]
        if key_mask is not None:
            memberships = memberships * key_mask[..., rows].unsqueeze(-1)
        part_mass = memberships.sum(dim=-2)  # [..., m]
        part_sum = memberships.transpose(-1, -2) @ values[..., rows, :]  # [..., m, dv]
        masses = part_mass if masses is None else masses + part_mass
        sums = part_sum if sums is None else sums + part_sum
    means = sums / masses.clamp_min(torch.finfo(masses.dtype).tiny).unsqueeze(-1)
    return means, masses


def l_hida_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    anchors: Tensor,
    eps: float,
    key_mask: Tensor | None = None,
    *,
    need_weights: bool = True,
    chunk: int = 2048,
) -> tuple[Tensor, Tensor | None]:
    """L-HIDA (seed 000 M3, Def 5.3, mass-weighted; see the module docstring):
    out_j = sum_k pi_jk mu_k, pi_jk ∝ n_k (d_H(q_j, a_k)^2 + eps)^-1; O((Nq + Nk) m d), keys
    and queries in chunks of ``chunk`` rows.
    weights [..., Nq, Nk] = sum_k pi_jk A_ik / n_k (rows sum to 1)."""
    means, masses = l_hida_summaries(keys, values, anchors, eps, key_mask, chunk=chunk)
    outs, pis = [], []
    for start in range(0, queries.shape[-2], chunk):
        out, pi = inverse_distance_attention(
            queries[..., start : start + chunk, :], anchors, means, eps, "poincare",
            key_mass=masses, check_inputs=False,
        )  # fmt: skip  # [..., c, dv], [..., c, m]
        outs.append(out)
        pis.append(pi)
    out = torch.cat(outs, dim=-2) if len(outs) > 1 else outs[0]
    if not need_weights:
        return out, None
    memberships = anchor_memberships(keys, anchors, eps)  # [..., Nk, m]
    if key_mask is not None:
        memberships = memberships * key_mask.unsqueeze(-1)
    per_key = memberships / masses.clamp_min(torch.finfo(masses.dtype).tiny).unsqueeze(-2)
    pi = torch.cat(pis, dim=-2) if len(pis) > 1 else pis[0]
    return out, pi @ per_key.transpose(-1, -2)


@dataclass
class LHIDAConfig:
    """Anchor-aggregated HIDA (seed 000 M3, Def 5.3).

    Attributes:
        n_anchors: m, the number of learnable anchors (geoopt ManifoldParameter on the ball).
        dim: the dimension of the ball (keys' last dim).
        eps: kernel regulariser eps > 0 (key-anchor and query-anchor weights alike).
        init_radius: anchors start as exp_0 of Gaussian tangent vectors, radially capped at
            this Euclidean radius (or use :meth:`LHIDA.init_anchors_from_keys`).
        chunk: keys and queries are processed in chunks of this many rows (keeps the
            [chunk, m] intermediates in cache; measured per-query cost at n = 2^11 ... 2^17:
            1.2-1.6 us with 2048, 1.25-2.1 us with 8192, 4.4 us unchunked at 2^17).
        check_inputs: validate shapes and domains at every call.
    """

    n_anchors: int = 64
    dim: int = 16
    eps: float = 1e-3
    init_radius: float = 0.5
    chunk: int = 2048
    check_inputs: bool = True

    def __post_init__(self):
        _check_positive_int("n_anchors", self.n_anchors)
        _check_positive_int("dim", self.dim)
        _check_eps(self.eps)
        if not 0.0 < self.init_radius < 1.0:
            raise ValueError(f"init_radius must lie in (0, 1), got {self.init_radius!r}")
        _check_positive_int("chunk", self.chunk)


class LHIDA(nn.Module):
    """M3: m learnable anchors on the Poincare ball summarise the keys; each query attends to
    the anchors. Train the anchors with geoopt.optim.RiemannianAdam to keep them in the ball."""

    def __init__(self, config: LHIDAConfig | None = None):
        super().__init__()
        self.config = cfg = config or LHIDAConfig()
        tangent = 0.5 * torch.randn(cfg.n_anchors, cfg.dim)
        start = poincare.project(poincare.expmap0(tangent), cfg.init_radius)
        self.anchors = geoopt.ManifoldParameter(start, manifold=geoopt.PoincareBall(c=1.0))

    @torch.no_grad()
    def init_anchors_from_keys(self, keys: Tensor, generator: torch.Generator | None = None):
        """Set the anchors to m distinct keys drawn uniformly (Nystrom-style sampling);
        keys [N, d] with N >= m."""
        flat = keys.reshape(-1, keys.shape[-1])
        if flat.shape[0] < self.config.n_anchors or flat.shape[-1] != self.config.dim:
            raise ValueError(
                f"need at least n_anchors = {self.config.n_anchors} keys of dim "
                f"{self.config.dim}, got {tuple(keys.shape)}"
            )
        pick = torch.randperm(flat.shape[0], generator=generator)[: self.config.n_anchors]
        self.anchors.copy_(flat[pick.to(flat.device)].to(self.anchors.dtype))

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
            check_attention_inputs(queries, keys, values, mask)
            check_points(queries, "poincare", "queries")
            check_points(keys, "poincare", "keys")
            if keys.shape[-1] != cfg.dim:
                raise ValueError(f"keys must have dim {cfg.dim}, got {tuple(keys.shape)}")
        key_mask = _key_mask(mask, queries, keys, "L-HIDA")
        anchors = self.anchors.to(queries.dtype)
        return l_hida_attention(
            queries, keys, values, anchors, cfg.eps, key_mask, need_weights=need_weights,
            chunk=cfg.chunk,
        )  # fmt: skip


# =========================================================================== M4: C


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
        d2 = squared_distance_matrix(keys, centers, "poincare")  # [..., Nk, c]
        d2 = d2.masked_fill((counts <= 0).unsqueeze(-2), math.inf)
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
            check_attention_inputs(queries, keys, values, mask)
            check_points(queries, "poincare", "queries")
            check_points(keys, "poincare", "keys")
        key_mask = _key_mask(mask, queries, keys, "C-HIDA")
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
