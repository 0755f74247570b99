"""world_model/memory/routed_prototypes.py and its plumbing: GSR selects the K prototypes nearest
on the sphere (against a brute-force geodesic sort), the routed mask over the prepared pool
reads what the selected bank prepared afresh reads, a routed pool that selects every prototype
is the fixed table (same heads, same output), DMG spawns at the surprising sample with its
neighbour's features and clears the optimiser's moments of that row, idle prototypes are pruned,
and the numbers stay finite at the ball's boundary."""

from __future__ import annotations

import math
from dataclasses import replace

import geoopt
import pytest
import torch

from geometry import sphere
from world_model.attention.covariant import CovariantQueries
from world_model.geodesic import GeodesicConfig, GeodesicDynamics
from world_model.geodesic.config import ContextConfig
from world_model.memory.routed_prototypes import RoutedPoolConfig, RoutedPrototypePool, Selection
from world_model.memory.routing import clear_optimizer_rows


def _dynamics(routing: str, **context) -> GeodesicDynamics:
    torch.manual_seed(0)
    cfg = GeodesicConfig(
        latent_dim=4, encoder_dim=16, context=ContextConfig(routing=routing, **context)
    )
    dyn = GeodesicDynamics(6, 2, cfg).double()
    with torch.no_grad():  # w_o starts at 0: give the heads an output
        for head in (dyn.integrator.kick_head, dyn.integrator.drift_head):
            head.w_o.weight.normal_(0.0, 0.3)
    return dyn


def test_gsr_selects_the_k_nearest_active_prototypes_on_the_sphere():
    torch.manual_seed(1)
    pool = RoutedPrototypePool(3, RoutedPoolConfig(capacity=20, initial=15, k=5)).double()
    pool.pool.active[[2, 7]] = False  # two rows pruned: never selected
    z = geoopt.PoincareBall().expmap0(0.8 * torch.randn(9, 3, dtype=torch.float64))
    index, valid, weights = pool.route(z)
    assert valid.all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(9, dtype=torch.float64))
    q = sphere.ball_to_sphere_stereographic(z)
    c = sphere.ball_to_sphere_stereographic(pool.pool.centroids.detach())
    angle = torch.arccos((q @ c.T).clamp(-1, 1))  # geodesic distance on S^3
    angle[:, ~pool.pool.active] = float("inf")
    expected = angle.argsort(-1)[:, :5]
    assert torch.equal(index.sort(-1).values, expected.sort(-1).values)


def test_fewer_active_prototypes_than_k_leave_the_rest_invalid():
    pool = RoutedPrototypePool(3, RoutedPoolConfig(capacity=8, initial=3, k=5))
    index, valid, _ = pool.route(torch.zeros(2, 3))
    assert valid.sum(-1).tolist() == [3, 3]
    assert set(index[valid].tolist()) <= {0, 1, 2}


