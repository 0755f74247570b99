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
    """The §9.1 rule written out step by step (statistics recomputed from the raw window): the
    flags, and (mu_t, sigma_t, tau_t) per step."""
    s, last, surprise, spawn, stats = 0, -(10**9), [], [], []
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
        stats.append((mu, sigma, tau))
    return surprise, spawn, stats


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
    surprise, spawn, stats = reference_rule(losses.tolist(), cfg)
    assert res.surprise.tolist() == surprise and res.spawn.tolist() == spawn
    got = torch.stack([res.mean, res.std, res.threshold], dim=-1)  # what the scan reports
    torch.testing.assert_close(got, torch.tensor(stats, dtype=torch.float64), rtol=1e-9, atol=1e-9)
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


@pytest.mark.parametrize("window", [1, 2, 6])
def test_window_statistics_with_history_against_brute_force_in_float64(window):
    """Windows of 1, 2 and 6 reaching into a history of 4 float32 losses: the mean and
    population sd over the last min(t, W) losses, float64 (from float32 inputs)."""
    g = torch.Generator().manual_seed(5)
    hist, new = torch.randn(4, generator=g), torch.randn(7, generator=g)
    mean, std = window_statistics(hist, new, window)
    assert mean.dtype == std.dtype == torch.float64
    full = torch.cat([hist, new]).tolist()
    for i in range(7):
        win = full[max(0, 4 + i + 1 - window) : 4 + i + 1]
        mu = sum(win) / len(win)
        assert mean[i].item() == pytest.approx(mu, rel=1e-12, abs=1e-12)
        sd = math.sqrt(sum((x - mu) ** 2 for x in win) / len(win))
        assert std[i].item() == pytest.approx(sd, rel=1e-9, abs=1e-7)  # sqrt of a rounded 0


