"""DMG (seed 000 §9): the surprise rule against a step-by-step reference, exact checkpoints,
spawn / prune / capacity, Lemma 9.1's O(log T) against a measured Theta(T), and spawning after
change points (world_model/memory/dmg.py)."""

from __future__ import annotations

import math

import pytest
import torch

from world_model.memory.dmg import (
    DMGConfig,
    DynamicMemoryGenesis,
    surprise_scan,
    window_statistics,
)
from world_model.memory.routing import MemoryPool, PoolConfig


def reference_rule(losses, cfg):
    """The §9.1 rule written out step by step (statistics recomputed from the raw window)."""
    s, last, surprise, spawn = 0, -(10**9), [], []
    for i in range(len(losses)):
        t = i + 1
        win = losses[max(0, t - cfg.window) : t]
        mu = sum(win) / len(win)
        sigma = math.sqrt(sum((x - mu) ** 2 for x in win) / len(win))
        tau = cfg.tau_base + cfg.kappa * sigma + cfg.gamma * s / t
        stat = mu if cfg.trigger == "window_mean" else losses[i]
        hit = t >= cfg.warmup_steps and stat > tau
        s += hit
        fire = hit and t - last > cfg.cooldown
        last = t if fire else last
        surprise.append(hit)
        spawn.append(fire)
    return surprise, spawn


def test_window_statistics_match_brute_force():
    g = torch.Generator().manual_seed(0)
    hist, new = (
        5 + torch.randn(9, generator=g, dtype=torch.float64),
        torch.randn(20, generator=g, dtype=torch.float64),
    )
    mean, std = window_statistics(hist, new, 6)
    full = torch.cat([hist, new])
    for i in range(20):
        win = full[9 + i - 5 : 9 + i + 1]
        torch.testing.assert_close(mean[i], win.mean())
        torch.testing.assert_close(std[i], win.std(unbiased=False))
    mean, _ = window_statistics(hist[:0], new, 6)  # partial windows at the start
    torch.testing.assert_close(mean[2], new[:3].mean())


@pytest.mark.parametrize(
    "cfg",
    [
        DMGConfig(window=8, tau_base=0.1, kappa=0.3, gamma=0.5),
        DMGConfig(window=5, tau_base=0.5, kappa=0.5, gamma=2.0, trigger="sample", cooldown=3),
        DMGConfig(window=4, tau_base=0.0, kappa=0.0, gamma=0.1, warmup=1, cooldown=10),
    ],
)
def test_scan_is_the_rule_step_by_step(cfg):
    losses = torch.randn(400, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    res = surprise_scan(losses, cfg)
    surprise, spawn = reference_rule(losses.tolist(), cfg)
    assert res.surprise.tolist() == surprise and res.spawn.tolist() == spawn
    assert 0 < sum(spawn) <= sum(surprise) < 400


def stream(n, d=3, seed=2):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, generator=g, dtype=torch.float64) * 2, 0.5 * torch.rand(
        n, d, generator=g
    ) - 0.25


def test_chunked_observation_equals_one_scan_and_checkpoints_restore_exactly():
    cfg = DMGConfig(
        window=10,
        tau_base=0.9,
        kappa=0.2,
        gamma=0.5,
        trigger="sample",
        cooldown=2,
        prune_age=30,
        max_idle=40,
    )
    losses, keys = stream(600)
    torch.manual_seed(0)
    ref_pool, ref = (
        MemoryPool(PoolConfig(capacity=12, dim=3, value_dim=2)),
        DynamicMemoryGenesis(cfg),
    )
    torch.manual_seed(0)
    pool, dmg = MemoryPool(PoolConfig(capacity=12, dim=3, value_dim=2)), DynamicMemoryGenesis(cfg)
    ref_rows = [ref.observe(losses[i : i + 1], keys[i : i + 1], ref_pool) for i in range(600)]
    rows = [dmg.observe(losses[i : i + 37], keys[i : i + 37], pool) for i in range(0, 296, 37)]
    saved = {
        **{f"pool.{k}": v.clone() for k, v in pool.state_dict().items()},
        **{f"dmg.{k}": v.clone() for k, v in dmg.state_dict().items()},
    }
    pool2, dmg2 = MemoryPool(PoolConfig(capacity=12, dim=3, value_dim=2)), DynamicMemoryGenesis(cfg)
    pool2.load_state_dict({k[5:]: v for k, v in saved.items() if k.startswith("pool.")})
    dmg2.load_state_dict({k[4:]: v for k, v in saved.items() if k.startswith("dmg.")})
    rows += [dmg2.observe(losses[i : i + 50], keys[i : i + 50], pool2) for i in range(296, 600, 50)]
    assert int(dmg2.spawns) == int(ref.spawns) == sum(r.numel() for r in ref_rows) > 12
    for k, v in ref_pool.state_dict().items():
        assert torch.equal(pool2.state_dict()[k], v), k
    for k, v in ref.state_dict().items():
        assert torch.equal(dmg2.state_dict()[k], v), k


