"""HyperGate (seed 000 §7): the gates' definitions, Theorem 7.1 in a checkable form against
autograd Jacobians, where it is vacuous, and a saturated gate whose gradient vanishes
(world_model/memory/hypergate.py)."""

from __future__ import annotations

import math

import geoopt
import pytest
import torch
from torch.func import jacrev, vmap

from world_model.memory.hypergate import (
    HyperGate,
    HyperGateConfig,
    dimension_gate,
    gate_jacobian_bounds,
    head_gate,
    token_gate,
)


def instance(d, scale_w, scale_u, bias, seed):
    g = torch.Generator().manual_seed(seed)
    w = scale_w * torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5
    b = bias + torch.randn(d, generator=g, dtype=torch.float64)
    u = scale_u * torch.randn(64, d, generator=g, dtype=torch.float64)
    return u, w, b


def sigma_min(u, w, b):
    jac = vmap(jacrev(lambda x: dimension_gate(x, w, b)))(u)  # [n, d, d] by autograd
    return torch.linalg.svdvals(jac)[:, -1], jac


def test_jacobian_is_the_closed_form():
    u, w, b = instance(6, 1.0, 1.0, 0.0, 0)
    _, jac = sigma_min(u, w, b)
    s = torch.sigmoid(u @ w.T + b)
    closed = torch.diag_embed(s) + (s * (1 - s) * u).unsqueeze(-1) * w
    torch.testing.assert_close(jac, closed)


@pytest.mark.parametrize("d", [4, 32])
@pytest.mark.parametrize(
    "scale_w, scale_u, bias", [(0.1, 0.5, 2.0), (1.0, 1.0, 0.0), (3.0, 2.0, -1.0)]
)
def test_theorem_7_1_bounds_hold(d, scale_w, scale_u, bias):
    u, w, b = instance(d, scale_w, scale_u, bias, d)
    smin, _ = sigma_min(u, w, b)
    sharp, seed_form = gate_jacobian_bounds(u, w, b)
    assert (smin >= sharp - 1e-12).all() and (sharp >= seed_form - 1e-12).all()


def test_bound_is_vacuous_at_initialisation_scales_and_informative_for_small_inputs():
    u, w, b = instance(32, 1.0, 1.0, 0.0, 1)  # unit-variance inputs, a Xavier-like W_g
    _, seed_form = gate_jacobian_bounds(u, w, b)
    assert (seed_form <= 0).all()  # vacuous for every input
    u, w, b = instance(32, 0.1, 0.1, 2.0, 2)  # small W_g and inputs, an open gate
    smin, _ = sigma_min(u, w, b)
    _, seed_form = gate_jacobian_bounds(u, w, b)
    assert (seed_form > 0.5).all() and (smin >= seed_form).all()


def test_a_saturated_gate_makes_the_gradient_vanish():
    """'gradients do not vanish due to gating alone' (Thm 7.1's conclusion) fails: with
    sigma(z_k) ~ e^-20 on one coordinate, sigma_min(dh/du) ~ 2e-9 (the bound says <= that)."""
    u, w, b = instance(8, 0.1, 0.5, 0.0, 3)
    b[0] = -20.0
    smin, _ = sigma_min(u, w, b)
    sharp, _ = gate_jacobian_bounds(u, w, b)
    assert (smin < 1e-8).all() and (sharp < 1e-8).all()


def test_head_and_token_gates_match_their_definitions():
    ball = geoopt.PoincareBall()
    pos = 0.3 * torch.randn(2, 5, 3, 4, dtype=torch.float64)  # [B, N, H, d]
    pos = pos / (1 + pos.norm(dim=-1, keepdim=True))
    slope, offset = torch.tensor([0.5, -1.0, 2.0]).double(), torch.tensor([0.1, 0.2, 0.3]).double()
    kappa = head_gate(pos, slope, offset)
    m = torch.log(1 - (pos**2).sum(-1)).mean(1)  # [B, H]
    torch.testing.assert_close(kappa, torch.sigmoid(slope * m + offset))
    beta = token_gate(pos, torch.tensor(0.7).double(), torch.tensor(-0.2).double())
    rho = ball.dist0(pos).mean(-1)  # [B, N]
    torch.testing.assert_close(beta, torch.sigmoid(0.7 * rho - 0.2))


