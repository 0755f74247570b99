"""The unified block (seed 000 §11.1): the call shape, the main path against an independent
recomputation, end-to-end training with Riemannian Adam, genesis and checkpoints
(world_model/memory/unified.py)."""

from __future__ import annotations

import geoopt
import pytest
import torch

from world_model.attention.ida import inverse_distance_attention
from world_model.memory.dmg import DMGConfig
from world_model.memory.gsr import GSRConfig
from world_model.memory.hypergate import dimension_gate
from world_model.memory.routing import CrossGeometricMapConfig, PoolConfig
from world_model.memory.unified import UnifiedBlock, UnifiedConfig


def small_config(**kw):
    base = dict(
        query_dim=6,
        value_dim=5,
        out_dim=4,
        heads=2,
        head_dim=3,
        memory_dim=4,
        pool=PoolConfig(capacity=10, initial_active=6),
        gsr=GSRConfig(k=3),
    )
    return UnifiedConfig(**{**base, **kw})


def inputs(b=2, nq=5, nk=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, nq, 6, generator=g),
        torch.randn(b, nk, 6, generator=g),
        torch.randn(b, nk, 5, generator=g),
    )


def test_call_shape_weights_and_masks():
    torch.manual_seed(0)
    block = UnifiedBlock(small_config())
    q, k, v = inputs()
    out, w = block(q, k, v)
    assert out.shape == (2, 5, 4) and w.shape == (2, 5, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 5))
    mask = torch.ones(2, 5, 7, dtype=torch.bool)
    mask[:, :, 3] = False
    out_m, w_m = block(q, k, v, mask)
    assert (w_m[..., 3] == 0).all()
    out_drop, _ = block(q, k[:, [0, 1, 2, 4, 5, 6]], v[:, [0, 1, 2, 4, 5, 6]])
    torch.testing.assert_close(out_m, out_drop)
    out_nw, none = block(q, k, v, need_weights=False)
    assert none is None
    torch.testing.assert_close(out_nw, out)


@pytest.mark.parametrize("learn_power", [False, True])
def test_main_path_is_hida_per_head_gated_and_projected(learn_power):
    torch.manual_seed(1)
    block = UnifiedBlock(small_config(memory=False, learn_power=learn_power)).double()
    q, k, v = (x.double() for x in inputs(seed=1))
    ball = geoopt.PoincareBall()
    heads = []
    for h in range(2):
        sl = slice(3 * h, 3 * h + 3)
        qh = ball.expmap0((q @ block.q_proj.weight.T + block.q_proj.bias)[..., sl])
        kh = ball.expmap0((k @ block.k_proj.weight.T + block.k_proj.bias)[..., sl])
        vh = (v @ block.v_proj.weight.T + block.v_proj.bias)[..., sl]
        d2 = ball.dist(qh.unsqueeze(-2), kh.unsqueeze(-3)) ** 2
        w = 1 / (d2 + 1e-3)
        o = (w / w.sum(-1, keepdim=True)) @ vh
        kappa = torch.sigmoid(block.gate.head_offset[h])  # head_slope starts at 0
        heads.append(kappa * o)
    u = torch.cat(heads, -1)
    ref = block.o_proj(dimension_gate(u, block.gate.gate.weight, block.gate.gate.bias))
    out, _ = block(q, k, v)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)
    qh = ball.expmap0((q @ block.q_proj.weight.T + block.q_proj.bias)[..., :3])
    kh = ball.expmap0((k @ block.k_proj.weight.T + block.k_proj.bias)[..., :3])
    vh = (v @ block.v_proj.weight.T + block.v_proj.bias)[..., :3]
    alt, _ = inverse_distance_attention(qh, kh, vh, 1e-3, "poincare")
    torch.testing.assert_close(alt * torch.sigmoid(block.gate.head_offset[0]), heads[0])


