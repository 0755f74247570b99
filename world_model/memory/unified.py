"""The unified GeoResolver block, seed 000 §11.1 (M10):

    x -> QKV -> { HIDA path (main),  SIDA -> GSR -> DMG (memory) } -> HyperGate -> output

with the HIDA operators' call shape (docs/architecture.md, "The attention call shape"):

    out, weights = block(queries, keys, values, mask=None)

- QKV: per head h, q_{h,i} = exp_0(W_q x_i)_h and k_{h,j} = exp_0(W_k y_j)_h in the Poincare
  ball (projected to |.| <= max_norm), v_{h,j} = (W_v y_j)_h.
- main path: Dense-HIDA (world_model/attention/hida_dense.py) per head over the given keys;
  `weights` is its weight matrix averaged over heads [..., Nq, Nk] (None with
  need_weights=False). With ``learn_power`` (the default) the kernel is raised to a learned
  power per head, W ∝ (d_H^2 + eps)^-p_h = softmax(-p_h log(d_H^2 + eps)): a learned
  temperature 1/p_h on the log-distance logits, starting at p_h = 1 (Dense-HIDA exactly;
  ``learn_power=False`` keeps p = 1, the seed's kernel). A departure from the seed, measured on
  associative recall with noisy queries (benchmarks/memory_modules.py, docs/measurements.md):
  with p = 1 the true key gets weight ~ s^-2 against ~ n Delta^-2 for the others (noise s, key
  spacing Delta), so the seed's kernel collapses as n or s grows (0.0-0.02 of 1 at n = 1024);
  the learned power (p_h ~ 3-7 after training) reaches 0.71-1.0 up to n = 4096.
- memory path: a memory query exp_0(W_m x_i) is mapped to the sphere by a cross-geometric map
  (world_model/memory/routing.py), routed by GSR (world_model/memory/gsr.py) to its top-K
  active prototypes of a fixed-capacity :class:`MemoryPool` (centroids mapped by the same map),
  whose values E_e are combined. Each forward counts the selected prototypes in the pool's
  records (a_e, t_last); :meth:`UnifiedBlock.genesis` feeds per-query losses to DMG
  (world_model/memory/dmg.py), which spawns prototypes at surprising memory queries.
- HyperGate (world_model/memory/hypergate.py) combines the heads' outputs (kappa_h) and the
  memory output (beta_i) and gates the result per dimension; W_o maps it to the output.

Training: geoopt.optim.RiemannianAdam over block.parameters() is Riemannian Adam on the pool's
centroids (a ManifoldParameter) and Adam on everything else, as in agent/core/agent.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from geometry import poincare
from world_model.attention.hida_dense import DenseHIDA, DenseHIDAConfig
from world_model.attention.ida import squared_distance_matrix

from .dmg import DMGConfig, DynamicMemoryGenesis
from .gsr import GeodesicSparseRouting, GSRConfig
from .hypergate import HyperGate, HyperGateConfig
from .routing import (
    CrossGeometricMap,
    CrossGeometricMapConfig,
    MemoryPool,
    PoolConfig,
    soft_routing,
)

__all__ = ["UnifiedConfig", "UnifiedBlock"]


@dataclass
class UnifiedConfig:
    """The unified block (seed 000 §11.1; module docstring).

    Attributes:
        query_dim: width of the query inputs x (and key inputs y).
        value_dim: width of the value inputs.
        out_dim: width of the output (None = heads * head_dim).
        heads: number H of HIDA heads.
        head_dim: ball dimension (and value width) of each head.
        eps: Dense-HIDA kernel regulariser.
        learn_power: raise the kernel to a learned power p_h per head (module docstring).
        max_norm: ball points are projected to |z| <= max_norm.
        memory: build the memory path (pool, map, GSR, DMG).
        memory_dim: dimension of the memory queries and the pool's centroids.
        pool: the pool (its dim and value_dim are set from memory_dim and heads * head_dim).
        sphere_map: the cross-geometric map of queries and centroids.
        gsr: the routing.
        dmg: the genesis rule (None = no genesis).
        gate: the HyperGate's initial biases (its dim and heads are set from the block).
    """

    query_dim: int = 16
    value_dim: int = 16
    out_dim: int | None = None
    heads: int = 2
    head_dim: int = 16
    eps: float = 1e-3
    learn_power: bool = True
    max_norm: float = 1.0 - 1e-5
    memory: bool = True
    memory_dim: int = 16
    pool: PoolConfig = field(default_factory=lambda: PoolConfig(capacity=64, initial_active=64))
    sphere_map: CrossGeometricMapConfig = field(default_factory=CrossGeometricMapConfig)
    gsr: GSRConfig = field(default_factory=GSRConfig)
    dmg: DMGConfig | None = None
    gate: HyperGateConfig = field(default_factory=HyperGateConfig)

    def __post_init__(self):
        for name in ("query_dim", "value_dim", "heads", "head_dim", "memory_dim"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"UnifiedConfig.{name} must be an integer >= 1, got {v!r}")
        if self.out_dim is not None and not (isinstance(self.out_dim, int) and self.out_dim >= 1):
            raise ValueError(f"UnifiedConfig.out_dim must be None or >= 1, got {self.out_dim!r}")
        if not (isinstance(self.eps, (int, float)) and self.eps > 0):
            raise ValueError(f"UnifiedConfig.eps must be > 0, got {self.eps!r}")
        if not 0.0 < self.max_norm < 1.0:
            raise ValueError(f"UnifiedConfig.max_norm must lie in (0, 1), got {self.max_norm!r}")
        width = self.heads * self.head_dim
        self.pool = PoolConfig(**{**vars(self.pool), "dim": self.memory_dim, "value_dim": width})
        self.gate = HyperGateConfig(**{**vars(self.gate), "dim": width, "heads": self.heads})


class UnifiedBlock(nn.Module):
    """x -> QKV -> {HIDA main, SIDA -> GSR -> DMG memory} -> HyperGate -> W_o (module doc)."""

    def __init__(self, config: UnifiedConfig | None = None):
        super().__init__()
        cfg = self.config = config or UnifiedConfig()
        width = cfg.heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.query_dim, width)
        self.k_proj = nn.Linear(cfg.query_dim, width)
        self.v_proj = nn.Linear(cfg.value_dim, width)
        self.o_proj = nn.Linear(width, cfg.out_dim or width)
        self.hida = DenseHIDA(DenseHIDAConfig(eps=cfg.eps, metric="poincare", check_inputs=False))
        if cfg.learn_power:
            self.log_power = nn.Parameter(torch.zeros(cfg.heads))  # p_h = exp(.) = 1 at init
        self.gate = HyperGate(cfg.gate)
        if cfg.memory:
            self.m_proj = nn.Linear(cfg.query_dim, cfg.memory_dim)
            self.pool = MemoryPool(cfg.pool)
            self.sphere_map = CrossGeometricMap(cfg.memory_dim, cfg.sphere_map)
            self.router = GeodesicSparseRouting(cfg.gsr)
            self.dmg = DynamicMemoryGenesis(cfg.dmg) if cfg.dmg is not None else None

    def _ball(self, x: Tensor) -> Tensor:
        """[..., N, H * dh] -> ball points [..., N, H, dh] (exp_0 per head)."""
        cfg = self.config
        x = x.unflatten(-1, (cfg.heads, cfg.head_dim))
        return poincare.project(poincare.expmap0(x), cfg.max_norm)

    def memory_queries(self, queries: Tensor) -> Tensor:
        """The memory path's ball queries exp_0(W_m x): [..., Nq, query_dim] -> [..., Nq, dm]."""
        return poincare.project(poincare.expmap0(self.m_proj(queries)), self.config.max_norm)

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        *,
        need_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """queries [..., Nq, query_dim], keys [..., Nk, query_dim], values [..., Nk, value_dim],
        mask bool broadcastable to [..., Nq, Nk] -> out [..., Nq, out_dim], weights
        [..., Nq, Nk] (Dense-HIDA's, averaged over heads) or None."""
        q = self._ball(self.q_proj(queries))  # [..., Nq, H, dh]
        k = self._ball(self.k_proj(keys))  # [..., Nk, H, dh]
        v = self.v_proj(values).unflatten(-1, (self.config.heads, self.config.head_dim))
        head_mask = None if mask is None else mask.unsqueeze(-3)  # [..., 1, Nq, Nk]
        main, weights = self._main(
            q.transpose(-2, -3), k.transpose(-2, -3), v.transpose(-2, -3), head_mask, need_weights
        )  # main [..., H, Nq, dh], weights [..., H, Nq, Nk]
        memory = None
        if self.config.memory:
            memory, idx, _ = self.router(
                self.sphere_map(self.memory_queries(queries)), self.pool, self.sphere_map
            )  # [..., Nq, H * dh]
            t = int(self.dmg.t) if self.dmg is not None else 0
            self.pool.record_use(idx, t)
        h, _ = self.gate(main.transpose(-2, -3), q, memory)  # [..., Nq, H * dh]
        return self.o_proj(h), (None if weights is None else weights.mean(-3))

    def _main(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool):
        """Per-head HIDA: q [..., H, Nq, dh], k, v [..., H, Nk, dh] -> out, weights."""
        if not self.config.learn_power:
            return self.hida(q, k, v, mask, need_weights=need_weights)
        sq = squared_distance_matrix(q, k, "poincare")  # [..., H, Nq, Nk]
        logits = -self.log_power.exp()[:, None, None] * torch.log(sq + self.config.eps)
        if mask is not None:
            logits = logits.masked_fill(~mask, -math.inf)
        weights = soft_routing(logits)  # softmax over allowed keys; an empty row is 0
        return weights @ v, (weights if need_weights else None)

    @torch.no_grad()
    def genesis(self, losses: Tensor, queries: Tensor, values: Tensor | None = None) -> Tensor:
        """Feed per-query losses [...] (one step each, in order) to DMG; spawns put prototypes at
        those queries' memory positions, with values [..., H * dh] (None: zeros). Returns the
        rows written. Clear their optimiser state with routing.clear_optimizer_rows."""
        if not self.config.memory or self.dmg is None:
            raise ValueError("genesis needs the memory path and a DMGConfig (UnifiedConfig.dmg)")
        m = self.memory_queries(queries).reshape(-1, self.config.memory_dim)
        v = None if values is None else values.reshape(m.shape[0], -1)
        return self.dmg.observe(losses.reshape(-1), m, self.pool, v)