def test_module_combines_heads_memory_and_the_dimension_gate():
    gate = HyperGate(HyperGateConfig(dim=6, heads=3)).double()
    main = torch.randn(2, 4, 3, 2, dtype=torch.float64)
    pos = 0.2 * torch.randn(2, 4, 3, 5, dtype=torch.float64)
    mem = torch.randn(2, 4, 6, dtype=torch.float64)
    h, gates = gate(main, pos, mem)
    u = (gates["kappa"][:, None, :, None] * main).reshape(2, 4, 6) + gates["beta"][..., None] * mem
    torch.testing.assert_close(h, dimension_gate(u, gate.gate.weight, gate.gate.bias))
    h0, _ = gate(main, pos, None)
    assert not torch.allclose(h0, h)


def test_config_errors_are_one_line():
    for kwargs, match in ((dict(dim=0), "dim"), (dict(dim=6, heads=4), "multiple")):
        with pytest.raises(ValueError, match=match) as info:
            HyperGateConfig(**kwargs)
        assert "\n" not in str(info.value)


def test_bounds_in_closed_form_over_a_batch():
    """gate_jacobian_bounds on inputs [2, 5, D] against the formulas written out per input:
    min_k s_k - max_k |s_k (1 - s_k) u_k| sigma_1(W) and min_k s_k - |u|_inf sigma_1(W) / 4,
    sigma_1 from the singular values."""
    g = torch.Generator().manual_seed(6)
    w = torch.randn(4, 4, generator=g, dtype=torch.float64)
    b = torch.randn(4, generator=g, dtype=torch.float64)
    u = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    sharp, seed_form = gate_jacobian_bounds(u, w, b)
    assert sharp.shape == seed_form.shape == (2, 5)
    top = float(torch.linalg.svdvals(w)[0])
    wl, bl = w.tolist(), b.tolist()
    for i in range(2):
        for j in range(5):
            x = u[i, j].tolist()
            z = [sum(wr[c] * x[c] for c in range(4)) + br for wr, br in zip(wl, bl, strict=True)]
            s = [1 / (1 + math.exp(-zk)) for zk in z]
            lead = min(s)
            worst = max(abs(sk * (1 - sk) * xk) for sk, xk in zip(s, x, strict=True))
            assert sharp[i, j].item() == pytest.approx(lead - worst * top, rel=1e-9, abs=1e-12)
            inf = max(abs(xk) for xk in x)
            assert seed_form[i, j].item() == pytest.approx(
                lead - inf * top / 4, rel=1e-9, abs=1e-12
            )


def test_an_unbatched_call_is_the_definition_with_learned_gate_parameters():
    """main [N, H, dh] without a batch dimension, non-zero slopes: kappa, beta, the dimension
    gate and h against the definitions (log(1 - |q|^2) means, geoopt's distance to 0)."""
    torch.manual_seed(7)
    gate = HyperGate(HyperGateConfig(dim=6, heads=2)).double()
    with torch.no_grad():
        gate.head_slope.copy_(torch.tensor([0.8, -0.5]))
        gate.token_slope.fill_(1.3)
    g = torch.Generator().manual_seed(8)
    main = torch.randn(3, 2, 3, generator=g, dtype=torch.float64)  # [N, H, dh]
    pos = 0.3 * torch.randn(3, 2, 4, generator=g, dtype=torch.float64)
    mem = torch.randn(3, 6, generator=g, dtype=torch.float64)
    h, gates = gate(main, pos, mem)
    kappa = torch.sigmoid(
        gate.head_slope * torch.log(1 - (pos**2).sum(-1)).mean(0) + gate.head_offset
    )
    beta = torch.sigmoid(1.3 * geoopt.PoincareBall().dist0(pos).mean(-1) + gate.token_offset)
    u = torch.cat([kappa[0] * main[:, 0], kappa[1] * main[:, 1]], -1) + beta[:, None] * mem
    g_ref = torch.sigmoid(u @ gate.gate.weight.T + gate.gate.bias)
    torch.testing.assert_close(gates["kappa"], kappa)
    torch.testing.assert_close(gates["beta"], beta)
    torch.testing.assert_close(gates["gate"], g_ref)
    torch.testing.assert_close(h, g_ref * u)


def test_one_head_is_a_valid_config_and_zero_heads_is_refused():
    HyperGateConfig(dim=5, heads=1)
    with pytest.raises(ValueError, match="^HyperGateConfig.heads must be an integer >= 1, got 0$"):
        HyperGateConfig(dim=4, heads=0)
    with pytest.raises(ValueError, match="^HyperGateConfig.dim must be an integer >= 1, got True$"):
        HyperGateConfig(dim=True, heads=1)
