"""Cross-geometric maps, hard/soft routing and the fixed-capacity pool (seed 000 §8.2-8.3;
world_model/memory/routing.py)."""

from __future__ import annotations

import math

import geoopt
import pytest
import torch

from geometry import poincare
from world_model.memory.routing import (
    CrossGeometricMap,
    CrossGeometricMapConfig,
    MemoryPool,
    PoolConfig,
    clear_optimizer_rows,
    hard_routing,
    ordered_topk,
    sida_logits,
    soft_routing,
)


def unit(n, d, seed=0):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def test_the_three_maps_land_on_their_spheres():
    torch.manual_seed(0)  # the learned maps' initialisation
    c = 0.9 * torch.rand(50, 6, dtype=torch.float64) - 0.45
    c = c * (0.95 / c.norm(dim=-1, keepdim=True)).clamp(max=1.0)  # inside the ball (|c| < 1)
    a = CrossGeometricMap(6, CrossGeometricMapConfig(kind="norm"))(c)
    torch.testing.assert_close(a, c / c.norm(dim=-1, keepdim=True))
    b = CrossGeometricMap(6, CrossGeometricMapConfig(kind="stereographic"))(c)
    assert b.shape == (50, 7)
    torch.testing.assert_close(b.norm(dim=-1), torch.ones(50, dtype=torch.float64))
    for tangent in (True, False):
        cfg = CrossGeometricMapConfig(kind="learned", hidden=8, out_dim=5, tangent_input=tangent)
        phi = CrossGeometricMap(6, cfg).double()
        out = phi(c.requires_grad_())
        assert out.shape == (50, 5) and phi.sphere_dim == 5
        torch.testing.assert_close(out.norm(dim=-1), torch.ones(50, dtype=torch.float64))
        x = geoopt.PoincareBall().logmap0(c) if tangent else c
        first, last = phi.mlp[0], phi.mlp[-1]  # phi_C = MLP / |MLP|, one GELU hidden layer
        mlp = last(torch.nn.functional.gelu(first(x)))
        torch.testing.assert_close(out, torch.nn.functional.normalize(mlp, dim=-1))
        out[:, 0].sum().backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in phi.parameters())


def test_sida_logits_give_the_sida_weights():
    q, c = unit(7, 5, 1), unit(30, 5, 2)
    w = soft_routing(sida_logits(q, c, 1e-2))
    theta = torch.arccos((q @ c.T).clamp(-1, 1))  # independent: arccos of the inner product
    ref = 1 / (theta**2 + 1e-2)
    torch.testing.assert_close(w, ref / ref.sum(-1, keepdim=True), rtol=1e-6, atol=1e-9)


def test_hard_routing_is_the_renormalised_top_k_of_the_active_prototypes():
    q, c = unit(9, 4, 3), unit(40, 4, 4)
    active = torch.rand(40, generator=torch.Generator().manual_seed(5)) < 0.6
    logits = sida_logits(q, c, 1e-3, active)
    idx, w = hard_routing(logits, 5)
    full = soft_routing(logits)
    assert (full[:, ~active] == 0).all()
    for i in range(9):  # brute force: sort the active prototypes by weight
        order = sorted(torch.nonzero(active).flatten().tolist(), key=lambda e: -full[i, e])[:5]
        assert sorted(idx[i].tolist()) == sorted(order)
        torch.testing.assert_close(w[i], full[i, idx[i]] / full[i, idx[i]].sum())


def test_hard_routing_with_fewer_active_than_k_and_with_none():
    q, c = unit(3, 4, 6), unit(6, 4, 7)
    active = torch.tensor([False, True, False, False, True, False])
    idx, w = hard_routing(sida_logits(q, c, 1e-3, active), 4)
    assert ((idx == -1).sum(-1) == 2).all() and torch.allclose(w.sum(-1), torch.ones(3).double())
    assert set(idx[idx >= 0].tolist()) <= {1, 4}
    idx, w = hard_routing(sida_logits(q, c, 1e-3, torch.zeros(6, dtype=torch.bool)), 2)
    assert (idx == -1).all() and (w == 0).all() and torch.isfinite(w).all()


