"""Cross-geometric maps, hard/soft routing and the fixed-capacity pool (seed 000 §8.2-8.3;
world_model/memory/routing.py)."""

from __future__ import annotations

import geoopt
import pytest
import torch

from world_model.memory.routing import (
    CrossGeometricMap,
    CrossGeometricMapConfig,
    MemoryPool,
    PoolConfig,
    clear_optimizer_rows,
    hard_routing,
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
        torch.testing.assert_close(out, torch.nn.functional.normalize(phi.mlp(x), dim=-1))
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
