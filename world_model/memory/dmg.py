"""Dynamic Memory Genesis (DMG), seed 000 §9 (M9): spawn a prototype where the loss is
surprising, prune by age and disuse, within a hard capacity.

Records (c_e centroid, E_e value, t_birth, a_e activation count, t_last) live in the
fixed-capacity :class:`world_model.memory.routing.MemoryPool`; this module holds the surprise
statistics and the spawn / prune rules, and does not own the pool (the caller passes it).

Surprise (§9.1). Over the last W losses (fewer before W steps), mu_t and sigma_t are the window
mean and (population) standard deviation, and
    tau_t = tau_base + kappa sigma_t + gamma S_{t-1} / t,
with S_{t-1} the number of surprises before step t (the seed's rate (1/t) sum_{i<=t} counts
step t itself, which would make the rule circular). Step t is a surprise when the statistic
exceeds tau_t: the window mean mu_t (trigger "window_mean", the seed's rule) or the step's own
loss l_t (trigger "sample", also offered: it reacts at the first surprising input instead of
after the window mean has moved). No surprise before `warmup` steps (default W: sigma of a
one-sample window is 0). A surprise spawns unless a spawn happened within the last `cooldown`
steps; the new prototype sits at the surprising step's input (its key, and its value when one
is given). With a full pool, a spawn evicts the least recently used active prototype
("evict_lru") or is dropped ("skip").

Lemma 9.1 claims E[T_s(T)] = O(log T) spawns on a stationary sub-Gaussian stream. It does not
hold: the threshold is bounded (tau_t <= tau_base + kappa sigma_t + gamma), so the probability
of a surprise at each step stays above P(stat > tau_base + kappa sigma + gamma) > 0 for
unbounded noise, and the surprise rate S_t/t tends to the fixed point rho = P(stat > ... +
gamma rho) > 0: Theta(T) spawns. Measured in benchmarks/memory_modules.py (docs/measurements.md).

The whole state (window, counters) is in buffers: state_dict / load_state_dict restore it
exactly, so a resumed stream spawns as an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .routing import MemoryPool

__all__ = [
    "TRIGGERS",
    "DMGConfig",
    "ScanResult",
    "window_statistics",
    "surprise_scan",
    "DynamicMemoryGenesis",
]

TRIGGERS = ("window_mean", "sample")
NEVER = -(2**62)  # "no spawn yet" for last_spawn


@dataclass
class DMGConfig:
    """DMG (seed 000 §9; module docstring).

    Attributes:
        window: W, length of the sliding window of losses.
        tau_base: tau_base of the threshold (the seed asks tau_base > the null mean loss).
        kappa: weight of the window standard deviation sigma_t.
        gamma: weight of the surprise rate S_{t-1} / t.
        trigger: "window_mean" (mu_t > tau_t, the seed's) or "sample" (l_t > tau_t).
        warmup: no surprise before this many steps (None = window).
        cooldown: steps after a spawn during which a surprise does not spawn (0 = off).
        prune_age: prototypes younger than this are never pruned (None = pruning off).
        max_idle: prune a prototype unused for more than this many steps (None = no idle rule).
        min_activations: prune a prototype (old enough) used fewer times than this.
        when_full: "evict_lru" or "skip" when a spawn finds no free row.
    """

    window: int = 64
    tau_base: float = 1.0
    kappa: float = 1.0
    gamma: float = 1.0
    trigger: str = "window_mean"
    warmup: int | None = None
    cooldown: int = 0
    prune_age: int | None = None
    max_idle: int | None = None
    min_activations: int = 0
    when_full: str = "evict_lru"

    def __post_init__(self):
        if not (isinstance(self.window, int) and self.window >= 1):
            raise ValueError(f"DMGConfig.window must be an integer >= 1, got {self.window!r}")
        for name in ("tau_base", "kappa", "gamma"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v)):
                raise ValueError(f"DMGConfig.{name} must be a finite number, got {v!r}")
        if self.kappa < 0 or self.gamma < 0:
            raise ValueError("DMGConfig.kappa and gamma must be >= 0")
        if self.trigger not in TRIGGERS:
            raise ValueError(f"DMGConfig.trigger must be one of {TRIGGERS}, got {self.trigger!r}")
        for name in ("warmup", "prune_age", "max_idle"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int) and v >= 0):
                raise ValueError(f"DMGConfig.{name} must be None or an integer >= 0, got {v!r}")
        for name in ("cooldown", "min_activations"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 0):
                raise ValueError(f"DMGConfig.{name} must be an integer >= 0, got {v!r}")
        if self.when_full not in ("evict_lru", "skip"):
            raise ValueError(
                f"DMGConfig.when_full must be 'evict_lru' or 'skip', got {self.when_full!r}"
            )

    @property
    def warmup_steps(self) -> int:
        return self.window if self.warmup is None else self.warmup


class ScanResult(NamedTuple):
    surprise: Tensor  # bool [T]
    spawn: Tensor  # bool [T]
    mean: Tensor  # float64 [T]  mu_t
    std: Tensor  # float64 [T]  sigma_t
    threshold: Tensor  # float64 [T]  tau_t
    surprises: int  # S after the scan
    last_spawn: int  # time of the last spawn (NEVER if none)


def window_statistics(history: Tensor, losses: Tensor, window: int) -> tuple[Tensor, Tensor]:
    """mu_t and sigma_t (population) over the last min(t, W) losses, for each new loss.

    history [h] (the previous losses, oldest first, h <= W - 1 used), losses [T] ->
    mean [T], std [T], float64, by prefix sums of the shifted losses (no per-step loop)."""
    hist = history[-(window - 1) :] if window > 1 else history[:0]
    x = torch.cat([hist, losses]).to(torch.float64)  # [h + T]
    shift = x.mean()  # NaN for no losses at all, which leaves the outputs empty
    y = x - shift
    zero = y.new_zeros(1)
    s1 = torch.cat([zero, torch.cumsum(y, 0)])  # [h + T + 1]
    s2 = torch.cat([zero, torch.cumsum(y * y, 0)])
    end = torch.arange(hist.numel() + 1, x.numel() + 1)  # one past each new loss
    start = (end - window).clamp_min(0)
    count = end - start
    m = (s1[end] - s1[start]) / count
    var = ((s2[end] - s2[start]) / count - m * m).clamp_min(0.0)
    return m + shift, var.sqrt()


def surprise_scan(
    losses: Tensor,
    config: DMGConfig,
    history: Tensor | None = None,
    t0: int = 0,
    surprises: int = 0,
    last_spawn: int = NEVER,
) -> ScanResult:
    """The surprise / spawn rule of §9.1 over a stream of scalar losses [T] that follows t0
    earlier steps (their last losses in `history`, S = `surprises`). The window statistics are
    vectorised; the threshold's rate term depends on earlier surprises, so that recursion is
    one pass over Python floats (about 1 s per 10^6 steps)."""
    cfg = config
    losses = losses.detach().to(torch.float64).reshape(-1)
    hist = losses.new_zeros(0) if history is None else history.detach().to(torch.float64)
    mean, std = window_statistics(hist, losses, cfg.window)
    stat = mean if cfg.trigger == "window_mean" else losses
    base = (cfg.tau_base + cfg.kappa * std).tolist()
    stat_l = stat.tolist()
    gamma, warm, cool = cfg.gamma, cfg.warmup_steps, cfg.cooldown
    n = len(stat_l)
    surprise, spawn, thr = [False] * n, [False] * n, []
    s, last = surprises, last_spawn
    for i in range(n):
        t = t0 + i + 1  # steps are numbered from 1
        tau = base[i] + gamma * s / t
        thr.append(tau)
        if t >= warm and stat_l[i] > tau:
            surprise[i] = True
            s += 1
            if t - last > cool:
                spawn[i] = True
                last = t
    as_bool = lambda v: torch.tensor(v, dtype=torch.bool)  # noqa: E731
    return ScanResult(
        as_bool(surprise),
        as_bool(spawn),
        mean,
        std,
        torch.tensor(thr, dtype=torch.float64),
        s,
        last,
    )


class DynamicMemoryGenesis(nn.Module):
    """The DMG controller: window, counters and the spawn / prune rules (module docstring)."""

    def __init__(self, config: DMGConfig | None = None):
        super().__init__()
        self.config = cfg = config or DMGConfig()
        self.register_buffer("history", torch.zeros(cfg.window, dtype=torch.float64))  # [W]
        self.register_buffer("history_len", torch.zeros((), dtype=torch.int64))
        self.register_buffer("t", torch.zeros((), dtype=torch.int64))
        self.register_buffer("surprises", torch.zeros((), dtype=torch.int64))
        self.register_buffer("spawns", torch.zeros((), dtype=torch.int64))
        self.register_buffer("last_spawn", torch.full((), NEVER, dtype=torch.int64))

    def _recent(self) -> Tensor:
        return self.history[self.config.window - int(self.history_len) :]

    @torch.no_grad()
    def observe(
        self, losses: Tensor, keys: Tensor, pool: MemoryPool, values: Tensor | None = None
    ) -> Tensor:
        """Advance by the B steps of losses [B] whose inputs are keys [B, d] (ball) and values
        [B, dv] (optional): spawn where due, then prune. Returns the rows written, int64 [m]."""
        cfg = self.config
        losses = losses.detach().reshape(-1).to(torch.float64)
        t0 = int(self.t)
        scan = surprise_scan(
            losses, cfg, self._recent(), t0, int(self.surprises), int(self.last_spawn)
        )
        written = []
        for i in torch.nonzero(scan.spawn).flatten().tolist():
            self.prune(pool, t0 + i + 1)  # as if pruned at every step: nothing is used in between
            slot = self._slot(pool)
            if slot is None:
                continue
            v = None if values is None else values[i : i + 1]
            pool.write(torch.tensor([slot]), keys[i : i + 1], v, t0 + i + 1)
            written.append(slot)
        recent = torch.cat([self._recent(), losses])[-cfg.window :]
        self.history.zero_()
        self.history[cfg.window - recent.numel() :] = recent
        self.history_len.fill_(recent.numel())
        self.t.fill_(t0 + losses.numel())
        self.surprises.fill_(scan.surprises)
        self.last_spawn.fill_(scan.last_spawn)
        self.spawns.add_(len(written))
        self.prune(pool)
        return torch.tensor(written, dtype=torch.int64)

    def _slot(self, pool: MemoryPool) -> int | None:
        free = pool.free_slots()
        if free.numel():
            return int(free[0])
        if self.config.when_full == "skip":
            return None
        # no free slot: every row is active; evict the least recently used (lowest index on ties)
        return int(torch.argmin(pool.t_last))

    @torch.no_grad()
    def prune(self, pool: MemoryPool, t: int | None = None) -> Tensor:
        """Deactivate prototypes old enough (age >= prune_age at time t, default now) that are
        idle (t - t_last > max_idle) or rarely used (a_e < min_activations). Returns the pruned
        rows [m]. Observing in chunks prunes before each spawn and at the chunk's end, which is
        the same as pruning at every step (records change only by spawns and routing)."""
        cfg = self.config
        if cfg.prune_age is None:
            return torch.zeros(0, dtype=torch.int64)
        t = int(self.t) if t is None else t
        old = pool.active & (t - pool.t_birth >= cfg.prune_age)
        unused = pool.activations < cfg.min_activations
        if cfg.max_idle is not None:
            unused = unused | (t - pool.t_last > cfg.max_idle)
        rows = torch.nonzero(old & unused).flatten()
        pool.deactivate(rows)
        return rows

    def record_use(self, pool: MemoryPool, indices: Tensor, weights: Tensor | None = None) -> None:
        """Count the prototypes a routing step selected (a_e, t_last = now)."""
        pool.record_use(indices, int(self.t), weights)
