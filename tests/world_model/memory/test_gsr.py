"""GSR (seed 000 §10): the routed output against brute force, the distributed steps, and
Theorem 10.1 — the seed's bound fails, the bounds its proof shows hold, per query
(world_model/memory/gsr.py)."""

from __future__ import annotations

import pytest
import torch

from world_model.memory.gsr import (
    GeodesicSparseRouting,
    GSRConfig,
    combine_step,
    gsr_route,
    local_step,
    merge_step,
    routing_error_report,
)
from world_model.memory.routing import CrossGeometricMap, MemoryPool, PoolConfig


def unit(n, d, seed=0):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def brute_force(q, c, v, k, eps, renormalise):
    out = torch.zeros(q.shape[0], v.shape[1], dtype=torch.float64)
    for i in range(q.shape[0]):
        theta = torch.arccos((c @ q[i]).clamp(-1, 1))
        w = 1 / (theta**2 + eps)
        w = w / w.sum()
        top = torch.argsort(w, descending=True)[:k]
        wk = w[top] / (w[top].sum() if renormalise else 1.0)
        out[i] = (wk.unsqueeze(-1) * v[top]).sum(0)
    return out


@pytest.mark.parametrize("renormalise", [True, False])
@pytest.mark.parametrize("shards", [1, 3, 7])
def test_routed_output_is_the_top_k_sida_combination(renormalise, shards):
    q, c, v = unit(11, 6, 1), unit(50, 6, 2), torch.randn(50, 3, dtype=torch.float64)
    cfg = GSRConfig(k=4, eps=1e-2, renormalise=renormalise, shards=shards)
    out, idx, w = gsr_route(q, c, v, None, cfg)
    torch.testing.assert_close(
        out, brute_force(q, c, v, 4, 1e-2, renormalise), rtol=1e-6, atol=1e-9
    )
    assert idx.shape == w.shape == (11, 4) and (idx >= 0).all()


def test_the_steps_compose_across_workers_with_masks():
    q, c, v = unit(5, 4, 3), unit(30, 4, 4), torch.randn(30, 2, dtype=torch.float64)
    active = torch.arange(30) % 3 != 0
    parts = [local_step(q, c[lo:hi], active[lo:hi], 3, 1e-3, lo) for lo, hi in ((0, 12), (12, 30))]
    merged = merge_step(parts, 3)
    w = torch.softmax(merged.scores, -1)
    out = combine_step(w, merged.indices, v[:12], 0) + combine_step(w, merged.indices, v[12:], 12)
    ref, idx, _ = gsr_route(q, c, v, active, GSRConfig(k=3, eps=1e-3))
    torch.testing.assert_close(out, ref)
    assert torch.equal(merged.indices.sort(-1).values, idx.sort(-1).values)
    assert (active[idx]).all()
    full_log_z = torch.logsumexp(
        -torch.log(torch.arccos((q @ c[active].T).clamp(-1, 1)) ** 2 + 1e-3), -1
    )
    torch.testing.assert_close(merged.log_normaliser.squeeze(-1), full_log_z, rtol=1e-6, atol=1e-6)


def test_post_routing_touches_only_the_selected_values():
    q, c = unit(4, 5, 5), unit(64, 5, 6)
    v = torch.randn(64, 3, dtype=torch.float64, requires_grad=True)
    out, idx, _ = gsr_route(q, c, v, None, GSRConfig(k=2))
    out.sum().backward()
    touched = torch.nonzero(v.grad.abs().sum(-1)).flatten()
    assert set(touched.tolist()) == set(idx.flatten().tolist())


@pytest.mark.parametrize("scale", [1.0, 0.01, 100.0])
def test_true_routing_bounds_hold_per_query(scale):
    q, c = unit(200, 8, 7), unit(128, 8, 8)
    v = scale * torch.randn(128, 4, dtype=torch.float64)
    for k, eps in ((1, 1e-1), (4, 1e-2), (16, 1e-3)):
        r = routing_error_report(q, c, v, k, eps)
        slack = 1e-12 * scale
        assert (r["err_unrenorm"] <= r["bound_tail"] + slack).all()
        assert (r["bound_tail"] <= r["bound_frobenius"] + slack).all()
        assert (r["err_renorm"] <= r["bound_renorm"] + slack).all()


def test_seed_bound_is_quadratic_in_v_and_fails_when_v_is_scaled_down():
    """Thm 10.1 as stated: |o - o*| <= 2 |V|_F (sum_{e>K} w / sum_{e<=K} w) max_{e<=K} |v_e|.
    Scaling V by s scales the error by s and the bound by s^2: 16 prototypes with unit values
    of similar direction satisfy it at s = 1 and fail it at s = 0.01."""
    q, c = unit(200, 8, 9), unit(16, 8, 10)
    g = torch.Generator().manual_seed(3)
    v = torch.tensor([1.0, 0, 0, 0], dtype=torch.float64)
    v = v + 0.3 * torch.randn(16, 4, generator=g, dtype=torch.float64)
    v = v / v.norm(dim=-1, keepdim=True)
    big = routing_error_report(q, c, v, 2, 1e-2)
    small = routing_error_report(q, c, 0.01 * v, 2, 1e-2)
    torch.testing.assert_close(small["seed_bound"], 1e-4 * big["seed_bound"])
    torch.testing.assert_close(small["err_unrenorm"], 1e-2 * big["err_unrenorm"])
    assert (big["err_unrenorm"] <= big["seed_bound"]).all()
    assert (small["err_unrenorm"] > small["seed_bound"]).all()  # fails for every query
    assert (small["err_renorm"] > small["seed_bound"]).float().mean() > 0.3
    assert (small["err_renorm"] <= small["bound_renorm"]).all()  # the true bound still holds


def test_error_vanishes_as_eps_goes_to_zero_for_a_unique_nearest_prototype():
    c = unit(64, 6, 11)
    q = c[:5] + 1e-4 * unit(5, 6, 12)
    q = q / q.norm(dim=-1, keepdim=True)
    v = torch.randn(64, 3, dtype=torch.float64)
    errs = [
        routing_error_report(q, c, v, 1, eps)["err_renorm"].max().item()
        for eps in (1e-2, 1e-4, 1e-6)
    ]
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-3


def test_module_routes_over_the_active_rows_of_a_pool():
    pool = MemoryPool(PoolConfig(capacity=20, dim=4, value_dim=3, initial_active=7))
    router = GeodesicSparseRouting(GSRConfig(k=3, shards=2))
    phi = CrossGeometricMap(4)
    out, idx, w = router(unit(6, 4, 13).float(), pool, phi)
    assert out.shape == (6, 3) and (idx < 7).all() and (idx >= 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(6))


def test_config_errors_are_one_line():
    for kwargs, match in ((dict(k=0), "k"), (dict(eps=0.0), "eps"), (dict(shards=0), "shards")):
        with pytest.raises(ValueError, match=match) as info:
            GSRConfig(**kwargs)
        assert "\n" not in str(info.value)