def test_the_centroids_manifold_is_the_models_unit_ball():
    """geoopt's Riemannian optimisers step the centroids on their parameter's manifold: it is
    the curvature -1 ball of geometry/poincare.py (the distances agree)."""
    pool = MemoryPool(PoolConfig(capacity=6, dim=3, value_dim=2, initial_active=6))
    c = pool.centroids.detach().double()
    assert c.norm(dim=-1).min() > 0.05  # far enough from the origin for curvature to show
    got = pool.centroids.manifold.dist(c[:3], c[3:])
    torch.testing.assert_close(got, poincare.dist(c[:3], c[3:]), rtol=1e-6, atol=1e-9)


def test_pool_keeps_its_shapes_and_inactive_rows_get_no_gradient():
    pool = MemoryPool(PoolConfig(capacity=8, dim=3, value_dim=2, initial_active=3))
    shapes = {k: v.shape for k, v in pool.state_dict().items()}
    pool.write(torch.tensor([5]), torch.tensor([[0.5, 0.0, 2.0]]), torch.ones(1, 2), t=7)
    pool.deactivate(torch.tensor([0]))
    assert {k: v.shape for k, v in pool.state_dict().items()} == shapes
    assert pool.active.tolist() == [False, True, True, False, False, True, False, False]
    assert pool.centroids[5].norm() <= pool.config.max_norm + 1e-6  # projected into the ball
    assert int(pool.t_birth[5]) == int(pool.t_last[5]) == 7 and int(pool.activations[5]) == 0
    q = unit(4, 3, 8).float()
    idx, w = hard_routing(
        sida_logits(
            q, pool.centroids / pool.centroids.norm(dim=-1, keepdim=True), 1e-2, pool.active
        ),
        8,
    )
    out = (w.unsqueeze(-1) * pool.values[idx.clamp_min(0)]).sum()
    out.backward()
    dead = ~pool.active
    assert (pool.centroids.grad[dead] == 0).all() and (pool.values.grad[dead] == 0).all()
    assert pool.centroids.grad[pool.active].abs().sum() > 0
    pool.record_use(idx, t=9, weights=w)
    assert int(pool.activations.sum()) == int((w > 0).sum()) and int(pool.t_last[1]) == 9