def test_spawn_sits_at_the_surprising_input_with_its_value():
    cfg = DMGConfig(window=4, tau_base=1.0, kappa=0.0, gamma=0.0, trigger="sample")
    pool, dmg = MemoryPool(PoolConfig(capacity=4, dim=2, value_dim=1)), DynamicMemoryGenesis(cfg)
    losses = torch.tensor([0.1, 0.2, 0.1, 0.2, 0.1, 5.0, 0.1])
    keys = torch.arange(14.0).reshape(7, 2) / 100
    rows = dmg.observe(losses, keys, pool, values=torch.arange(7.0).unsqueeze(-1))
    assert rows.tolist() == [0] and pool.active.tolist() == [True, False, False, False]
    torch.testing.assert_close(pool.centroids[0].data, keys[5])
    assert pool.values[0].item() == 5.0 and int(pool.t_birth[0]) == 6


def test_capacity_is_hard_lru_eviction_or_skip():
    losses, keys = torch.full((30,), 9.0), torch.rand(30, 2) * 0.5
    for when_full in ("evict_lru", "skip"):
        cfg = DMGConfig(
            window=2,
            tau_base=1.0,
            kappa=0.0,
            gamma=0.0,
            trigger="sample",
            warmup=1,
            when_full=when_full,
        )
        pool, dmg = (
            MemoryPool(PoolConfig(capacity=3, dim=2, value_dim=1)),
            DynamicMemoryGenesis(cfg),
        )
        dmg.observe(losses[:3], keys[:3], pool)
        pool.record_use(torch.tensor([0, 2]), t=3)  # row 1 is the least recently used
        dmg.observe(losses[3:4], keys[3:4], pool)
        assert pool.active_count() == 3
        if when_full == "evict_lru":
            torch.testing.assert_close(pool.centroids[1].data, keys[3])
            assert int(dmg.spawns) == 4
        else:
            torch.testing.assert_close(pool.centroids[1].data, keys[1])
            assert int(dmg.spawns) == 3


def test_pruning_by_age_and_disuse():
    cfg = DMGConfig(window=2, tau_base=1e9, prune_age=10, max_idle=5, min_activations=2)
    pool, dmg = MemoryPool(PoolConfig(capacity=4, dim=2, value_dim=1)), DynamicMemoryGenesis(cfg)
    pool.write(torch.tensor([0, 1, 2, 3]), torch.zeros(4, 2), None, t=0)
    pool.write(torch.tensor([3]), torch.zeros(1, 2), None, t=8)  # young
    pool.activations[:] = torch.tensor([5, 5, 1, 0])
    pool.t_last[:] = torch.tensor([12, 2, 12, 8])
    dmg.observe(torch.zeros(12), torch.zeros(12, 2), pool)  # t = 12
    # 0: old, used, recent -> kept; 1: idle 10 > 5 -> pruned; 2: a_e = 1 < 2 -> pruned; 3: age 4
    assert pool.active.tolist() == [True, False, False, True]


def test_lemma_9_1_fails_spawns_grow_linearly_on_a_stationary_stream():
    """Gaussian losses (sub-Gaussian, mean 0, sd 1), parameters fixed in advance, no capacity,
    pruning or cooldown: Lemma 9.1's O(log T) would give a ratio ~ log(1e5)/log(1e3) = 1.7 between
    T = 1e5 and 1e3; the count grows ~100x and the rate settles at a constant."""
    cfg = DMGConfig(window=32, tau_base=0.05, kappa=0.25, gamma=0.5)
    losses = torch.randn(100_000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    spawn = surprise_scan(losses, cfg).spawn
    counts = [int(spawn[:t].sum()) for t in (1_000, 10_000, 100_000)]
    assert counts[2] / counts[0] > 30
    rate_a, rate_b = spawn[10_000:50_000].float().mean(), spawn[50_000:].float().mean()
    assert 0.005 < rate_b and abs(rate_a - rate_b) < 0.3 * rate_b


def test_spawns_after_each_change_point_in_a_closed_loop():
    """Inputs from one cluster at a time, switching to a new cluster every 400 steps; the loss is
    the squared distance to the nearest active prototype (large when there is none). DMG spawns
    within a window of each switch and not in between."""
    g = torch.Generator().manual_seed(4)
    centres = 0.6 * torch.cat([torch.eye(3), -torch.eye(3)])  # squared distances >= 0.72
    cfg = DMGConfig(window=16, tau_base=0.05, kappa=1.0, gamma=0.05, cooldown=16)
    pool, dmg = MemoryPool(PoolConfig(capacity=16, dim=3, value_dim=1)), DynamicMemoryGenesis(cfg)
    spawn_times = []
    for t in range(2400):
        x = centres[t // 400] + 0.01 * torch.randn(3, generator=g)
        c = pool.centroids.data[pool.active]
        loss = ((c - x) ** 2).sum(-1).min() if c.numel() else torch.tensor(1.0)
        if dmg.observe(loss.reshape(1), x.reshape(1, 3), pool).numel():
            spawn_times.append(t)
    switches = [400 * j for j in range(6)]
    for s in switches:
        assert any(s <= t < s + 48 for t in spawn_times), (s, spawn_times)
    assert all(any(s <= t < s + 48 for s in switches) for t in spawn_times), spawn_times
    assert len(spawn_times) <= 12


def test_config_errors_are_one_line():
    for kwargs, match in (
        (dict(window=0), "window"),
        (dict(kappa=-1.0), "kappa"),
        (dict(trigger="max"), "trigger"),
        (dict(cooldown=-1), "cooldown"),
        (dict(when_full="grow"), "when_full"),
        (dict(tau_base=float("nan")), "tau_base"),
    ):
        with pytest.raises(ValueError, match=match) as info:
            DMGConfig(**kwargs)
        assert "\n" not in str(info.value)
