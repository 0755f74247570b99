"""Cross-geometric maps and routing over a fixed-capacity prototype pool, seed 000 §8.2-8.3.

- Maps from the Poincare ball to the sphere (§8.2): phi_A(c) = c / |c| and phi_B (inverse
  stereographic, onto S^d) are pure functions in geometry/sphere.py
  (``ball_to_sphere_norm``, ``ball_to_sphere_stereographic``); phi_C(c) = MLP(c) / |MLP(c)| is
  :class:`CrossGeometricMap` with kind "learned" (its MLP reads log_0(c), the tangent vector
  at the origin, by default: ball coordinates crowd near the boundary, where log_0 spreads them;
  ``tangent_input=False`` feeds c itself, as the seed writes it).
- Routing (§8.3) on SIDA logits s_e = -log(d_S(q, c_e)^2 + eps), whose softmax is the SIDA
  weight w_e (Def 8.1): soft routing is the full distribution (:func:`soft_routing`), hard
  routing the top-K prototypes by weight, renormalised over the K (:func:`hard_routing`).
- The pool (:class:`MemoryPool`) has a FIXED capacity and an active mask: a prototype is a row
  of fixed-shape parameters (centroid c_e, a geoopt ManifoldParameter on the Poincare ball, for
  Riemannian Adam; value E_e) and of record buffers (t_birth, activation count a_e, t_last;
  seed §9). Spawning writes a row and sets its mask, pruning clears the mask; nothing is ever
  resized, so optimiser state, checkpoints, compiled graphs and data-parallel replicas keep
  their shapes. A written row's stale optimiser moments are cleared by
  :func:`clear_optimizer_rows`. Inactive rows get -inf logits: no weight, no gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import geoopt
import torch
from torch import Tensor, nn

from geometry import poincare, sphere
from world_model.attention.ida import squared_distance_matrix

__all__ = [
    "MAP_KINDS",
    "CrossGeometricMapConfig",
    "CrossGeometricMap",
    "PoolConfig",
    "MemoryPool",
    "sida_logits",
    "soft_routing",
    "hard_routing",
    "ordered_topk",
    "clear_optimizer_rows",
]

MAP_KINDS = ("norm", "stereographic", "learned")


@dataclass
class CrossGeometricMapConfig:
    """A ball -> sphere map of seed 000 §8.2.

    Attributes:
        kind: "norm" (phi_A, onto S^{d-1}), "stereographic" (phi_B, onto S^d) or "learned"
            (phi_C = MLP / |MLP|, onto S^{out_dim - 1}).
        hidden: width of phi_C's hidden layer.
        out_dim: phi_C's output dimension (None = the input dimension).
        tangent_input: phi_C reads log_0(c) (True) or c (False, the seed's form).
    """

    kind: str = "norm"
    hidden: int = 64
    out_dim: int | None = None
    tangent_input: bool = True

    def __post_init__(self):
        if self.kind not in MAP_KINDS:
            raise ValueError(f"CrossGeometricMapConfig.kind must be one of {MAP_KINDS}")
        if not (isinstance(self.hidden, int) and self.hidden >= 1):
            raise ValueError(f"CrossGeometricMapConfig.hidden must be >= 1, got {self.hidden!r}")
        if self.out_dim is not None and not (isinstance(self.out_dim, int) and self.out_dim >= 2):
            raise ValueError(f"CrossGeometricMapConfig.out_dim must be >= 2, got {self.out_dim!r}")


class CrossGeometricMap(nn.Module):
    """Ball points [..., d] -> unit vectors [..., sphere_dim] (phi_A, phi_B or phi_C)."""

    def __init__(self, dim: int, config: CrossGeometricMapConfig | None = None):
        super().__init__()
        cfg = config or CrossGeometricMapConfig()
        self.config, self.dim = cfg, dim
        if cfg.kind == "learned":
            out = cfg.out_dim or dim
            self.mlp = nn.Sequential(
                nn.Linear(dim, cfg.hidden), nn.GELU(), nn.Linear(cfg.hidden, out)
            )
        self.sphere_dim = {"norm": dim, "stereographic": dim + 1}.get(cfg.kind, cfg.out_dim or dim)

    def forward(self, c: Tensor) -> Tensor:
        kind = self.config.kind
        if kind == "norm":
            return sphere.ball_to_sphere_norm(c)
        if kind == "stereographic":
            return sphere.ball_to_sphere_stereographic(c)
        x = poincare.logmap0(c) if self.config.tangent_input else c
        return sphere.normalize(self.mlp(x))  # an MLP output of exactly 0 stays 0 (no direction)


@dataclass
class PoolConfig:
    """The prototype pool (fixed capacity, active mask).

    Attributes:
        capacity: number of rows (the hard capacity of DMG, seed §9).
        dim: dimension d of the centroids (Poincare ball).
        value_dim: dimension of the prototype values E_e.
        initial_active: rows active at construction (random centroids, the rest empty).
        init_scale: std of the tangent vectors whose exp_0 gives the initial centroids.
        max_norm: centroids are projected to |c| <= max_norm when written.
    """

    capacity: int = 256
    dim: int = 16
    value_dim: int = 16
    initial_active: int = 0
    init_scale: float = 0.5
    max_norm: float = 0.999

    def __post_init__(self):
        for name in ("capacity", "dim", "value_dim"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"PoolConfig.{name} must be an integer >= 1, got {v!r}")
        if not (isinstance(self.initial_active, int) and 0 <= self.initial_active <= self.capacity):
            raise ValueError(
                f"PoolConfig.initial_active must lie in [0, capacity], got {self.initial_active!r}"
            )
        if not 0.0 < self.init_scale < 5.0:
            raise ValueError(f"PoolConfig.init_scale must lie in (0, 5), got {self.init_scale!r}")
        if not 0.0 < self.max_norm < 1.0:
            raise ValueError(f"PoolConfig.max_norm must lie in (0, 1), got {self.max_norm!r}")


class MemoryPool(nn.Module):
    """Fixed-capacity prototype records (c_e, E_e, t_birth, a_e, t_last) with an active mask."""

    def __init__(self, config: PoolConfig | None = None):
        super().__init__()
        cfg = config or PoolConfig()
        self.config = cfg
        c = poincare.project(
            poincare.expmap0(cfg.init_scale * torch.randn(cfg.capacity, cfg.dim)), cfg.max_norm
        )
        self.centroids = geoopt.ManifoldParameter(c, manifold=geoopt.PoincareBall(c=1.0))  # [C, d]
        self.values = nn.Parameter(cfg.value_dim**-0.5 * torch.randn(cfg.capacity, cfg.value_dim))
        active = torch.zeros(cfg.capacity, dtype=torch.bool)
        active[: cfg.initial_active] = True
        self.register_buffer("active", active)  # [C]
        zeros = torch.zeros(cfg.capacity, dtype=torch.int64)
        self.register_buffer("t_birth", zeros.clone())  # [C]
        self.register_buffer("activations", zeros.clone())  # [C]  a_e
        self.register_buffer("t_last", zeros.clone())  # [C]

    @property
    def capacity(self) -> int:
        return self.config.capacity

    def active_count(self) -> int:
        return int(self.active.sum())

    def free_slots(self) -> Tensor:
        """Indices of inactive rows, lowest first: int64 [C - active]."""
        return torch.nonzero(~self.active).flatten()

    @torch.no_grad()
    def write(self, slots: Tensor, centroids: Tensor, values: Tensor | None, t: int) -> None:
        """Activate rows `slots` [m] at centroids [m, d] (projected into the ball) with values
        [m, dv] (None: zeros) born at time t (a_e = 0, t_last = t)."""
        if slots.numel() == 0:
            return
        self.centroids.data[slots] = poincare.project(
            centroids.to(self.centroids.dtype), self.config.max_norm
        )
        fill = torch.zeros(slots.numel(), self.config.value_dim) if values is None else values
        self.values.data[slots] = fill.to(self.values.dtype)
        self.active[slots] = True
        self.t_birth[slots] = t
        self.t_last[slots] = t
        self.activations[slots] = 0

    @torch.no_grad()
    def deactivate(self, slots: Tensor) -> None:
        self.active[slots] = False

    @torch.no_grad()
    def record_use(self, indices: Tensor, t: int, weights: Tensor | None = None) -> None:
        """a_e += number of times e appears in indices (int, any shape; -1 = none) and
        t_last_e = t for those e; with weights, only entries of weight > 0 count."""
        idx = indices.reshape(-1)
        keep = idx >= 0
        if weights is not None:
            keep = keep & (weights.reshape(-1) > 0)
        idx = idx[keep]
        self.activations.index_add_(0, idx, torch.ones_like(idx))
        self.t_last[idx] = t


def sida_logits(
    queries: Tensor, prototypes: Tensor, eps: float, active: Tensor | None = None
) -> Tensor:
    """SIDA logits s_e = -log(d_S(q, c_e)^2 + eps) (Def 8.1; softmax over e gives w_e), -inf
    where a prototype is inactive. queries [..., Nq, m], prototypes [P, m] (unit vectors),
    active bool [P] -> [..., Nq, P]."""
    logits = -torch.log(squared_distance_matrix(queries, prototypes, "sphere") + eps)
    if active is not None:
        logits = logits.masked_fill(~active, -math.inf)
    return logits


def _softmax_rows(logits: Tensor) -> Tensor:
    """Softmax over the last dim; a row with no finite logit gives zeros (not NaN)."""
    finite = torch.isfinite(logits).any(dim=-1, keepdim=True)
    return torch.softmax(logits.masked_fill(~finite, 0.0), dim=-1) * finite


def soft_routing(logits: Tensor) -> Tensor:
    """Soft routing (§8.3): the full SIDA distribution w [..., Nq, P] over active prototypes."""
    return _softmax_rows(logits)


def hard_routing(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Hard routing (§8.3): the K largest SIDA weights, renormalised over the K.

    logits [..., Nq, P] -> indices int64 [..., Nq, K'] (K' = min(K, P); -1 where fewer than K'
    prototypes are active) and weights [..., Nq, K'] (rows sum to 1, or 0 with none). The
    weights are differentiable in the selected logits (the selection itself is not)."""
    top, idx = ordered_topk(logits, k)  # [..., Nq, K]
    idx = idx.masked_fill(~torch.isfinite(top), -1)
    return idx, _softmax_rows(top)


def ordered_topk(scores: Tensor, k: int, indices: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The min(k, n) largest scores [..., n] in descending order, ties broken by the lower
    index, and their indices [..., min(k, n)] (`indices` [..., n]: each score's own index,
    e.g. a prototype's global row; default its position). torch.topk leaves the order of ties
    unspecified, so a top-K merged from shards could differ from the unsharded one where two
    prototypes score the same; this order is one total order for both."""
    if indices is None:
        indices = torch.arange(scores.shape[-1], device=scores.device).expand_as(scores)
    else:  # index order first, so the stable sort below keeps ties by index
        order = torch.sort(indices, dim=-1, stable=True).indices
        scores, indices = scores.gather(-1, order), indices.gather(-1, order)
    top, pos = torch.sort(scores, dim=-1, descending=True, stable=True)
    k = min(k, scores.shape[-1])
    return top[..., :k], indices.gather(-1, pos[..., :k])


@torch.no_grad()
def clear_optimizer_rows(optimizer: torch.optim.Optimizer, param: Tensor, rows: Tensor) -> None:
    """Zero the per-element optimiser state (Adam's moments, ...) of `rows` of `param`, so a
    row written by a spawn does not inherit the previous occupant's moments."""
    state = optimizer.state.get(param, {})
    for value in state.values():
        if isinstance(value, Tensor) and value.shape == param.shape:
            value[rows] = 0