def test_riemannian_adam_keeps_centroids_in_the_ball_and_rows_can_be_cleared():
    pool = MemoryPool(PoolConfig(capacity=6, dim=2, value_dim=2, initial_active=6))
    opt = geoopt.optim.RiemannianAdam(pool.parameters(), lr=0.5)
    target = torch.tensor([3.0, 0.0])  # pulls every centroid towards (and past) the boundary
    for _ in range(30):
        opt.zero_grad()
        (-(pool.centroids @ target).sum() + pool.values.pow(2).sum()).backward()
        opt.step()
    assert pool.centroids.norm(dim=-1).max() < 1.0
    state = opt.state[pool.centroids]
    assert state["exp_avg"][2].abs().sum() > 0
    clear_optimizer_rows(opt, pool.centroids, torch.tensor([2]))
    assert (state["exp_avg"][2] == 0).all() and (state["exp_avg_sq"][2] == 0).all()
    assert state["exp_avg"][1].abs().sum() > 0


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        (CrossGeometricMapConfig, dict(kind="hyperbolic"), "kind"),
        (CrossGeometricMapConfig, dict(out_dim=1), "out_dim"),
        (PoolConfig, dict(capacity=0), "capacity"),
        (PoolConfig, dict(initial_active=300), "initial_active"),
        (PoolConfig, dict(max_norm=1.0), "max_norm"),
    ],
)
def test_config_errors_are_one_line(cls, kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        cls(**kwargs)
    assert "\n" not in str(info.value)


def test_sphere_dimensions_of_the_maps_and_the_learned_maps_default_width():
    """phi_A lands on S^{d-1} (d coordinates) whatever out_dim says, phi_B on S^d (d + 1),
    phi_C on S^{out_dim - 1}, and on S^{d-1} without an out_dim."""
    torch.manual_seed(0)
    assert CrossGeometricMap(6, CrossGeometricMapConfig(kind="norm", out_dim=3)).sphere_dim == 6
    assert CrossGeometricMap(6, CrossGeometricMapConfig(kind="stereographic")).sphere_dim == 7
    phi = CrossGeometricMap(6, CrossGeometricMapConfig(kind="learned", hidden=1))
    assert phi.sphere_dim == 6 and phi(0.1 * torch.ones(2, 6)).shape == (2, 6)
    assert CrossGeometricMap(6, CrossGeometricMapConfig(kind="learned", out_dim=2)).sphere_dim == 2


def test_config_boundaries_are_accepted_and_the_values_beyond_refused():
    """hidden = 1, out_dim = 2, capacity = dim = value_dim = 1, initial_active = 0 are valid;
    hidden = 0, init_scale 0 or 5 and max_norm 0 are refused with their messages."""
    CrossGeometricMapConfig(hidden=1, out_dim=2)
    PoolConfig(capacity=1, dim=1, value_dim=1, initial_active=0)
    for cls, kwargs, match in (
        (CrossGeometricMapConfig, dict(hidden=0), "^CrossGeometricMapConfig.hidden must be >= 1"),
        (PoolConfig, dict(init_scale=0.0), r"^PoolConfig.init_scale must lie in \(0, 5\)"),
        (PoolConfig, dict(init_scale=5.0), r"^PoolConfig.init_scale must lie in \(0, 5\)"),
        (PoolConfig, dict(max_norm=0.0), r"^PoolConfig.max_norm must lie in \(0, 1\)"),
        (PoolConfig, dict(initial_active=-1), r"^PoolConfig.initial_active must lie in"),
    ):
        with pytest.raises(ValueError, match=match):
            cls(**kwargs)


def test_initial_rows_are_exp0_of_scaled_gaussians_projected_and_values_scaled():
    """With the generator seeded, the centroids are geoopt's exp_0 of init_scale * N(0, 1)
    rescaled to |c| <= max_norm where they land beyond it, and the values N(0, 1) / sqrt(dv)
    (the draws in that order)."""
    torch.manual_seed(11)
    pool = MemoryPool(
        PoolConfig(capacity=40, dim=3, value_dim=4, initial_active=5, init_scale=2.0, max_norm=0.9)
    )
    torch.manual_seed(11)
    c = geoopt.PoincareBall().expmap0(2.0 * torch.randn(40, 3))
    values = torch.randn(40, 4) / 2.0
    norm = c.norm(dim=-1, keepdim=True)
    assert (norm > 0.9).any() and (norm < 0.9).any()
    torch.testing.assert_close(pool.centroids.data, c * (0.9 / norm).clamp(max=1.0))
    torch.testing.assert_close(pool.values.data, values)
    assert pool.active.tolist() == [True] * 5 + [False] * 35
    assert pool.free_slots().tolist() == list(range(5, 40))


def test_write_casts_to_the_pools_dtype_and_stores_the_values():
    """float64 centroids and values written into a float32 pool are stored (cast) at their
    rows, values None writes zeros, and the row's records restart."""
    pool = MemoryPool(PoolConfig(capacity=4, dim=2, value_dim=3, initial_active=4))
    pool.activations[:] = 5
    rows = torch.tensor([2, 0])
    cents = torch.tensor([[0.1, 0.2], [-0.3, 0.0]], dtype=torch.float64)
    vals = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
    pool.write(rows, cents, vals, t=3)
    torch.testing.assert_close(pool.centroids.data[rows], cents.float())
    torch.testing.assert_close(pool.values.data[rows], vals.float())
    assert pool.activations.tolist() == [0, 5, 0, 5] and pool.t_birth.tolist() == [3, 0, 3, 0]
    pool.write(torch.tensor([1]), torch.zeros(1, 2), None, t=4)
    assert (pool.values.data[1] == 0).all() and pool.t_last.tolist() == [3, 4, 3, 0]
    pool.write(torch.tensor([], dtype=torch.long), torch.zeros(0, 2), None, t=9)
    assert pool.t_last.tolist() == [3, 4, 3, 0]


def test_record_use_counts_every_occurrence_of_positive_weight():
    """a_e += occurrences (row 0 included, repeats counted), -1 and weight-0 entries skipped,
    t_last = t for the counted rows only; without weights every index >= 0 counts."""
    pool = MemoryPool(PoolConfig(capacity=5, dim=2, value_dim=1, initial_active=5))
    idx = torch.tensor([[0, 2, 2, -1], [3, 0, 4, 1]])
    w = torch.tensor([[0.5, 0.2, 0.3, 0.0], [0.0, 0.6, 0.4, 1e-30]])
    pool.record_use(idx, 7, w)
    counts = [0] * 5
    for e, x in zip(idx.flatten().tolist(), w.flatten().tolist(), strict=True):
        counts[e] += e >= 0 and x > 0
    assert pool.activations.tolist() == counts == [2, 1, 2, 0, 1]
    assert pool.t_last.tolist() == [7, 7, 7, 0, 7]
    pool.record_use(torch.tensor([3, -1, 3]), 8)
    assert pool.activations.tolist() == [2, 1, 2, 2, 1] and pool.t_last.tolist() == [7, 7, 7, 8, 7]


def test_ordered_topk_over_a_batch_with_ties_against_a_sort_by_score_then_index():
    """Scores [2, 3, 6] with repeated values: the k largest, ties to the lower index, against
    Python's sort on (-score, index); with given indices (a shuffled global numbering), the
    same order on those indices; k above n keeps n."""
    g = torch.Generator().manual_seed(12)
    scores = torch.randint(0, 3, (2, 3, 6), generator=g).double()
    scores[0, 0, 2] = float("-inf")
    top, idx = ordered_topk(scores, 4)
    glob = torch.tensor([10, 3, 7, 0, 5, 8]).expand(2, 3, 6)
    gtop, gidx = ordered_topk(scores, 4, glob)
    for b in range(2):
        for i in range(3):
            row = scores[b, i].tolist()
            order = sorted(range(6), key=lambda j: (-row[j], j))[:4]
            assert idx[b, i].tolist() == order
            assert top[b, i].tolist() == [row[j] for j in order]
            by_global = sorted(range(6), key=lambda j: (-row[j], int(glob[b, i, j])))[:4]
            assert gidx[b, i].tolist() == [int(glob[b, i, j]) for j in by_global]
            assert gtop[b, i].tolist() == [row[j] for j in by_global]
    assert ordered_topk(scores, 9)[1].shape == (2, 3, 6)


def test_batched_routing_with_an_empty_row_and_fewer_than_k():
    """Logits [2, 3, 5]: hard routing's weights are the softmax over each row's top-K finite
    logits (written out), -1 where fewer than K are finite, all 0 in a row with none."""
    g = torch.Generator().manual_seed(13)
    logits = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)
    logits[0, 1, [0, 2, 4]] = float("-inf")  # two finite
    logits[1, 2] = float("-inf")  # none
    idx, w = hard_routing(logits, 3)
    soft = soft_routing(logits)
    for b in range(2):
        for i in range(3):
            row = logits[b, i].tolist()
            finite = [j for j in range(5) if row[j] > float("-inf")]
            order = sorted(finite, key=lambda j: -row[j])[:3]
            assert idx[b, i].tolist() == order + [-1] * (3 - len(order))
            e = [math.exp(row[j]) for j in order]
            assert w[b, i].tolist() == pytest.approx([x / sum(e) for x in e] + [0.0] * (3 - len(e)))
            e_all = [math.exp(row[j]) for j in finite]
            expected = [math.exp(row[j]) / sum(e_all) if j in finite else 0.0 for j in range(5)]
            assert soft[b, i].tolist() == pytest.approx(expected)


def test_clearing_rows_before_any_step_is_a_no_op():
    """A spawn before the optimiser's first step: the parameter has no state yet, and clearing
    its rows neither fails nor creates any."""
    pool = MemoryPool(PoolConfig(capacity=3, dim=2, value_dim=1, initial_active=3))
    opt = geoopt.optim.RiemannianAdam(pool.parameters(), lr=0.1)
    clear_optimizer_rows(opt, pool.centroids, torch.tensor([1]))  # no state yet
    assert pool.centroids not in opt.state or not opt.state[pool.centroids]