@pytest.mark.parametrize("window", [1, 4])
def test_losses_older_than_the_window_do_not_enter_it_even_through_the_shift(window):
    """A history whose oldest losses are ~1e12 and whose last W - 1 are 1, then losses of 1:
    every window holds ones only, so the mean is 1 and the sd 0 exactly (had the prefix sums
    been shifted by a mean that saw the 1e12s, neither would be, from their rounding)."""
    big = 1e12 * (
        1 + torch.rand(3, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    )
    history = torch.cat([big, torch.ones(window - 1, dtype=torch.float64)])
    mean, std = window_statistics(history, torch.ones(5, dtype=torch.float64), window)
    assert mean.tolist() == [1.0] * 5 and std.tolist() == [0.0] * 5


def test_window_statistics_of_losses_far_from_zero_keep_their_spread():
    """Losses 1e8 + N(0, 1): the prefix sums run on losses shifted by their mean, so the sd is
    the brute-force one to 1e-6 (unshifted float64 sums of squares lose it to cancellation)."""
    g = torch.Generator().manual_seed(6)
    x = 1e8 + torch.randn(40, generator=g, dtype=torch.float64)
    _, std = window_statistics(x[:0], x, 8)
    for i in range(7, 40):
        win = x[i - 7 : i + 1].tolist()
        mu = sum(win) / 8
        sd = math.sqrt(sum((v - mu) ** 2 for v in win) / 8)
        assert std[i].item() == pytest.approx(sd, rel=1e-6)


def test_scan_thresholds_ties_cooldown_and_an_empty_stream():
    """A loss equal to tau is no surprise (it must exceed); a spawn blocks the next `cooldown`
    steps (spawns at t = 1, 4, 7 with cooldown 2); thresholds are tau_t in float64, here
    1 + 0.5 S_{t-1} / t; the counters continue from t0, S and the last spawn given; an empty
    stream gives empty bool flags."""
    cfg = DMGConfig(window=3, tau_base=1.0, kappa=0.0, gamma=0.0, trigger="sample", warmup=1)
    res = surprise_scan(torch.tensor([1.0, 1.5, 1.0, 2.0]), cfg)
    assert res.surprise.tolist() == [False, True, False, True]
    cool = DMGConfig(
        window=3, tau_base=0.5, kappa=0.0, gamma=0.0, trigger="sample", warmup=1, cooldown=2
    )
    res = surprise_scan(torch.ones(8), cool)
    assert res.spawn.tolist() == [True, False, False, True, False, False, True, False]
    assert res.surprises == 8 and res.last_spawn == 7
    rate = DMGConfig(window=3, tau_base=1.0, kappa=0.0, gamma=0.5, trigger="sample", warmup=1)
    res = surprise_scan(torch.full((4,), 3.0, dtype=torch.float64), rate, t0=10, surprises=2)
    expected = [1.0 + 0.5 * s / t for s, t in ((2, 11), (3, 12), (4, 13), (5, 14))]
    assert res.threshold.dtype == torch.float64
    assert res.threshold.tolist() == pytest.approx(expected, rel=1e-15)
    empty = surprise_scan(torch.zeros(0), cfg)
    assert empty.surprise.dtype == empty.spawn.dtype == torch.bool and empty.spawn.numel() == 0


def test_warmup_boundary_counts_step_t_equal_to_warmup():
    """warmup = 3: steps 1 and 2 are never surprises, step 3 is (t >= warmup)."""
    cfg = DMGConfig(window=4, tau_base=0.5, kappa=0.0, gamma=0.0, trigger="sample", warmup=3)
    assert surprise_scan(torch.ones(4), cfg).surprise.tolist() == [False, False, True, True]


def test_prune_boundaries_and_what_it_returns():
    """At t = 10 with prune_age 4, max_idle 3, min_activations 2: age exactly 4 is old enough,
    idle exactly 3 is not idle, a_e exactly 2 is not rare; prune returns the rows it
    deactivated (int64), none of the inactive ones; with pruning off it returns an empty int64."""
    cfg = DMGConfig(window=2, prune_age=4, max_idle=3, min_activations=2)
    pool = MemoryPool(PoolConfig(capacity=6, dim=2, value_dim=1, initial_active=6))
    pool.t_birth[:] = torch.tensor([6, 7, 6, 6, 0, 0])
    pool.t_last[:] = torch.tensor([7, 0, 6, 9, 0, 9])
    pool.activations[:] = torch.tensor([2, 0, 2, 1, 0, 2])
    pool.active[4] = False  # inactive, old and idle: not returned
    rows = DynamicMemoryGenesis(cfg).prune(pool, 10)
    # 0: age 4, idle 3, a 2: kept; 1: age 3: kept; 2: idle 4: pruned; 3: a 1 < 2: pruned
    assert rows.dtype == torch.int64 and rows.tolist() == [2, 3]
    assert pool.active.tolist() == [True, True, False, False, False, True]
    off = DynamicMemoryGenesis(DMGConfig(window=2)).prune(pool, 10)
    assert off.dtype == torch.int64 and off.numel() == 0
    only_rare = DMGConfig(window=2, prune_age=0, min_activations=1)
    # no idle rule: at t = 20 rows 0 and 5 (idle 13 and 11, used twice) stay, row 1 (unused) goes
    assert DynamicMemoryGenesis(only_rare).prune(pool, 20).tolist() == [1]


def test_a_spawn_prunes_first_at_its_own_step_then_writes():
    """Capacity 2, "skip", max_idle 3: rows last used at t = 0 and 1. The spawn at t = 4 prunes
    row 0 (idle 4 > 3; row 1's idle 3 is not) and takes its slot, born at 4; the spawn at
    t = 2 before it found no slot and was dropped (the loop goes on after it)."""
    cfg = DMGConfig(
        window=2, tau_base=1.0, kappa=0.0, gamma=0.0, trigger="sample", warmup=1,
        prune_age=0, max_idle=3, when_full="skip",
    )  # fmt: skip
    pool = MemoryPool(PoolConfig(capacity=2, dim=2, value_dim=1))
    pool.write(torch.tensor([0, 1]), torch.zeros(2, 2), None, t=0)
    pool.t_last[1] = 1
    dmg = DynamicMemoryGenesis(cfg)
    keys = torch.arange(8.0).reshape(4, 2) / 10
    rows = dmg.observe(torch.tensor([0.0, 5.0, 0.0, 5.0]), keys, pool)
    assert rows.tolist() == [0] and rows.dtype == torch.int64
    assert pool.active.tolist() == [True, True] and int(pool.t_birth[0]) == 4
    torch.testing.assert_close(pool.centroids.data[0], keys[3])
    assert int(dmg.spawns) == 1 and int(dmg.surprises) == 2
    assert dmg.observe(torch.zeros(1), keys[:1], pool).dtype == torch.int64  # nothing written


def test_state_holds_the_exact_window_and_integer_counters():
    """After two observations the history buffer ends with the last W losses exactly (float64
    values float32 cannot hold), history_len and t count them, and every counter is int64;
    record_use counts at the DMG's clock."""
    dmg = DynamicMemoryGenesis(DMGConfig(window=4, tau_base=1e9))
    pool = MemoryPool(PoolConfig(capacity=3, dim=2, value_dim=1, initial_active=3))
    losses = torch.tensor([1 / 3, 2 / 3, 1 / 7, 1e-9 + 1, 5 / 7], dtype=torch.float64)
    dmg.observe(losses[:2], torch.zeros(2, 2), pool)
    assert dmg.history[-2:].tolist() == losses[:2].tolist() and int(dmg.history_len) == 2
    dmg.observe(losses[2:], torch.zeros(3, 2), pool)
    assert dmg.history.tolist() == losses[1:].tolist() and int(dmg.history_len) == 4
    assert int(dmg.t) == 5
    for name in ("history_len", "t", "surprises", "spawns", "last_spawn"):
        assert getattr(dmg, name).dtype == torch.int64, name
    dmg.record_use(pool, torch.tensor([[0, 2]]), torch.tensor([[1.0, 0.0]]))
    assert pool.activations.tolist() == [1, 0, 0] and pool.t_last.tolist() == [5, 0, 0]


def test_config_boundaries_and_messages():
    """window 1 and warmup / prune_age / max_idle 0 are valid; negatives are refused with
    their messages, and the kappa / gamma message is the whole line."""
    DMGConfig(window=1, warmup=0, prune_age=0, max_idle=0, cooldown=0)
    for name in ("warmup", "prune_age", "max_idle"):
        with pytest.raises(ValueError, match=f"^DMGConfig.{name} must be None or an integer >= 0"):
            DMGConfig(**{name: -1})
    with pytest.raises(ValueError, match="^DMGConfig.min_activations must be an integer >= 0"):
        DMGConfig(min_activations=-1)
    with pytest.raises(ValueError, match="^DMGConfig.kappa and gamma must be >= 0$"):
        DMGConfig(gamma=-0.5)