def test_trains_end_to_end_with_riemannian_adam():
    """Associative recall in miniature: 8 key-value pairs as context, queries = keys + noise."""
    torch.manual_seed(2)
    block = UnifiedBlock(small_config(query_dim=6, value_dim=4, out_dim=4))
    opt = geoopt.optim.RiemannianAdam(block.parameters(), lr=3e-2)
    g = torch.Generator().manual_seed(3)
    before = block.pool.centroids.detach().clone()
    losses = []
    for _ in range(80):
        keys = torch.randn(16, 8, 6, generator=g)
        vals = torch.randn(16, 8, 4, generator=g)
        pick = torch.randint(0, 8, (16, 8), generator=g)
        q = torch.gather(keys, 1, pick.unsqueeze(-1).expand(-1, -1, 6)) + 0.1 * torch.randn(
            16, 8, 6, generator=g
        )
        target = torch.gather(vals, 1, pick.unsqueeze(-1).expand(-1, -1, 4))
        out, _ = block(q, keys, vals)
        loss = ((out - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        assert block.pool.centroids.grad is not None and block.pool.values.grad.abs().sum() > 0
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10
    assert block.pool.centroids.norm(dim=-1).max() < 1.0
    assert not torch.allclose(block.pool.centroids, before)
    assert int(block.pool.activations.sum()) > 0  # routing recorded a_e


def test_genesis_spawns_at_memory_queries_and_checkpoints_round_trip():
    torch.manual_seed(3)
    cfg = small_config(
        pool=PoolConfig(capacity=10, initial_active=0),
        dmg=DMGConfig(window=4, tau_base=1.0, kappa=0.0, gamma=0.0, trigger="sample"),
    )
    block = UnifiedBlock(cfg)
    q, k, v = inputs(b=1, nq=6)
    out_empty, _ = block(q, k, v)
    losses = torch.tensor([[0.1, 0.1, 0.2, 0.1, 3.0, 0.1]])
    rows = block.genesis(losses, q, values=torch.randn(1, 6, 6))
    assert rows.tolist() == [0] and block.pool.active_count() == 1
    torch.testing.assert_close(block.pool.centroids[0].data, block.memory_queries(q)[0, 4])
    out, _ = block(q, k, v)
    assert not torch.allclose(out, out_empty)
    clone = UnifiedBlock(cfg)
    clone.load_state_dict(block.state_dict())
    out2, _ = clone(q, k, v)
    torch.testing.assert_close(out2, block(q, k, v)[0])
    assert torch.equal(clone.dmg.history, block.dmg.history) and int(clone.dmg.t) == 6


def test_genesis_without_dmg_is_refused_and_config_errors_are_one_line():
    block = UnifiedBlock(small_config())
    with pytest.raises(ValueError, match="DMGConfig"):
        block.genesis(torch.zeros(3), torch.zeros(3, 6))
    for kwargs, match in (
        (dict(heads=0), "heads"),
        (dict(eps=0.0), "eps"),
        (dict(max_norm=1.0), "max_norm"),
    ):
        with pytest.raises(ValueError, match=match) as info:
            small_config(**kwargs)
        assert "\n" not in str(info.value)


def test_learned_power_starts_as_dense_hida_and_sharpens_the_kernel():
    torch.manual_seed(4)
    fixed = UnifiedBlock(small_config(learn_power=False)).double()
    learned = UnifiedBlock(small_config(learn_power=True)).double()
    learned.load_state_dict(fixed.state_dict(), strict=False)
    q, k, v = (x.double() for x in inputs(seed=4))
    mask = torch.rand(2, 5, 7, generator=torch.Generator().manual_seed(5)) < 0.7
    for m in (None, mask):
        out_f, w_f = fixed(q, k, v, m)
        out_l, w_l = learned(q, k, v, m)
        torch.testing.assert_close(out_l, out_f)
        torch.testing.assert_close(w_l, w_f)
    qb, kb = (
        learned._ball(learned.q_proj(q)).transpose(-2, -3),
        learned._ball(learned.k_proj(k)).transpose(-2, -3),
    )
    vh = learned.v_proj(v).unflatten(-1, (2, 3)).transpose(-2, -3)
    _, w1 = learned._main(qb, kb, vh, None, True)  # [B, H, Nq, Nk]
    with torch.no_grad():
        learned.log_power.fill_(torch.log(torch.tensor(3.0)).item())
    _, w3 = learned._main(qb, kb, vh, None, True)
    ref = w1**3 / (w1**3).sum(-1, keepdim=True)  # (d^2 + eps)^-3, normalised
    torch.testing.assert_close(w3, ref)
    assert (w3.amax(-1) > w1.amax(-1)).all()  # p = 3 concentrates every row


def _stereographic(x):
    """phi_B(x) = (2x, 1 - |x|^2) / (1 + |x|^2), written out."""
    s = (x * x).sum(-1, keepdim=True)
    return torch.cat([2 * x, 1 - s], -1) / (1 + s)


def test_an_unbatched_call_with_memory_is_the_block_written_out():
    """Inputs without a batch dimension, a mask, learned powers, non-zero gate slopes, eps 0.05
    and the stereographic map: the output, the head-averaged weights and the recorded uses
    against the block recomputed from its parameters (geoopt's exp_0 and distances, arccos
    SIDA weights, a Python top-K, the gates' definitions)."""
    torch.manual_seed(29)
    cfg = small_config(eps=0.05, sphere_map=CrossGeometricMapConfig(kind="stereographic"))
    block = UnifiedBlock(cfg).double()
    with torch.no_grad():
        block.log_power.copy_(torch.tensor([0.3, -0.2]))
        block.gate.head_slope.copy_(torch.tensor([0.7, -0.4]))
        block.gate.token_slope.fill_(0.9)
    g = torch.Generator().manual_seed(30)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    y = torch.randn(5, 6, generator=g, dtype=torch.float64)
    val = torch.randn(5, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(4, 5, generator=g) < 0.7
    mask[:, 0] = True
    out, weights = block(x, y, val, mask)

    ball, lin = geoopt.PoincareBall(), torch.nn.functional.linear
    qx, kx = (
        lin(x, block.q_proj.weight, block.q_proj.bias),
        lin(y, block.k_proj.weight, block.k_proj.bias),
    )
    vx = lin(val, block.v_proj.weight, block.v_proj.bias)
    heads, head_w, qs = [], [], []
    for h in range(2):
        sl = slice(3 * h, 3 * h + 3)
        qh, kh = ball.expmap0(qx[:, sl]), ball.expmap0(kx[:, sl])
        kernel = (ball.dist(qh[:, None], kh[None]) ** 2 + 0.05) ** -block.log_power[h].exp()
        kernel = kernel * mask
        w = kernel / kernel.sum(-1, keepdim=True)
        kappa = torch.sigmoid(
            block.gate.head_slope[h] * torch.log(1 - (qh**2).sum(-1)).mean()
            + block.gate.head_offset[h]
        )
        heads.append(kappa * (w @ vx[:, sl]))
        head_w.append(w)
        qs.append(qh)
    m = _stereographic(ball.expmap0(lin(x, block.m_proj.weight, block.m_proj.bias)))
    c = _stereographic(block.pool.centroids.detach())
    memory, rows = [], []
    for i in range(4):
        theta = torch.arccos((c @ m[i]).clamp(-1, 1)).tolist()
        sida = {e: 1 / (theta[e] ** 2 + cfg.gsr.eps) for e in range(10) if block.pool.active[e]}
        top = sorted(sida, key=lambda e: -sida[e])[:3]
        total = sum(sida[e] for e in top)
        memory.append(sum(sida[e] / total * block.pool.values[e] for e in top))
        rows += top
    rho = (ball.dist0(qs[0]) + ball.dist0(qs[1])) / 2
    beta = torch.sigmoid(block.gate.token_slope * rho + block.gate.token_offset)
    u = torch.cat(heads, -1) + beta[:, None] * torch.stack(memory)
    gated = torch.sigmoid(lin(u, block.gate.gate.weight, block.gate.gate.bias)) * u
    torch.testing.assert_close(
        out, lin(gated, block.o_proj.weight, block.o_proj.bias), rtol=1e-9, atol=1e-10
    )
    torch.testing.assert_close(weights, (head_w[0] + head_w[1]) / 2, rtol=1e-9, atol=1e-12)
    assert block.pool.activations.tolist() == [rows.count(e) for e in range(10)]
    assert block.pool.t_last.tolist() == [0] * 10  # no DMG: the clock reads 0


def test_the_fixed_kernel_uses_the_configured_eps_and_can_skip_its_weights():
    """learn_power=False with eps 0.05: head 0's output against (d_H^2 + 0.05)^-1 weights by
    geoopt; need_weights=False returns no weights and the same output."""
    torch.manual_seed(31)
    block = UnifiedBlock(small_config(memory=False, learn_power=False, eps=0.05)).double()
    q, k, v = (t.double() for t in inputs(seed=6))
    out, w = block(q, k, v)
    out_nw, none = block(q, k, v, need_weights=False)
    assert none is None
    torch.testing.assert_close(out_nw, out)
    ball = geoopt.PoincareBall()
    qh = ball.expmap0((q @ block.q_proj.weight.T + block.q_proj.bias)[..., :3])
    kh = ball.expmap0((k @ block.k_proj.weight.T + block.k_proj.bias)[..., :3])
    kh2 = ball.expmap0((k @ block.k_proj.weight.T + block.k_proj.bias)[..., 3:])
    qh2 = ball.expmap0((q @ block.q_proj.weight.T + block.q_proj.bias)[..., 3:])
    kern = [
        1 / (ball.dist(a.unsqueeze(-2), b.unsqueeze(-3)) ** 2 + 0.05)
        for a, b in ((qh, kh), (qh2, kh2))
    ]
    ref = sum(x / x.sum(-1, keepdim=True) for x in kern) / 2
    torch.testing.assert_close(w, ref, rtol=1e-9, atol=1e-12)


def test_genesis_stores_the_values_and_uses_are_recorded_at_the_dmgs_clock():
    """A spawn stores the given value row (a value of None stores zeros); after 6 steps of
    genesis a forward records its selections at t = 6."""
    torch.manual_seed(32)
    cfg = small_config(
        pool=PoolConfig(capacity=10, initial_active=4),
        dmg=DMGConfig(window=4, tau_base=1.0, kappa=0.0, gamma=0.0, trigger="sample"),
    )
    block = UnifiedBlock(cfg)
    q, k, v = inputs(b=1, nq=6, seed=7)
    values = torch.randn(1, 6, 6)
    rows = block.genesis(torch.tensor([[0.1, 0.1, 0.2, 0.1, 3.0, 0.1]]), q, values=values)
    assert rows.tolist() == [4]
    torch.testing.assert_close(block.pool.values[4].data, values[0, 4])
    rows = block.genesis(torch.tensor([0.1, 0.1, 0.2, 0.1, 3.0, 0.1]), q[0])
    assert rows.tolist() == [5] and (block.pool.values[5] == 0).all()
    block.pool.t_last.zero_()
    _, _ = block(q, k, v)
    used = block.pool.t_last > 0
    assert used.any() and (block.pool.t_last[used] == 12).all()


def test_config_boundaries_and_refusals():
    """Every width may be 1 and out_dim None (the output is heads x head_dim wide); out_dim 0,
    max_norm 0 and genesis without the memory path are refused with their messages."""
    UnifiedConfig(query_dim=1, value_dim=1, heads=1, head_dim=1, memory_dim=1, out_dim=1)
    torch.manual_seed(33)
    block = UnifiedBlock(small_config(out_dim=None))
    out, _ = block(*inputs())
    assert out.shape == (2, 5, 6)
    with pytest.raises(ValueError, match="^UnifiedConfig.out_dim must be None or >= 1, got 0$"):
        small_config(out_dim=0)
    with pytest.raises(ValueError, match=r"^UnifiedConfig.max_norm must lie in \(0, 1\), got 0.0$"):
        small_config(max_norm=0.0)
    refusal = r"^genesis needs the memory path and a DMGConfig \(UnifiedConfig.dmg\)$"
    no_memory = UnifiedBlock(small_config(memory=False, dmg=DMGConfig(window=2)))
    with pytest.raises(ValueError, match=refusal):
        no_memory.genesis(torch.zeros(3), torch.zeros(3, 6))
    with pytest.raises(ValueError, match=refusal):
        UnifiedBlock(small_config()).genesis(torch.zeros(3), torch.zeros(3, 6))
