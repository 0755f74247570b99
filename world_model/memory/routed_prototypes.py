"""The routed prototype pool: the macro-level context of the BAOAB heads grown by DMG and read
through GSR (seed 000 §8.2, §9, §10), the alternative to the fixed table of prototypes.py.

- Records: a fixed-capacity :class:`world_model.memory.routing.MemoryPool` whose centroids are
  the prototypes' positions c_e in the latent ball (Riemannian Adam keeps them inside) and whose
  value rows hold the four per-prototype feature vectors of prototypes.py, side by side:
  [force keys | force values | correction keys | correction values], each `feature_dim` wide.
- Routing (GSR, §10): a rollout's root position z (one per training sample, one per planning
  call) and the centroids are mapped to the sphere S^d by the inverse stereographic map phi_B
  (§8.2; injective, unlike phi_A = c/|c|, which merges prototypes along a ray; the learned
  phi_C, trained through the masses below, read worse: docs/measurements.md); the K active
  prototypes of largest SIDA weight w_e ∝ (d_S(q, c_e)^2 + eps)^-1 are the rollout's macro
  entries. Every step of the rollout reads those K entries, each weighted by its SIDA weight
  (§10.1's o(q) = sum_{e in S(q)} w_e v_e, read by the covariant heads: entry e enters their
  softmax with mass m_e = K w_e / W_K, alpha_e ∝ m_e exp(l_e), so the head's own scores and GSR's
  weights combine; m_e = 1 for equal weights, the selection alone; Selection.log_mass; the KRR
  kernel, whose ridge system is over the gathered entries, reads the selection alone). Thm
  10.1's bound 2 (1 - W_K) max_e |v_e| is logged for the force values as a measure of how much of
  the SIDA mass the K hold.
- Genesis (DMG, §9): after each update the per-sample one-step latent prediction errors of the
  batch, divided by their batch mean (scale-free: a learned latent has no fixed error scale),
  stream through DMG's "sample" trigger with tau = 1 + kappa sigma_t + gamma S_{t-1} / t: a
  sample whose relative error exceeds the threshold spawns a prototype at its latent position,
  with the features of its nearest active prototype (a split: the kick read there barely
  changes until the new row is trained). At most one spawn per update (DMG's cooldown of one
  batch). Prototypes routed to by a training loss are counted (a_e, t_last); a prototype old
  enough and not routed to for `prune_idle` updates is pruned; a spawn into a full pool evicts
  the least recently used row. Rows written are returned so the optimiser's moments of those
  rows can be cleared (routing.clear_optimizer_rows).

Time is DMG's: one step per training sample, so t advances by the batch size per update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from geometry import sphere
from world_model import sharding
from world_model.attention.context import MACRO_LEVEL, ContextBank

from .dmg import DMGConfig, DynamicMemoryGenesis
from .routing import MemoryPool, PoolConfig, hard_routing, sida_logits, soft_routing

__all__ = ["RoutedPoolConfig", "Selection", "RoutedPrototypePool"]


@dataclass
class RoutedPoolConfig:
    """The routed prototype pool (module docstring)."""

    capacity: int = 128
    """rows of the pool (DMG's hard capacity)"""
    initial: int = 64
    """prototypes active at the start"""
    k: int = 16
    """macro entries each rollout reads (GSR's top-K)"""
    feature_dim: int = 16
    """key / value feature size of each bank"""
    init_scale: float = 0.7
    """spread of the initial positions (as PrototypeConfig.init_scale)"""
    eps: float = 1e-2
    """SIDA kernel regulariser"""
    spawn_sigmas: float = 3.0
    """kappa: a sample spawns when its relative one-step error exceeds 1 + kappa sigma + rate"""
    window: int = 4096
    """DMG's window of relative errors (samples)"""
    prune_idle: int = 200
    """prune a prototype not routed to for this many updates (and at least as old)"""
    max_norm: float = 0.999
    """centroids are kept at |c| <= max_norm"""

    def __post_init__(self) -> None:
        for name in ("capacity", "initial", "k", "feature_dim", "window", "prune_idle"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"RoutedPoolConfig.{name} must be an integer >= 1, got {v!r}")
        if self.initial > self.capacity:
            raise ValueError(
                f"RoutedPoolConfig.initial ({self.initial}) must be <= capacity ({self.capacity})"
            )
        if self.k > self.capacity:
            raise ValueError(f"RoutedPoolConfig.k ({self.k}) must be <= capacity ({self.capacity})")
        for name in ("eps", "spawn_sigmas", "init_scale"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v < float("inf")):
                raise ValueError(f"RoutedPoolConfig.{name} must be a finite number > 0, got {v!r}")

    def dmg(self, batch_size: int) -> DMGConfig:
        """DMG's rule for updates of `batch_size` samples (DMG's clock counts samples)."""
        idle = self.prune_idle * batch_size  # updates -> DMG steps
        return DMGConfig(
            window=self.window,
            tau_base=1.0,  # the batch mean of the relative error
            kappa=float(self.spawn_sigmas),
            gamma=1.0,
            trigger="sample",
            cooldown=batch_size - 1,  # at most one spawn per update
            prune_age=idle,
            max_idle=idle,
            when_full="evict_lru",
        )


class Selection(NamedTuple):
    """The K prototypes a rollout reads: index [B, K] (rows of the pool), valid [B, K] (False
    where fewer than K prototypes are active) and their SIDA weights renormalised over the K,
    weights [B, K] (§10.1's w_e / W_K)."""

    index: Tensor
    valid: Tensor
    weights: Tensor

    def log_mass(self, rows: int) -> Tensor:
        """[B, rows]: log m_e = log(K w_e / W_K) at each root's selected rows (mean mass 1 over
        the K: equal weights give 0, the selection alone), 0 elsewhere (masked out by `mask`)."""
        k = self.index.shape[-1]
        log_m = torch.log((k * self.weights).clamp_min(torch.finfo(self.weights.dtype).tiny))
        return self._on_rows(log_m, rows)

    def mask(self, rows: int) -> Tensor:
        """[B, rows] bool: True at each root's valid selected rows of a pool of `rows`."""
        return self._on_rows(torch.ones_like(self.valid), rows)

    def _on_rows(self, values: Tensor, rows: int) -> Tensor:
        """values [B, K] written at each root's selected rows of a pool of `rows`: [B, rows],
        zero (False) elsewhere. An invalid slot writes into a spare last column, dropped (its
        index may repeat a valid one)."""
        out = values.new_zeros(self.index.shape[0], rows + 1)
        return out.scatter_(1, torch.where(self.valid, self.index, rows), values)[:, :rows]


class RoutedPrototypePool(nn.Module):
    """Prototypes in the d-ball, grown by DMG and routed by GSR (module docstring)."""

    def __init__(self, dim: int, config: RoutedPoolConfig | None = None):
        super().__init__()
        cfg = self.config = config or RoutedPoolConfig()
        f = cfg.feature_dim
        self.pool = MemoryPool(
            PoolConfig(cfg.capacity, dim, 4 * f, cfg.initial, cfg.init_scale, cfg.max_norm)
        )
        with torch.no_grad():  # keys ~ N(0, 1), values ~ N(0, 1/F), as prototypes.py
            scale = torch.tensor([(4 * f) ** 0.5, 2.0, (4 * f) ** 0.5, 2.0]).repeat_interleave(f)
            self.pool.values.mul_(scale)
        self.dmg = DynamicMemoryGenesis(cfg.dmg(1))  # its rule is set per update (genesis)
        self.register_buffer("prunes", torch.zeros((), dtype=torch.int64))

    # ------------------------------------------------------------------ reading

    @property
    def positions(self) -> Tensor:
        """The active prototypes' positions [M_active, d] (the diagnostics' fallback queries)."""
        return self.pool.centroids[self.pool.active]

    def _bank(self, part: int) -> ContextBank:
        """Every row of the pool as one bank [1, C] (inactive rows are never selected)."""
        f = self.config.feature_dim
        feats = self.pool.values.unflatten(-1, (4, f))  # [C, 4, F]
        return ContextBank.at_level(
            self.pool.centroids.unsqueeze(0),
            feats[:, 2 * part].unsqueeze(0),
            feats[:, 2 * part + 1].unsqueeze(0),
            MACRO_LEVEL,
        )

    def force_bank(self) -> ContextBank:
        """Macro entries for the kick heads, the whole pool: [1, C]."""
        return self._bank(0)

    def correction_bank(self) -> ContextBank:
        """Macro entries for the drift heads, the whole pool: [1, C]."""
        return self._bank(1)

    def logits(self, z: Tensor) -> Tensor:
        """SIDA logits of the roots z [B, d] over the pool [B, C] (-inf: inactive)."""
        pool = self.pool
        q = sphere.ball_to_sphere_stereographic(z.detach())  # routing is not trained through
        c = sphere.ball_to_sphere_stereographic(pool.centroids.detach())
        return sida_logits(q, c, self.config.eps, pool.active)

    def route(self, z: Tensor) -> Selection:
        """GSR's top-K at the roots z [B, d]. A selection for a training loss (train mode, with
        gradients) counts as a use; planning, diagnostics and the memory's residuals do not."""
        counts = self.training and torch.is_grad_enabled()
        with torch.no_grad():
            index, weights = hard_routing(self.logits(z), self.config.k)  # [B, K] each
            if counts:  # a data-parallel update counts every rank's samples (sharding.py)
                self.dmg.record_use(self.pool, sharding.gather(index))
        return Selection(index.clamp_min(0), index >= 0, weights)

    @torch.no_grad()
    def routing_report(self, z: Tensor) -> dict[str, float]:
        """For TensorBoard, at the roots z [B, d]: active prototypes, spawns and prunes so far,
        the mean entropy of the full SIDA distribution (nats), the mean top-K mass W_K and the
        mean of Thm 10.1's bound 2 (1 - W_K) max_e |v_e| for the force values."""
        w = soft_routing(self.logits(z))  # [B, C]
        mass = torch.topk(w, min(self.config.k, w.shape[-1]), dim=-1).values.sum(-1)  # [B]
        f = self.config.feature_dim
        force_values = self.pool.values[:, f : 2 * f]
        vmax = force_values[self.pool.active].norm(dim=-1).max()
        entropy = -(w * torch.log(w.clamp_min(1e-30))).sum(-1)
        return {
            "prototypes_active": float(self.pool.active_count()),
            "prototype_spawns": float(self.dmg.spawns),
            "prototype_prunes": float(self.prunes),
            "routing_entropy": float(entropy.mean()),
            "routing_topk_mass": float(mass.mean()),
            "gsr_bound": float((2 * (1 - mass) * vmax).mean()),
        }

    # ------------------------------------------------------------------ genesis

    @torch.no_grad()
    def genesis(self, z: Tensor, errors: Tensor) -> list[tuple[Tensor, Tensor]]:
        """DMG on one update's samples: roots z [B, d] and their one-step errors [B] >= 0.
        Returns (parameter, rows written) pairs, for clearing the optimiser's moments."""
        pool = self.pool
        self.dmg.config = self.config.dmg(z.shape[0])  # the window's size is fixed by config
        relative = errors.detach().double() / errors.detach().double().mean().clamp_min(1e-30)
        active_before = pool.active.clone()
        nearest = self._nearest(z)  # [B] rows, for the new prototypes' features
        values = pool.values[nearest]  # [B, 4F]
        written = self.dmg.observe(relative, z.detach(), pool, values)
        pruned = active_before & ~pool.active
        pruned[written] = False  # an evicted row rewritten is a spawn, not a prune
        self.prunes.add_(int(pruned.sum()))
        if written.numel() == 0:
            return []
        return [(pool.centroids, written), (pool.values, written)]

    def _nearest(self, z: Tensor) -> Tensor:
        logits = self.logits(z)  # [B, C]
        return logits.argmax(-1)
