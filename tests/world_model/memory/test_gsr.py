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


def brute_force(q, c, v, active, k, eps, renormalise):
    """Per query of q [..., Nq, m]: SIDA weights over the active prototypes (all where active
    is None) by arccos, the k largest (ties to the lower row), renormalised or not -> out,
    rows (-1 padded), weights."""
    flat = q.reshape(-1, q.shape[-1])
    outs, rows, weights = [], [], []
    live = [e for e in range(c.shape[0]) if active is None or active[e]]
    for x in flat:
        theta = torch.arccos((c @ x).clamp(-1, 1)).tolist()
        w = {e: 1 / (theta[e] ** 2 + eps) for e in live}
        total = sum(w.values())
        top = sorted(live, key=lambda e: (-w[e], e))[:k]
        norm = sum(w[e] for e in top) if renormalise else total
        sel = [w[e] / norm for e in top]
        outs.append(sum((s * v[e] for s, e in zip(sel, top, strict=True)), torch.zeros_like(v[0])))
        rows.append(top + [-1] * (k - len(top)))
        weights.append(sel + [0.0] * (k - len(top)))
    shape = q.shape[:-1]
    return (
        torch.stack(outs).reshape(*shape, v.shape[-1]),
        torch.tensor(rows).reshape(*shape, k),
        torch.tensor(weights, dtype=v.dtype).reshape(*shape, k),
    )


@pytest.mark.parametrize("renormalise", [True, False])
@pytest.mark.parametrize("shards", [1, 3, 7])
def test_routed_output_is_the_top_k_sida_combination(renormalise, shards):
    q, c, v = unit(11, 6, 1), unit(50, 6, 2), torch.randn(50, 3, dtype=torch.float64)
    cfg = GSRConfig(k=4, eps=1e-2, renormalise=renormalise, shards=shards)
    out, idx, w = gsr_route(q, c, v, None, cfg)
    torch.testing.assert_close(
        out, brute_force(q, c, v, None, 4, 1e-2, renormalise)[0], rtol=1e-6, atol=1e-9
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


@pytest.mark.parametrize("renormalise", [True, False])
def test_batched_queries_over_more_shards_than_rows_with_fewer_active_than_k(renormalise):
    """Queries [2, 3, m] over 5 prototypes cut into 7 shards (some empty), 3 of them active
    and K = 4: out, rows (-1 for the missing one) and weights equal the brute force."""
    q, c = unit(6, 4, 14).reshape(2, 3, 4), unit(5, 4, 15)
    v = torch.randn(5, 2, generator=torch.Generator().manual_seed(16), dtype=torch.float64)
    active = torch.tensor([True, False, True, False, True])
    cfg = GSRConfig(k=4, eps=1e-2, renormalise=renormalise, shards=7)
    out, idx, w = gsr_route(q, c, v, active, cfg)
    ref_out, ref_idx, ref_w = brute_force(q, c, v, active, 4, 1e-2, renormalise)
    assert torch.equal(idx, ref_idx)
    torch.testing.assert_close(w, ref_w, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(out, ref_out, rtol=1e-9, atol=1e-12)


def test_an_empty_pool_routes_to_nothing_with_zero_weights():
    """No active prototype: every row -1, every weight 0 (renormalised or the full pool's),
    out 0."""
    q, c, v = unit(3, 4, 17), unit(6, 4, 18), torch.randn(6, 2, dtype=torch.float64)
    for renormalise in (True, False):
        cfg = GSRConfig(k=2, renormalise=renormalise, shards=2)
        out, idx, w = gsr_route(q, c, v, torch.zeros(6, dtype=torch.bool), cfg)
        assert (idx == -1).all() and (w == 0).all() and (out == 0).all()


def test_local_and_combine_steps_default_to_offset_0():
    """A worker's step without an offset numbers its rows from 0; combine_step sums w v over
    the rows in [offset, offset + P_l), written out term by term (rows -1, outside, first,
    last)."""
    q, c = unit(2, 4, 19), unit(5, 4, 20)
    part = local_step(q, c, None, 5, 1e-2)
    assert sorted(part.indices[0].tolist()) == [0, 1, 2, 3, 4]
    values = torch.tensor([[1.0], [10.0], [100.0]], dtype=torch.float64)  # rows 4, 5, 6
    idx = torch.tensor([[4, 6, -1, 3, 7], [5, 0, 6, 6, 2]])
    w = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5], [1.0, 2.0, 3.0, 4.0, 5.0]], dtype=torch.float64)
    got = combine_step(w, idx, values, 4)
    assert got.squeeze(-1).tolist() == pytest.approx([0.1 * 1 + 0.2 * 100, 1.0 * 10 + 700.0])
    at_zero = combine_step(w, torch.tensor([[0, 2, -1, 1, 3]] * 2), values)
    assert at_zero.squeeze(-1).tolist() == pytest.approx([0.1 + 20 + 4, 1 + 200 + 40])