def test_the_routed_mask_over_the_prepared_pool_is_the_selected_bank_prepared_afresh():
    """Each root reads its top-K through a mask over the pool prepared once; two steps under
    that context equal two steps under the selected entries gathered and prepared afresh, with
    the same GSR masses (§10.1; their meaning is the next test's)."""
    dyn = _dynamics("gsr", prototypes=12, pool_capacity=16, route_k=5)
    with torch.no_grad():
        dyn.prototypes.pool.active[[3, 8]] = False  # pruned rows: never read
    integ = dyn.integrator
    obs, action = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    state = dyn.encode(obs)
    context = dyn.context(state)
    assert context.force.mask.shape == (4, 16) and context.force.batch_size == 1
    selection = dyn.prototypes.route(state.z)
    assert torch.equal(context.force.mask.sum(-1), selection.valid.sum(-1))
    pool = dyn.prototypes
    every = torch.ones_like(selection.valid)
    mass = torch.log(5 * selection.weights).masked_fill(~selection.valid, 0.0)  # [4, K]
    gathered = (pool.force_bank(), pool.correction_bank())
    afresh = replace(
        context,
        force=integ.kick_head.prepare(gathered[0].take(*selection[:2])).within(every, mass),
        correction=integ.drift_head.prepare(gathered[1].take(*selection[:2])).within(every, mass),
    )
    outs = []
    for ctx in (context, afresh):
        after = dyn.next(dyn.next(state, action, ctx), action)
        outs.append((after.z, after.p))
    for a, b in zip(*outs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_a_pool_that_routes_to_every_prototype_with_equal_weights_is_the_fixed_table():
    """route_k = the pool, and a SIDA kernel so flat (eps 1e12) that every weight is the same:
    every mass is 1 and the routed pool reads as the fixed table does."""
    dense = _dynamics("dense", prototypes=6)
    routed = _dynamics("gsr", prototypes=6, pool_capacity=6, route_k=6)
    routed.prototypes.config.eps = 1e12
    routed.load_state_dict(dense.state_dict(), strict=False)  # everything but the prototypes
    table, rows = dense.prototypes, routed.prototypes.pool
    with torch.no_grad():
        rows.centroids.copy_(table.positions)
        rows.values.copy_(
            torch.cat(
                [table.force_keys, table.force_values, table.correction_keys,
                 table.correction_values], dim=-1,
            )
        )  # fmt: skip
    obs, action = torch.randn(5, 6, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)
    outs = []
    for dyn in (dense, routed):
        state = dyn.encode(obs)
        after = dyn.next(dyn.next(state, action, dyn.context(state)), action)
        outs.append((after.z, after.p))
    for a, b in zip(*outs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_a_gsr_mass_counts_as_that_many_coincident_entries():
    """§10.1's weights enter the heads as masses: with log m = log 2 on one selected entry, the
    kick head's output and its closed-form gradient equal those of the bank holding that entry
    twice (mass 1 each), for a shared pool read through a mask; and uniform weights give mass 1
    (log 0) at every selected row, 0 off them."""
    dyn = _dynamics("gsr", prototypes=8, pool_capacity=8, route_k=4)
    head, pool = dyn.integrator.kick_head, dyn.prototypes
    bank = pool.force_bank()  # [1, 8]
    keep = torch.zeros(3, 8, dtype=torch.bool)
    keep[:, [1, 4, 6]] = True
    log_mass = torch.zeros(3, 8, dtype=torch.float64)
    log_mass[:, 4] = torch.log(torch.tensor(2.0, dtype=torch.float64))
    weighted = head.prepare(bank).within(keep, log_mass)
    twice = head.prepare(bank.take(torch.tensor([[1, 4, 4, 6]] * 3), torch.ones(3, 4).bool()))
    z = geoopt.PoincareBall().expmap0(0.5 * torch.randn(3, 4, dtype=torch.float64))
    features = torch.cat([z, geoopt.PoincareBall().logmap0(z)], -1)
    queries = CovariantQueries(z, features)
    torch.testing.assert_close(head(queries, weighted)[0], head(queries, twice)[0])
    for one, other in zip(
        head.scalar_output_gradient(queries, weighted)[:3],
        head.scalar_output_gradient(queries, twice)[:3],
        strict=True,
    ):
        torch.testing.assert_close(one, other, rtol=1e-10, atol=1e-12)
    uniform = Selection(
        torch.tensor([[2, 5]]), torch.tensor([[True, False]]), torch.full((1, 2), 0.5)
    )
    assert torch.equal(uniform.log_mass(7), torch.zeros(1, 7, dtype=torch.float32))
    skewed = Selection(
        torch.tensor([[2, 5]]), torch.ones(1, 2).bool(), torch.tensor([[0.75, 0.25]])
    )
    expected = torch.zeros(1, 7)
    expected[0, 2], expected[0, 5] = torch.log(torch.tensor(1.5)), torch.log(torch.tensor(0.5))
    torch.testing.assert_close(skewed.log_mass(7), expected)


def test_training_reads_only_the_routed_rows_and_counts_their_use():
    dyn = _dynamics("gsr", prototypes=16, pool_capacity=24, route_k=3)
    state = dyn.encode(torch.randn(2, 6, dtype=torch.float64))
    used = set(dyn.eval().prototypes.route(state.z).index.flatten().tolist())
    with torch.no_grad():
        dyn.train().context(state)  # diagnostics: train mode, no gradients
    assert int(dyn.prototypes.pool.activations.sum()) == 0  # counted by training losses only
    context = dyn.train().context(state)
    after = dyn.next(state, torch.randn(2, 2, dtype=torch.float64), context)
    (after.z.square().sum() + after.p.square().sum()).backward()
    grad_rows = torch.nonzero(dyn.prototypes.pool.values.grad.abs().sum(-1)).flatten()
    assert set(grad_rows.tolist()) <= used and grad_rows.numel() > 0
    assert int(dyn.prototypes.pool.activations.sum()) == 2 * 3


def test_genesis_spawns_at_the_surprising_sample_and_clears_its_moments():
    cfg = RoutedPoolConfig(capacity=10, initial=4, k=2, window=8, spawn_sigmas=1.0)
    pool = RoutedPrototypePool(2, cfg).double()
    optim = geoopt.optim.RiemannianAdam(pool.parameters(), lr=1e-2)
    pool.pool.values.sum().backward()
    optim.step()  # non-zero moments everywhere
    torch.manual_seed(2)
    z = geoopt.PoincareBall().expmap0(0.5 * torch.randn(8, 2, dtype=torch.float64))
    assert pool.genesis(z, torch.ones(8, dtype=torch.float64)) == []  # the window fills
    errors = torch.ones(8, dtype=torch.float64)
    errors[5] = 50.0
    nearest = int(pool.logits(z[5:6]).argmax())
    written = pool.genesis(z, errors)
    ((param, rows), _) = written
    assert rows.tolist() == [4]  # the first free row
    torch.testing.assert_close(pool.pool.centroids[4], z[5])
    torch.testing.assert_close(pool.pool.values[4], pool.pool.values[nearest])
    assert pool.pool.active_count() == 5 and int(pool.dmg.spawns) == 1
    for param, rows in written:
        clear_optimizer_rows(optim, param, rows)
    assert optim.state[pool.pool.values]["exp_avg"][4].abs().max() == 0
    assert optim.state[pool.pool.values]["exp_avg"][3].abs().max() > 0


def test_idle_prototypes_are_pruned_and_counted():
    cfg = RoutedPoolConfig(capacity=6, initial=6, k=2, window=4, prune_idle=2)
    pool = RoutedPrototypePool(2, cfg).train()
    z = pool.pool.centroids.detach()[:1] * 0.999  # routes to row 0 and its neighbour
    for _ in range(4):  # 4 updates of 4 samples: rows never routed to go idle
        index, _, _ = pool.route(z.expand(4, -1))
        pool.genesis(z.expand(4, -1), torch.ones(4))
    kept = set(index.flatten().tolist())
    assert set(torch.nonzero(pool.pool.active).flatten().tolist()) == kept
    assert int(pool.prunes) == 6 - len(kept)
    report = pool.routing_report(z)
    assert report["prototypes_active"] == len(kept) and report["prototype_prunes"] == 6 - len(kept)
    assert 0 < report["routing_topk_mass"] <= 1 + 1e-6


def test_routing_stays_finite_at_the_boundary():
    dyn = _dynamics("gsr", prototypes=8, pool_capacity=8, route_k=4)
    with torch.no_grad():
        dyn.prototypes.pool.centroids[0] = torch.tensor([1 - 1e-9, 0, 0, 0], dtype=torch.float64)
    z = torch.tensor([[1 - 1e-9, 0, 0, 0], [0, -(1 - 1e-7), 0, 0]], dtype=torch.float64)
    z.requires_grad_(True)
    state = dyn.state_type(z, torch.ones_like(z))
    after = dyn.next(state, torch.zeros(2, 2, dtype=torch.float64), dyn.context(state))
    (after.z.sum() + after.p.sum()).backward()
    assert torch.isfinite(after.z).all() and torch.isfinite(after.p).all()
    assert torch.isfinite(z.grad).all()
    assert torch.isfinite(dyn.prototypes.pool.centroids.grad).all()
    assert 0 in dyn.prototypes.route(z.detach()).index[0].tolist()


def test_the_config_refuses_an_impossible_pool():
    with pytest.raises(ValueError, match="prototypes <= pool_capacity"):
        ContextConfig(routing="gsr", prototypes=64, pool_capacity=32)
    with pytest.raises(ValueError, match="routing must be one of"):
        ContextConfig(routing="sparse")


def test_a_pool_smaller_than_route_k_is_read_whole():
    """route_k = 16 over 8 initial prototypes (a small config keeping the default route_k):
    every root reads the 8, each once."""
    dyn = _dynamics("gsr", prototypes=8, pool_capacity=12, route_k=16)
    z = geoopt.PoincareBall().expmap0(0.5 * torch.randn(5, 4, dtype=torch.float64))
    index, valid, _ = dyn.prototypes.route(z)
    assert index.shape == (5, 8) and valid.all()
    assert all(sorted(row) == list(range(8)) for row in index.tolist())


def test_config_boundaries_refusals_and_the_dmg_rule_per_update():
    """Every count may be 1; 0, a bool, an initial above the capacity, eps 0 or inf are refused
    with their messages. The DMG rule for updates of B samples is the module docstring's: tau =
    1 + kappa sigma + S / t on each sample's relative error, one spawn per update (cooldown
    B - 1), pruning after prune_idle updates (B prune_idle steps), LRU eviction."""
    RoutedPoolConfig(capacity=1, initial=1, k=1, feature_dim=1, window=1, prune_idle=1)
    for kwargs, match in (
        (dict(initial=0), "^RoutedPoolConfig.initial must be an integer >= 1, got 0$"),
        (dict(k=True), "^RoutedPoolConfig.k must be an integer >= 1, got True$"),
        (dict(capacity=8, initial=9, k=2), r"^RoutedPoolConfig.initial \(9\) must be <= capacity"),
        (dict(capacity=4, initial=2, k=5), r"^RoutedPoolConfig.k \(5\) must be <= capacity \(4\)$"),
        (dict(eps=0.0), "^RoutedPoolConfig.eps must be a finite number > 0, got 0.0$"),
        (dict(spawn_sigmas=float("inf")), "^RoutedPoolConfig.spawn_sigmas must be a finite"),
    ):
        with pytest.raises(ValueError, match=match):
            RoutedPoolConfig(**kwargs)
    cfg = RoutedPoolConfig(window=32, spawn_sigmas=2, prune_idle=5)
    rule = cfg.dmg(8)
    assert (rule.window, rule.trigger, rule.when_full) == (32, "sample", "evict_lru")
    assert (rule.tau_base, rule.kappa, rule.gamma) == (1.0, 2.0, 1.0)
    assert isinstance(rule.kappa, float)
    assert (rule.cooldown, rule.prune_age, rule.max_idle) == (7, 40, 40)


def test_initial_rows_keys_n01_values_n0_1_over_f_inside_max_norm():
    """With the generator seeded: the positions are geoopt's exp_0 of init_scale N(0, 1) rescaled
    to |c| <= max_norm, and the four feature blocks [force keys | force values | correction keys
    | correction values] are N(0, 1), N(0, 1/F), N(0, 1), N(0, 1/F) (the same draws)."""
    cfg = RoutedPoolConfig(capacity=12, initial=5, k=2, feature_dim=3, init_scale=2.5, max_norm=0.8)
    torch.manual_seed(25)
    pool = RoutedPrototypePool(2, cfg)
    torch.manual_seed(25)
    c = geoopt.PoincareBall().expmap0(2.5 * torch.randn(12, 2))
    raw = torch.randn(12, 12)
    norm = c.norm(dim=-1, keepdim=True)
    assert (norm > 0.8).any() and (norm < 0.8).any()
    torch.testing.assert_close(pool.pool.centroids.data, c * (0.8 / norm).clamp(max=1.0))
    scale = torch.tensor([1.0, 3**-0.5, 1.0, 3**-0.5]).repeat_interleave(3)
    torch.testing.assert_close(pool.pool.values.data, raw * scale)
    assert pool.pool.active.tolist() == [True] * 5 + [False] * 7
    assert pool.prunes.dtype == torch.int64


def test_routing_report_in_numbers():
    """Every entry of routing_report for three roots over a pool with an inactive row holding
    the largest force value: the SIDA weights from the stereographic map by arccos, their
    entropy and top-K mass, 2 (1 - W_K) max |force value| over the active rows, and the
    counters."""
    torch.manual_seed(26)
    cfg = RoutedPoolConfig(capacity=8, initial=6, k=2, feature_dim=2, eps=0.05)
    pool = RoutedPrototypePool(3, cfg).double()
    with torch.no_grad():
        pool.pool.values[7, 2:4] = 100.0  # inactive: not in the bound
        pool.pool.values[0, 0:2] = 50.0  # force keys: not in the bound
    pool.dmg.spawns.fill_(3)
    pool.prunes.fill_(2)
    z = geoopt.PoincareBall().expmap0(0.7 * torch.randn(3, 3, dtype=torch.float64))
    report = pool.routing_report(z)
    q = sphere.ball_to_sphere_stereographic(z)
    c = sphere.ball_to_sphere_stereographic(pool.pool.centroids.detach())
    vmax = max(float(pool.pool.values.detach()[e, 2:4].norm()) for e in range(6))
    entropies, masses, bounds = [], [], []
    for i in range(3):
        theta = torch.arccos((c[:6] @ q[i]).clamp(-1, 1)).tolist()
        w = [1 / (t**2 + 0.05) for t in theta]
        w = [x / sum(w) for x in w]
        entropies.append(-sum(x * math.log(x) for x in w))
        masses.append(sum(sorted(w)[-2:]))
        bounds.append(2 * (1 - masses[-1]) * vmax)
    expected = {
        "prototypes_active": 6.0,
        "prototype_spawns": 3.0,
        "prototype_prunes": 2.0,
        "routing_entropy": sum(entropies) / 3,
        "routing_topk_mass": sum(masses) / 3,
        "gsr_bound": sum(bounds) / 3,
    }
    assert set(report) == set(expected)
    for key, value in expected.items():
        assert report[key] == pytest.approx(value, rel=1e-9), key


def test_genesis_is_scale_free_and_sets_the_rule_for_the_batch():
    """Errors scaled by 1e-3 spawn exactly where the unscaled ones do (the relative error is
    divided by the batch mean, however small), and the DMG's rule is the config's for a batch
    of 8 (not the latent dimension's 2)."""
    rows = []
    for scale in (1.0, 1e-3):
        cfg = RoutedPoolConfig(capacity=10, initial=4, k=2, window=8, spawn_sigmas=1.0)
        torch.manual_seed(27)
        pool = RoutedPrototypePool(2, cfg).double()
        z = geoopt.PoincareBall().expmap0(0.5 * torch.randn(8, 2, dtype=torch.float64))
        pool.genesis(z, scale * torch.ones(8, dtype=torch.float64))
        errors = torch.ones(8, dtype=torch.float64)
        errors[5] = 50.0
        written = pool.genesis(z, scale * errors)
        rows.append([r.tolist() for _, r in written])
        torch.testing.assert_close(pool.pool.centroids[4], z[5])
        assert pool.dmg.config == cfg.dmg(8)
    assert rows[0] == rows[1] == [[4], [4]]


def test_an_evicting_spawn_is_a_spawn_not_a_prune():
    """A full pool (nothing old enough to prune): the surprising sample evicts the least
    recently used row and takes its place; spawns counts it, prunes does not."""
    cfg = RoutedPoolConfig(capacity=3, initial=3, k=1, window=4, spawn_sigmas=1.0)
    torch.manual_seed(28)
    pool = RoutedPrototypePool(2, cfg).double()
    pool.pool.t_last[:] = torch.tensor([5, 2, 7])
    pool.dmg.t.fill_(8)
    z = geoopt.PoincareBall().expmap0(0.5 * torch.randn(4, 2, dtype=torch.float64))
    pool.genesis(z, torch.ones(4, dtype=torch.float64))
    written = pool.genesis(z, torch.tensor([1.0, 1.0, 30.0, 1.0], dtype=torch.float64))
    assert [r.tolist() for _, r in written] == [[1], [1]]
    torch.testing.assert_close(pool.pool.centroids[1], z[2])
    assert int(pool.dmg.spawns) == 1 and int(pool.prunes) == 0
    assert pool.pool.active.all()
