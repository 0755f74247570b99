"""L-HIDA, seed 000 M3 (Def 5.3): m learnable anchors on the Poincare ball summarise the keys
and each query attends to the anchors, O((Nq + Nk) m d). The summaries are sums over keys
(:func:`l_hida_summaries`), so a memory can accumulate them as keys arrive while the anchors are
fixed. Overview of the family: world_model/attention/hida.py.

Departure from the seed (measured in tests/world_model/test_ida_claims.py and listed in the
inverse-distance section of docs/seed_map.md): Def 5.3 sums the values over keys,
v~_k = sum_i W~_ik v_i, and averages them with query-anchor weights that ignore how many keys
each anchor holds, so its output grows with n/m. Here the anchor's value is the mean
mu_k = sum_i A_ik v_i / n_k (n_k = sum_i A_ik, its soft count), and the query weights count each
anchor n_k times: out_j = sum_k pi_jk mu_k with pi_jk ∝ n_k / (d_H(q_j, a_k)^2 + eps). This is
Dense-HIDA with K(q, k_i) replaced by its interpolation sum_k K(q, a_k) A_ik, so rows sum to 1
and anchors placed on the keys with eps -> 0 give Dense back. (Measured: the normalisation is
what matters, the seed's sums are off by ~n/m; counting anchors by n_k or not changed the error
against Dense by <= 6%.)
"""

from __future__ import annotations

from dataclasses import dataclass

import geoopt
import torch
from torch import Tensor, nn

from geometry import poincare

from .hida_common import (
    _check_positive_int,
    _key_mask,
    cat_rows,
    check_operator_inputs,
    query_chunks,
)
from .ida import (
    _check_eps,
    inverse_distance_attention,
    inverse_distance_weights,
    squared_distance_matrix,
)

__all__ = ["LHIDAConfig", "LHIDA", "anchor_memberships", "l_hida_summaries", "l_hida_attention"]


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
    for rows in query_chunks(queries.shape[-2], chunk):
        out, pi = inverse_distance_attention(
            queries[..., rows, :], anchors, means, eps, "poincare",
            key_mass=masses, check_inputs=False,
        )  # fmt: skip  # [..., c, dv], [..., c, m]
        outs.append(out)
        pis.append(pi)
    out = cat_rows(outs)
    if not need_weights:
        return out, None
    memberships = anchor_memberships(keys, anchors, eps)  # [..., Nk, m]
    if key_mask is not None:
        memberships = memberships * key_mask.unsqueeze(-1)
    per_key = memberships / masses.clamp_min(torch.finfo(masses.dtype).tiny).unsqueeze(-2)
    pi = cat_rows(pis)
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
            check_operator_inputs(queries, keys, values, mask, "poincare")
            if keys.shape[-1] != cfg.dim:
                raise ValueError(f"keys must have dim {cfg.dim}, got {tuple(keys.shape)}")
        key_mask = _key_mask(mask, queries, "L-HIDA")
        anchors = self.anchors.to(queries.dtype)
        return l_hida_attention(
            queries, keys, values, anchors, cfg.eps, key_mask, need_weights=need_weights,
            chunk=cfg.chunk,
        )  # fmt: skip