def test_error_report_in_closed_form_per_query_over_a_batch():
    """Every entry of routing_error_report for queries [2, 2, m], against the definitions
    evaluated per query from arccos SIDA weights and a Python sort."""
    q, c = unit(4, 3, 21).reshape(2, 2, 3), unit(7, 3, 22)
    v = torch.randn(7, 2, generator=torch.Generator().manual_seed(23), dtype=torch.float64)
    r = routing_error_report(q, c, v, 3, 1e-2)
    norms = v.norm(dim=-1).tolist()
    frob = float(v.norm())
    for b in range(2):
        for i in range(2):
            theta = torch.arccos((c @ q[b, i]).clamp(-1, 1)).tolist()
            w = [1 / (t**2 + 1e-2) for t in theta]
            w = [x / sum(w) for x in w]
            top = sorted(range(7), key=lambda e: -w[e])[:3]
            mass = sum(w[e] for e in top)
            exact = sum(w[e] * v[e] for e in range(7))
            unrenorm = sum(w[e] * v[e] for e in top)
            expected = {
                "err_renorm": float((unrenorm / mass - exact).norm()),
                "err_unrenorm": float((unrenorm - exact).norm()),
                "bound_tail": sum(w[e] * norms[e] for e in range(7) if e not in top),
                "bound_frobenius": frob * (1 - mass),
                "bound_renorm": 2 * (1 - mass) * max(norms),
                "seed_bound": 2 * frob * (1 - mass) / mass * max(norms[e] for e in top),
                "top_mass": mass,
            }
            assert set(r) == set(expected)
            for key, value in expected.items():
                assert r[key][b, i].item() == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_module_output_is_gsr_over_the_active_rows_mapped_to_the_sphere():
    """GeodesicSparseRouting with its config's K = 3 over a pool with 7 active rows: the
    brute-force routed output over those rows' c / |c| (phi_A)."""
    torch.manual_seed(24)
    pool = MemoryPool(PoolConfig(capacity=20, dim=4, value_dim=3, initial_active=7)).double()
    router = GeodesicSparseRouting(GSRConfig(k=3, eps=0.05, shards=2))
    q = unit(6, 4, 13)
    out, idx, w = router(q, pool, CrossGeometricMap(4))
    c = pool.centroids.detach()
    ref_out, ref_idx, ref_w = brute_force(
        q, c / c.norm(dim=-1, keepdim=True), pool.values.detach(), pool.active, 3, 0.05, True
    )
    assert torch.equal(idx, ref_idx)
    torch.testing.assert_close(out, ref_out, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=1e-9, atol=1e-12)


def test_config_boundaries():
    """k = shards = 1 are valid; a bool is no integer, a non-finite eps is refused."""
    GSRConfig(k=1, shards=1)
    with pytest.raises(ValueError, match="^GSRConfig.k must be an integer >= 1, got True$"):
        GSRConfig(k=True)
    with pytest.raises(ValueError, match="^GSRConfig.eps must be a finite number > 0, got inf$"):
        GSRConfig(eps=float("inf"))
